// Host-side parts of the decode kernels that need no GPU: launch planning, the token buckets and
// the argument checks that run before anything touches a device.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/carveout.hpp"
#include "kernels/csr/vector.hpp"
#include "kernels/dense/gemv.hpp"
#include "kernels/macko/entry_split.hpp"
#include "kernels/macko/swiglu_mlp.hpp"
#include "kernels/macko/warp_row.hpp"
#include "kernels/tca_bme/decode.hpp"
#include "kernels/tca_bme/few_tokens.hpp"
#include "kernels/tca_bme/one_token.hpp"
#include "kernels/token_bucket.hpp"
#include "sparrow/patterns.hpp"

using namespace sparrow;
using namespace sparrow::kernels;

TEST(DecodeLaunch, TokenBuckets) {
  EXPECT_EQ(token_bucket(1), 1);
  for (int n = 2; n <= 4; ++n) EXPECT_EQ(token_bucket(n), 4) << n;
  for (int n = 5; n <= 8; ++n) EXPECT_EQ(token_bucket(n), 8) << n;
  for (int n = 9; n <= 16; ++n) EXPECT_EQ(token_bucket(n), 16) << n;
}

TEST(DecodeLaunch, DenseGemvPlanCoversRowsWithWideBlocks) {
  // One M tile (1..8 tokens): 4096 x 4096 has 256 row tiles, each block as wide as allowed.
  auto a = dense_gemv::plan(4096, 4096, 132, 1);
  EXPECT_EQ(a.blocks, 256);
  EXPECT_EQ(a.warps, dense_gemv::Config::kMaxWarps);
  // Many rows: still the widest blocks, on any device (measured faster than narrow ones that
  // fill the SMs in fewer waves: 28672x8192 ran 4 % faster with 12 warps than with 3).
  auto b = dense_gemv::plan(28672, 8192, 132, 1);
  EXPECT_EQ(b.blocks, 1792);
  EXPECT_EQ(b.warps, dense_gemv::Config::kMaxWarps);
  EXPECT_EQ(dense_gemv::plan(28672, 8192, 8, 1).warps, dense_gemv::Config::kMaxWarps);
  // Two M tiles (9..16 tokens) without a residency table: half the blocks, a partial tile still
  // gets one, and ~32 warps per SM: 22016 rows = 688 blocks, ceil(132 * 32 / 688) = 7 warps;
  // 4096 rows = 128 blocks, 33 wanted, capped at kMaxWarps; few SMs, many rows: one warp.
  EXPECT_EQ(dense_gemv::plan(4096, 4096, 132, 2).blocks, 128);
  EXPECT_EQ(dense_gemv::plan(4097, 4096, 132, 2).blocks, 129);
  EXPECT_EQ(dense_gemv::plan(22016, 4096, 132, 2).warps, 7);
  EXPECT_EQ(dense_gemv::plan(4096, 4096, 132, 2).warps, dense_gemv::Config::kMaxWarps);
  EXPECT_EQ(dense_gemv::plan(28672, 8192, 8, 2).warps, 1);
  // An explicit warp count, up to the two-tile instance's largest block.
  EXPECT_EQ(dense_gemv::plan(4096, 4096, 132, 2, 5).warps, 5);
  EXPECT_EQ(dense_gemv::plan(4096, 4096, 132, 2, 99).warps, dense_gemv::Config::kMaxWarpsTwoTiles);
  EXPECT_EQ(dense_gemv::plan(4096, 4096, 132, 1, 0).warps, dense_gemv::Config::kMaxWarps);
}

TEST(DecodeLaunch, DenseGemvTwoTilesFitOneWave) {
  // A residency of 20 warps per SM (the two-tile instance's ~90 registers): w warps per block,
  // floor(20 / w) blocks per SM. The plan takes the most warps per block that still let every
  // block be resident at once.
  dense_gemv::Residency r{};
  for (int w = 1; w <= dense_gemv::Config::kMaxWarpsTwoTiles; ++w) r.blocks_per_sm[w] = 20 / w;
  // 128 blocks on 132 SMs: one block per SM, as wide as allowed.
  EXPECT_EQ(dense_gemv::plan(4096, 4096, 132, 2, 0, &r).warps, 20);
  EXPECT_EQ(dense_gemv::plan(4096, 11008, 132, 2, 0, &r).warps, 20);
  // 344 blocks: three per SM, so 6 warps (7 would leave two per SM and a second wave).
  EXPECT_EQ(dense_gemv::plan(11008, 4096, 132, 2, 0, &r).warps, 6);
  EXPECT_EQ(dense_gemv::plan(12288, 4096, 132, 2, 0, &r).warps, 6);
  // 688 blocks: six per SM of 3 warps; 896 blocks: seven per SM of 2 warps.
  EXPECT_EQ(dense_gemv::plan(22016, 4096, 132, 2, 0, &r).warps, 3);
  EXPECT_EQ(dense_gemv::plan(28672, 8192, 132, 2, 0, &r).warps, 2);
  // No warp count fits one wave (8 SMs, 896 blocks): the rule without a residency table.
  EXPECT_EQ(dense_gemv::plan(28672, 8192, 8, 2, 0, &r).warps,
            dense_gemv::plan(28672, 8192, 8, 2).warps);
  // Never more warps than K steps (ld 160: 5 steps).
  EXPECT_EQ(dense_gemv::plan(64, 160, 132, 2, 0, &r).warps, 5);
  // The residency as measured on the device decides: where only 2 blocks of 6 warps fit, 5.
  r.blocks_per_sm[6] = 2;
  EXPECT_EQ(dense_gemv::plan(11008, 4096, 132, 2, 0, &r).warps, 5);
}

TEST(DecodeLaunch, DenseGemvOneTileFitsOneWaveWhereItCan) {
  // One tile, 24 warps per SM (73-79 registers): 12288 rows = 768 blocks, six per SM of 4 warps;
  // 22016 rows = 1376 blocks, eleven per SM of 2 warps; 4096 rows = 256 blocks, two per SM of the
  // most warps (12); 32000 rows = 2000 blocks, sixteen per SM: no block of >= 2 warps fits one
  // wave, so kMaxWarps as without a residency table.
  dense_gemv::Residency r{};
  for (int w = 1; w <= dense_gemv::Config::kMaxWarps; ++w) r.blocks_per_sm[w] = 24 / w;
  EXPECT_EQ(dense_gemv::plan(12288, 4096, 132, 1, 0, &r).warps, 4);
  EXPECT_EQ(dense_gemv::plan(22016, 4096, 132, 1, 0, &r).warps, 2);
  EXPECT_EQ(dense_gemv::plan(4096, 4096, 132, 1, 0, &r).warps, dense_gemv::Config::kMaxWarps);
  EXPECT_EQ(dense_gemv::plan(32000, 4096, 132, 1, 0, &r).warps, dense_gemv::Config::kMaxWarps);
  EXPECT_EQ(dense_gemv::plan(28672, 8192, 132, 1, 0, &r).warps, dense_gemv::Config::kMaxWarps);
  EXPECT_EQ(dense_gemv::plan(32000, 4096, 132, 1, 0, &r).blocks, 2000);
  // A K of one step (ld 8) cannot use more than one warp; 5 steps (ld 160) five.
  auto c = dense_gemv::plan(7, 8, 132, 1);
  EXPECT_EQ(c.blocks, 1);
  EXPECT_EQ(c.warps, 1);
  EXPECT_EQ(dense_gemv::plan(64, 160, 132, 1).warps, 5);
  EXPECT_GE(dense_gemv::plan(1, 1, 0, 2).warps, 1);  // a bogus SM count still gives a launch
}

TEST(DecodeLaunch, TcaBmeClusterSizeBalancesTheSms) {
  // A device of 132 SMs, one block per SM, where 66 clusters of 2, 33 of 4 and 16 of 8 fit
  // (illustrative: the H100 fit 66 clusters of 2 for this kernel).
  const int h100[4] = {132, 66, 33, 16};
  // 11008 x 4096 (172 group rows of 64 groups): clusters of 8 give 11 rows each, 88 groups per
  // block; single blocks would give two rows (128 groups) to 40 SMs.
  EXPECT_EQ(tca_bme_decode::choose_cluster_blocks(172, 64, h100), 8);
  // 4096 x 11008 (64 group rows): 2 blocks per row already give every block 86 groups; the tie
  // goes to the smaller cluster.
  EXPECT_EQ(tca_bme_decode::choose_cluster_blocks(64, 172, h100), 2);
  // No clusters (sm_80, or none fit): single blocks.
  const int a100[4] = {108, 0, 0, 0};
  EXPECT_EQ(tca_bme_decode::choose_cluster_blocks(172, 64, a100), 1);
  // Nothing fits at all: still a valid size.
  const int none[4] = {0, 0, 0, 0};
  EXPECT_EQ(tca_bme_decode::choose_cluster_blocks(172, 64, none), 1);
}

TEST(DecodeLaunch, TcaBmeWarpPiecesCoverEveryGroupOnce) {
  // The kernel's split: warp v of P has groups [warp_begin(v), warp_begin(v + 1)), and warp_of(i)
  // names the warp holding group i, also when there are fewer groups than warps.
  for (int64_t groups : {int64_t(1), int64_t(3), int64_t(127), int64_t(128), int64_t(704),
                         int64_t(5504), int64_t(1) << 33}) {
    for (int warps : {1, 16, 128}) {
      EXPECT_EQ(tca_bme_decode::warp_begin(groups, warps, 0), 0);
      EXPECT_EQ(tca_bme_decode::warp_begin(groups, warps, warps), groups);
      for (int64_t i : {int64_t(0), groups / 3, groups / 2, groups - 1}) {
        const int v = tca_bme_decode::warp_of(groups, warps, i);
        ASSERT_GE(v, 0);
        ASSERT_LT(v, warps);
        EXPECT_LE(tca_bme_decode::warp_begin(groups, warps, v), i) << groups << " " << warps;
        EXPECT_GT(tca_bme_decode::warp_begin(groups, warps, v + 1), i) << groups << " " << warps;
      }
    }
  }
  // Clusters own whole group rows, in order, all of them.
  EXPECT_EQ(tca_bme_decode::row_begin(172, 16, 0), 0);
  EXPECT_EQ(tca_bme_decode::row_begin(172, 16, 1), 10);
  EXPECT_EQ(tca_bme_decode::row_begin(172, 16, 16), 172);
}

// The streaming kernel's cluster epilogue (decode.cu): a block pushes its partial tile of its last
// row when that row continues, to the block that finishes the row, and a finisher waits for one
// tile from every earlier block holding groups of its first row (the piece holding the row's first
// group onwards). If the two sides disagree the finisher waits forever or sums unwritten memory:
// check that they agree for short and long rows, few and many groups per warp, and fewer groups
// than warps (blocks without groups).
TEST(DecodeLaunch, TcaBmeClusterPushesMeetTheirFinishers) {
  using namespace tca_bme_decode;
  for (int64_t gk : {int64_t(1), int64_t(3), int64_t(64), int64_t(172)}) {
    for (int64_t rows : {int64_t(1), int64_t(2), int64_t(5), int64_t(37)}) {
      for (int blocks : {2, 4, 8}) {
        for (int warps : {8, 16}) {
          const int pieces = blocks * warps;
          const int64_t groups = rows * gk;
          SCOPED_TRACE("groups_k " + std::to_string(gk) + ", rows " + std::to_string(rows) +
                       ", blocks " + std::to_string(blocks) + ", warps " + std::to_string(warps));
          std::vector<int64_t> start(size_t(pieces) + 1);
          for (int u = 0; u <= pieces; ++u) start[size_t(u)] = warp_begin(groups, pieces, u);
          std::vector<int> received(size_t(blocks), 0);
          std::vector<int64_t> pushed(size_t(blocks), -1);
          for (int b = 0; b < blocks; ++b) {
            const int64_t bs = start[size_t(b) * warps], be = start[size_t(b + 1) * warps];
            if (!pushes_last_row(bs, be, gk)) continue;
            const int64_t r = be / gk;
            const int f = row_finisher(groups, pieces, warps, r, gk);
            ASSERT_GT(f, b);
            ASSERT_LT(f, blocks);
            ASSERT_TRUE(block_holds_groups(start.data(), warps, b));
            ++received[size_t(f)];
            pushed[size_t(f)] = r;
          }
          for (int f = 0; f < blocks; ++f) {
            const int64_t bs = start[size_t(f) * warps], be = start[size_t(f + 1) * warps];
            int expected = 0;
            if (be > bs && bs % gk != 0) {
              // The finisher's first row started in an earlier block; it finishes it if it holds
              // the row's last group.
              const int64_t r = bs / gk;
              if (row_finisher(groups, pieces, warps, r, gk) == f) {
                const int b0 = warp_of(groups, pieces, r * gk) / warps;
                for (int b = b0; b < f; ++b) expected += block_holds_groups(start.data(), warps, b);
                if (expected > 0) EXPECT_EQ(pushed[size_t(f)], r);
              }
            }
            EXPECT_EQ(received[size_t(f)], expected) << "block " << f;
          }
        }
      }
    }
  }
}

TEST(DecodeLaunch, TcaBmeOneTokenKernelForSmallWeights) {
  // 132 SMs x 16 warps x 12 groups = 25344 groups: 4096 x 11008 (11008 groups) and 22016 x 4096
  // (22016) run the one-token kernel at N = 1, 32000 x 4096 (32000) and 28672 x 8192 (57344) the
  // streaming kernel.
  EXPECT_TRUE(tca_bme_decode::use_one_token_kernel(64 * 172, 132));
  EXPECT_TRUE(tca_bme_decode::use_one_token_kernel(344 * 64, 132));
  EXPECT_FALSE(tca_bme_decode::use_one_token_kernel(500 * 64, 132));
  EXPECT_FALSE(tca_bme_decode::use_one_token_kernel(448 * 128, 132));
  // The one-token kernel's plan: a block per 16-row strip, warps along K, as many as let every
  // strip be resident at once. Residency of a 64-register kernel: 32 warps per SM.
  tca_bme_one_token::Residency r;
  for (int w = 1; w <= tca_bme_one_token::Config::kMaxWarps; ++w) {
    r.blocks_per_sm[w] = std::min(32, 32 / w);
  }
  auto a = tca_bme_one_token::plan(4096, 64, 132, r);  // 256 strips: 2 blocks of 16 per SM
  EXPECT_EQ(a.blocks, 256);
  EXPECT_EQ(a.warps, 16);
  auto b = tca_bme_one_token::plan(130, 2, 132, r);  // only two groups along K: two warps
  EXPECT_EQ(b.blocks, 9);
  EXPECT_EQ(b.warps, 2);
  // 11008 rows: 688 strips need 6 blocks per SM (132 x 6 = 792), so 5 warps (6 x 5 <= 32);
  // 6 warps give 5 blocks per SM = 660 slots, a second wave.
  auto c = tca_bme_one_token::plan(11008, 64, 132, r);
  EXPECT_EQ(c.blocks, 688);
  EXPECT_EQ(c.warps, 5);
  // More strips than one-warp blocks can hold (132 x 32 = 4224): the warps-per-SM target.
  auto d = tca_bme_one_token::plan(16 * 8448, 128, 132, r);
  EXPECT_EQ(d.blocks, 8448);
  EXPECT_EQ(d.warps, 1);
  // A device that fits nothing (occupancy 0) still launches.
  auto e = tca_bme_one_token::plan(4096, 64, 132, tca_bme_one_token::Residency{});
  EXPECT_GE(e.warps, 1);
}

// Where the one-token kernel copies a strip's values with the copy engine (use_bulk_copy): sm_90,
// density >= 0.45, and on a plain launch at least 64 rows per SM (8448 on 132 SMs).
TEST(DecodeLaunch, TcaBmeOneTokenBulkCopyRule) {
  using tca_bme_one_token::use_bulk_copy;
  const int64_t k = 4096;
  const int64_t half = 11008 * k / 2;
  EXPECT_TRUE(use_bulk_copy(half, 11008, k, 132, 9, false));      // 50 %, 11008 rows
  EXPECT_TRUE(use_bulk_copy(half, 11008, k, 132, 9, true));
  EXPECT_FALSE(use_bulk_copy(half, 11008, k, 132, 8, false));     // no copy engine below sm_90
  EXPECT_FALSE(use_bulk_copy(half, 11008, k, 132, 8, true));
  EXPECT_FALSE(use_bulk_copy(11008 * k * 3 / 10, 11008, k, 132, 9, true));  // 70 %: registers
  const int64_t edge = (11008 * k * 45 + 99) / 100;  // the fewest non-zeros at density 0.45
  EXPECT_TRUE(use_bulk_copy(edge, 11008, k, 132, 9, false));
  EXPECT_FALSE(use_bulk_copy(edge - 1, 11008, k, 132, 9, false));
  // 4096 rows (31 per SM): bulk only under a dependent launch.
  EXPECT_FALSE(use_bulk_copy(4096 * k / 2, 4096, k, 132, 9, false));
  EXPECT_TRUE(use_bulk_copy(4096 * k / 2, 4096, k, 132, 9, true));
  EXPECT_TRUE(use_bulk_copy(8448 * k / 2, 8448, k, 132, 9, false));
  EXPECT_FALSE(use_bulk_copy(8447 * k / 2, 8447, k, 132, 9, false));
  EXPECT_FALSE(use_bulk_copy(0, 0, k, 132, 9, true));  // empty shapes
  // A stage holds the fullest strip plus up to 7 values of alignment before and 7 of padding
  // after, in 16-byte chunks: 580 values -> 75 chunks; a dense strip (1024) -> the 129 of
  // Config::kStripChunks; an empty weight still gets one chunk.
  EXPECT_EQ(tca_bme_one_token::bulk_stage_chunks(580), 75u);
  EXPECT_EQ(tca_bme_one_token::bulk_stage_chunks(1024), 129u);
  EXPECT_EQ(tca_bme_one_token::bulk_stage_chunks(1018), 129u);
  EXPECT_EQ(tca_bme_one_token::bulk_stage_chunks(0), 2u);
  EXPECT_EQ(tca_bme_one_token::bulk_stage_chunks(1), 2u);
}

TEST(DecodeLaunch, TcaBmeFewTokenKernelForSmallWeightsAtTwoToFourTokens) {
  using tca_bme_decode::use_few_tokens_kernel;
  // 132 SMs: at most 264 strips (4224 rows); fewer than 6 x 16 x 132 = 12672 groups at N = 2,
  // 6336 at N = 3, 4. 4096 x 4096 (4096 groups) at N = 2..4; 4096 x 11008 (11008) at N = 2 only;
  // 11008 x 4096 (688 strips) never; 1, 5 and more tokens never.
  for (int n : {2, 3, 4}) EXPECT_TRUE(use_few_tokens_kernel(4096, 64 * 64, n, 132)) << n;
  EXPECT_TRUE(use_few_tokens_kernel(4096, 64 * 172, 2, 132));
  EXPECT_FALSE(use_few_tokens_kernel(4096, 64 * 172, 3, 132));
  EXPECT_FALSE(use_few_tokens_kernel(11008, 172 * 64, 2, 132));
  EXPECT_FALSE(use_few_tokens_kernel(4224 + 1, 67 * 2, 2, 132));  // one strip too many
  EXPECT_TRUE(use_few_tokens_kernel(4224, 66 * 2, 2, 132));
  for (int n : {1, 5, 8}) EXPECT_FALSE(use_few_tokens_kernel(130, 6, n, 132)) << n;
  EXPECT_TRUE(use_few_tokens_kernel(130, 6, 2, 132));
  // Its shared memory: per warp the strip's values (129 x 16 B) and X (64 x NT floats + 8 x 4
  // floats of padding); 16 warps of the 4-token instance fit every GPU the build targets.
  EXPECT_EQ(tca_bme_few_tokens::shared_bytes(1, 2), size_t(2064 + (128 + 32) * 4));
  EXPECT_EQ(tca_bme_few_tokens::shared_bytes(16, 3), size_t(16 * (2064 + (256 + 32) * 4)));
  EXPECT_LE(tca_bme_few_tokens::shared_bytes(16, 4), size_t(99 * 1024));
}

TEST(DecodeLaunch, TcaBmeStageHoldsTheWeightsGroups) {
  const int h100 = 227 * 1024;
  // 16 warps with 8-token tiles: 2560 values a stage (a group of up to 62 % density; denser ones
  // are read from global memory); 8 warps with 16-token tiles: a whole group.
  EXPECT_EQ(tca_bme_decode::stage_values(16, 8, h100), 2560);
  EXPECT_EQ(tca_bme_decode::stage_values(8, 16, h100), 4096);
  // A device with little shared memory still gets the smallest stage.
  EXPECT_EQ(tca_bme_decode::stage_values(16, 8, 48 * 1024), 64);
  // 16 warps x 8-token first-row tiles (68 floats a token), then 16 warps x (two stages of
  // 512 B bitmaps + 2 B per value + a 16 B tail, 1 KB records); all of it fits the block.
  EXPECT_EQ(tca_bme_decode::shared_bytes(2432, 16, 8),
            size_t(16 * 8 * 68 * 4 + 16 * (2 * (512 + 2 * 2432 + 16) + 1024)));
  EXPECT_LE(tca_bme_decode::shared_bytes(2560, 16, 8), size_t(h100));
  EXPECT_LE(tca_bme_decode::shared_bytes(4096, 8, 16), size_t(h100));
  // Tiny stages: the last-row tiles set the size of the stage region.
  EXPECT_EQ(tca_bme_decode::shared_bytes(64, 8, 16), size_t(2 * 8 * 16 * 68 * 4));
  // A cluster's epilogue receives up to 8 partial tiles behind the last-row tiles: room for them
  // with the H100's stages, none when the last-row tiles fill the region (the blocks run alone).
  EXPECT_TRUE(tca_bme_decode::cluster_epilogue_fits(2560, 16, 8));
  EXPECT_TRUE(tca_bme_decode::cluster_epilogue_fits(4096, 8, 16));
  EXPECT_FALSE(tca_bme_decode::cluster_epilogue_fits(64, 8, 16));
}

TEST(DecodeLaunch, MackoTokenPassesFitSharedMemory) {
  const int h100 = 227 * 1024;
  // K = 4096 fp16: X^T of 16 tokens is 128 KiB: one pass of 16.
  auto a = macko_warp_row::token_passes(4096, 2, h100);
  EXPECT_EQ(a.tokens, 16);
  EXPECT_TRUE(a.staged);
  // K = 11008: 16 tokens need 344 KiB, 8 need 172 KiB: passes of 8.
  EXPECT_EQ(macko_warp_row::token_passes(11008, 2, h100).tokens, 8);
  // A device with 48 KiB per block and K = 8192: passes of 1 (16 KiB) ... 4 needs 64 KiB.
  EXPECT_EQ(macko_warp_row::token_passes(8192, 2, 48 * 1024).tokens, 1);
  // The staged X^T is K rounded up to 64 columns.
  EXPECT_EQ(macko_warp_row::x_staged_columns(1), 64);
  EXPECT_EQ(macko_warp_row::x_staged_columns(4096), 4096);
  EXPECT_EQ(macko_warp_row::x_staged_columns(4097), 4160);
  // Not even one token fits: gather X, 16 tokens per pass.
  auto d = macko_warp_row::token_passes(200000, 2, h100);
  EXPECT_FALSE(d.staged);
  EXPECT_EQ(d.tokens, 16);
}

TEST(DecodeLaunch, MackoPlanIsOneBalancedWave) {
  // 11008 rows, 3 blocks of 16 warps per SM on 132 SMs: no warp takes more than 2 rows. All 396
  // resident blocks run (the warps with the second row numbered across blocks, so every SM gets
  // its share); with the knob at 0, as before session 36, the 344 blocks whose 5504 warps take
  // exactly 2 rows each (80 SMs with 3 blocks, 52 with 2).
  auto a = macko_warp_row::plan(11008, 132, 3, 64 * 1024);
  EXPECT_TRUE(a.x_shared);
  EXPECT_EQ(a.blocks, 396);
  EXPECT_EQ(macko_warp_row::plan(11008, 132, 3, 64 * 1024, 0).blocks, 344);
  // Fewer rows than resident warps: one row per warp.
  EXPECT_EQ(macko_warp_row::plan(4096, 132, 2, 0).blocks, 4096 / 16);
  // The occupancy is capped at kMaxBlocksPerSm and floored at 1.
  EXPECT_EQ(macko_warp_row::plan(1000000, 10, 99, 0).blocks,
            10 * macko_warp_row::Config::kMaxBlocksPerSm);
  EXPECT_EQ(macko_warp_row::plan(1000000, 10, 0, 0).blocks, 10);
  EXPECT_EQ(macko_warp_row::plan(1, 132, 4, 0).blocks, 1);
  EXPECT_EQ(macko_warp_row::plan(0, 132, 4, 0).blocks, 1);  // no rows: one block, no division by 0
}

TEST(DecodeLaunch, MackoOneTokenKernelChoice) {
  using macko_warp_row::OneTokenKernel;
  using macko_warp_row::choose_one_token;
  const auto automatic = OneTokenKernel::automatic;
  const int64_t cut = macko_warp_row::kHalfWarpBelowEntriesPerRow;
  // Rows of >= `cut` entries on average: a warp each; shorter: half a warp (even or not).
  EXPECT_EQ(choose_one_token(100, 100 * cut, 4 * cut, 132, automatic), OneTokenKernel::warp);
  EXPECT_EQ(choose_one_token(100, 100 * cut - 1, 4 * cut, 132, automatic), OneTokenKernel::half_warp);
  EXPECT_EQ(choose_one_token(7, 0, 0, 132, automatic), OneTokenKernel::half_warp);
  // Up to kHalfWarpEvenBelowEntriesPerRow: half a warp for even rows that fill the warp slots
  // (132 SMs: 8448). 11008 rows of ~500 entries, longest 600: half; longest 700: a warp.
  EXPECT_EQ(choose_one_token(11008, 11008 * 500, 600, 132, automatic), OneTokenKernel::half_warp);
  EXPECT_EQ(choose_one_token(11008, 11008 * 500, 700, 132, automatic), OneTokenKernel::warp);
  // Too few rows for the slots (4096 on an H100), or rows too long: a warp.
  EXPECT_EQ(choose_one_token(4096, 4096 * 500, 550, 132, automatic), OneTokenKernel::warp);
  EXPECT_EQ(choose_one_token(4096, 4096 * 500, 550, 64, automatic), OneTokenKernel::half_warp);
  const int64_t even_cut = macko_warp_row::kHalfWarpEvenBelowEntriesPerRow;
  EXPECT_EQ(choose_one_token(11008, 11008 * even_cut, even_cut, 132, automatic), OneTokenKernel::warp);
  EXPECT_EQ(choose_one_token(11008, 11008 * even_cut - 1, even_cut, 132, automatic),
            OneTokenKernel::half_warp);
  // An explicit request (the experiment knob) wins.
  EXPECT_EQ(choose_one_token(100, 1, 1, 132, OneTokenKernel::persistent), OneTokenKernel::persistent);
  EXPECT_EQ(choose_one_token(100, 1000000, 20000, 132, OneTokenKernel::half_warp),
            OneTokenKernel::half_warp);
}

TEST(DecodeLaunch, MackoOneTokenBlockWarps) {
  using macko_warp_row::kSharedXMaxCols;
  using macko_warp_row::kSixteenWarpsMaxDensity;
  using macko_warp_row::kSixteenWarpsSparseMinCols;
  // Warps per block for a rows x cols weight storing `density` entries per element.
  auto warps = [](int64_t cols, double density, bool x_shared, int requested) {
    const int64_t rows = 1000;
    return macko_warp_row::one_token_block_warps(rows, cols, int64_t(density * rows * cols),
                                                 x_shared, requested);
  };
  // A long X copied into shared memory (down_proj at 90 %): 16-warp blocks, half the copies.
  EXPECT_EQ(warps(11008, 0.5, true, 0), 16);
  EXPECT_EQ(warps(kSharedXMaxCols + 1, 0.5, true, 0), 16);
  // Short X, or X gathered through L1: 8-warp blocks.
  EXPECT_EQ(warps(kSharedXMaxCols, 0.5, true, 0), 8);
  EXPECT_EQ(warps(4096, 0.5, true, 0), 8);
  EXPECT_EQ(warps(11008, 0.5, false, 0), 8);
  // K = 8192 storing ~0.12 entries per element (Llama-2-70B's 8192-column weights at 90 %): 16;
  // ~0.21 (80 %), K = 4096 at any density, or X through L1: 8.
  EXPECT_EQ(warps(kSixteenWarpsSparseMinCols, 0.12, true, 0), 16);
  EXPECT_EQ(warps(8192, kSixteenWarpsMaxDensity - 0.01, true, 0), 16);
  EXPECT_EQ(warps(8192, 0.21, true, 0), 8);
  EXPECT_EQ(warps(4096, 0.05, true, 0), 8);
  EXPECT_EQ(warps(8192, 0.05, false, 0), 8);
  // The knob's values override; anything else is the rule.
  EXPECT_EQ(warps(4096, 0.5, true, 16), 16);
  EXPECT_EQ(warps(11008, 0.5, true, 8), 8);
  EXPECT_EQ(warps(11008, 0.5, true, 12), 16);
  EXPECT_EQ(warps(8192, 0.05, true, 8), 8);
}

TEST(DecodeLaunch, MackoFewTokensBlockWarps) {
  using macko_warp_row::few_tokens_block_warps;
  // Whole warps running several rows: 32-warp blocks; the knob's 16 takes them back.
  EXPECT_EQ(few_tokens_block_warps(32, 1, 0), 32);
  EXPECT_EQ(few_tokens_block_warps(32, 1, 16), 16);
  EXPECT_EQ(few_tokens_block_warps(32, 1, 32), 32);
  // Half warps and row pieces keep 16-warp blocks whatever is asked.
  EXPECT_EQ(few_tokens_block_warps(16, 1, 0), 16);
  EXPECT_EQ(few_tokens_block_warps(32, 2, 0), 16);
  EXPECT_EQ(few_tokens_block_warps(32, 4, 32), 16);
}

TEST(DecodeLaunch, MackoRowPieces) {
  using macko_warp_row::row_pieces;
  const int64_t per = macko_warp_row::kMinEntriesPerPiece;
  // 132 SMs: 8448 warp slots. 4096 rows of 2048+ entries: two warps per row.
  EXPECT_EQ(row_pieces(4096, 4096 * 2048, 0, 132, 0), 2);
  // 11008 rows already fill more than a wave: one warp per row.
  EXPECT_EQ(row_pieces(11008, 11008 * 5504, 0, 132, 0), 1);
  // 2112 long rows: four; short rows stay whole (a piece keeps >= kMinEntriesPerPiece entries).
  EXPECT_EQ(row_pieces(2112, 2112 * 4 * per, 0, 132, 0), 4);
  EXPECT_EQ(row_pieces(2112, 2112 * (4 * per - 1), 0, 132, 0), 2);
  EXPECT_EQ(row_pieces(2112, 2112 * (2 * per - 1), 0, 132, 0), 1);
  EXPECT_EQ(row_pieces(2113, 2113 * 4 * per, 0, 132, 0), 2);  // 4 pieces would pass one wave
  // Fewer SMs, fewer slots; degenerate inputs stay at one piece.
  EXPECT_EQ(row_pieces(4096, 4096 * 2048, 0, 40, 0), 1);
  EXPECT_EQ(row_pieces(0, 0, 0, 132, 0), 1);
  EXPECT_EQ(row_pieces(10, 10 * 100000, 0, 0, 0), 4);  // sm_count 0 reads as 1 SM: 64 slots
  // Uneven rows (magnitude pruning): the longest row decides. 4096 x 11008 at 90 % as the magnitude
  // pattern leaves it (average 1101 entries, longest 5149): two pieces; with even rows of that
  // average, one. Rows within kEvenRowsRatio of the average count as even.
  EXPECT_EQ(row_pieces(4096, 4096 * 1101, 5149, 132, 0), 2);
  EXPECT_EQ(row_pieces(4096, 4096 * 1101, 1101, 132, 0), 1);
  EXPECT_EQ(row_pieces(4096, 4096 * 1101, 1400, 132, 0), 1);  // 1.27x the average: even
  EXPECT_EQ(row_pieces(4096, 4096 * 1101, 1540, 132, 0), 2);  // 1.4x: uneven, 770 per piece
  // An unknown longest row (0: a matrix built on the GPU) reads as even rows.
  EXPECT_TRUE(macko_warp_row::rows_are_even(4096, 4096 * 1101, 0));
  EXPECT_FALSE(macko_warp_row::rows_are_even(4096, 4096 * 1101, 1540));
  // A long row cannot lift the one-wave limit: 11008 rows stay whole.
  EXPECT_EQ(row_pieces(11008, 11008 * 410, 2132, 132, 0), 1);
  // 2..4 tokens: half the warp slots (16-warp blocks, two per SM). 4096 rows stay whole, 1024
  // rows of 2048 entries still split in two.
  const int64_t few = macko_warp_row::kFewTokensWarpsPerSm;
  EXPECT_EQ(row_pieces(4096, 4096 * 2048, 0, 132, 0, few), 1);
  EXPECT_EQ(row_pieces(4096, 4096 * 1101, 5149, 132, 0, few), 1);
  EXPECT_EQ(row_pieces(1024, 1024 * 2048, 0, 132, 0, few), 2);
  // The experiment knob wins when it names a valid count.
  EXPECT_EQ(row_pieces(11008, 11008 * 5504, 0, 132, 4), 4);
  EXPECT_EQ(row_pieces(4096, 4096 * 2048, 0, 132, 1), 1);
  EXPECT_EQ(row_pieces(4096, 4096 * 2048, 0, 132, 3), 2);  // 3 is not a piece count: the rule
}

TEST(DecodeLaunch, MackoRowsPerWarpMakeOneWave) {
  using macko_warp_row::rows_per_segment;
  // 132 SMs x 6 blocks x 8 warps = 6336 warps at once.
  EXPECT_EQ(rows_per_segment(4096, 6336, 0), 1);
  EXPECT_EQ(rows_per_segment(6336, 6336, 0), 1);
  EXPECT_EQ(rows_per_segment(6337, 6336, 0), 2);
  EXPECT_EQ(rows_per_segment(11008, 6336, 0), 2);   // was 1.74 waves of one row per warp
  EXPECT_EQ(rows_per_segment(28672, 6336, 0), 5);
  EXPECT_EQ(rows_per_segment(0, 6336, 0), 1);
  EXPECT_EQ(rows_per_segment(100, 0, 0), 1);        // unknown occupancy: one row per warp
  EXPECT_EQ(rows_per_segment(11008, 6336, 1), 1);   // the knob: one row per warp, as before
  EXPECT_EQ(rows_per_segment(4096, 6336, 3), 3);
  // Every row gets a warp slot: ceil(rows / rows_per_segment) warps fit the resident ones.
  for (int64_t rows : {1, 7, 6335, 6336, 6337, 12672, 12673, 100000}) {
    const int r = rows_per_segment(rows, 6336, 0);
    EXPECT_LE((rows + r - 1) / r, 6336) << rows;
    EXPECT_GT(int64_t(r) * 6336, rows - 6336) << rows;  // and no more rows than needed
  }
}

// Several-row launches take every resident block, so the last pass's empty slots spread over all
// SMs (ncu, session 36: 11008 rows at 8 tokens, 32-warp blocks, one per SM, ran in 115 blocks);
// one row per segment, or a knob of 0, keeps the blocks the segments fill.
TEST(DecodeLaunch, MackoSeveralRowLaunchesTakeEveryResidentBlock) {
  using macko_warp_row::launch_grid;
  EXPECT_EQ(launch_grid(11008, 3, 32, 132, -1), 132);
  EXPECT_EQ(launch_grid(11008, 3, 32, 132, 0), 115);    // the knob: filled blocks, as before
  EXPECT_EQ(launch_grid(22016, 6, 32, 132, -1), 132);   // 115 filled
  EXPECT_EQ(launch_grid(4096, 1, 32, 132, -1), 128);    // one row each: the filled blocks
  EXPECT_EQ(launch_grid(28672, 2, 32, 132, -1), 448);   // a forced row count needing more blocks
  EXPECT_EQ(launch_grid(0, 1, 32, 132, -1), 1);
  // Every row has a slot: blocks x segments x rows per segment covers the rows.
  for (int64_t rows : {4225, 8449, 11008, 12288, 22016, 28672}) {
    const int64_t resident_segs = 132 * 32;
    const int rps = macko_warp_row::rows_per_segment(rows, resident_segs, 0);
    EXPECT_GE(launch_grid(rows, rps, 32, 132, -1) * 32 * rps, rows) << rows;
  }
}

TEST(DecodeLaunch, CsrBlocks) {
  EXPECT_EQ(csr_vector::blocks_for(1), 1);
  EXPECT_EQ(csr_vector::blocks_for(8), 1);
  EXPECT_EQ(csr_vector::blocks_for(9), 2);
  // A row's pieces share a block: 8 warps hold 4 rows of 2 pieces, 2 rows of 4.
  EXPECT_EQ(csr_vector::blocks_for(4, 2), 1);
  EXPECT_EQ(csr_vector::blocks_for(5, 2), 2);
  EXPECT_EQ(csr_vector::blocks_for(4096, 2), 1024);
  EXPECT_EQ(csr_vector::blocks_for(3, 4), 2);
}

// Pieces per row: the most of 4, 2 whose warps all fit the GPU at once (H100: 132 SMs x 48
// resident warps of the one-token instance = 6336); past one wave, for uneven rows (the longest
// >= 1.5x the average), 4 at several tokens and at one token 4 or 2 for rows of at least that
// many 256-entry steps; else 1. A knob value of 1, 2 or 4 wins.
TEST(DecodeLaunch, CsrPieces) {
  const int64_t slots = 132 * 48;
  auto even = [&](int64_t rows, int64_t per_row, int n = 1) {
    return csr_vector::pieces_for(rows, rows * per_row, per_row + 40, slots, n);
  };
  auto uneven = [&](int64_t rows, int64_t per_row, int n = 1) {
    return csr_vector::pieces_for(rows, rows * per_row, 3 * per_row, slots, n);
  };
  EXPECT_EQ(even(1024, 2048), 4);
  EXPECT_EQ(even(1584, 2048), 4);  // 6336 warps: exactly one wave
  EXPECT_EQ(even(1585, 2048), 2);
  EXPECT_EQ(even(3168, 2048), 2);
  EXPECT_EQ(even(4096, 2048), 1);  // 8192 warps: more than one wave, even rows
  EXPECT_EQ(even(11008, 5504), 1);
  // Uneven rows (magnitude pruning), measured: 4096x4096 and 4096x11008 at 50-90 % and 11008x4096
  // at 50-70 % take 4 pieces; 11008x4096 at 90 % (410 per row, 1.6 steps) keeps one.
  EXPECT_EQ(uneven(4096, 2048), 4);
  EXPECT_EQ(uneven(4096, 1101), 4);
  EXPECT_EQ(uneven(11008, 1229), 4);
  EXPECT_EQ(uneven(11008, 600), 2);
  EXPECT_EQ(uneven(11008, 410), 1);
  EXPECT_EQ(uneven(11008, 410, 8), 4);  // several tokens: 4 pieces whatever the row length
  EXPECT_EQ(uneven(4096, 410, 2), 4);
  EXPECT_EQ(even(11008, 410, 8), 1);
  EXPECT_EQ(csr_vector::pieces_for(11008, 11008 * 2048, 3071, slots, 1), 1);  // < 1.5x the average
  EXPECT_EQ(csr_vector::pieces_for(11008, 11008 * 2048, 3072, slots, 1), 4);  // = 1.5x
  EXPECT_EQ(csr_vector::pieces_for(11008, 0, 0, slots, 8), 1);  // no non-zeros
  EXPECT_EQ(csr_vector::pieces_for(11008, 1, 1, slots, 1, 4), 4);  // the knob
  EXPECT_EQ(csr_vector::pieces_for(7, 7, 1, slots, 1, 1), 1);
  EXPECT_EQ(csr_vector::pieces_for(7, 7, 1, slots, 1, 3), 4);  // not a piece count: the rule
  EXPECT_EQ(csr_vector::pieces_for(7, 7, 1, 0, 1), 1);         // no residency, even rows: one piece
}

// Checks that need no device: a host weight and a weight of another format are rejected with
// invalid_argument before any CUDA call.
TEST(DecodeLaunch, KernelsRejectHostAndForeignWeights) {
  const HostMatrix h = patterns::random(DType::fp16, 16, 24, 0.5, 3);
  HostMatrix x(DType::fp16, 2, 24), y(DType::fp16, 2, 16);
  struct K {
    RunFn run;
    Format f;
  };
  const K ks[] = {{dense_gemv::run, Format::dense},
                  {csr_vector::run, Format::csr},
                  {macko_warp_row::run, Format::macko},
                  {tca_bme_decode::run, Format::tca_bme}};
  for (const K& k : ks) {
    auto w = encode(k.f, h.view());
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    Status st = k.run(Problem{w.value(), x.view(), y.view(), {}}, nullptr);
    EXPECT_EQ(st.code(), Code::invalid_argument) << format_name(k.f) << ": " << st.to_string();
    const Format other = k.f == Format::dense ? Format::csr : Format::dense;
    auto wo = encode(other, h.view());
    ASSERT_TRUE(wo.ok());
    st = k.run(Problem{wo.value(), x.view(), y.view(), {}}, nullptr);
    EXPECT_EQ(st.code(), Code::invalid_argument) << format_name(k.f) << ": " << st.to_string();
  }
  for (const char* name : {"dense.gemv", "csr.vector", "macko.warp_row", "tca_bme.decode"}) {
    EXPECT_NE(find_kernel(name), nullptr) << name;
  }
}

// Rows are handed out longest first when they are uneven (longest > 1.3x average); the knob's
// 0 / 1 override the rule.
TEST(DecodeLaunch, MackoRowKernelTokens) {
  using macko_warp_row::row_kernel_tokens;
  const int64_t half = 4096 * 2048;  // entries of a 4096-column row at 50 %, per row
  EXPECT_EQ(row_kernel_tokens(1, 11008, 1 << 20, 11008 * 8, 132, -1), 1);  // one token: always
  // Two tokens: their own instance (X^T of K x 2), on K up to 16384 (down_proj's 11008 too).
  EXPECT_EQ(row_kernel_tokens(2, 4096, 4096, half, 132, -1), 2);
  EXPECT_EQ(row_kernel_tokens(2, 4096, 11008, half, 132, -1), 2);
  EXPECT_EQ(row_kernel_tokens(2, 4096, 16384, half, 132, -1), 2);
  EXPECT_EQ(row_kernel_tokens(2, 4096, 16385, half, 132, -1), 0);
  EXPECT_EQ(row_kernel_tokens(2, 4096, 4096, half, 132, 0), 0);  // the knob's persistent kernel
  EXPECT_EQ(row_kernel_tokens(3, 4096, 4096, half, 132, -1), 4);
  EXPECT_EQ(row_kernel_tokens(3, 4096, 11008, half, 132, -1), 0);
  EXPECT_EQ(row_kernel_tokens(4, 4096, 8192, 4096 * 4096, 132, -1), 4);
  EXPECT_EQ(row_kernel_tokens(4, 4096, 8193, half, 132, -1), 0);  // longer K: the persistent kernel
  EXPECT_EQ(row_kernel_tokens(4, 4096, 11008, half, 132, -1), 0);
  // 5..8 tokens: with several rows per warp (>= 64 rows per SM) and density >= 0.25.
  EXPECT_EQ(row_kernel_tokens(5, 11008, 4096, 11008 * 2048, 132, -1), 8);
  EXPECT_EQ(row_kernel_tokens(8, 28672, 8192, 28672 * 2458, 132, -1), 8);  // 70 %
  EXPECT_EQ(row_kernel_tokens(8, 4096, 4096, half, 132, -1), 0);           // one row per warp
  EXPECT_EQ(row_kernel_tokens(8, 8448, 4096, 8448 * 2048, 132, -1), 8);    // 64 rows per SM
  EXPECT_EQ(row_kernel_tokens(8, 8447, 4096, 8447 * 2048, 132, -1), 0);
  EXPECT_EQ(row_kernel_tokens(8, 11008, 4096, 11008 * 410, 132, -1), 0);   // 90 %
  EXPECT_EQ(row_kernel_tokens(8, 11008, 4096, 11008 * 2048, 132, 0), 0);   // override
  EXPECT_EQ(row_kernel_tokens(9, 11008, 4096, 11008 * 2048, 132, -1), 0);  // beyond 8 tokens
  EXPECT_EQ(row_kernel_tokens(8, 100, 4096, 100 * 2048, 0, -1), 8);  // sm_count 0 reads as 1 SM
  EXPECT_EQ(row_kernel_tokens(1, 4096, 4096, half, 132, 0), 1);
}

TEST(DecodeLaunch, MackoSharedXRule) {
  using macko_warp_row::one_token_shared_x;
  const int64_t big = 4096 * 11008;
  EXPECT_TRUE(one_token_shared_x(11008, 4096, big / 2, 2, -1));        // K <= 8192: always
  EXPECT_TRUE(one_token_shared_x(28672, 8192, 28672 * 8192 * 7 / 10, 2, -1));
  EXPECT_TRUE(one_token_shared_x(4096, 11008, big / 2, 2, -1));        // K <= 12288 at <= 60 %
  EXPECT_FALSE(one_token_shared_x(4096, 11008, big * 7 / 10, 2, -1));  // ... not at 70 %
  const int64_t longer = 4096 * 14336;
  EXPECT_FALSE(one_token_shared_x(4096, 14336, longer / 2, 2, -1));    // longer K at 50 %: L1
  EXPECT_TRUE(one_token_shared_x(4096, 14336, longer / 10, 2, -1));    // ... at 90 %: shared
  EXPECT_FALSE(one_token_shared_x(11008, 4096, big / 2, 2, 0));        // overrides
  EXPECT_TRUE(one_token_shared_x(4096, 11008, big / 2, 2, 1));
  EXPECT_FALSE(one_token_shared_x(8, 60000, 8, 2, 1));                 // X over 96 KB: never
  EXPECT_FALSE(one_token_shared_x(8, 60000, 8, 2, -1));
  EXPECT_TRUE(one_token_shared_x(0, 0, 0, 2, -1));                     // empty: harmless
}

TEST(DecodeLaunch, MackoRowOrderRule) {
  using macko_warp_row::use_row_order;
  EXPECT_FALSE(use_row_order(11008, 11008 * 500, 650, -1));  // 1.3x exactly: even
  EXPECT_TRUE(use_row_order(11008, 11008 * 500, 651, -1));
  EXPECT_FALSE(use_row_order(11008, 11008 * 500, 2000, 0));
  EXPECT_TRUE(use_row_order(11008, 11008 * 500, 500, 1));
  EXPECT_FALSE(use_row_order(7, 0, 0, -1));  // no entries at all
}

// The entry split: uneven rows that fit one wave of the row kernel's warps (132 SMs x 64 = 8448
// rows), under a dependent launch only; the overrides win either way.
TEST(DecodeLaunch, MackoEntrySplitRule) {
  using macko_entry_split::use_entry_split;
  EXPECT_TRUE(use_entry_split(4096, 4096 * 500, 2000, 132, true, -1));    // uneven, dependent
  EXPECT_FALSE(use_entry_split(4096, 4096 * 500, 2000, 132, false, -1));  // plain launch
  EXPECT_FALSE(use_entry_split(4096, 4096 * 500, 650, 132, true, -1));    // even (1.3x exactly)
  EXPECT_TRUE(use_entry_split(8448, 8448 * 500, 2000, 132, true, -1));    // one wave exactly
  EXPECT_FALSE(use_entry_split(8449, 8449 * 500, 2000, 132, true, -1));   // more rows
  EXPECT_FALSE(use_entry_split(11008, 11008 * 500, 2000, 132, true, -1));
  EXPECT_TRUE(use_entry_split(11008, 11008 * 500, 500, 132, false, 1));   // overrides
  EXPECT_FALSE(use_entry_split(4096, 4096 * 500, 2000, 132, true, 0));
  EXPECT_FALSE(use_entry_split(7, 0, 0, 132, true, -1));  // no entries at all
  EXPECT_EQ(macko_entry_split::launch_blocks(132, 5), 660);
  EXPECT_EQ(macko_entry_split::launch_blocks(0, 0), 1);
}

// macko.swiglu_mlp's checks, all before anything touches a device.
TEST(DecodeLaunch, MackoSwigluMlpRefusesWhatItCannotRun) {
  namespace mlp = macko_swiglu_mlp;
  auto enc = [](DType t, int64_t m, int64_t k, double s, uint64_t seed) {
    return macko::encode(patterns::random(t, m, k, s, seed).view()).value();
  };
  const macko::Matrix gu = enc(DType::fp16, 64, 32, 0.5, 1);    // gate_up (2 x 32, 32)
  const macko::Matrix down = enc(DType::fp16, 32, 32, 0.5, 2);  // down (32, 32)
  const macko::Matrix bf = enc(DType::bf16, 32, 32, 0.5, 3);
  EXPECT_TRUE(mlp::check(gu, down).ok());
  EXPECT_EQ(mlp::check(down, down).code(), Code::invalid_argument);  // gate_up needs 2 x inter rows
  EXPECT_EQ(mlp::check(gu, bf).code(), Code::invalid_argument);      // dtypes differ
  EXPECT_EQ(mlp::check(gu, down, 1000).code(), Code::invalid_argument);   // slot does not divide
  EXPECT_EQ(mlp::check(gu, down, 65536).code(), Code::invalid_argument);  // one slot: no ring
  EXPECT_TRUE(mlp::check(gu, down, 4096).ok());
  // A dense row of 5000 columns needs more entries than a 4096-entry slot holds.
  const macko::Matrix wide_gu = enc(DType::fp16, 8, 5000, 0.0, 4);
  const macko::Matrix wide_down = enc(DType::fp16, 5000, 4, 0.0, 5);
  EXPECT_EQ(mlp::check(wide_gu, wide_down, 4096).code(), Code::unsupported);
  EXPECT_TRUE(mlp::check(wide_gu, wide_down).ok());  // the default slot holds it
  mlp::Call call;
  call.gate_up = &gu;
  call.down = &down;
  EXPECT_EQ(mlp::run(call, nullptr).code(), Code::invalid_argument);  // null activations
}

// The carveout a launch names (kernels/carveout.hpp): what its resident blocks need, rounded up to
// a whole percent, never below the floor (the small kernels of a chain share one split), never
// above 100, and no preference when the SM's shared memory is unknown. H200 / H100: 228 KB per SM.
TEST(DecodeLaunch, CarveoutCoversTheResidentBlocks) {
  constexpr int64_t kSm = 228 * 1024;
  // dense.gemv at one M tile: 2 blocks of ~7 KB static + 1 KB reserved: the floor.
  EXPECT_EQ(carveout_percent_for(2, 8 * 1024, kSm), kCarveoutFloorPercent);
  EXPECT_EQ(carveout_percent_for(0, 8 * 1024, kSm), kCarveoutFloorPercent);
  EXPECT_EQ(carveout_percent_for(2, 8 * 1024, kSm, 0), 8);  // 16 KB of 228: 7.02 % -> 8
  // Two 80 KB blocks plus 1 KB reserved each: 162 KB, 71.05 % -> 72, enough for both.
  const int p = carveout_percent_for(2, 81 * 1024, kSm);
  EXPECT_EQ(p, 72);
  EXPECT_GE(int64_t(p) * kSm, 100 * 2 * int64_t(81 * 1024));
  // Exactly a whole percent stays there; more than the SM holds is capped.
  EXPECT_EQ(carveout_percent_for(1, kSm / 2, kSm), 50);
  EXPECT_EQ(carveout_percent_for(4, kSm / 2, kSm), 100);
  EXPECT_EQ(carveout_percent_for(1, 1024, 0), -1);
}
