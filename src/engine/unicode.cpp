// Code point classes (tables in unicode_tables.cpp) and UTF-8 conversions of unicode.hpp.
#include "engine/unicode.hpp"

#include <algorithm>
#include <utility>

namespace sparrow::engine::unicode {

namespace {

bool in_ranges(const CodeRange* ranges, size_t count, char32_t c) {
  const CodeRange* end = ranges + count;
  const CodeRange* it =
      std::upper_bound(ranges, end, c, [](char32_t v, const CodeRange& r) { return v < r.first; });
  return it != ranges && c <= (it - 1)->last;
}

// One UTF-8 sequence at p[0, n) (the well-formed byte sequences of the Unicode standard, table
// 3-7): its length with `cp` set, or 0 with `bad` set to the length of the maximal subpart of a
// valid sequence that starts there (at least 1), which is what a lossy decoder replaces.
size_t next_code_point(const unsigned char* p, size_t n, char32_t& cp, size_t& bad) {
  const unsigned char b0 = p[0];
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  }
  size_t len = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
  char32_t v = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
    v = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    v = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;  // no overlong forms
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    v = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    bad = 1;
    return 0;
  }
  for (size_t i = 1; i < len; ++i) {
    const unsigned char min = i == 1 ? lo : 0x80, max = i == 1 ? hi : 0xBF;
    if (i >= n || p[i] < min || p[i] > max) {
      bad = i;
      return 0;
    }
    v = (v << 6) | (p[i] & 0x3F);
  }
  cp = v;
  return len;
}

}  // namespace

bool is_letter(char32_t c) { return in_ranges(kLetters, kLetterCount, c); }
bool is_number(char32_t c) { return in_ranges(kNumbers, kNumberCount, c); }
bool is_white_space(char32_t c) { return in_ranges(kWhiteSpace, kWhiteSpaceCount, c); }
bool is_nfc_active(char32_t c) { return in_ranges(kNfcActive, kNfcActiveCount, c); }

unsigned char combining_class(char32_t c) {
  const ClassRange* end = kCombiningClasses + kCombiningClassCount;
  const ClassRange* it = std::upper_bound(kCombiningClasses, end, c,
                                          [](char32_t v, const ClassRange& r) { return v < r.first; });
  return it != kCombiningClasses && c <= (it - 1)->last ? (it - 1)->ccc : 0;
}

namespace {

// Hangul syllables decompose and compose by arithmetic (Unicode 3.12): S = SBase + (L * VCount +
// V) * TCount + T.
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;

void decompose(char32_t c, std::u32string& out) {
  if (c >= kSBase && c < kSBase + kSCount) {
    const char32_t s = c - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const Decomposition* end = kDecompositions + kDecompositionCount;
  const Decomposition* it = std::lower_bound(
      kDecompositions, end, c, [](const Decomposition& d, char32_t v) { return d.cp < v; });
  if (it != end && it->cp == c) {
    out.append(kDecompositionCodePoints + it->offset, it->length);  // already full
  } else {
    out.push_back(c);
  }
}

// The primary composite of (a, b), or 0.
char32_t compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount)
    return a + (b - kTBase);
  const Composition* end = kCompositions + kCompositionCount;
  const Composition* it =
      std::lower_bound(kCompositions, end, std::make_pair(a, b),
                       [](const Composition& x, const std::pair<char32_t, char32_t>& v) {
                         return x.first < v.first || (x.first == v.first && x.second < v.second);
                       });
  return it != end && it->first == a && it->second == b ? it->composite : 0;
}

}  // namespace

std::u32string nfc(const std::u32string& text) {
  if (std::none_of(text.begin(), text.end(), is_nfc_active)) return text;
  std::u32string d;
  d.reserve(text.size() + 8);
  for (char32_t c : text) decompose(c, d);
  // Canonical ordering: each run of non-starters sorted by combining class, stably.
  for (size_t i = 0; i < d.size();) {
    if (combining_class(d[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < d.size() && combining_class(d[j]) != 0) ++j;
    std::stable_sort(d.begin() + long(i), d.begin() + long(j), [](char32_t a, char32_t b) {
      return combining_class(a) < combining_class(b);
    });
    i = j;
  }
  // Canonical composition: a code point joins the last starter when nothing between them blocks
  // it (a starter, or a code point of the same or a higher class) and the pair has a composite.
  std::u32string out;
  out.reserve(d.size());
  size_t starter = std::u32string::npos;  // index in `out`
  unsigned char last_class = 0;           // class of the last code point kept after the starter
  for (char32_t c : d) {
    const unsigned char cc = combining_class(c);
    if (starter != std::u32string::npos) {
      const bool adjacent = out.size() == starter + 1;
      if (adjacent || (last_class != 0 && last_class < cc)) {
        if (const char32_t comp = compose(out[starter], c)) {
          out[starter] = comp;
          continue;
        }
      }
    }
    if (cc == 0) starter = out.size();
    out.push_back(c);
    last_class = cc;
  }
  return out;
}

bool is_white_space_at(const std::string& text, size_t begin, size_t end) {
  if (begin >= end || end > text.size()) return false;
  char32_t cp = 0;
  size_t bad = 0;
  const auto* p = reinterpret_cast<const unsigned char*>(text.data()) + begin;
  return next_code_point(p, end - begin, cp, bad) == end - begin && is_white_space(cp);
}

bool decode_utf8(const std::string& text, std::u32string& out) {
  out.clear();
  out.reserve(text.size());
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t i = 0; i < text.size();) {
    char32_t cp = 0;
    size_t bad = 0;
    const size_t len = next_code_point(p + i, text.size() - i, cp, bad);
    if (len == 0) return false;
    out.push_back(cp);
    i += len;
  }
  return true;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(char(c));
  } else if (c < 0x800) {
    out.push_back(char(0xC0 | (c >> 6)));
    out.push_back(char(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(char(0xE0 | (c >> 12)));
    out.push_back(char(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(char(0x80 | (c & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (c >> 18)));
    out.push_back(char(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(char(0x80 | (c & 0x3F)));
  }
}

std::string to_utf8(const std::u32string& text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t c : text) append_utf8(out, c);
  return out;
}

size_t utf8_length(unsigned char lead) {
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  return 1;
}

std::string lossy_utf8(const std::string& bytes) {
  std::string out;
  out.reserve(bytes.size());
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  for (size_t i = 0; i < bytes.size();) {
    char32_t cp = 0;
    size_t bad = 0;
    const size_t len = next_code_point(p + i, bytes.size() - i, cp, bad);
    if (len == 0) {
      append_utf8(out, 0xFFFD);
      i += bad;
    } else {
      out.append(bytes, i, len);
      i += len;
    }
  }
  return out;
}

bool is_valid_utf8(const std::string& bytes) {
  std::u32string ignored;
  return decode_utf8(bytes, ignored);
}

}  // namespace sparrow::engine::unicode
