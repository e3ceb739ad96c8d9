#!/usr/bin/env python3
"""Engine cells from whole-model runs: which assignment of formats to a decoder layer's four
matmuls (qkv, o, gate_up, down) pick_engine_layer would choose at each sparsity and batch, and the
lines for src/dispatch/engine_layer.cpp's kModels.

Each LOG is one `sparrow bench-model --synth MODEL --sparsity 0,S... -b B... --format F` run
(scripts/engine-cells.sh makes them; its first line is `# format: F`). Every sparse tgN row is
divided by the dense (sparsity 0) row of the same batch in the same log, as the cells are.
The choice is pick_engine_layer's: dense unless an assignment ran faster than dense; among those
within 5 % of the fastest (kBytesTieMargin), the fewest weight GiB.

  scripts/engine_cells.py [--test tg32] LOG [LOG ...]
  scripts/engine_cells.py --self-test
"""
import argparse
import io
import re
import sys

from engine_roles import ROW  # a bench-model table row (model, size, sparsity, ..., tgN, t/s)

FORMAT = re.compile(r"^# format:\s*(?P<format>\S+)\s*$")
BYTES_TIE_MARGIN = 1.05  # rule_cells.hpp's kBytesTieMargin
ROLES = ("qkv", "o", "gate_up", "down")
LETTER = {"dense": "D", "tca_bme": "T", "macko": "M"}
# engine_layer.cpp's names for the assignments it holds (qkv, o, gate_up, down).
CONSTANT = {"DDDD": "kDense", "TTTT": "kTca", "MMMM": "kMacko", "TDTT": "kTcaDenseO",
            "MTMT": "kMackoTcaOD", "MTMD": "kMackoTcaODenseD", "TDTD": "kTcaDenseOD"}


def assignment(fmt):
    """'MTMT'-style letters of a --format value, or None where it does not fix every matmul
    (fastest, auto) or names a format the cells do not hold."""
    if fmt in LETTER:
        return LETTER[fmt] * 4
    parts = dict(p.partition("=")[::2] for p in fmt.split(","))
    if sorted(parts) != sorted(ROLES) or any(parts[r] not in LETTER for r in ROLES):
        return None
    return "".join(LETTER[parts[r]] for r in ROLES)


def read_log(lines, name, test="tg32"):
    """(format, {(sparsity, batch): (tps, gib)}) of one log's rows of the asked test."""
    fmt, rows = None, {}
    for line in lines:
        m = FORMAT.match(line)
        if m:
            fmt = m["format"]
            continue
        m = ROW.match(line)
        if m and m["test"] == test:
            gib = float(m["size"].split()[0])  # "7.30 GiB"
            rows[(m["sparsity"], int(m["batch"]))] = (float(m["tps"]), gib)
    if fmt is None:
        sys.exit(f"engine_cells.py: {name} has no '# format: F' line (scripts/engine-cells.sh writes it)")
    return fmt, rows


def cells(logs):
    """{(sparsity, batch): [(format, letters, tps, dense_tps, vs_dense, gib)]} over the logs."""
    out = {}
    for fmt, rows in logs:
        for (sparsity, batch), (tps, gib) in rows.items():
            if float(sparsity) == 0.0:
                continue
            dense = rows.get(("0.00", batch))
            if dense is None:
                continue  # no dense row of that batch in this process
            out.setdefault((sparsity, batch), []).append(
                (fmt, assignment(fmt), tps, dense[0], tps / dense[0], gib))
    return out


def pick(entries):
    """pick_engine_layer's choice among one cell's entries (None: dense); only entries that fix
    every matmul can be held by a cell."""
    held = [e for e in entries if e[1] is not None]
    fastest = max([1.0] + [e[4] for e in held])
    best = None
    for e in held:
        if e[4] <= 1.0 or e[4] * BYTES_TIE_MARGIN < fastest:
            continue
        if best is None or e[5] < best[5]:
            best = e
    return best


def report(table, out):
    out.write("| sparsity | batch | --format | t/s | dense t/s | x dense | weights GiB | pick |\n")
    out.write("|---|---|---|---|---|---|---|---|\n")
    for key in sorted(table, key=lambda k: (k[1], float(k[0]))):
        chosen = pick(table[key])
        for e in sorted(table[key], key=lambda e: -e[4]):
            mark = "<- pick" if e is chosen else ("(not a cell entry)" if e[1] is None else "")
            out.write(f"| {key[0]} | {key[1]} | {e[0]} | {e[2]:.2f} | {e[3]:.2f} | {e[4]:.3f} | "
                      f"{e[5]:.2f} | {mark} |\n")
        if chosen is None:
            out.write(f"| {key[0]} | {key[1]} | dense | | | 1.000 | | <- pick (none beat dense) |\n")
    out.write("\nengine_layer.cpp entries ({sparsity, batch, {{assignment, t/s / dense t/s, GiB}}}):\n")
    for key in sorted(table, key=lambda k: (k[1], float(k[0]))):
        held = [e for e in table[key] if e[1] is not None]
        items = []
        for e in held:
            name = CONSTANT.get(e[1]) or "{" + ", ".join(e[1]) + "}"
            items.append(f"{{{name}, {e[2]:.2f} / {e[3]:.2f}, {e[5]:.2f}}}")
        note = "  // a cell holds 3: keep the pick and the fastest" if len(items) > 3 else ""
        out.write(f"  {{{float(key[0]):g}, {key[1]}, {{{{{', '.join(items)}}}}}}},{note}\n")


SAMPLE_TCA = """# format: tca_bme
| llama2-7b (synth) | 12.55 GiB | 0.00 | gpu | 8 | tg32 | 1541.31 ± 0.63 |
| llama2-7b (synth) | 2.48 GiB | 0.90 | gpu | 8 | tg32 | 1877.54 ± 18.06 |
| llama2-7b (synth) | 7.30 GiB | 0.50 | gpu | 8 | pp512 | 15475.07 ± 13.96 |
| llama2-7b (synth) | 7.30 GiB | 0.50 | gpu | 8 | tg32 | 1500.00 ± 0.29 |
"""
SAMPLE_MACKO = """# format: macko
| llama2-7b (synth) | 12.55 GiB | 0.00 | gpu | 8 | tg32 | 1548.91 ± 0.77 |
| llama2-7b (synth) | 2.45 GiB | 0.90 | gpu | 8 | tg32 | 1876.50 ± 6.93 |
| llama2-7b (synth) | 8.12 GiB | 0.50 | gpu | 8 | tg32 | 1060.69 ± 4.84 |
"""
SAMPLE_MIX = """# format: qkv=macko,o=tca_bme,gate_up=macko,down=tca_bme
| llama2-7b (synth) | 12.55 GiB | 0.00 | gpu | 8 | tg32 | 1549.58 ± 0.88 |
| llama2-7b (synth) | 2.45 GiB | 0.90 | gpu | 8 | tg32 | 1981.03 ± 0.45 |
"""
SAMPLE_FASTEST = """# format: fastest
| llama2-7b (synth) | 12.55 GiB | 0.00 | gpu | 8 | tg32 | 1550.00 ± 0.88 |
| llama2-7b (synth) | 2.45 GiB | 0.90 | gpu | 8 | tg32 | 2100.00 ± 0.45 |
"""


def self_test():
    """Session 46's batch-8 runs (c1, c6; 50 % made slower than dense): the checks that the rule
    is pick_engine_layer's."""
    assert assignment("tca_bme") == "TTTT" and assignment("fastest") is None
    assert assignment("qkv=macko,o=tca_bme,gate_up=macko,down=tca_bme") == "MTMT"
    assert assignment("qkv=macko,o=tca_bme,gate_up=macko") is None
    logs = [read_log(s.splitlines(), n) for n, s in
            (("tca", SAMPLE_TCA), ("macko", SAMPLE_MACKO), ("mix", SAMPLE_MIX),
             ("fastest", SAMPLE_FASTEST))]
    table = cells(logs)
    assert sorted(table) == [("0.50", 8), ("0.90", 8)], sorted(table)
    # 90 %: the mix is fastest among the held ones (1.278x; fastest's 1.355x is not a cell entry);
    # tca_bme (1.218x) is within 5 % of it but holds more bytes.
    chosen = pick(table[("0.90", 8)])
    assert chosen[1] == "MTMT" and abs(chosen[4] - 1981.03 / 1549.58) < 1e-12, chosen
    # 50 %: nothing beat dense.
    assert pick(table[("0.50", 8)]) is None
    # Within the margin the fewest bytes win, further apart the fastest.
    near = [("a", "TTTT", 0, 0, 1.20, 2.48), ("b", "MMMM", 0, 0, 1.16, 2.45)]
    far = [("a", "TTTT", 0, 0, 1.25, 2.48), ("b", "MMMM", 0, 0, 1.16, 2.45)]
    assert pick(near)[1] == "MMMM" and pick(far)[1] == "TTTT"

    text = io.StringIO()
    report(table, text)
    assert "{0.9, 8, {{{kTca, 1877.54 / 1541.31, 2.48}, {kMacko, 1876.50 / 1548.91, 2.45}, " \
           "{kMackoTcaOD, 1981.03 / 1549.58, 2.45}}}}," in text.getvalue(), text.getvalue()
    print("engine_cells.py: self-test passed")


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="*")
    ap.add_argument("--test", default="tg32", help="bench-model test column (tg32, tg128)")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args(argv)
    if a.self_test:
        self_test()
        return
    if not a.logs:
        ap.error("give one or more logs")
    logs = []
    for path in a.logs:
        try:
            with open(path) as f:
                logs.append(read_log(f.read().splitlines(), path, a.test))
        except OSError as e:
            sys.exit(f"engine_cells.py: {e}")
    table = cells(logs)
    if not table:
        sys.exit(f"engine_cells.py: no {a.test} rows with a dense row of the same batch")
    report(table, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1:])
