// The pre-tokenizer regexes of tokenizer.json files that sparrow recognises, matched by hand
// (no regex library): a file's pattern string must equal one of these exactly, and anything else
// is refused rather than split differently. The matchers follow the regex semantics of Hugging
// Face `tokenizers` (Oniguruma: leftmost alternative first, greedy quantifiers with
// backtracking; \p{L}, \p{N}, \s as in engine/unicode.hpp).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace sparrow::engine {

enum class SplitPattern {
  llama3,  // Llama 3's Split: contractions any case, numbers in groups of up to 3 digits
  qwen2,   // Qwen2's Split: as llama3 but one digit a piece
  gpt2,    // GPT-2's, built into the ByteLevel pre-tokenizer with use_regex
};

// The regex text of `p` as it appears in tokenizer.json (after JSON unescaping).
const char* split_regex(SplitPattern p);
// The pattern whose regex text is exactly `regex`.
std::optional<SplitPattern> find_split_pattern(const std::string& regex);

// The successive matches of `p` in `text`, as [begin, end) code point offsets. Every code point
// matches one of the patterns' alternatives, so the matches cover the whole text.
std::vector<std::pair<size_t, size_t>> split_matches(const std::u32string& text, SplitPattern p);

}  // namespace sparrow::engine
