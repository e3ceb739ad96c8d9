// tca_bme: lossless round trip over patterns/shapes/sparsities, exact arrays of a hand-made
// example, byte accounting, the reference walk, and rejection of corrupted buffers.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "cpu/format_cases.hpp"
#include "cpu/test_util.hpp"
#include "sparrow/formats/tca_bme.hpp"
#include "sparrow/weight.hpp"

using namespace sparrow;

namespace {

tca_bme::Matrix round_trip(const ConstMatrixView& w, const std::string& what) {
  auto m = tca_bme::encode(w);
  EXPECT_TRUE(m.ok()) << what << ": " << m.status().to_string();
  if (!m.ok()) return {};
  Status v = tca_bme::validate(m.value());
  EXPECT_TRUE(v.ok()) << what << ": " << v.to_string();
  EXPECT_EQ(m->nnz, test::count_nonzeros(w)) << what;
  EXPECT_EQ(m->groups_m, (w.rows + 63) / 64) << what;
  EXPECT_EQ(m->groups_k, (w.cols + 63) / 64) << what;
  int64_t most = 0;
  const std::vector<uint32_t>& off = m->group_offsets.host();
  for (size_t g = 0; g < off.size(); ++g) {
    EXPECT_EQ(off[g] % 8, 0u) << what;
    if (g > 0) most = std::max<int64_t>(most, off[g] - off[g - 1]);
  }
  EXPECT_EQ(m->max_group_values, most) << what;
  // strip_starts: the group's non-zeros in its rows above each 16-row strip, counted on the dense
  // matrix (not from the bitmaps, which derive() reads).
  const std::vector<uint16_t>& starts = m->strip_starts.host();
  EXPECT_EQ(starts.size(), size_t(m->groups() * 4)) << what;
  int64_t fullest_strip = 0;
  for (int64_t g = 0; g < m->groups() && starts.size() == size_t(m->groups() * 4); ++g) {
    const int64_t r0 = g / m->groups_k * 64, c0 = g % m->groups_k * 64;
    int64_t above = 0;
    for (int s = 0; s < 4; ++s) {
      EXPECT_EQ(starts[size_t(g * 4 + s)], above) << what << ": group " << g << " strip " << s;
      const int64_t before = above;
      for (int64_t r = r0 + 16 * s; r < std::min(r0 + 16 * s + 16, w.rows); ++r) {
        for (int64_t c = c0; c < std::min(c0 + 64, w.cols); ++c) above += !w.zero_at(r, c);
      }
      fullest_strip = std::max(fullest_strip, above - before);
    }
  }
  EXPECT_EQ(m->max_strip_values, fullest_strip) << what;
  auto d = tca_bme::decode(m.value());
  EXPECT_TRUE(d.ok()) << what << ": " << d.status().to_string();
  if (d.ok()) {
    EXPECT_EQ(d->dtype(), w.dtype) << what;
    EXPECT_TRUE(same_values(d->view(), w)) << what;
  }
  return std::move(m).value();
}

uint16_t h(float v) { return float_to_half(v); }

}  // namespace

TEST(TcaBme, RoundTripSmallShapes) {
  for (const auto& c : test::small_cases()) {
    HostMatrix w = test::make(c);
    round_trip(w.view(), c.name());
  }
}

TEST(TcaBme, RoundTripLarge) {
  for (const auto& c : test::large_cases()) {
    HostMatrix w = test::make(c);
    round_trip(w.view(), c.name());
  }
}

TEST(TcaBme, RoundTripZeroRowsAndColumns) {
  for (DType t : {DType::fp16, DType::bf16}) {
    HostMatrix w =
        test::with_zero_lines(t, 150, 131, 0.3, {0, 63, 64, 149}, {0, 7, 8, 64, 127, 130});
    round_trip(w.view(), dtype_name(t));
  }
  HostMatrix zero(DType::bf16, 65, 200);
  tca_bme::Matrix m = round_trip(zero.view(), "all zero");
  EXPECT_EQ(m.values.size(), 0u);
  EXPECT_EQ(m.bitmaps.size(), size_t(2 * 4 * 64));
}

TEST(TcaBme, EncodeReadsStridedViews) {
  HostMatrix big = patterns::random(DType::fp16, 90, 150, 0.6, 3);
  ConstMatrixView sub{static_cast<const uint16_t*>(big.data()) + 5, DType::fp16, 90, 131, 150};
  auto m = tca_bme::encode(sub);
  ASSERT_TRUE(m.ok());
  auto d = tca_bme::decode(m.value());
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(same_values(d->view(), sub));
}

TEST(TcaBme, RejectsFp32) {
  HostMatrix w(DType::fp32, 4, 4);
  auto m = tca_bme::encode(w.view());
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Code::unsupported);
}

// 20 x 70: two groups along K (the second holds columns 64..69).
TEST(TcaBme, HandMadeExample) {
  HostMatrix w(DType::fp16, 20, 70);
  w.set(0, 0, 1.f);    // tc tile 0, bitmap 0 (rows 0-7, cols 0-7),   bit 0
  w.set(0, 7, 7.f);    // tc tile 0, bitmap 0,                        bit 7
  w.set(9, 1, 3.f);    // tc tile 0, bitmap 1 (rows 8-15, cols 0-7),  bit 1*8+1 = 9
  w.set(0, 9, 2.f);    // tc tile 0, bitmap 2 (rows 0-7, cols 8-15),  bit 1
  w.set(9, 9, 5.f);    // tc tile 0, bitmap 3 (rows 8-15, cols 8-15), bit 9
  w.set(3, 17, 4.f);   // tc tile 1 (cols 16-31), bitmap 0,           bit 3*8+1 = 25
  w.set(16, 2, 6.f);   // tc tile 4 (rows 16-31), bitmap 0,           bit 2
  w.set(1, 65, 8.f);   // group 1, tc tile 0, bitmap 0,               bit 9
  auto m = tca_bme::encode(w.view());
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->groups_m, 1);
  EXPECT_EQ(m->groups_k, 2);
  EXPECT_EQ(m->nnz, 8);
  std::vector<uint64_t> bitmaps(128, 0);
  bitmaps[0] = 0x81;                // bits 0 and 7
  bitmaps[1] = uint64_t(1) << 9;
  bitmaps[2] = uint64_t(1) << 1;
  bitmaps[3] = uint64_t(1) << 9;
  bitmaps[1 * 4 + 0] = uint64_t(1) << 25;
  bitmaps[4 * 4 + 0] = uint64_t(1) << 2;
  bitmaps[64 + 0] = uint64_t(1) << 9;
  EXPECT_EQ(m->bitmaps.host(), bitmaps);
  EXPECT_EQ(m->group_offsets.host(), (std::vector<uint32_t>{0, 8, 16}));
  // Group 0 in (tc tile, bitmap, bit) order, 7 values + 1 padding; group 1: 1 value + 7 padding.
  const std::vector<uint16_t> values = {h(1), h(7), h(3), h(2), h(5), h(4), h(6), 0,
                                        h(8), 0,     0,     0,     0,     0,     0,     0};
  EXPECT_EQ(m->values.host(), values);
  EXPECT_EQ(m->storage_bytes(), 128 * 8 + 3 * 4 + 16 * 2u);

  // The header's lookup rule: offset + popcount(earlier bitmaps) + popcount(earlier bits).
  auto lookup = [&](int64_t g, int64_t b, int bit) {
    uint64_t v = m->group_offsets.host()[size_t(g)];
    for (int64_t i = 0; i < b; ++i) v += __builtin_popcountll(bitmaps[size_t(g * 64 + i)]);
    v += __builtin_popcountll(bitmaps[size_t(g * 64 + b)] & ((uint64_t(1) << bit) - 1));
    return m->values.host()[v];
  };
  EXPECT_EQ(lookup(0, 3, 9), h(5));
  EXPECT_EQ(lookup(0, 4, 25), h(4));
  EXPECT_EQ(lookup(0, 16, 2), h(6));
  EXPECT_EQ(lookup(1, 0, 9), h(8));
}

TEST(TcaBme, EffectiveDensity) {
  const int64_t M = 4096, K = 4096;
  for (double sparsity : {0.5, 0.7}) {
    HostMatrix w = patterns::random(DType::fp16, M, K, sparsity, 9);
    auto m = tca_bme::encode(w.view());
    ASSERT_TRUE(m.ok());
    const double d = 1.0 - sparsity;
    const double deff = effective_density(m->storage_bytes(), m->shape);
    // One bit per element (1/16 of an fp16), plus per 64x64 group 4 offset bytes and on average
    // 3.5 padding values: (4 + 7) / 8192 = 0.0013.
    EXPECT_NEAR(deff, d + 1.0 / 16, 0.003) << sparsity;
    EXPECT_GE(deff, d + 1.0 / 16) << sparsity;
    if (sparsity == 0.5) EXPECT_LE(deff, 0.57);
  }
}

TEST(TcaBme, ReferenceMatchesDense) {
  for (DType t : {DType::fp16, DType::bf16}) {
    test::expect_reference_matches_dense(Format::tca_bme,
                                         patterns::magnitude(t, 130, 300, 0.7, 2), 3, 4);
    test::expect_reference_matches_dense(Format::tca_bme, patterns::random(t, 67, 1000, 0.98, 6),
                                         2, 8);
    test::expect_reference_matches_dense(
        Format::tca_bme, test::with_zero_lines(t, 77, 45, 0.5, {0, 76}, {0, 44}), 5, 1);
    test::expect_reference_matches_dense(Format::tca_bme, patterns::random(t, 1, 1, 0.0, 1), 1,
                                         2);
  }
}

// ---- corrupted buffers ---------------------------------------------------------------------------

namespace {

tca_bme::Matrix sample() {
  // 100 x 150: 2 x 3 groups, edge groups partial in both directions.
  HostMatrix w = patterns::random(DType::bf16, 100, 150, 0.6, 21);
  auto m = tca_bme::encode(w.view());
  EXPECT_TRUE(m.ok());
  return std::move(m).value();
}

void expect_corrupt(const tca_bme::Matrix& m, const std::string& message_part) {
  Status s = tca_bme::validate(m);
  EXPECT_EQ(s.code(), Code::corrupt_data) << s.to_string();
  EXPECT_NE(s.message().find(message_part), std::string::npos)
      << "message '" << s.message() << "' does not mention '" << message_part << "'";
  auto d = tca_bme::decode(m);
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

// A set bit of group g: (bitmap index in the group, bit).
std::pair<int64_t, int> a_set_bit(const tca_bme::Matrix& m, int64_t g) {
  for (int64_t b = 0; b < 64; ++b) {
    const uint64_t bits = m.bitmaps.host()[size_t(g * 64 + b)];
    if (bits != 0) return {b, __builtin_ctzll(bits)};
  }
  return {-1, -1};
}

}  // namespace

TEST(TcaBme, ValidateRejectsWrongSizes) {
  {
    auto m = sample();
    resize(m.bitmaps, m.bitmaps.size() - 1);
    expect_corrupt(m, "bitmaps, expected");
  }
  {
    auto m = sample();
    resize(m.bitmaps, m.bitmaps.size() - 64);  // whole groups missing
    expect_corrupt(m, "bitmaps, expected");
  }
  {
    auto m = sample();
    resize(m.group_offsets, m.group_offsets.size() - 1);
    expect_corrupt(m, "group_offsets has");
  }
  {
    auto m = sample();
    resize(m.values, m.values.size() - 8);
    expect_corrupt(m, "values has");
  }
  {
    auto m = sample();
    m.groups_k += 1;
    expect_corrupt(m, "groups do not match");
  }
  {
    auto m = sample();
    m.shape.rows = 129;  // 3 group rows, but the buffers hold 2
    m.groups_m = 3;
    expect_corrupt(m, "bitmaps, expected");
  }
  {
    auto m = sample();
    m.shape.rows = int64_t(1) << 62;  // garbage shape: no overflow, no huge read
    m.groups_m = (int64_t(1) << 62) / 64;
    expect_corrupt(m, "bitmaps, expected");
  }
  {
    auto m = sample();
    m.shape.dtype = DType::fp32;
    expect_corrupt(m, "dtype");
  }
}

TEST(TcaBme, ValidateRejectsBadOffsets) {
  {
    auto m = sample();
    m.group_offsets.host()[0] = 8;
    expect_corrupt(m, "group_offsets[0]");
  }
  {
    auto m = sample();
    m.group_offsets.host()[2] += 1;
    expect_corrupt(m, "not a multiple of 8");
  }
  {
    auto m = sample();
    std::swap(m.group_offsets.host()[2], m.group_offsets.host()[3]);
    expect_corrupt(m, "group_offsets decrease");
  }
  {
    auto m = sample();
    m.group_offsets.host()[2] += 8;  // group 1 claims 8 more values than its bitmaps mark
    expect_corrupt(m, "offsets span");
  }
  {
    auto m = sample();
    m.group_offsets.host()[3] = 0xFFFFFFF8u;  // far out of range
    expect_corrupt(m, "group_offsets decrease");
  }
  {
    auto m = sample();
    m.group_offsets.host().back() += 8;
    expect_corrupt(m, "values has");
  }
}

TEST(TcaBme, ValidateRejectsBitmapsInconsistentWithOffsets) {
  {
    // Eight fewer set bits in group 0: its padded count drops by 8 below its offsets' span.
    auto m = sample();
    for (int cleared = 0; cleared < 8; ++cleared) {
      auto [b, bit] = a_set_bit(m, 0);
      ASSERT_GE(b, 0);
      m.bitmaps.host()[size_t(b)] &= ~(uint64_t(1) << bit);
    }
    expect_corrupt(m, "offsets span");
  }
  {
    // One bit fewer: either the padded count changes or the last value of the group lands in
    // the padding, which must be zero. Either way it is caught.
    auto m = sample();
    auto [b, bit] = a_set_bit(m, 1);
    ASSERT_GE(b, 0);
    m.bitmaps.host()[size_t(64 + b)] &= ~(uint64_t(1) << bit);
    EXPECT_EQ(tca_bme::validate(m).code(), Code::corrupt_data);
  }
  {
    // A bit set outside the matrix (edge groups).
    auto m = sample();
    // Group 5 is (1, 2): rows 64..99 (36 valid rows), cols 128..149 (22 valid columns).
    // Bitmap 0 of tc tile 1 covers cols 16..23, so column 23 (tile col 7) is past K = 150.
    m.bitmaps.host()[5 * 64 + 1 * 4 + 0] |= uint64_t(1) << 7;
    expect_corrupt(m, "outside the 100 x 150 matrix");
  }
  {
    auto m = sample();
    // Group 3 is (1, 0): rows 64..99; tc tile row 2 starts at row 96, bitmap 1 at row 104.
    m.bitmaps.host()[3 * 64 + 8 * 4 + 1] |= 1;
    expect_corrupt(m, "outside the 100 x 150 matrix");
  }
  {
    auto m = sample();
    m.nnz -= 1;
    expect_corrupt(m, "nnz field");
  }
  {
    // A zero under a set bit.
    auto m = sample();
    m.values.host()[m.group_offsets.host()[1]] = 0;
    expect_corrupt(m, "is zero where its bitmap marks a non-zero");
  }
  {
    // Group padding must be zero. Find a group with padding.
    auto m = sample();
    bool found = false;
    for (size_t g = 0; g + 1 < m.group_offsets.size() && !found; ++g) {
      uint64_t n = 0;
      for (int b = 0; b < 64; ++b) n += __builtin_popcountll(m.bitmaps.host()[g * 64 + size_t(b)]);
      if (m.group_offsets.host()[g + 1] - m.group_offsets.host()[g] > n) {
        m.values.host()[m.group_offsets.host()[g + 1] - 1] = h(1);
        found = true;
      }
    }
    ASSERT_TRUE(found);
    expect_corrupt(m, "padding value");
  }
}

// A derived size field that a kernel sizes shared memory by: validate refuses every value but the
// true one (0, -1, one step below and above), naming the field, and derive() restores it.
namespace {
void expect_size_field_checked(int64_t tca_bme::Matrix::*field, const char* name, int64_t step) {
  const tca_bme::Matrix good = sample();
  const int64_t truth = good.*field;
  ASSERT_GT(truth, 0) << name;
  for (int64_t wrong : {int64_t(0), truth - step, truth + step, int64_t(-1)}) {
    tca_bme::Matrix m = good;
    m.*field = wrong;
    expect_corrupt(m, name);
    tca_bme::derive(m);
    EXPECT_EQ(m.*field, truth) << name;
    EXPECT_TRUE(tca_bme::validate(m).ok()) << name;
  }
}
}  // namespace

// max_group_values sizes tca_bme.mma's shared-memory stages: a field below the largest group
// would leave that group's last values out of its stage (the copy clamps to the stage).
TEST(TcaBme, ValidateRejectsWrongMaxGroupValues) {
  expect_size_field_checked(&tca_bme::Matrix::max_group_values, "max_group_values", 8);
}

// max_strip_values sizes the one-token kernel's bulk-copy stages: a value below the fullest strip
// would leave that strip's last values out of its stage (the copy clamps to the stage).
TEST(TcaBme, ValidateRejectsWrongMaxStripValues) {
  ASSERT_LE(sample().max_strip_values, sample().max_group_values);
  expect_size_field_checked(&tca_bme::Matrix::max_strip_values, "max_strip_values", 1);
}

// strip_starts tells the strip kernels where a strip's values begin: validate refuses a stale or
// missing array, derive() rebuilds it, and derived_bytes counts it (8 bytes per group).
TEST(TcaBme, ValidateRejectsWrongStripStarts) {
  tca_bme::Matrix good = sample();
  ASSERT_EQ(good.strip_starts.size(), size_t(good.groups() * 4));
  ASSERT_GT(good.strip_starts.host()[1], 0);
  EXPECT_EQ(good.derived_bytes(), size_t(good.groups() * 8));
  EXPECT_EQ(derived_bytes(Weight(good)), good.derived_bytes());
  tca_bme::Matrix shifted = good;
  shifted.strip_starts.host()[1] += 1;
  expect_corrupt(shifted, "strip_starts");
  tca_bme::Matrix missing = good;
  missing.strip_starts = Buffer<uint16_t>();
  expect_corrupt(missing, "strip_starts");
  tca_bme::derive(missing);
  EXPECT_EQ(missing.strip_starts.host(), good.strip_starts.host());
  EXPECT_TRUE(tca_bme::validate(missing).ok());
}

// Random damage: validate never reads out of bounds (run under AddressSanitizer to see it) and
// whatever it accepts decodes.
TEST(TcaBme, ValidateSurvivesRandomDamage) {
  const tca_bme::Matrix good = sample();
  std::mt19937_64 rng(321);
  int rejected = 0;
  for (int i = 0; i < 400; ++i) {
    tca_bme::Matrix m = good;
    auto pick = [&](size_t n) { return n == 0 ? 0 : size_t(rng() % n); };
    const int damages = 1 + int(rng() % 3);  // one to three at once
    for (int k = 0; k < damages; ++k) {
      switch (int(rng() % 8)) {
        case 0: flip_bit(m.bitmaps, pick(m.bitmaps.size()), int(rng() % 64)); break;
        case 1: flip_bit(m.group_offsets, pick(m.group_offsets.size()), int(rng() % 32)); break;
        case 2: flip_bit(m.values, pick(m.values.size()), int(rng() % 16)); break;
        case 3: resize(m.bitmaps, pick(m.bitmaps.size() * 2)); break;
        case 4: resize(m.group_offsets, pick(m.group_offsets.size() * 2)); break;
        case 5: resize(m.values, pick(m.values.size() * 2)); break;
        case 6: m.shape.cols = int64_t(rng() % 400); break;
        case 7: m.groups_m = int64_t(rng() % 4); break;
      }
    }
    Status s = tca_bme::validate(m);
    if (!s.ok()) {
      EXPECT_EQ(s.code(), Code::corrupt_data) << s.to_string();
      ++rejected;
      continue;
    }
    EXPECT_TRUE(tca_bme::decode(m).ok());
  }
  EXPECT_GT(rejected, 200);
}
