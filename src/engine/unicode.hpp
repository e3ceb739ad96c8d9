// The bits of Unicode the tokenizer.json reader needs: code point classes as the pre-tokenizer
// regexes of Hugging Face `tokenizers` (Oniguruma) see them, NFC normalization (Qwen2's
// normalizer), and UTF-8 conversions. The tables are generated (scripts/gen_unicode_tables.py
// -> unicode_tables.cpp, from Python's unicodedata), so nothing is needed at run time.
#pragma once

#include <cstddef>
#include <string>

namespace sparrow::engine::unicode {

struct CodeRange {
  char32_t first, last;  // inclusive
};
// Sorted, disjoint (unicode_tables.cpp).
extern const CodeRange kLetters[];  // \p{L}
extern const size_t kLetterCount;
extern const CodeRange kNumbers[];  // \p{N}
extern const size_t kNumberCount;
extern const CodeRange kWhiteSpace[];  // \s (the White_Space property)
extern const size_t kWhiteSpaceCount;
extern const CodeRange kNfcActive[];  // what NFC may change or combine with what precedes it
extern const size_t kNfcActiveCount;

// NFC data (unicode_tables.cpp): nonzero canonical combining classes as sorted ranges of one
// class; each code point's full canonical decomposition (Hangul syllables are algorithmic) as a
// run of kDecompositionCodePoints, sorted by code point; the primary composites, sorted by pair.
struct ClassRange {
  char32_t first, last;  // inclusive
  unsigned char ccc;
};
struct Decomposition {
  char32_t cp;
  unsigned short offset, length;  // into kDecompositionCodePoints
};
struct Composition {
  char32_t first, second, composite;
};
extern const ClassRange kCombiningClasses[];
extern const size_t kCombiningClassCount;
extern const char32_t kDecompositionCodePoints[];
extern const Decomposition kDecompositions[];
extern const size_t kDecompositionCount;
extern const Composition kCompositions[];
extern const size_t kCompositionCount;

bool is_letter(char32_t c);
bool is_number(char32_t c);
bool is_white_space(char32_t c);
// Text without such code points is its own NFC normalization.
bool is_nfc_active(char32_t c);
// The canonical combining class (0 for starters).
unsigned char combining_class(char32_t c);
// Unicode Normalization Form C (UAX #15): canonical decomposition, canonical ordering, canonical
// composition; text with no is_nfc_active code point comes back unchanged without that work.
std::u32string nfc(const std::u32string& text);

// Code points of valid UTF-8; false (and `out` unspecified) on malformed input.
bool decode_utf8(const std::string& text, std::u32string& out);
void append_utf8(std::string& out, char32_t c);
std::string to_utf8(const std::u32string& text);
// Length of the UTF-8 sequence that starts with byte `lead` (1 for a stray byte).
size_t utf8_length(unsigned char lead);
// `bytes` with every malformed sequence replaced by U+FFFD, as Rust's String::from_utf8_lossy
// (which the ByteLevel decoder uses): one replacement per maximal invalid prefix.
std::string lossy_utf8(const std::string& bytes);
bool is_valid_utf8(const std::string& bytes);
// Whether text[begin, end) is exactly one code point and that code point is white space.
bool is_white_space_at(const std::string& text, size_t begin, size_t end);

}  // namespace sparrow::engine::unicode
