// tca_bme.decode: Y = X * W^T for a tca_bme (bitmap) weight and few tokens (N = 1..16 per pass),
// the bitmaps decoded straight into mma.m16n8k16 A fragments, every warp streaming its own run of
// 64x64 groups through a cp.async pipeline. See decode.cu and docs/kernels.md ("tca_bme.decode").
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/kernel.hpp"
#include "kernels/tca_bme/one_token.hpp"  // StageCopy
#include "kernels/tca_bme/fragment.hpp"  // SPARROW_HD

namespace sparrow::kernels::tca_bme_decode {

struct Config {
  static constexpr int kStages = 2;               // groups per warp in shared memory
  static constexpr int kTokensPerPass = 16;       // two mma n8 tiles
  static constexpr int kMaxClusterBlocks = 8;     // portable thread-block cluster size
  static constexpr int kBitmapBytes = 64 * 8;     // (64) uint64 per group
  static constexpr int kRecordBytes = 128 * 8;    // (128) half-bitmap records per warp
  // After a stage's values: the nibble decode's window loads read up to two values (4 bytes)
  // past a group's last one; the tail keeps them inside the stage (not in the other stage, which
  // cp.async may be filling) and the next stage 16-byte aligned.
  static constexpr int kValueTailBytes = 16;
  static constexpr int kMaxGroupValues = 64 * 64; // a dense group
  static constexpr int kTilePitch = 64 + 4;       // floats per row of an epilogue tile
  // Warps per block (one block per SM): 16 with one n8 tile; 8 with two (twice the accumulators).
  static constexpr int warps(int n_tiles) { return n_tiles == 1 ? 16 : 8; }
  // The A-fragment decode (decode.cu): nibble order with two n8 tiles, pair order with one.
  // Measured on the H100 (2026-11-24, bench/NOTES-decode.md session 11) against the pair decode,
  // on the four Llama shapes at 50-90 %: N = 16 0.75-0.91x the time (median 0.80); N = 8
  // 1.08-1.14x at 50 %, 0.98-1.03x at 70-90 % (when both ran the nibble order).
  static constexpr bool nibble_order(int n_tiles) { return n_tiles == 2; }
  // A warp decodes one group in ~6 us of wall time while 15 others share its SM (H100, 2026-11-23),
  // so a weight that gives the warps only a few groups each is latency-bound in the streaming
  // kernel. At N = 1 and fewer than this many groups per warp the one-token CUDA-core kernel
  // (one_token.hpp) is faster. Measured one-token / streaming time at 50-90 % (H100, session 12,
  // after the one-token kernel's X prefetch): 12288x4096 (5.8 groups per warp) 0.82-0.92,
  // 22016x4096 (10.4) 0.92-0.96, 32000x4096 (15.2) 1.05-1.23, 28672x8192 (27) 1.18-1.32.
  static constexpr int kStreamMinGroupsPerWarp = 12;
  // N = 2..4 and the few-token CUDA-core kernel (few_tokens.hpp): it runs where its strips fit
  // one wave of two blocks per SM and the streaming kernel's warps would get fewer than 6 groups
  // each (N = 2) or 3 (N = 3, 4). Measured few-token / streaming time on the H100 (session 23,
  // 50 / 70 / 90 %): 4096x4096 (256 strips, 1.9 groups per warp) 0.58-0.61 at N = 2, 0.65-0.71
  // at N = 4; 4096x11008 (256 strips, 5.2) 0.80-0.89 at N = 2, 0.91-1.04 at N = 4; 11008x4096
  // (688 strips, 5.2) 0.96-1.11 at N = 2; 12288x4096 and larger 0.93-1.9 (0.93: 12288x4096 at
  // N = 2, 50 %, whose 768 strips the rule leaves to the streaming kernel).
  static constexpr int kFewTokensMaxStripsPerSm = 2;
  static constexpr int few_tokens_max_groups_per_warp(int n) { return n == 2 ? 6 : 3; }
};

// ---- work split (host and device) --------------------------------------------------------------
// The grid is `clusters` clusters of `blocks` blocks, one wave. Cluster c owns group rows
// [row_begin(c), row_begin(c + 1)) (whole 64-row group rows, so no sum crosses clusters), i.e. the
// contiguous run of groups row_begin(c) * groups_k ... in the format's row-major group order; the
// P = blocks * warps warps of the cluster split that run into equal contiguous pieces.
SPARROW_HD int64_t row_begin(int64_t groups_m, int clusters, int c) {
  return groups_m * c / clusters;
}
// First group (within the cluster's run of G groups) of warp v of P; warp v has
// [warp_begin(v), warp_begin(v + 1)).
SPARROW_HD int64_t warp_begin(int64_t groups, int warps, int v) {
  return groups * v / warps;
}
// The warp whose piece holds group i of the cluster's run (0 <= i < groups).
SPARROW_HD int warp_of(int64_t groups, int warps, int64_t i) {
  return int(((i + 1) * warps - 1) / groups);
}

// The cluster epilogue (decode.cu): a cluster's blocks hold contiguous runs of its groups (block b
// the pieces of warps b * warps .. + warps - 1), so only a block's first row can have groups in
// earlier blocks and only its last row groups in later ones. A block whose last row continues
// past it pushes its partial tile of that row to the row's finisher, the block holding the row's
// last group; the finisher expects one tile from every earlier block that holds groups of it.
// Whether block [begin, end) pushes a partial tile: its last row (end / groups_k) continues.
SPARROW_HD bool pushes_last_row(int64_t begin, int64_t end, int64_t groups_k) {
  return end > begin && end % groups_k != 0;
}
// The block that finishes `row`: the one holding its last group.
SPARROW_HD int row_finisher(int64_t groups, int pieces, int warps, int64_t row, int64_t groups_k) {
  return warp_of(groups, pieces, (row + 1) * groups_k - 1) / warps;
}
// Whether block b holds any groups (with fewer groups than warps some hold none), given the
// pieces' first groups piece_start[0 .. pieces].
SPARROW_HD bool block_holds_groups(const int64_t* piece_start, int warps, int b) {
  return piece_start[b * warps] < piece_start[b * warps + warps];
}

// Values a warp's stage holds: as many as `warps` warps' stages and first-row tiles of `tokens`
// columns leave room for in `smem_per_block` bytes (one block per SM in any case). A group
// holding more is decoded from global memory instead, correctly and more slowly. A multiple of 64.
int stage_values(int warps, int tokens, int smem_per_block);

// Dynamic shared memory of one block: the warps' first-row tiles, then their stages and records
// (which the last-row tiles reuse after the main loop).
size_t shared_bytes(int stage_values, int warps, int tokens);

// Whether the stages leave room behind the last-row tiles for the kMaxClusterBlocks partial tiles
// of `tokens` rows a cluster's epilogue receives (decode.cu); if not, the blocks run alone.
bool cluster_epilogue_fits(int stage_values, int warps, int tokens);

// The cluster size to use, given how many clusters of each size 1, 2, 4, 8 fit at once
// (max_clusters[log2(size)], 0 = that size does not fit): the size whose busiest SM gets the
// fewest groups, ties going to the smaller cluster.
int choose_cluster_blocks(int64_t groups_m, int64_t groups_k, const int (&max_clusters)[4]);

// Whether N = 1 runs the one-token CUDA-core kernel (fewer than kStreamMinGroupsPerWarp groups
// per warp of the streaming kernel's one wave).
bool use_one_token_kernel(int64_t groups, int sm_count);

// Whether a pass of n = 2..4 tokens on an M-row weight of `groups` groups runs the few-token
// CUDA-core kernel (Config::kFewTokensMaxStripsPerSm, few_tokens_max_groups_per_warp).
bool use_few_tokens_kernel(int64_t m, int64_t groups, int n, int sm_count);

// Takes MatmulOptions::input_rms at every N: each pass normalises its own tokens.
bool takes_input_rms(const Weight& w, int64_t n);
Status run(const Problem& p, Stream stream);

// Which kernel a pass of N <= 4 tokens runs: automatic (use_one_token_kernel,
// use_few_tokens_kernel), always the CUDA-core strip kernels (one_token, few_tokens) or never
// (the streaming tensor-core kernel). run() is run_with(automatic); tests force both.
// `copy` forces how the one-token or the streaming kernel fills its stages (one_token.hpp's
// StageCopy; the few-token kernel has one way).
enum class StripKernel { automatic, always, never };
using tca_bme_one_token::StageCopy;
Status run_with(const Problem& p, Stream stream, StripKernel strip,
                StageCopy copy = StageCopy::automatic);

}  // namespace sparrow::kernels::tca_bme_decode
