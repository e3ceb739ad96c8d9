// macko: lossless round trip over patterns/shapes/sparsities, exact arrays of a hand-made
// example, byte accounting, the reference walk, and rejection of corrupted buffers.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "cpu/format_cases.hpp"
#include "cpu/test_util.hpp"
#include "sparrow/formats/macko.hpp"
#include "sparrow/patterns.hpp"
#include "sparrow/weight.hpp"

using namespace sparrow;

namespace {

// Encodes, validates, decodes and checks the result equals the input; returns the encoding.
macko::Matrix round_trip(const ConstMatrixView& w, const std::string& what) {
  auto m = macko::encode(w);
  EXPECT_TRUE(m.ok()) << what << ": " << m.status().to_string();
  if (!m.ok()) return {};
  Status v = macko::validate(m.value());
  EXPECT_TRUE(v.ok()) << what << ": " << v.to_string();
  EXPECT_EQ(m->nnz, test::count_nonzeros(w)) << what;
  EXPECT_EQ(m->entries() % macko::kPad, 0) << what;
  auto d = macko::decode(m.value());
  EXPECT_TRUE(d.ok()) << what << ": " << d.status().to_string();
  if (d.ok()) {
    EXPECT_EQ(d->dtype(), w.dtype) << what;
    EXPECT_TRUE(same_values(d->view(), w)) << what;
  }
  return std::move(m).value();
}

uint16_t h(float v) { return float_to_half(v); }

}  // namespace

TEST(Macko, RoundTripSmallShapes) {
  for (const auto& c : test::small_cases()) {
    HostMatrix w = test::make(c);
    round_trip(w.view(), c.name());
  }
}

TEST(Macko, RoundTripLarge) {
  for (const auto& c : test::large_cases()) {
    HostMatrix w = test::make(c);
    round_trip(w.view(), c.name());
  }
}

TEST(Macko, RoundTripZeroRowsAndColumns) {
  for (DType t : {DType::fp16, DType::bf16}) {
    HostMatrix w = test::with_zero_lines(t, 97, 181, 0.3, {0, 40, 41, 96}, {0, 17, 18, 100, 180});
    macko::Matrix m = round_trip(w.view(), dtype_name(t));
    // An all-zero row holds no entries at all.
    for (int64_t r : {0, 40, 41, 96}) EXPECT_EQ(m.row_ptr.host()[r], m.row_ptr.host()[r + 1]);
  }
  HostMatrix zero(DType::fp16, 33, 65);
  macko::Matrix m = round_trip(zero.view(), "all zero");
  EXPECT_EQ(m.entries(), 0);
  EXPECT_EQ(m.nnz, 0);
}

TEST(Macko, EncodeReadsStridedViews) {
  HostMatrix big = patterns::random(DType::bf16, 40, 100, 0.6, 3);
  ConstMatrixView sub{static_cast<const uint16_t*>(big.data()) + 7, DType::bf16, 40, 61, 100};
  auto m = macko::encode(sub);
  ASSERT_TRUE(m.ok());
  auto d = macko::decode(m.value());
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(same_values(d->view(), sub));
}

TEST(Macko, RejectsFp32) {
  HostMatrix w(DType::fp32, 4, 4);
  auto m = macko::encode(w.view());
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Code::unsupported);
}

// 2 x 20:  row 0 = a at column 1, b at column 19      (gap 18: one padding entry at column 17)
//          row 1 = c at column 17, d at column 18     (first column 17: padding at column 15)
TEST(Macko, HandMadeExample) {
  HostMatrix w(DType::fp16, 2, 20);
  w.set(0, 1, 1.0f);
  w.set(0, 19, 2.0f);
  w.set(1, 17, -1.0f);
  w.set(1, 18, 0.5f);
  auto m = macko::encode(w.view());
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->nnz, 4);
  EXPECT_EQ(m->row_ptr.host(), (std::vector<uint32_t>{0, 3, 6}));
  std::vector<uint16_t> values(32, 0);
  //          col 1   col 17 (pad)  col 19 | col 15 (pad)  col 17     col 18
  const uint16_t head[] = {h(1.0f), 0, h(2.0f), 0, h(-1.0f), h(0.5f)};
  std::copy(std::begin(head), std::end(head), values.begin());
  EXPECT_EQ(m->values.host(), values);
  // Deltas (low nibble first): 1, 15, 1 | 15, 1, 0, then the zero tail.
  std::vector<uint8_t> deltas(16, 0);
  deltas[0] = 0xF1;
  deltas[1] = 0xF1;
  deltas[2] = 0x01;
  EXPECT_EQ(m->deltas.host(), deltas);
  EXPECT_EQ(m->storage_bytes(), 3 * 4 + 32 * 2 + 16u);
  EXPECT_EQ(m->max_row_entries, 3);  // derived, not stored: storage_bytes has no room for it
}

// Gaps of exactly 16 need no padding; a gap of 34 needs two padding entries.
TEST(Macko, PaddingAtGapBoundaries) {
  HostMatrix w(DType::bf16, 1, 70);
  for (int c : {15, 31, 65}) w.set(0, c, 3.0f);
  auto m = macko::encode(w.view());
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->row_ptr.host(), (std::vector<uint32_t>{0, 5}));
  // entries: col 15 (d15), col 31 (d15), pad col 47 (d15), pad col 63 (d15), col 65 (d1)
  const std::vector<uint8_t> deltas = {0xFF, 0xFF, 0x01};
  for (size_t i = 0; i < deltas.size(); ++i) EXPECT_EQ(m->deltas.host()[i], deltas[i]) << i;
  const uint16_t three = float_to_bf16(3.0f);
  const std::vector<uint16_t> values = {three, three, 0, 0, three, 0};
  for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(m->values.host()[i], values[i]) << i;
  EXPECT_EQ(m->nnz, 3);
}

TEST(Macko, EffectiveDensity) {
  const int64_t M = 4096, K = 4096;
  for (double sparsity : {0.5, 0.7}) {
    HostMatrix w = patterns::random(DType::fp16, M, K, sparsity, 9);
    auto m = macko::encode(w.view());
    ASSERT_TRUE(m.ok());
    const double d = 1.0 - sparsity;
    const double deff = effective_density(m->storage_bytes(), m->shape);
    // 2 bytes of value + half a byte of delta per entry; gaps > 16 are rare at d >= 0.3
    // (0.7^16 = 0.3 %), row pointers add 4 / (2K).
    EXPECT_NEAR(deff, 1.25 * d, 0.01) << sparsity;
    if (sparsity == 0.5) EXPECT_LE(deff, 0.64);
  }
}

TEST(Macko, ReferenceMatchesDense) {
  for (DType t : {DType::fp16, DType::bf16}) {
    test::expect_reference_matches_dense(Format::macko, patterns::magnitude(t, 130, 300, 0.7, 2),
                                         3, 4);
    // Long gaps: mostly padding entries.
    test::expect_reference_matches_dense(Format::macko, patterns::random(t, 67, 1000, 0.98, 6),
                                         2, 8);
    test::expect_reference_matches_dense(
        Format::macko, test::with_zero_lines(t, 45, 77, 0.5, {0, 44}, {0, 76}), 5, 1);
  }
}

// ---- corrupted buffers ---------------------------------------------------------------------------

namespace {

macko::Matrix sample() {
  // Sparse enough for padding entries, with an empty row.
  HostMatrix w = patterns::random(DType::fp16, 37, 150, 0.85, 21);
  for (int64_t c = 0; c < 150; ++c) w.set(5, c, 0.f);
  auto m = macko::encode(w.view());
  EXPECT_TRUE(m.ok());
  return std::move(m).value();
}

void expect_corrupt(const macko::Matrix& m, const std::string& message_part) {
  Status s = macko::validate(m);
  EXPECT_EQ(s.code(), Code::corrupt_data) << s.to_string();
  EXPECT_NE(s.message().find(message_part), std::string::npos)
      << "message '" << s.message() << "' does not mention '" << message_part << "'";
  auto d = macko::decode(m);
  EXPECT_EQ(d.status().code(), Code::corrupt_data);
}

template <class T>
void resize(Buffer<T>& b, size_t n) {
  b.host().resize(n);
  b.sync_size();
}

template <class T>
void flip_bit(Buffer<T>& b, size_t i, int bit) {
  if (i < b.size()) b.host()[i] ^= T(uint64_t(1) << bit);
}

// An entry index of `m` holding a true non-zero, and one holding gap padding.
int64_t find_entry(const macko::Matrix& m, bool padding) {
  for (int64_t e = 0; e < int64_t(m.row_ptr.host().back()); ++e) {
    if ((m.values.host()[size_t(e)] == 0) == padding) return e;
  }
  return -1;
}

}  // namespace

TEST(Macko, ValidateRejectsWrongSizes) {
  {
    auto m = sample();
    resize(m.row_ptr, m.row_ptr.size() - 1);
    expect_corrupt(m, "row_ptr has");
  }
  {
    auto m = sample();
    m.shape.rows += 1;
    expect_corrupt(m, "row_ptr has");
  }
  {
    auto m = sample();
    resize(m.values, m.values.size() - 1);
    expect_corrupt(m, "multiple of 32");
  }
  {
    auto m = sample();
    resize(m.values, m.values.size() - 32);  // still a multiple of kPad, but too short
    resize(m.deltas, m.values.size() / 2);
    expect_corrupt(m, "past the");
  }
  {
    auto m = sample();
    resize(m.values, m.values.size() + 32);  // a tail longer than the padding
    resize(m.deltas, m.values.size() / 2);
    expect_corrupt(m, "tail must pad");
  }
  {
    auto m = sample();
    resize(m.deltas, m.deltas.size() - 1);
    expect_corrupt(m, "deltas has");
  }
  {
    auto m = sample();
    m.shape.cols = 0;
    expect_corrupt(m, "non-positive shape");
  }
  {
    auto m = sample();
    m.shape.dtype = DType::fp32;
    expect_corrupt(m, "dtype");
  }
}

TEST(Macko, ValidateRejectsBadRowPointers) {
  {
    auto m = sample();
    m.row_ptr.host()[0] = 1;
    expect_corrupt(m, "row_ptr[0]");
  }
  {
    auto m = sample();
    std::swap(m.row_ptr.host()[3], m.row_ptr.host()[4]);
    expect_corrupt(m, "row_ptr decreases at row");
  }
  {
    auto m = sample();
    m.row_ptr.host().back() = uint32_t(m.values.size() + 1);
    expect_corrupt(m, "past the");
  }
  {
    auto m = sample();
    m.row_ptr.host()[10] = 0xFFFFFFF0u;  // far past the end, then decreasing
    expect_corrupt(m, "row_ptr decreases");
  }
  {
    auto m = sample();
    m.max_row_entries += 1;  // the launch rules would read a wrong longest row
    expect_corrupt(m, "max_row_entries");
  }
  {
    auto m = sample();
    ASSERT_GE(m.row_order.size(), 8u);
    std::swap(m.row_order.host()[0], m.row_order.host()[4]);  // a kernel would skip a row
    expect_corrupt(m, "row_order");
  }
  {
    auto m = sample();
    ASSERT_GE(m.step_rows.size(), 4u);
    m.step_rows.host()[1] += 1;  // a warp starting there would read columns one off
    expect_corrupt(m, "step_rows");
  }
}

// step_rows against its definition (macko.hpp), worked out entry by entry: for each step, the
// first row not wholly before its first entry, that row's column count before it, and the first
// row starting at or after it. Rows far longer than a step (several records inside one row), rows
// shorter than one (several rows per step), empty rows (leading, inside, trailing), gap padding,
// and the all-zero matrix.
TEST(Macko, StepRowsMatchTheirDefinition) {
  std::vector<HostMatrix> cases;
  cases.push_back(patterns::random(DType::fp16, 40, 3000, 0.5, 11));    // ~6 steps per row
  cases.push_back(patterns::magnitude(DType::bf16, 300, 1001, 0.9, 12));  // uneven, short rows
  cases.push_back(patterns::random(DType::fp16, 20, 20000, 0.995, 13));  // padding entries
  HostMatrix gaps = patterns::random(DType::fp16, 200, 300, 0.97, 14);   // ~9 entries per row
  for (int64_t r : {0, 1, 2, 50, 51, 52, 53, 197, 198, 199})
    for (int64_t c = 0; c < gaps.cols(); ++c) gaps.set(r, c, 0.f);
  cases.push_back(gaps);
  cases.push_back(HostMatrix(DType::fp16, 5, 9));  // all zeros: no steps
  for (size_t i = 0; i < cases.size(); ++i) {
    auto enc = macko::encode(cases[i].view());
    ASSERT_TRUE(enc.ok()) << enc.status().to_string();
    const macko::Matrix& m = enc.value();
    const auto& rp = m.row_ptr.host();
    const uint64_t rows = rp.size() - 1;
    const uint64_t steps = (rp[rows] + macko::kStepEntries - 1) / macko::kStepEntries;
    const auto& sr = m.step_rows.host();
    ASSERT_EQ(sr.size(), 4 * (steps + 1)) << i;
    EXPECT_EQ(sr[4 * steps], rows) << i;
    EXPECT_EQ(sr[4 * steps + 1], 0u) << i;
    EXPECT_EQ(sr[4 * steps + 2], rows) << i;
    EXPECT_EQ(sr[4 * steps + 3], rp[rows]) << i;
    for (uint64_t s = 0; s < steps; ++s) {
      const uint64_t base = s * macko::kStepEntries;
      uint64_t r = 0;
      while (r < rows && rp[r + 1] <= base && rp[r] < base) ++r;
      uint64_t carry = 0;
      for (uint64_t e = rp[r]; e < base; ++e) carry += macko::delta_at(m.deltas.data(), e) + 1;
      uint64_t next = 0;
      while (rp[next] < base) ++next;  // the first row starting at or after the step
      EXPECT_EQ(sr[4 * s], r) << "case " << i << " step " << s;
      EXPECT_EQ(sr[4 * s + 1], carry) << "case " << i << " step " << s;
      EXPECT_EQ(sr[4 * s + 2], next) << "case " << i << " step " << s;
      EXPECT_EQ(sr[4 * s + 3], rp[next]) << "case " << i << " step " << s;
      if (r < rows && rp[r] < base) EXPECT_GT(rp[r + 1], base);  // the row holds the step's start
    }
  }
}

// The row order against its definition (macko.hpp): every row once, longest first, ties by row,
// each record holding the row's extent.
TEST(Macko, RowOrderIsLongestFirst) {
  std::vector<HostMatrix> cases;
  cases.push_back(patterns::random(DType::fp16, 300, 1000, 0.5, 1));
  cases.push_back(patterns::magnitude(DType::bf16, 200, 3001, 0.9, 2));
  HostMatrix gaps = patterns::random(DType::fp16, 90, 700, 0.6, 4);
  for (int64_t r : {0, 1, 2, 40, 41, 87, 88, 89})  // empty rows, leading and trailing
    for (int64_t c = 0; c < gaps.cols(); ++c) gaps.set(r, c, 0.f);
  cases.push_back(gaps);
  cases.push_back(HostMatrix(DType::fp16, 5, 9));  // all zeros
  for (size_t i = 0; i < cases.size(); ++i) {
    auto enc = macko::encode(cases[i].view());
    ASSERT_TRUE(enc.ok()) << enc.status().to_string();
    const macko::Matrix& m = enc.value();
    const auto& rp = m.row_ptr.host();
    const auto& order = m.row_order.host();
    const size_t rows = rp.size() - 1;
    ASSERT_EQ(order.size(), 4 * rows) << i;
    EXPECT_EQ(m.derived_bytes(), 16 * rows + m.step_rows.bytes());
    EXPECT_EQ(derived_bytes(Weight(m)), m.derived_bytes());
    std::vector<int> seen(rows, 0);
    for (size_t j = 0; j < rows; ++j) {
      const uint32_t r = order[4 * j];
      ASSERT_LT(r, rows) << "case " << i;
      ++seen[r];
      EXPECT_EQ(order[4 * j + 1], rp[r]);
      EXPECT_EQ(order[4 * j + 2], rp[r + 1]);
      EXPECT_EQ(order[4 * j + 3], 0u);
      if (j > 0) {
        const uint32_t q = order[4 * (j - 1)];
        const uint32_t lq = rp[q + 1] - rp[q], lr = rp[r + 1] - rp[r];
        EXPECT_TRUE(lq > lr || (lq == lr && q < r)) << "case " << i << " position " << j;
      }
    }
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), int64_t(rows)) << "case " << i;
  }
}

TEST(Macko, ValidateRejectsBadEntries) {
  {
    // Deltas of 15 everywhere in row 0 (> 10 entries on a 150-wide row) run past K.
    auto m = sample();
    ASSERT_GT(m.row_ptr.host()[1], 10u);
    for (uint32_t e = m.row_ptr.host()[0]; e < m.row_ptr.host()[1]; ++e)
      m.deltas.host()[e / 2] |= uint8_t(0xF << ((e % 2) * 4));
    expect_corrupt(m, ">= K");
  }
  {
    // A padding entry whose delta is not 15.
    auto m = sample();
    const int64_t e = find_entry(m, /*padding=*/true);
    ASSERT_GE(e, 0);
    m.deltas.host()[size_t(e / 2)] &= uint8_t(e % 2 ? 0x0F : 0xF0);
    expect_corrupt(m, "padding entries must have delta 15");
  }
  {
    auto m = sample();
    m.nnz += 1;
    expect_corrupt(m, "nnz field");
  }
  {
    auto m = sample();
    ASSERT_GT(m.values.size(), size_t(m.row_ptr.host().back()));
    m.values.host().back() = h(1.0f);
    expect_corrupt(m, "tail entry");
  }
  {
    auto m = sample();
    ASSERT_GT(m.values.size(), size_t(m.row_ptr.host().back()) + 1);
    m.deltas.host().back() = 0x30;
    expect_corrupt(m, "tail entry");
  }
  {
    // A padding entry that became a value changes the count.
    auto m = sample();
    const int64_t e = find_entry(m, /*padding=*/true);
    ASSERT_GE(e, 0);
    m.values.host()[size_t(e)] = h(2.0f);
    expect_corrupt(m, "nnz field");
  }
}

// Random damage: validate never reads out of bounds (run under AddressSanitizer to see it) and
// whatever it accepts decodes.
TEST(Macko, ValidateSurvivesRandomDamage) {
  const macko::Matrix good = sample();
  std::mt19937_64 rng(123);
  int rejected = 0;
  for (int i = 0; i < 400; ++i) {
    macko::Matrix m = good;
    auto pick = [&](size_t n) { return n == 0 ? 0 : size_t(rng() % n); };
    const int damages = 1 + int(rng() % 3);  // one to three at once
    for (int k = 0; k < damages; ++k) {
      switch (int(rng() % 7)) {
        case 0: flip_bit(m.row_ptr, pick(m.row_ptr.size()), int(rng() % 32)); break;
        case 1: flip_bit(m.deltas, pick(m.deltas.size()), int(rng() % 8)); break;
        case 2: flip_bit(m.values, pick(m.values.size()), int(rng() % 16)); break;
        case 3: resize(m.row_ptr, pick(m.row_ptr.size() * 2)); break;
        case 4: resize(m.values, pick(m.values.size() * 2)); break;
        case 5: resize(m.deltas, pick(m.deltas.size() * 2)); break;
        case 6: m.shape.rows = int64_t(rng() % 100); break;
      }
    }
    Status s = macko::validate(m);
    if (!s.ok()) {
      EXPECT_EQ(s.code(), Code::corrupt_data) << s.to_string();
      ++rejected;
      continue;
    }
    EXPECT_TRUE(macko::decode(m).ok());
  }
  EXPECT_GT(rejected, 100);
}
