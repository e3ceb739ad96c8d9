// dense.gemv: Y = X * W^T for a dense weight and few tokens (decode, N = 1..16), at the bandwidth
// floor. See docs/kernels.md ("dense.gemv") for the design.
#pragma once

#include <cstdint>

#include "kernels/kernel.hpp"

namespace sparrow::kernels::dense_gemv {

struct Config {
  static constexpr int kRowsPerBlock = 16;    // one mma.m16n8k16 M tile
  static constexpr int kStepK = 32;           // K elements a warp consumes per step (4 lanes x 8)
  static constexpr int kStepsInFlight = 4;    // steps whose loads a lane issues before any mma
  static constexpr int kMaxWarps = 8;         // warps of a block, splitting K between them
  static constexpr int kTokensPerPass = 16;   // two mma N tiles; more tokens run as more passes
  static constexpr int kTargetWarpsPerSm = 32;
};

struct LaunchPlan {
  int64_t blocks = 0;  // one per 16-row tile of W
  int warps = 0;       // warps per block (K split)
};

// Launch shape for an M x K weight (ld = K rounded up to 8) on a device with `sm_count` SMs:
// enough warps in total to keep ~kTargetWarpsPerSm warps per SM streaming, but no more warps per
// block than there are K steps to share.
LaunchPlan plan(int64_t m, int64_t ld, int sm_count);

Status run(const Problem& p, Stream stream);

}  // namespace sparrow::kernels::dense_gemv
