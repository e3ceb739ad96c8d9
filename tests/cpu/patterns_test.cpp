#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/rng.hpp"
#include "cpu/test_util.hpp"
#include "patterns/trained_like.hpp"
#include "sparrow/patterns.hpp"

using namespace sparrow;

TEST(Patterns, RandomHasExactZeroCount) {
  for (double s : {0.0, 0.3, 0.5, 0.9, 0.99}) {
    auto w = patterns::random(DType::fp16, 130, 70, s, 7);
    const int64_t want_zeros = std::llround(s * 130 * 70);
    EXPECT_EQ(130 * 70 - test::count_nonzeros(w.view()), want_zeros) << s;
  }
}

TEST(Patterns, DeterministicBySeed) {
  auto a = patterns::magnitude(DType::bf16, 64, 96, 0.5, 3);
  auto b = patterns::magnitude(DType::bf16, 64, 96, 0.5, 3);
  auto c = patterns::magnitude(DType::bf16, 64, 96, 0.5, 4);
  EXPECT_TRUE(same_values(a.view(), b.view()));
  EXPECT_FALSE(same_values(a.view(), c.view()));
}

TEST(Patterns, MagnitudeHasExactCountAndUnevenRows) {
  const int64_t M = 256, K = 512;
  auto w = patterns::magnitude(DType::fp16, M, K, 0.5, 11);
  EXPECT_EQ(test::count_nonzeros(w.view()), M * K / 2);
  int64_t lo = K, hi = 0;
  for (int64_t r = 0; r < M; ++r) {
    int64_t n = 0;
    for (int64_t c = 0; c < K; ++c) n += !w.zero_at(r, c);
    lo = std::min(lo, n);
    hi = std::max(hi, n);
  }
  // Per-row scales make rows clearly uneven (a random pattern would stay near K/2 +- 3 sigma).
  EXPECT_GT(hi - lo, K / 4);
  // Kept elements are the large ones: every kept magnitude >= every pruned original is implied by
  // one global threshold; check that the smallest kept value is not tiny relative to the largest.
  float min_kept = 1e30f;
  for (int64_t r = 0; r < M; ++r)
    for (int64_t c = 0; c < K; ++c)
      if (!w.zero_at(r, c)) min_kept = std::min(min_kept, std::fabs(w.at(r, c)));
  EXPECT_GT(min_kept, 0.f);
}

TEST(Patterns, BlockZerosWholeBlocks) {
  auto w = patterns::block(DType::fp16, 64, 64, 4, 8, 0.5, 5);
  int zero_blocks = 0;
  for (int br = 0; br < 16; ++br)
    for (int bc = 0; bc < 8; ++bc) {
      int nz = 0;
      for (int r = 0; r < 4; ++r)
        for (int c = 0; c < 8; ++c) nz += !w.zero_at(br * 4 + r, bc * 8 + c);
      EXPECT_TRUE(nz == 0 || nz == 32);
      zero_blocks += nz == 0;
    }
  EXPECT_EQ(zero_blocks, 64);
}

TEST(Patterns, NmKeepsNPerGroup) {
  nm::Pattern p{2, 4, 1};
  auto w = patterns::nm_pattern(DType::fp16, 33, 70, p, 0.0, 9);  // K not a multiple of 4
  for (int r = 0; r < 33; ++r)
    for (int g = 0; g < 70; g += 4) {
      int nz = 0;
      for (int c = g; c < std::min(g + 4, 70); ++c) nz += !w.zero_at(r, c);
      EXPECT_EQ(nz, 2) << r << " " << g;
    }
}

TEST(Patterns, VectorWiseNmSharesColumnsInARowBlock) {
  nm::Pattern p{1, 4, 4};
  auto w = patterns::nm_pattern(DType::bf16, 16, 32, p, 0.0, 2);
  for (int rb = 0; rb < 16; rb += 4)
    for (int c = 0; c < 32; ++c)
      for (int r = rb + 1; r < rb + 4; ++r) EXPECT_EQ(w.zero_at(rb, c), w.zero_at(r, c));
}

TEST(Patterns, ParseAcceptsAndRejects) {
  EXPECT_TRUE(patterns::parse("random").ok());
  EXPECT_TRUE(patterns::parse("magnitude").ok());
  auto b = patterns::parse("block:4x8");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->block_rows, 4);
  EXPECT_EQ(b->block_cols, 8);
  EXPECT_TRUE(patterns::parse("block:16").ok());
  EXPECT_FALSE(patterns::parse("block:0x4").ok());
  EXPECT_FALSE(patterns::parse("blocks").ok());
  EXPECT_FALSE(patterns::parse("gaussian").ok());
}

// Rng::advance(n) leaves the generator where n calls of next() would, for small n, across the
// powers of two it composes, and for a large n split in two.
TEST(Patterns, RngAdvanceIsNCallsOfNext) {
  for (uint64_t n : {0ull, 1ull, 2ull, 3ull, 63ull, 64ull, 65ull, 1000ull, 123457ull}) {
    Rng stepped(42), jumped(42);
    for (uint64_t i = 0; i < n; ++i) stepped.next();
    jumped.advance(n);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(jumped.next(), stepped.next()) << "n = " << n;
  }
  Rng once(7), twice(7);
  once.advance((uint64_t(1) << 40) + 12345);
  twice.advance(uint64_t(1) << 40);
  twice.advance(12345);
  EXPECT_EQ(once.next(), twice.next());
}

// trained_like fills blocks of rows in parallel from an advanced generator: the values are the
// serial sequence's (draw_channel_scales, then one trained_like_value per element in row-major
// order), on shapes of several blocks with odd sizes.
TEST(Patterns, TrainedLikeIsTheSerialSequence) {
  struct Shape {
    int64_t rows, cols;
  };
  for (const Shape& sh : {Shape{600, 4097}, Shape{1100001, 2}, Shape{7, 13}}) {
    for (DType t : {DType::fp16, DType::bf16}) {
      const HostMatrix got = patterns::trained_like(t, sh.rows, sh.cols, 99);
      Rng rng(99);
      std::vector<float> row_scale, col_scale;
      patterns::detail::draw_channel_scales(rng, sh.rows, sh.cols, row_scale, col_scale);
      HostMatrix want(t, sh.rows, sh.cols);
      for (int64_t r = 0; r < sh.rows; ++r)
        for (int64_t c = 0; c < sh.cols; ++c)
          want.set(r, c, patterns::detail::trained_like_value(rng, t, 0.02, row_scale[size_t(r)],
                                                              col_scale[size_t(c)]));
      EXPECT_TRUE(same_values(got.view(), want.view())) << sh.rows << "x" << sh.cols;
    }
  }
}
