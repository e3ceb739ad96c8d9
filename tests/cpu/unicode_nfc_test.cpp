// NFC normalization (engine/unicode.hpp) against Python's unicodedata: tests/data/unicode/nfc.json
// holds [input, NFC(input)] pairs that scripts/gen_unicode_tables.py wrote with it (every code
// point NFC may change or combine, alone; every decomposable code point's NFD; random strings of
// starters, combining marks of several classes, Hangul jamo and syllables, singletons and
// composition exclusions).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/unicode.hpp"

namespace sparrow::engine::unicode {
namespace {

std::string hex(const std::u32string& s) {
  std::string out;
  char buf[16];
  for (char32_t c : s) {
    std::snprintf(buf, sizeof buf, "%s%04X", out.empty() ? "" : " ", unsigned(c));
    out += buf;
  }
  return out;
}

std::u32string code_points(const nlohmann::json& a) {
  std::u32string s;
  for (const auto& v : a) s.push_back(char32_t(v.get<uint32_t>()));
  return s;
}

TEST(UnicodeNfc, MatchesPythonsUnicodedata) {
  const std::filesystem::path p =
      std::filesystem::path(SPARROW_SOURCE_DIR) / "tests" / "data" / "unicode" / "nfc.json";
  std::ifstream in(p);
  ASSERT_TRUE(in) << p;
  const nlohmann::json doc = nlohmann::json::parse(in);
  ASSERT_GT(doc["cases"].size(), 5000u);
  size_t changed = 0, failures = 0;
  for (const auto& c : doc["cases"]) {
    const std::u32string input = code_points(c[0]), want = code_points(c[1]);
    const std::u32string got = nfc(input);
    if (got != want && ++failures <= 20) {
      ADD_FAILURE() << "NFC(" << hex(input) << ") = " << hex(got) << ", Python: " << hex(want);
    }
    EXPECT_EQ(nfc(want), want) << "NFC is idempotent: " << hex(want);
    changed += input != want;
  }
  EXPECT_EQ(failures, 0u);
  EXPECT_GT(changed, 2000u) << "the cases must exercise composition";
}

TEST(UnicodeNfc, ClassicExamples) {
  EXPECT_EQ(nfc(U"cafe\u0301"), U"caf\u00e9");                 // e + acute -> é
  EXPECT_EQ(nfc(U"\u212b"), U"\u00c5");                        // ANGSTROM SIGN -> Å
  EXPECT_EQ(nfc(U"\u1e9b\u0323"), U"\u1e9b\u0323");            // long s with dot: blocked
  EXPECT_EQ(nfc(U"a\u0323\u0302"), U"\u1ead");                 // reordered, then composed
  EXPECT_EQ(nfc(U"a\u0302\u0323"), U"\u1ead");
  EXPECT_EQ(nfc(U"\u1100\u1161\u11a8"), U"\uac01");            // Hangul L V T -> syllable
  EXPECT_EQ(nfc(U"\u0958"), U"\u0915\u093c");                  // composition exclusion
  EXPECT_EQ(nfc(U"plain ascii text"), U"plain ascii text");   // nothing to do
  EXPECT_EQ(combining_class(U'\u0301'), 230);
  EXPECT_EQ(combining_class(U'a'), 0);
}

}  // namespace
}  // namespace sparrow::engine::unicode
