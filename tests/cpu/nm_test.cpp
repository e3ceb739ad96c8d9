// nm: pattern parsing, lossless round trip for element-wise and vector-wise N:M on any shape,
// the exact packed layout, rejection of non-N:M input naming the first bad group, byte
// accounting, the reference walk, and rejection of corrupted buffers.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "core/rng.hpp"
#include "cpu/test_util.hpp"
#include "formats/nm/nm_bits.hpp"
#include "sparrow/patterns.hpp"
#include "sparrow/reference.hpp"
#include "sparrow/weight.hpp"

using namespace sparrow;

namespace {

constexpr DType kDtypes[] = {DType::fp16, DType::bf16};

struct Size {
  int64_t rows, cols;
};
constexpr Size kSmallShapes[] = {{1, 1}, {1, 300}, {300, 1}, {7, 13}, {130, 70}};

// 2:4, 1:4, 2:8 element-wise; 2:4:4 and 1:2:8 vector-wise; 3:7:5 with M not a power of two.
const nm::Pattern kPatterns[] = {{2, 4, 1}, {1, 4, 1}, {2, 8, 1}, {2, 4, 4}, {1, 2, 8}, {3, 7, 5}};

std::string name_of(const nm::Pattern& p) {
  return std::to_string(p.n) + ":" + std::to_string(p.m) + ":" + std::to_string(p.l);
}

void expect_round_trip(const HostMatrix& w, const nm::Pattern& p, const std::string& what) {
  SCOPED_TRACE(what + " pattern " + name_of(p));
  auto enc = nm::encode(w.view(), p);
  ASSERT_TRUE(enc.ok()) << enc.status().to_string();
  auto dec = nm::decode(enc.value());
  ASSERT_TRUE(dec.ok()) << dec.status().to_string();
  EXPECT_TRUE(same_values(dec->view(), w.view()));
}

// N:M matrices of one shape: extra zeros inside kept vectors from none to nearly all, empty,
// a single non-zero, and zero rows and columns.
std::vector<std::pair<std::string, HostMatrix>> nm_cases(DType t, int64_t rows, int64_t cols,
                                                        const nm::Pattern& p, uint64_t seed) {
  std::vector<std::pair<std::string, HostMatrix>> out;
  for (double extra : {0.0, 0.5, 0.9, 0.99}) {
    out.emplace_back("extra zeros " + std::to_string(extra),
                     patterns::nm_pattern(t, rows, cols, p, extra, seed));
  }
  out.emplace_back("all zero", HostMatrix(t, rows, cols));
  HostMatrix one(t, rows, cols);
  one.set(rows - 1, cols - 1, 0.375f);
  out.emplace_back("one non-zero", std::move(one));
  HostMatrix holes = patterns::nm_pattern(t, rows, cols, p, 0.0, seed + 1);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      if (r % 5 == 2 || c % 7 == 3) holes.set(r, c, 0.f);
  out.emplace_back("zero rows and columns", std::move(holes));
  return out;
}

HostMatrix from_rows(const std::vector<std::vector<float>>& rows) {
  HostMatrix w(DType::fp16, int64_t(rows.size()), int64_t(rows[0].size()));
  for (size_t r = 0; r < rows.size(); ++r)
    for (size_t c = 0; c < rows[r].size(); ++c) w.set(int64_t(r), int64_t(c), rows[r][c]);
  return w;
}

std::vector<float> values_as_float(const nm::Matrix& m) {
  std::vector<float> out;
  for (uint16_t v : m.values.host()) out.push_back(half_to_float(v));
  return out;
}

}  // namespace

TEST(Nm, ParsePattern) {
  auto p = nm::parse_pattern("2:4");
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(std::make_tuple(p->n, p->m, p->l), std::make_tuple(2, 4, 1));
  p = nm::parse_pattern("2:4:8");
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(std::make_tuple(p->n, p->m, p->l), std::make_tuple(2, 4, 8));
  p = nm::parse_pattern("255:256:256");
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->m, 256);
  for (const char* bad : {"", "2", "2:", ":4", "2::4", "4:4", "0:4", "5:4", "2:4:0", "2:257",
                          "2:4:257", "2:4:8:1", " 2:4", "2:4 ", "-1:4", "+2:4", "2;4", "a:b",
                          "99999999999:4", "2:4:"}) {
    EXPECT_FALSE(nm::parse_pattern(bad).has_value()) << "'" << bad << "'";
  }
}

TEST(Nm, CheckPatternSaysWhatIsAllowed) {
  EXPECT_TRUE(nm::check_pattern({2, 4, 1}).ok());
  EXPECT_TRUE(nm::check_pattern({1, 256, 256}).ok());
  for (nm::Pattern bad : {nm::Pattern{0, 4, 1}, nm::Pattern{4, 4, 1}, nm::Pattern{2, 300, 1},
                          nm::Pattern{2, 4, 0}, nm::Pattern{2, 4, 257}}) {
    Status s = nm::check_pattern(bad);
    EXPECT_EQ(s.code(), Code::invalid_argument) << name_of(bad);
    EXPECT_NE(s.message().find("1 <= N < M <= 256 and 1 <= L <= 256"), std::string::npos)
        << s.message();
  }
}

TEST(Nm, RoundTripSmallShapesEveryPattern) {
  for (const nm::Pattern& p : kPatterns)
    for (DType t : kDtypes)
      for (const Size& sz : kSmallShapes)
        for (auto& [name, w] : nm_cases(t, sz.rows, sz.cols, p, 5)) {
          expect_round_trip(w, p,
                            std::string(dtype_name(t)) + " " + std::to_string(sz.rows) + "x" +
                                std::to_string(sz.cols) + " " + name);
        }
}

TEST(Nm, RoundTripLargeOddShape) {
  const nm::Pattern p24{2, 4, 1}, p128{1, 2, 8};
  expect_round_trip(patterns::nm_pattern(DType::fp16, 4097, 4095, p24, 0.1, 3), p24,
                    "fp16 4097x4095");
  expect_round_trip(patterns::nm_pattern(DType::bf16, 4097, 4095, p128, 0.3, 4), p128,
                    "bf16 4097x4095");
}

TEST(Nm, LayoutOfA4x8TwoFourMatrix) {
  // Row 2 has one non-zero in group 0 and none in group 1: the lowest unused indices fill in.
  const HostMatrix w = from_rows({{1, 0, 2, 0, 0, 3, 0, 4},
                                  {0, 5, 0, 6, 7, 8, 0, 0},
                                  {0, 0, 9, 0, 0, 0, 0, 0},
                                  {10, 11, 0, 0, 0, 0, 12, 13}});
  auto enc = nm::encode(w.view(), {2, 4, 1});
  ASSERT_TRUE(enc.ok()) << enc.status().to_string();
  EXPECT_EQ(enc->index_bits, 2);
  EXPECT_EQ(enc->groups, 2);
  EXPECT_EQ(enc->padded_rows, 4);
  EXPECT_EQ(enc->words_per_block, 1);
  // Indices (g0: j0 j1, g1: j0 j1) at bits 0, 2, 4, 6: row 0 = {0,2},{1,3} -> 0b11'01'10'00.
  EXPECT_EQ(enc->indices.host(), (std::vector<uint32_t>{0xD8, 0x4D, 0x48, 0xE4}));
  EXPECT_EQ(values_as_float(enc.value()),
            (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 0, 9, 0, 0, 10, 11, 12, 13}));
  EXPECT_EQ(enc->storage_bytes(), 16u * 2 + 4u * 4);
}

TEST(Nm, LayoutOfAVectorWiseMatrixWithPadding) {
  // 2:4:2 on 3 x 5: row blocks {0,1} and {2, padding row 3}; groups cols 0..3 and col 4 alone,
  // so in block 0 the second kept index of group 1 is a filler past K (column 5).
  const HostMatrix w = from_rows({{1, 0, 0, 2, 3}, {0, 0, 0, 4, 0}, {0, 6, 0, 0, 0}});
  auto enc = nm::encode(w.view(), {2, 4, 2});
  ASSERT_TRUE(enc.ok()) << enc.status().to_string();
  EXPECT_EQ(enc->padded_rows, 4);
  EXPECT_EQ(enc->groups, 2);
  EXPECT_EQ(enc->words_per_block, 1);
  // Block 0: {0,3},{0,1} -> 0x4C. Block 1: {0,1},{0,1} (filler 0 beside column 1; all fillers).
  EXPECT_EQ(enc->indices.host(), (std::vector<uint32_t>{0x4C, 0x44}));
  EXPECT_EQ(values_as_float(enc.value()),
            (std::vector<float>{1, 2, 3, 0, 0, 4, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0}));
  auto dec = nm::decode(enc.value());
  ASSERT_TRUE(dec.ok());
  EXPECT_TRUE(same_values(dec->view(), w.view()));
}

TEST(Nm, IndicesStraddlingWordsRoundTrip) {
  // 3-bit indices: index 10 of a block occupies bits 30..32, across two words.
  const nm::Pattern p{2, 8, 1};
  auto w = patterns::nm_pattern(DType::fp16, 3, 8 * 40, p, 0.0, 12);
  auto enc = nm::encode(w.view(), p);
  ASSERT_TRUE(enc.ok());
  EXPECT_EQ(enc->words_per_block, (40 * 2 * 3 + 31) / 32);
  for (int64_t g = 0; g < 40; ++g) {  // every kept index points at a non-zero column
    for (int64_t j = 0; j < 2; ++j) {
      const uint32_t idx = nm::get_index(enc->indices.data(), (g * 2 + j) * 3, 3);
      EXPECT_FALSE(w.zero_at(0, g * 8 + idx)) << g << " " << j;
    }
  }
  expect_round_trip(w, p, "straddling");
}

TEST(Nm, RejectsNonNmNamingTheFirstGroup) {
  {
    const nm::Pattern p{2, 4, 1};
    auto w = patterns::nm_pattern(DType::fp16, 16, 40, p, 0.0, 1);
    auto add_one = [&](int64_t r, int64_t c0) {  // a third non-zero in group c0..c0+3 of row r
      for (int64_t c = c0; c < c0 + 4; ++c)
        if (w.zero_at(r, c)) return w.set(r, c, 1.5f);
    };
    add_one(13, 0);   // later row: reported after row 12
    add_one(12, 36);  // same row, later group
    add_one(12, 28);  // the first violation
    auto enc = nm::encode(w.view(), p);
    ASSERT_FALSE(enc.ok());
    EXPECT_EQ(enc.status().code(), Code::invalid_argument);
    EXPECT_EQ(enc.status().message(),
              "nm: matrix is not 2:4: row 12, group 7 (columns 28..31) holds 3 non-zeros "
              "(at most 2 allowed)");
  }
  {
    const nm::Pattern p{2, 4, 4};
    auto w = patterns::nm_pattern(DType::bf16, 16, 32, p, 0.0, 2);
    for (int64_t c = 28; c < 32; ++c)  // a non-zero in row 14 at a column the block dropped
      if (w.zero_at(12, c) && w.zero_at(13, c) && w.zero_at(14, c) && w.zero_at(15, c)) {
        w.set(14, c, -3.0f);
        break;
      }
    auto enc = nm::encode(w.view(), p);
    ASSERT_FALSE(enc.ok());
    EXPECT_EQ(enc.status().message(),
              "nm: matrix is not 2:4:4: row block 3 (rows 12..15), group 7 (columns 28..31) holds "
              "3 non-zero vectors (at most 2 allowed)");
  }
  {
    // Partial row block (row 16 alone) and partial group (columns 28..29).
    const nm::Pattern p{1, 4, 4};
    auto w = patterns::nm_pattern(DType::fp16, 17, 30, p, 0.0, 3);
    w.set(16, 28, 1.0f);
    w.set(16, 29, 2.0f);
    auto enc = nm::encode(w.view(), p);
    ASSERT_FALSE(enc.ok());
    EXPECT_EQ(enc.status().message(),
              "nm: matrix is not 1:4:4: row block 4 (row 16), group 7 (columns 28..29) holds "
              "2 non-zero vectors (at most 1 allowed)");
  }
  {
    auto w = patterns::random(DType::fp16, 5, 9, 0.0, 4);  // dense
    auto enc = nm::encode(w.view(), {2, 4, 1});
    ASSERT_FALSE(enc.ok());
    EXPECT_EQ(enc.status().message(),
              "nm: matrix is not 2:4: row 0, group 0 (columns 0..3) holds 4 non-zeros "
              "(at most 2 allowed)");
  }
}

TEST(Nm, RejectsFp32AndBadPatterns) {
  HostMatrix w32(DType::fp32, 4, 4);
  EXPECT_EQ(nm::encode(w32.view(), {2, 4, 1}).status().code(), Code::unsupported);
  HostMatrix w(DType::fp16, 4, 4);
  EXPECT_EQ(nm::encode(w.view(), {4, 4, 1}).status().code(), Code::invalid_argument);
}

TEST(Nm, EffectiveDensity) {
  // Byte accounting depends on the shape only, so an all-zero matrix (every group filled with
  // zero vectors) is enough here.
  {
    HostMatrix w(DType::fp16, 4096, 4096);
    auto enc = encode(Format::nm, w.view(), EncodeOptions{});  // default pattern 2:4
    ASSERT_TRUE(enc.ok());
    EXPECT_DOUBLE_EQ(d_eff(enc.value()), 0.5 * (1.0 + 2.0 / 16.0));
  }
  struct Case {
    nm::Pattern p;
    int b;
  };
  for (Case c : {Case{{1, 4, 1}, 2}, Case{{2, 8, 1}, 3}, Case{{2, 4, 4}, 2}, Case{{1, 2, 8}, 1},
                 Case{{3, 7, 5}, 3}, Case{{4, 16, 2}, 4}, Case{{16, 256, 32}, 8}}) {
    for (Size sz : {Size{1024, 4096}, Size{1001, 3001}}) {
      HostMatrix w(DType::bf16, sz.rows, sz.cols);
      auto enc = nm::encode(w.view(), c.p);
      ASSERT_TRUE(enc.ok());
      EXPECT_EQ(enc->index_bits, c.b);
      const double ideal = double(c.p.n) / c.p.m * (1.0 + c.b / (16.0 * c.p.l));
      const double got = effective_density(enc->storage_bytes(), enc->shape);
      // Padding rows to a multiple of L and K to a multiple of M scales the ideal; what is left
      // is the rounding of each block's index bits up to whole words.
      const double padding = double(enc->padded_rows) / double(sz.rows) *
                             double(enc->groups * c.p.m) / double(sz.cols);
      EXPECT_NEAR(got / (ideal * padding), 1.0, 0.01) << name_of(c.p) << " " << sz.rows << "x"
                                                      << sz.cols;
      if (sz.rows % c.p.l == 0 && sz.cols % c.p.m == 0 &&
          (sz.cols / c.p.m * c.p.n * c.b) % 32 == 0) {
        EXPECT_DOUBLE_EQ(got, ideal) << name_of(c.p);
      }
    }
  }
}

TEST(Nm, ReferenceMatmulEqualsDense) {
  for (const nm::Pattern& p : kPatterns)
    for (DType t : kDtypes)
      for (Size sz : {Size{130, 70}, Size{33, 129}, Size{1, 1}}) {
        auto w = patterns::nm_pattern(t, sz.rows, sz.cols, p, 0.2, 8);
        auto dense = encode(Format::dense, w.view());
        EncodeOptions opt;
        opt.nm_pattern = p;
        auto sparse = encode(Format::nm, w.view(), opt);
        ASSERT_TRUE(dense.ok() && sparse.ok()) << sparse.status().to_string();
        for (int64_t n : {1, 5, 17}) {
          auto x = patterns::dense_random(t, n, sz.cols, 200 + n);
          auto want = reference::matmul_f64(dense.value(), x.view());
          auto got = reference::matmul_f64(sparse.value(), x.view());
          ASSERT_TRUE(want.ok() && got.ok()) << got.status().to_string();
          double num = 0, den = 0;
          for (size_t i = 0; i < want->size(); ++i) {
            num += (got.value()[i] - want.value()[i]) * (got.value()[i] - want.value()[i]);
            den += want.value()[i] * want.value()[i];
          }
          EXPECT_LE(std::sqrt(num), 1e-12 * std::sqrt(den)) << name_of(p);
        }
      }
}

namespace {

// 2:5:3 on 10 x 23: b = 3 (indices 5..7 impossible), padded rows 10 and 11, last group has
// columns 20..22 only, G*N*b = 30 bits so each block's word has 2 unused bits.
const nm::Pattern kCorruptPattern{2, 5, 3};
nm::Matrix valid_matrix() {
  auto w = patterns::nm_pattern(DType::fp16, 10, 23, kCorruptPattern, 0.0, 41);
  return nm::encode(w.view(), kCorruptPattern).value();
}

void set_index(nm::Matrix& m, int64_t block, int64_t g, int64_t j, uint32_t idx) {
  uint32_t* words = m.indices.host().data() + block * m.words_per_block;
  const int64_t pos = (g * m.pattern.n + j) * m.index_bits;
  for (int bit = 0; bit < m.index_bits; ++bit) {
    const int64_t at = pos + bit;
    words[at / 32] = (words[at / 32] & ~(1u << (at % 32))) | (((idx >> bit) & 1u) << (at % 32));
  }
}

void expect_rejected(const nm::Matrix& m, const std::string& what, const std::string& part) {
  SCOPED_TRACE(what);
  Status s = nm::validate(m);
  EXPECT_EQ(s.code(), Code::corrupt_data) << s.to_string();
  EXPECT_NE(s.message().find(part), std::string::npos) << s.message();
  auto dec = nm::decode(m);
  ASSERT_FALSE(dec.ok());
  EXPECT_EQ(dec.status().code(), Code::corrupt_data);
}

}  // namespace

TEST(Nm, CorruptBuffersAreRejected) {
  ASSERT_TRUE(nm::validate(valid_matrix()).ok());
  using Edit = std::function<void(nm::Matrix&)>;
  const int64_t kc = 5 * 2;
  const std::vector<std::tuple<std::string, std::string, Edit>> cases = {
      {"index >= M", "not below M = 5", [](auto& m) { set_index(m, 1, 2, 1, 7); }},
      {"repeated index", "not above the previous",
       [](auto& m) {
         set_index(m, 0, 1, 0, 2);
         set_index(m, 0, 1, 1, 2);
       }},
      {"decreasing indices", "not above the previous",
       [](auto& m) {
         set_index(m, 2, 3, 0, 4);
         set_index(m, 2, 3, 1, 1);
       }},
      {"non-zero past K", "past K = 23",
       [&](auto& m) {  // group 4 is columns 20..22; index 4 is column 24
         set_index(m, 0, 4, 0, 0);
         set_index(m, 0, 4, 1, 4);
         m.values.host()[size_t(1 * kc + 4 * 2 + 1)] = 0x3C00;
       }},
      {"non-zero padding row", "padding row 11",
       [&](auto& m) { m.values.host()[size_t(11 * kc + 3)] = 0xBC00; }},
      {"unused index bits", "unused bits", [](auto& m) { m.indices.host()[2] |= 1u << 31; }},
      {"values too short", "values has",
       [](auto& m) {
         m.values.host().pop_back();
         m.values.sync_size();
       }},
      {"indices too long", "indices has",
       [](auto& m) {
         m.indices.host().push_back(0);
         m.indices.sync_size();
       }},
      {"index_bits", "index_bits", [](auto& m) { m.index_bits = 2; }},
      {"groups", "groups", [](auto& m) { m.groups = 4; }},
      {"padded_rows", "padded_rows", [](auto& m) { m.padded_rows = 10; }},
      {"words_per_block", "words_per_block", [](auto& m) { m.words_per_block = 2; }},
      {"impossible pattern", "not allowed", [](auto& m) { m.pattern.n = 5; }},
      {"other M", "groups", [](auto& m) { m.pattern.m = 6; }},
      {"zero rows", "non-positive shape", [](auto& m) { m.shape.cols = 0; }},
      {"fp32", "dtype", [](auto& m) { m.shape.dtype = DType::fp32; }},
      {"huge shape", "padded_rows", [](auto& m) { m.shape.rows = int64_t(1) << 62; }},
      {"huge groups", "", [](auto& m) {
         m.shape.cols = int64_t(1) << 62;
         m.groups = m.shape.cols / 5 + 1;
       }},
  };
  for (const auto& [what, part, edit] : cases) {
    nm::Matrix m = valid_matrix();
    edit(m);
    expect_rejected(m, what, part);
  }
}

TEST(Nm, RandomBitFlipsNeverCrash) {
  const nm::Matrix base = valid_matrix();
  Rng rng(99);
  int rejected = 0;
  for (int trial = 0; trial < 300; ++trial) {
    nm::Matrix m = base;
    for (int flips = 0; flips < 2; ++flips) {
      auto& words = m.indices.host();
      words[rng.below(words.size())] ^= 1u << rng.below(32);
    }
    Status s = nm::validate(m);
    if (s.ok()) {
      EXPECT_TRUE(nm::decode(m).ok());
    } else {
      EXPECT_EQ(s.code(), Code::corrupt_data) << s.to_string();
      EXPECT_FALSE(nm::decode(m).ok());
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 150);
}

TEST(Nm, EncodesAStridedView) {
  // A 21 x 37 window of a 24 x 50 matrix (ld = 50): encode must follow the view's ld.
  const nm::Pattern p{2, 8, 3};
  auto big = patterns::nm_pattern(DType::fp16, 24, 50, p, 0.1, 14);
  ConstMatrixView window = big.view();
  window.rows = 21;
  window.cols = 37;
  auto enc = nm::encode(window, p);
  ASSERT_TRUE(enc.ok()) << enc.status().to_string();
  auto dec = nm::decode(enc.value());
  ASSERT_TRUE(dec.ok());
  EXPECT_TRUE(same_values(dec->view(), window));
}
