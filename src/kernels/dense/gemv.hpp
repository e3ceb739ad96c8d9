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
  // Warps of a block, splitting K between them. 12: 4096-row weights (256 blocks) get 23 warps per
  // SM in one wave (74 registers: 24 resident); 8 gave them 15 (4096x4096 N = 8: 14.5 -> 14.0 µs),
  // 16 a second wave (15.0 µs at N = 1). Session 6, bench/NOTES-decode.md.
  static constexpr int kMaxWarps = 12;
  static constexpr int kTokensPerPass = 16;   // two mma N tiles; more tokens run as more passes
  // ~32 warps per SM in total. Measured (bench/NOTES-decode.md): sizing blocks for exactly one
  // wave of resident warps instead (3 warps per block on 11008 rows) was 3 % slower.
  static constexpr int kTargetWarpsPerSm = 32;
};

struct LaunchPlan {
  int64_t blocks = 0;  // one per 16 * m_tiles rows of W
  int warps = 0;       // warps per block (K split)
};

// Launch shape for an M x K weight (ld = K rounded up to 8), m_tiles 16-row tiles per block, on
// a device with `sm_count` SMs: ~kTargetWarpsPerSm warps per SM, no more warps per block than
// there are K steps to share.
LaunchPlan plan(int64_t m, int64_t ld, int sm_count, int m_tiles);

Status run(const Problem& p, Stream stream);
// dense.gemv takes MatmulOptions::input_rms at every N: each block reads all of X for its dot
// products and sums the squares of what it reads on the way.
bool takes_input_rms(const Weight& w, int64_t n);

}  // namespace sparrow::kernels::dense_gemv
