// macko.warp_row: Y = X * W^T for a macko weight (CSR with 4-bit column deltas), MACKO's warp per
// row with 16-byte loads and shuffle prefix sums, extended to N = 1..16 tokens per pass so each
// decoded weight is used for every token. See docs/kernels.md ("macko.warp_row").
#pragma once

#include <cstdint>

#include "kernels/kernel.hpp"
#include "sparrow/formats/macko.hpp"

namespace sparrow::kernels::macko_warp_row {

struct Config {
  static constexpr int kWarpsPerBlock = 16;
  static constexpr int kMaxBlocksPerSm = 4;            // 64 warps: the SM's limit
  // Register cap via __launch_bounds__: up to 8 tokens 64 registers, 2 blocks (32 warps) per SM;
  // 16 tokens as many as needed (X^T takes up to 128 KB of shared memory then: one block per SM).
  // Capping one token at 42 registers (3 blocks) spilled the prefetched loads to local memory.
  static constexpr int min_blocks_per_sm(int nb) { return nb <= 8 ? 2 : 1; }
  static constexpr int kChunk = 8;                     // entries a lane decodes per step (16 B)
  static constexpr int kStepsInFlight = 4;             // steps loaded before the first is used
};

// One token (N = 1): a non-persistent grid, one row per warp (or per half warp), X read through
// L1 (no shared-memory staging, no block barrier). See warp_row.cu for why.
struct OneTokenConfig {
  static constexpr int kThreads = 256;  // 8 warps per block
  // Register budget via __launch_bounds__ (session 4 measurements). A warp per row: 6 blocks
  // (48 warps) per SM leaves 40 registers, which lets the compiler issue a step's 8 X gathers
  // together; left to itself it picks 32 registers (64 warps) and measured 8 % slower on
  // 11008x4096 at 50-70 %. Half warps and row pieces, which run where rows are short or few,
  // measured as fast or faster with 32 registers and 64 warps per SM (8 blocks).
  static constexpr int min_blocks_per_sm(int lanes, int pieces) {
    return lanes == 32 && pieces == 1 ? 6 : 8;
  }
};
// Warp slots per SM of the half-warp and row-piece instances (what the launch rules count).
constexpr int64_t kOneTokenWarpsPerSm =
    OneTokenConfig::min_blocks_per_sm(16, 1) * OneTokenConfig::kThreads / 32;
// Warp slots per SM of the 2..4-token row kernel: its instances use 44-64 registers per thread
// (ptxas, sm_90), so two 16-warp blocks, or one 32-warp block (few_tokens_block_warps), fit an SM.
constexpr int64_t kFewTokensWarpsPerSm = 32;
enum class OneTokenKernel { automatic, persistent, warp, half_warp };
// Rows shorter than this (entries per row, on average) get half a warp each.
constexpr int64_t kHalfWarpBelowEntriesPerRow = 384;
// Rows of up to this many entries on average also get half a warp when they are even (the
// longest within kEvenRowsRatio of the average) and the rows fill the GPU's warp slots (a warp
// then runs two rows of about the same length, and half the warps cover the matrix).
constexpr int64_t kHalfWarpEvenBelowEntriesPerRow = 1200;
constexpr double kEvenRowsRatio = 1.3;
// Whether a weight's rows are even: the longest within kEvenRowsRatio of the average (a
// max_row_entries of 0, unknown, reads as even). The launch rules below all ask this.
bool rows_are_even(int64_t rows, int64_t entries, int64_t max_row_entries);
// Columns must fit the 32-bit column arithmetic with room for the wrap of masked entries.
constexpr int64_t kOneTokenMaxCols = int64_t(1) << 30;
// Rows must fit the row kernels' 32-bit slot arithmetic (more run the persistent kernel).
constexpr int64_t kRowKernelMaxRows = int64_t(1) << 30;
OneTokenKernel choose_one_token(int64_t rows, int64_t entries, int64_t max_row_entries,
                                int sm_count, OneTokenKernel requested);
// Whether the kernels hand rows out longest first (macko::Matrix::row_order): for uneven rows
// (the longest above kEvenRowsRatio x the average). The row kernels then start the long
// rows of a magnitude-pruned weight in the first wave instead of ending on them; the persistent
// kernel deals them round-robin, so every warp gets one row of each length band. `requested`
// 0 / 1 overrides the rule (-1: the rule).
bool use_row_order(int64_t rows, int64_t entries, int64_t max_row_entries, int requested);
// Whether the row kernels gather X (one token) from a copy in shared memory (each block copies X
// first) instead of through L1. Measured on the H100 (session 6, bench/NOTES-decode.md): the copy wins
// for K <= 8192 at 50-90 % (4096x4096 90 %: 5.7 -> 5.2 µs; 11008x4096 70 %: 16.9 -> 16.0) and at
// high sparsity for longer K (4096x11008 90 %: 10.3 -> 9.1). It then lost on 4096x11008 at 50-70 %
// (22.9 -> 24.5 µs), where each block copied 22 KB for fewer weight bytes; since long copies run
// in 16-warp blocks (one_token_block_warps, session 33: half the copies per SM) it wins there
// (session 37, two rounds in one call: 22.70 -> 22.45 µs at 50 %, 15.16 -> 14.86 at 70 %) but still
// loses at 30 % (30.62 -> 30.78) and on longer K (4096x14336 and 5120x13824 at 30-70 %: 0.4 % faster
// to 2.3 % slower; 8192x28672 10-12 % slower). So the copy is the rule for K <= kSharedXMaxCols,
// for K <= kSharedXMidMaxCols at density <= kSharedXMidMaxDensity, and for any K that fits at
// density <= kSharedXMaxDensity. `requested` 0 / 1 overrides the rule (-1: the rule); X must fit
// kOneTokenSharedXMaxBytes either way.
constexpr int64_t kSharedXMaxCols = 8192;  // also: longer copies take 16-warp blocks
constexpr int64_t kSharedXMidMaxCols = 12288;
constexpr double kSharedXMidMaxDensity = 0.6;
constexpr double kSharedXMaxDensity = 0.2;
constexpr int64_t kOneTokenSharedXMaxBytes = 96 * 1024;
bool one_token_shared_x(int64_t rows, int64_t cols, int64_t entries, int element_bytes,
                        int requested);
// Warps per block of the one-token row kernel: 8 (OneTokenConfig::kThreads), or 16 where each
// block copies a long X (staged, K > kSharedXMaxCols), or an X of K >= kSixteenWarpsSparseMinCols
// at <= kSixteenWarpsMaxDensity stored entries per element (gap padding included, as in
// one_token_shared_x: random rows at 90 % sparsity store ~0.12, at 85 % ~0.16, at 80 % ~0.21),
// where a block's rows are few bytes next to its copy. 16-warp blocks have the same warps and
// registers per SM in half as many blocks, so half the copies of X per SM.
// Measured on the H100 (bench/NOTES-decode.md): 4096x11008 at 90 % (X 22 KB against ~26 KB of
// weight per 8-warp block) 8.90 -> 8.41 µs (session 33); on K = 4096 it was within +-1.3 % on
// 4096 rows and 3-4 % slower on 11008 and 22016 rows (coarser blocks spread the rows less evenly
// over the SMs); on K = 8192 (session 38) 0.6-3.9 % faster at 90-95 % on 1024, 8192 and 28672
// rows, but at 80 % 2.1 % faster on 8192 rows and 2.7 % slower on 28672. `requested` 8 / 16
// overrides the rule (0: the rule).
constexpr int64_t kSixteenWarpsSparseMinCols = 8192;
constexpr double kSixteenWarpsMaxDensity = 0.15;
int one_token_block_warps(int64_t rows, int64_t cols, int64_t entries, bool x_shared,
                          int requested);
// Warps per block of the 2..8-token row kernel: 32 for whole warps that run several rows each
// (LANES = 32, PIECES = 1: one 1024-thread block per SM, one copy of X^T per SM), 16 for half
// warps and row pieces. Measured on the H100 (bench/NOTES-decode.md): whole warps 0.87-0.98x the
// time of 16-warp blocks at N = 2 on 4096..22016 rows at 50-90 %, 0.95-0.98x at N = 4..8 on
// K = 4096, the 7B engine at 90 % +1.0 % at batch 2 (session 33); half warps and pieces, which
// run one row per segment (a grid of many waves), 0.93-1.22x, mostly slower (session 34).
// `requested` 16 overrides (0: the rule).
int few_tokens_block_warps(int lanes, int pieces, int requested);
// Tokens per pass of the row kernels for N tokens: 1 for N = 1; 2 for N = 2 on K <=
// kRowKernelTwoTokensMaxCols; 4 (X^T of K x 4 tokens in shared memory) for N = 3..4 and 8 for
// N = 5..8 on K <= kRowKernelMaxCols; 0: the persistent kernel.
// Measured on the H100 (session 6, bench/NOTES-decode.md): at 2..4 tokens the row kernel took
// 11008x4096 from 41.4 / 29.2 / 16.8 to 36.2 / 25.4 / 14.1 µs at 50 / 70 / 90 % and 28672x8192
// from 153 / 101 / 51 to 140 / 95 / 46, but lost on 4096x11008 (36.2 -> 41.2 at 50 %). 5..8 tokens
// (session 17, once a warp ran several rows and each block's X^T copy served them all): N = 8 at
// 50 / 70 % 0.95 / 0.96x the persistent kernel's time on 11008x4096, 0.93x on 22016x4096, 0.76 /
// 0.77x on 28672x8192; but 1.04-1.31x on 4096x4096 (rows fill one wave: one row per warp) and
// 1.0-1.31x at 90 %. So 8 tokens only for at least kEightTokensMinRowsPerSm rows per SM and
// density >= kEightTokensMinDensity. `requested` 0 keeps the persistent kernel for N > 1.
constexpr int kRowKernelMaxTokens = 8;
constexpr int64_t kRowKernelMaxCols = 8192;
// Two tokens run an instance of their own (X^T of K x 2: half the shared memory and half the
// loads, conversions and FMAs per entry of the 4-token one), so K up to twice as long fits the
// same 64 KB X^T (down_proj's K = 11008 included).
constexpr int64_t kRowKernelTwoTokensMaxCols = 2 * kRowKernelMaxCols;
constexpr int64_t kEightTokensMinRowsPerSm = 64;
constexpr double kEightTokensMinDensity = 0.25;
int row_kernel_tokens(int64_t n, int64_t rows, int64_t cols, int64_t entries, int sm_count,
                      int requested);
// Warps per row (1, 2 or 4) for the warp-per-row kernel: rows split into contiguous runs of
// steps when the rows alone would leave most of the GPU's warp slots empty. A piece keeps at least
// kMinEntriesPerPiece of an average row, or of the longest row when rows are uneven
// (max_row_entries above kEvenRowsRatio x the average; 0 reads as even). Measured on the H100
// (session 9, magnitude pattern, N = 1): 4096x11008 at 90 % 14.1 -> 11.0 µs with 2 pieces,
// 4096x4096 at 70 % 9.4 -> 8.4; average rows there are below 2 x kMinEntriesPerPiece, the longest
// 2.4-4.7x the average. `warps_per_sm`: the instance's warp slots per SM (kOneTokenWarpsPerSm,
// or kFewTokensWarpsPerSm for 2..4 tokens: with the one-token slots, 4096-row weights took 2
// pieces there and measured slower, 4096x4096 N = 2 random at 50 % 17.6 vs 14.4 µs whole).
// `requested` 1, 2 or 4 overrides the rule (0: the rule).
constexpr int64_t kMinEntriesPerPiece = 768;
int row_pieces(int64_t rows, int64_t entries, int64_t max_row_entries, int sm_count,
               int requested, int64_t warps_per_sm = kOneTokenWarpsPerSm);

// Rows each warp of the row kernel's 2..8-token instances runs one after another when
// `resident_warps` of its warps fit the GPU at once: 1 while the rows fit, else the fewest that
// fit them in one wave. A warp reads its next row's extent while a row decodes and its first chunk
// during the row's last step, so it starts the next row without a DRAM round trip, and each
// block's copy of X^T serves all its warps' rows. Measured on the H100 (session 17): N = 2..4 at
// 50-70 % 0.83-0.91x the time on 11008..28672 rows. The one-token instance runs one row per warp:
// several measured 0.98-0.99x alone but 0.98 / 0.95x the engine's batch-1 tokens/s at 70 / 90 %;
// half warps and row pieces also run one (the extra state would spill from their 32 registers).
// `requested` > 0 overrides the rule.
int rows_per_segment(int64_t rows, int64_t resident_warps, int requested);
// Blocks of a row-kernel launch whose segments (segs_per_block per block) run rows_per_seg rows
// each: the blocks those segments fill, or, where segments run several rows, every block the GPU
// holds at once (resident_blocks; rows_per_seg was sized from them, so their slots hold every row).
// The kernel numbers such segments across the blocks first, so the last pass's empty slots fall
// evenly on all blocks. Measured on the H100 (session 36, against the filled blocks in one binary,
// 2..8 tokens at 50-90 %): 11008x4096 at N = 8 47.2 -> 42.7 µs at 50 %, 22016x4096 88.8 -> 78.6,
// at N = 4 60.5 -> 55.7; time ratio 0.89-1.01 over five shapes (1.015 on 22016x4096 at N = 2 and
// 50 %); the 7B engine at batch 2 / 4 +1.3-2.3 % / +3.5-4.5 % at 50-90 %. `requested` 0 keeps the
// filled blocks (-1: the rule).
int64_t launch_grid(int64_t rows, int rows_per_seg, int64_t segs_per_block,
                    int64_t resident_blocks, int requested);

struct LaunchPlan {
  int64_t blocks = 0;     // persistent: each warp strides over the rows (plan)
  bool x_shared = false;  // X^T staged in shared memory (else gathered through L1)
  int smem_bytes = 0;
};

// How many tokens one launch handles. X^T (K x tokens) is staged in shared memory, so the
// bucket is the largest of 16, 8, 4, 1 whose X^T fits the per-block limit (more tokens then run
// as further passes over W: re-reading W beats gathering X through L1 per entry, which measured
// 10x slower at N = 16). When not even one token fits (K > ~110 K on an H100), X is gathered.
struct TokenPasses {
  int tokens = 16;
  bool staged = true;
};
TokenPasses token_passes(int64_t k, int es, int smem_per_block);
// Columns of the staged X^T: K rounded up to 64 (the bank swizzle permutes within groups of 64).
int64_t x_staged_columns(int64_t k);

// Grid of the persistent kernel for M rows when `resident_blocks_per_sm` blocks of it fit an SM
// (from the occupancy calculator): one wave, each warp a segment of rows_per_segment rows, the
// blocks by launch_grid (the kernel numbers warps across blocks first, so the warps with a row
// more are spread over all SMs). `requested_spread` as launch_grid's `requested`. Measured on
// the H100 (session 36, one binary): N = 8 at 90 % 11008x4096 20.46 -> 19.73 µs, 22016x4096
// 36.43 -> 34.54; N = 16 0.94-1.00x the time (11008x4096 at 50 % 115.8 -> 108.6); 28672x8192
// (already 0.97 waves) within 1 %; the 7B engine at batch 8 and 90 % (macko's persistent kernel
// everywhere) 1912.6 -> 1933.5 t/s.
// `warps_per_block`: the instance's block (16 warps; 32 for 16 tokens in lane pairs).
LaunchPlan plan(int64_t m, int sm_count, int resident_blocks_per_sm, int smem_bytes,
                int requested_spread = -1, int warps_per_block = Config::kWarpsPerBlock);

Status run(const Problem& p, Stream stream);
// One token as an entry split (macko_entry_split, entry_split.hpp): by its rule (automatic, which
// SPARROW_MACKO_ENTRY_SPLIT=0|1 overrides), always or never. run() is run_with(automatic); the
// GPU tests force `always` on every shape of the decode suite (the suite's own plain launches take
// the row kernel).
enum class EntrySplit { automatic, always, never };
Status run_with(const Problem& p, Stream stream, EntrySplit split);
// Whether a one-token call on a GPU with `sm_count` SMs may run the entry split for m (its rule
// for a dependent launch, or SPARROW_MACKO_ENTRY_SPLIT=1): where not, m's step_rows are never read
// and a holder of m (the engine) may drop them before upload.
bool may_read_step_rows(const macko::Matrix& m, int sm_count);
// Whether the kernel takes MatmulOptions::input_rms for w at N = n: where it runs its row kernels
// (row_kernel_tokens > 0), not the persistent one.
bool takes_input_rms(const Weight& w, int64_t n);

}  // namespace sparrow::kernels::macko_warp_row
