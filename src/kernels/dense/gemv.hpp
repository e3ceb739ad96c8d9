// dense.gemv: Y = X * W^T for a dense weight and few tokens (decode, N = 1..16), at the bandwidth
// floor. See docs/kernels.md ("dense.gemv") for the design.
#pragma once

#include <cstdint>

#include "kernels/kernel.hpp"

namespace sparrow::kernels::dense_gemv {

struct Config {
  static constexpr int kRowsPerTile = 16;     // one mma.m16n8k16 M tile; a block has 1 or 2
  static constexpr int kStepK = 32;           // K elements a warp consumes per step (4 lanes x 8)
  static constexpr int kStepsInFlight = 4;    // steps whose loads a lane issues before any mma
  // Warps of a block, splitting K between them. One M tile (1..8 tokens, 73-79 registers: 24
  // warps per SM resident) always takes this many, two blocks per SM (16 gave 4096-row weights a
  // second wave, session 6). Wide blocks finish soonest, so the grid's last blocks leave SMs idle
  // for the shortest time: 12 warps ran 2-4 % faster than the ~32-warps-per-SM sizing below on
  // 12288..32000-row weights (28672x8192: 3 warps before, 1.7 waves) and the same elsewhere
  // (session 35, bench/NOTES-decode.md).
  static constexpr int kMaxWarps = 12;
  static constexpr int kTokensPerPass = 16;   // two mma N tiles; more tokens run as more passes
  // Two M tiles (9..16 tokens) take 90-98 registers, 21 warps per SM, so a 12-warp block would be
  // alone on its SM (measured 1.04-1.08x the time on 22016x4096 and 32000x4096): their blocks are
  // sized for ~32 warps per SM instead (22016 rows: 3 blocks of 7 warps).
  static constexpr int kTargetWarpsPerSm = 32;
};

struct LaunchPlan {
  int64_t blocks = 0;  // one per 16 * m_tiles rows of W
  int warps = 0;       // warps per block (K split)
};

// The sm_90 pipeline (gemv_bulk.cu): the copy engine streams each 16-row tile of W into shared
// memory in stages of kStageK columns (one bulk copy per row and stage, issued by a producer warp
// kMaxStages ahead at most), and kConsumerWarps warps feed the stages to the same mmas as the
// register kernel. The register kernel's warps hold their weight bytes in registers and have none
// in flight while they compute (ncu on the H200, session 47: 71 % of DRAM peak, 2.6 waves); here
// the bytes in flight depend on the stages only.
struct BulkConfig {
  static constexpr int kRows = 16;        // one mma M tile per block pass
  // Columns per stage: 2 KB of each row per bulk copy. 512-byte copies (256 columns) measured
  // ~20-25 GB/s per SM whatever the stages in flight (H200, session 48: 4096x11008 at 2.7 TB/s
  // with 2 or 8 stages, the consumers waiting on the copies 40 % of the time).
  static constexpr int kStageK = 1024;
  // Bytes between two rows of a stage: the 16-byte skew puts the 8 rows a warp's lds.128 reads
  // (lanes g = 0..7, 4 chunks each) on 8 different bank groups.
  static constexpr int kRowPitch = kStageK * 2 + 16;
  static constexpr int kStageBytes = kRows * kRowPitch;
  static constexpr int kMinStages = 2;
  static constexpr int kMaxStages = 6;
  // Stages of a launch whose tiles do not all fit one wave (blocks then loop over tiles).
  static constexpr int kLoopStages = 2;
  static constexpr int kConsumerWarps = 4;  // each takes 8 of a stage's 32 32-column steps
};

struct BulkPlan {
  int64_t blocks = 0;  // min(tiles, what is resident at once); a block loops over tiles
  int stages = 0;
};

// Launch shape of the pipeline for `tiles` 16-row tiles on `sm_count` SMs, blocks_per_sm[s] the
// resident blocks per SM with s stages (s = kMinStages..kMaxStages): the most stages with which
// every tile has its own resident block (all tiles stream at once, so no tail of a few blocks
// reading at their latency-bound rate), else kLoopStages stages and one wave of blocks looping over
// the tiles. stages_override (> 0) forces a stage count.
BulkPlan plan_bulk(int64_t tiles, int sm_count, const int (&blocks_per_sm)[BulkConfig::kMaxStages + 1],
                   int stages_override = 0);

// Which kernel runs: the rule (the pipeline on sm_90 and later where W is 16-byte aligned, else
// the register kernel), or one forced (tests; bulk falls back to registers below sm_90).
enum class Pipeline { automatic, registers, bulk };

// Launch shape for an M x K weight (ld = K rounded up to 8), m_tiles 16-row tiles per block, on
// a device with `sm_count` SMs: kMaxWarps warps per block for one tile, ~kTargetWarpsPerSm warps
// per SM for two; never more warps per block than there are K steps to share.
LaunchPlan plan(int64_t m, int64_t ld, int sm_count, int m_tiles);

// One launch of the pipeline (gemv_bulk.cu) for up to 16 tokens: W (m x k, row stride ldw, a
// multiple of 8, 16-byte aligned), X (n x k, ldx), Y (n x m, ldy), all of `dtype` (fp16 / bf16).
struct BulkPass {
  const void* w = nullptr;
  int64_t ldw = 0, m = 0, k = 0;
  const void* x = nullptr;
  int64_t ldx = 0;
  int n = 0;
  void* y = nullptr;
  int64_t ldy = 0;
  const void* bias = nullptr;
  bool accumulate = false;
  bool x_vec = false;  // X 16-byte aligned with ldx % 8 == 0
  bool rms = false;
  float rms_eps = 0.f;
  bool dependent = false;
};
Status launch_bulk(DType dtype, const BulkPass& pass, int sm_count, Stream stream);

Status run(const Problem& p, Stream stream);
Status run_with(const Problem& p, Stream stream, Pipeline pipeline);
// dense.gemv takes MatmulOptions::input_rms at every N: each block reads all of X for its dot
// products and sums the squares of what it reads on the way.
bool takes_input_rms(const Weight& w, int64_t n);

}  // namespace sparrow::kernels::dense_gemv
