#!/usr/bin/env python3
"""Generates src/engine/unicode_tables.cpp: the code point ranges the tokenizer.json
pre-tokenizers need (src/engine/unicode.hpp), from Python's `unicodedata`, so that sparrow needs
no Unicode library at run time. Standard library only:

    python3 scripts/gen_unicode_tables.py   # rewrites src/engine/unicode_tables.cpp
                                            # and tests/data/unicode/nfc.json

Classes, as Oniguruma (the regex engine of Hugging Face `tokenizers`) defines them:
  letter       \\p{L}: general categories Lu, Ll, Lt, Lm, Lo
  number       \\p{N}: Nd, Nl, No
  white space  \\s: the White_Space property (fixed list below; unicodedata does not expose it)
and for the NFC normalizer (Qwen2):
  nfc_active   code points that NFC may change, or that may combine with what precedes them:
               NFC(c) != c, a nonzero combining class, the second code point of a canonical
               composition, or a Hangul vowel / trailing jamo. Text without them is its own NFC
               (a quick check: only text with one of them is normalized).
  combining classes   the nonzero canonical combining classes, as ranges of one class
  decompositions      each code point's full canonical decomposition (applied recursively;
                      Hangul syllables are algorithmic and left out), as offsets into one array
  compositions        the primary composites: the pairs (first, second) NFC composes, with their
                      composite, sorted by pair (canonical decompositions of two code points that
                      NFC keeps composed, which leaves out singletons and composition exclusions)
"""
import json
import os
import random
import sys
import unicodedata

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "engine",
                   "unicode_tables.cpp")
NFC_CASES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data",
                         "unicode", "nfc.json")

WHITE_SPACE = [0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B),
               0x2028, 0x2029, 0x202F, 0x205F, 0x3000]


def is_letter(cp):
    return unicodedata.category(chr(cp)) in ("Lu", "Ll", "Lt", "Lm", "Lo")


def is_number(cp):
    return unicodedata.category(chr(cp)) in ("Nd", "Nl", "No")


def composition_second_elements():
    seconds = set()
    for cp in range(0x110000):
        if 0xD800 <= cp < 0xE000:
            continue
        d = unicodedata.decomposition(chr(cp))
        if not d or d.startswith("<"):
            continue
        parts = [int(x, 16) for x in d.split()]
        # A primary composite: NFC keeps it, so NFC composes its pair back into it.
        if len(parts) == 2 and unicodedata.normalize("NFC", chr(cp)) == chr(cp):
            seconds.add(parts[1])
    seconds.update(range(0x1161, 0x1176))  # Hangul V jamo (LV syllables are algorithmic)
    seconds.update(range(0x11A8, 0x11C3))  # Hangul T jamo (LVT)
    return seconds


def nfc_active_set():
    seconds = composition_second_elements()
    active = set()
    for cp in range(0x110000):
        if 0xD800 <= cp < 0xE000:
            continue
        c = chr(cp)
        if cp in seconds or unicodedata.combining(c) != 0 or unicodedata.normalize("NFC", c) != c:
            active.add(cp)
    return active


def code_points():
    return (cp for cp in range(0x110000) if not 0xD800 <= cp < 0xE000)


def canonical_decomposition(cp):
    """The code points of cp's canonical decomposition mapping, or None (none, or compatibility)."""
    d = unicodedata.decomposition(chr(cp))
    if not d or d.startswith("<"):
        return None
    return [int(x, 16) for x in d.split()]


def full_decompositions():
    """{cp: full canonical decomposition} for every cp that has one (not Hangul syllables)."""
    out = {}
    for cp in code_points():
        if canonical_decomposition(cp) is not None:
            full = [ord(c) for c in unicodedata.normalize("NFD", chr(cp))]
            assert full != [cp]
            out[cp] = full
    return out


def compositions():
    """{(first, second): composite} for the primary composites."""
    out = {}
    for cp in code_points():
        d = canonical_decomposition(cp)
        if d is not None and len(d) == 2 and unicodedata.normalize("NFC", chr(cp)) == chr(cp):
            out[(d[0], d[1])] = cp
    return out


def class_ranges():
    out, start, cls = [], None, 0
    for cp in range(0x110001):
        c = unicodedata.combining(chr(cp)) if cp < 0x110000 and not 0xD800 <= cp < 0xE000 else 0
        if c != cls:
            if cls != 0:
                out.append((start, cp - 1, cls))
            start, cls = cp, c
    return out


def emit_nfc_tables():
    decomp = full_decompositions()
    flat, index = [], []
    for cp in sorted(decomp):
        index.append((cp, len(flat), len(decomp[cp])))
        flat.extend(decomp[cp])
    comp = compositions()
    out = block("const ClassRange kCombiningClasses[] = {",
                [f" {{0x{a:X}, 0x{b:X}, {c}}}," for a, b, c in class_ranges()])
    out.append("const size_t kCombiningClassCount = "
               "sizeof(kCombiningClasses) / sizeof(kCombiningClasses[0]);")
    out.append("")
    out += block("const char32_t kDecompositionCodePoints[] = {", [f" 0x{c:X}," for c in flat])
    out += block("const Decomposition kDecompositions[] = {",
                 [f" {{0x{cp:X}, {off}, {n}}}," for cp, off, n in index])
    out.append("const size_t kDecompositionCount = "
               "sizeof(kDecompositions) / sizeof(kDecompositions[0]);")
    out.append("")
    out += block("const Composition kCompositions[] = {",
                 [f" {{0x{a:X}, 0x{b:X}, 0x{c:X}}}," for (a, b), c in sorted(comp.items())])
    out.append("const size_t kCompositionCount = sizeof(kCompositions) / sizeof(kCompositions[0]);")
    return "\n".join(out), len(index), len(comp)


def nfc_cases(active, seed=15):
    """NFC test cases from Python's unicodedata (the reference): every nfc_active code point
    alone, every decomposable code point's NFD, and random strings of starters, combining marks
    of several classes, Hangul jamo and syllables, and singleton / excluded composites."""
    cases = [[cp] for cp in sorted(active)]
    cases += [[ord(c) for c in unicodedata.normalize("NFD", chr(cp))]
              for cp in sorted(full_decompositions())]
    pool = ([ord(c) for c in "aeouAEOUnNcCsSzZyYkK"] +
            [0x300, 0x301, 0x302, 0x303, 0x308, 0x30A, 0x30C, 0x323, 0x327, 0x328, 0x31B, 0x345,
             0x5B0, 0x5B4, 0x5BC, 0x64B, 0x650, 0x93C, 0x94D, 0xF71, 0xF72, 0x1DCE, 0x20D2] +
            [0x1100, 0x1105, 0x1112, 0x1161, 0x1169, 0x1175, 0x11A8, 0x11AF, 0x11C2, 0xAC00,
             0xAC01, 0xD7A3, 0x3131] +
            [0x212B, 0x2126, 0xF900, 0x1E9B, 0x0344, 0x0958, 0x1F71, 0x0F73, 0x00C5, 0x1E0A,
             0x0041, 0x03B1, 0x0399, 0x0CC6, 0x0CC2, 0x0CD5, 0x0B47, 0x0B3E, 0x0DD9, 0x0DCF])
    rng = random.Random(seed)
    for _ in range(3000):
        cases.append([rng.choice(pool) for _ in range(rng.randint(1, 8))])
    return [[c, [ord(x) for x in unicodedata.normalize("NFC", "".join(map(chr, c)))]]
            for c in cases]


def ranges(pred):
    out, start = [], None
    for cp in range(0x110001):
        inside = cp < 0x110000 and not (0xD800 <= cp < 0xE000) and pred(cp)
        if inside and start is None:
            start = cp
        elif not inside and start is not None:
            out.append((start, cp - 1))
            start = None
    return out


def block(opening, items):
    """A C++ array initializer: `opening`, the items packed into lines of at most 100 columns."""
    lines, line = [opening], "   "
    for item in items:
        if len(line) + len(item) > 100:
            lines.append(line)
            line = "   "
        line += item
    if line.strip():
        lines.append(line)
    lines.append("};")
    return lines


def emit(name, count_name, rs):
    lines = block(f"const CodeRange {name}[] = {{", [f" {{0x{a:X}, 0x{b:X}}}," for a, b in rs])
    lines.append(f"const size_t {count_name} = sizeof({name}) / sizeof({name}[0]);")
    return "\n".join(lines)


def main():
    active = nfc_active_set()
    white = set(WHITE_SPACE)
    tables = [
        ("kLetters", "kLetterCount", ranges(is_letter)),
        ("kNumbers", "kNumberCount", ranges(is_number)),
        ("kWhiteSpace", "kWhiteSpaceCount", ranges(lambda cp: cp in white)),
        ("kNfcActive", "kNfcActiveCount", ranges(lambda cp: cp in active)),
    ]
    body = "\n\n".join(emit(n, c, r) for n, c, r in tables)
    nfc_body, n_decomp, n_comp = emit_nfc_tables()
    body += "\n\n" + nfc_body
    text = f"""// Generated by scripts/gen_unicode_tables.py from Python's unicodedata (Unicode
// {unicodedata.unidata_version}); do not edit. Sorted, disjoint, inclusive code point ranges for
// src/engine/unicode.hpp.
#include "engine/unicode.hpp"

namespace sparrow::engine::unicode {{

{body}

}}  // namespace sparrow::engine::unicode
"""
    with open(OUT, "w") as f:
        f.write(text)
    cases = nfc_cases(active)
    os.makedirs(os.path.dirname(NFC_CASES), exist_ok=True)
    with open(NFC_CASES, "w") as f:
        json.dump({"unicode": unicodedata.unidata_version,
                   "comment": "[input, NFC(input)] as code points, from Python's unicodedata; "
                              "written by scripts/gen_unicode_tables.py",
                   "cases": cases}, f, separators=(",", ":"))
        f.write("\n")
    print(f"{NFC_CASES}: {len(cases)} cases")
    for n, _, r in tables:
        print(f"{n}: {len(r)} ranges")
    print(f"NFC: {len(class_ranges())} class ranges, {n_decomp} decompositions, "
          f"{n_comp} compositions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
