// The tensor-core kernels' split-K choice (kernels/tensor_core/split_k.hpp) on the block counts the
// H100 reported for tca_bme.mma (SPARROW_TC_DEBUG, session 44: 132 SMs; at N = 32 seven blocks
// per SM, clusters of 2 / 3 / 4 / 7 / 8 blocks: 462 / 287 / 216 / 124 / 107 at once; the counts for
// 5 and 6 were not printed, and the split the device chose with a cap of 6 (2) puts both below 172
// clusters: 160 and 136 here).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/tensor_core/split_k.hpp"

namespace sparrow::kernels::tc {
namespace {

// Blocks at once per split count 1..8 of tca_bme.mma at N = 32 on the H100.
constexpr int64_t kSlotsN32[kMaxSplits] = {7 * 132, 462 * 2, 287 * 3, 216 * 4,
                                           160 * 5, 136 * 6, 124 * 7, 107 * 8};

// gate_up of Llama-2-7B (22016 x 4096: 344 group rows, 64 k steps) at 32 tokens: without the
// fixed steps a third wave of 7 splits (3 x 10 steps) beat one wave of 2 (32 steps) and ran
// 66.8 us against 63.2-63.5 us with 2 splits.
TEST(SplitK, AnotherWaveCostsABlocksFixedSteps) {
  EXPECT_EQ(choose_splits_by_cost(kSlotsN32, kMaxSplits, 344, 64, 0), 7);
  EXPECT_EQ(choose_splits_by_cost(kSlotsN32, kMaxSplits, 344, 64), 2);
}

// Few row tiles (4096 x 4096: 64 group rows; 4096 x 11008: 172 k steps) keep the most splits that
// fit in one wave, as before: there every extra split measured faster (4096x4096 at N = 32:
// 17.3 / 22.0 / 32.9 us with 8 / 4 / 2 splits at 90 %).
TEST(SplitK, OneWaveTakesTheMostSplits) {
  EXPECT_EQ(choose_splits_by_cost(kSlotsN32, kMaxSplits, 64, 64), 8);
  EXPECT_EQ(choose_splits_by_cost(kSlotsN32, kMaxSplits, 64, 172), 8);
  // Many row tiles (28672 x 8192: 448 group rows, 128 k steps): 2 splits, one wave, both ways.
  EXPECT_EQ(choose_splits_by_cost(kSlotsN32, kMaxSplits, 448, 128, 0), 2);
  EXPECT_EQ(choose_splits_by_cost(kSlotsN32, kMaxSplits, 448, 128), 2);
}

TEST(SplitK, SizesThatDoNotFitAreSkipped) {
  const int64_t slots[kMaxSplits] = {100, 0, -1, 400, 0, 0, 0, 0};
  EXPECT_EQ(choose_splits_by_cost(slots, kMaxSplits, 100, 64), 4);
  const int64_t none[kMaxSplits] = {};
  EXPECT_EQ(choose_splits_by_cost(none, kMaxSplits, 100, 64), 1);
  // `most` caps the choice (the cluster limit, or too few k steps per split).
  EXPECT_EQ(choose_splits_by_cost(kSlotsN32, 1, 64, 64), 1);
  EXPECT_EQ(choose_splits_by_cost(kSlotsN32, 4, 64, 64), 4);
}

// The pushed reduction's dealing (store_reduced_pushed): every quad of every tile height (1..128
// rows of 16 quads) has exactly one owner and one place in each block's slot of that owner, the
// owners' counts add up to the tile, and the receive area stays within the bound the kernels
// size their shared memory by.
TEST(SplitK, PushedSlicesDealEveryQuadOnce) {
  for (int rows = 1; rows <= 128; ++rows) {
    const int quads = rows * 16;
    for (int splits = 2; splits <= kMaxSplits; ++splits) {
      const PushedSlices s{quads, splits};
      SCOPED_TRACE("rows " + std::to_string(rows) + ", splits " + std::to_string(splits));
      std::vector<int> seen(size_t(splits) * s.slot(), -1);
      int total = 0;
      for (int r = 0; r < splits; ++r) {
        ASSERT_LE(s.owned(r), s.slot());
        total += s.owned(r);
        for (int i = 0; i < s.owned(r); ++i) {
          const int e = s.quad(r, i);
          ASSERT_GE(e, 0);
          ASSERT_LT(e, quads);
          ASSERT_EQ(s.owner(e), r);
          ASSERT_EQ(s.index(e), i);
          int& slot_entry = seen[size_t(r) * s.slot() + i];
          ASSERT_EQ(slot_entry, -1);
          slot_entry = e;
        }
      }
      EXPECT_EQ(total, quads);
      EXPECT_LE(int64_t(splits) * s.slot(), push_receive_quads(quads));
      // Chunks are whole: the first quad of each owned chunk starts a 32-byte sector of Y.
      for (int r = 0; r < splits; ++r) {
        for (int i = 0; i < s.owned(r); i += kPushChunk) EXPECT_EQ(s.quad(r, i) % kPushChunk, 0);
      }
    }
  }
  // A tile of one row at eight splits: the first four blocks own a chunk each, the rest none.
  const PushedSlices one_row{16, 8};
  EXPECT_EQ(one_row.owned(3), 4);
  EXPECT_EQ(one_row.owned(4), 0);
}

}  // namespace
}  // namespace sparrow::kernels::tc
