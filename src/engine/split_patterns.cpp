// Hand-written matchers of the regexes in split_patterns.hpp. Each alternative below is a
// function returning the end of its match at `i`, or 0 when it does not match there; the
// patterns try them in the regex's order and take the first that matches.
#include "engine/split_patterns.hpp"

#include "engine/unicode.hpp"

namespace sparrow::engine {

namespace {

using unicode::is_letter;
using unicode::is_number;
using unicode::is_white_space;

constexpr const char* kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kQwen2Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kGpt2Regex =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

bool is_line_break(char32_t c) { return c == '\r' || c == '\n'; }
// [^\s\p{L}\p{N}]
bool is_other(char32_t c) { return !is_white_space(c) && !is_letter(c) && !is_number(c); }

class Matcher {
 public:
  explicit Matcher(const std::u32string& t) : t_(t), n_(t.size()) {}

  // 's|'t|'re|'ve|'m|'ll|'d, or with (?i:...) any case. Oniguruma folds case by Unicode rules,
  // under which U+017F (long s) is an 's' too.
  size_t contraction(size_t i, bool any_case) const {
    if (t_[i] != '\'' || i + 1 >= n_) return 0;
    auto fold = [any_case](char32_t c) -> char32_t {
      if (!any_case) return c;
      if (c >= 'A' && c <= 'Z') return c - 'A' + 'a';
      return c == 0x17F ? char32_t('s') : c;
    };
    const char32_t a = fold(t_[i + 1]);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if (i + 2 >= n_) return 0;
    const char32_t b = fold(t_[i + 2]);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    return 0;
  }

  // [^\r\n\p{L}\p{N}]?\p{L}+
  size_t letters_after_any(size_t i) const {
    const char32_t c = t_[i];
    if (!is_line_break(c) && !is_letter(c) && !is_number(c) && i + 1 < n_ && is_letter(t_[i + 1])) {
      return run(i + 1, is_letter);
    }
    return is_letter(c) ? run(i, is_letter) : 0;
  }

  // \p{N}{1,max_digits} (max_digits 0: \p{N}+)
  size_t numbers(size_t i, size_t max_digits) const {
    size_t j = i;
    while (j < n_ && is_number(t_[j]) && (max_digits == 0 || j - i < max_digits)) ++j;
    return j > i ? j : 0;
  }

  // ` ?` followed by a run of `cls`: ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`.
  template <class Class>
  size_t space_then_run(size_t i, Class cls) const {
    if (t_[i] == ' ' && i + 1 < n_ && cls(t_[i + 1])) return run(i + 1, cls);
    return cls(t_[i]) ? run(i, cls) : 0;
  }

  // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
  size_t others_then_line_breaks(size_t i) const {
    const size_t j = space_then_run(i, is_other);
    return j == 0 ? 0 : run(j, is_line_break);
  }

  // \s*[\r\n]+ : the white space up to and including its last line break.
  size_t space_to_line_break(size_t i) const {
    const size_t end = run(i, is_white_space);
    for (size_t j = end; j > i; --j)
      if (is_line_break(t_[j - 1])) return j;
    return 0;
  }

  // \s+(?!\S) : a run of white space, less its last code point when something else follows.
  size_t space_not_before_text(size_t i) const {
    const size_t end = run(i, is_white_space);
    if (end == i) return 0;
    if (end == n_) return end;
    return end - 1 > i ? end - 1 : 0;
  }

  // \s+
  size_t space(size_t i) const {
    const size_t end = run(i, is_white_space);
    return end > i ? end : 0;
  }

 private:
  template <class Class>
  size_t run(size_t i, Class cls) const {
    while (i < n_ && cls(t_[i])) ++i;
    return i;
  }

  const std::u32string& t_;
  const size_t n_;
};

size_t match_llama3(const Matcher& m, size_t i, size_t max_digits) {
  if (size_t e = m.contraction(i, true)) return e;
  if (size_t e = m.letters_after_any(i)) return e;
  if (size_t e = m.numbers(i, max_digits)) return e;
  if (size_t e = m.others_then_line_breaks(i)) return e;
  if (size_t e = m.space_to_line_break(i)) return e;
  if (size_t e = m.space_not_before_text(i)) return e;
  return m.space(i);
}

size_t match_gpt2(const Matcher& m, size_t i) {
  if (size_t e = m.contraction(i, false)) return e;
  if (size_t e = m.space_then_run(i, is_letter)) return e;
  if (size_t e = m.space_then_run(i, is_number)) return e;
  if (size_t e = m.space_then_run(i, is_other)) return e;
  if (size_t e = m.space_not_before_text(i)) return e;
  return m.space(i);
}

}  // namespace

const char* split_regex(SplitPattern p) {
  switch (p) {
    case SplitPattern::llama3:
      return kLlama3Regex;
    case SplitPattern::qwen2:
      return kQwen2Regex;
    case SplitPattern::gpt2:
      return kGpt2Regex;
  }
  return "";
}

std::optional<SplitPattern> find_split_pattern(const std::string& regex) {
  for (SplitPattern p : {SplitPattern::llama3, SplitPattern::qwen2, SplitPattern::gpt2})
    if (regex == split_regex(p)) return p;
  return std::nullopt;
}

std::vector<std::pair<size_t, size_t>> split_matches(const std::u32string& text, SplitPattern p) {
  const Matcher m(text);
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t i = 0; i < text.size();) {
    size_t end = p == SplitPattern::gpt2 ? match_gpt2(m, i)
                                         : match_llama3(m, i, p == SplitPattern::llama3 ? 3 : 1);
    if (end <= i) end = i + 1;  // not reached: some alternative matches every code point
    out.emplace_back(i, end);
    i = end;
  }
  return out;
}

}  // namespace sparrow::engine
