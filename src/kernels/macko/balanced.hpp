// macko.warp_row's entry-balanced one-token kernel (N = 1): every warp gets the same number of
// 256-entry steps, whatever the rows' lengths. Magnitude-pruned weights have uneven rows (on a
// 11008x4096 weight at 90 % the longest row is 6.5x the average), and a warp per row then waits
// for the longest rows. See balanced.cu for how a warp starts mid-row (macko::Matrix::step_index)
// and how split rows are summed (in order, in shared memory: deterministic).
#pragma once

#include <cstdint>

#include "kernels/kernel.hpp"

namespace sparrow::kernels::macko_balanced {

struct Config {
  static constexpr int kThreads = 256;       // 8 warps; a block's rows are split among them
  static constexpr int kMinBlocksPerSm = 6;  // 48 warps per SM, 40 registers (as the warp kernel)
  // A block's share of the steps is at least this many per warp (small weights get fewer blocks).
  static constexpr int64_t kMinStepsPerWarp = 2;
};

// Blocks of one launch: one wave (sm_count x kMinBlocksPerSm), fewer when the weight has fewer
// than kMinStepsPerWarp steps per warp of that wave; at least 1.
int64_t grid_blocks(int64_t used_entries, int sm_count);

// Whether the weight can run this kernel: a step index that matches row_ptr (macko::derive), and
// rows and columns that fit its 32-bit arithmetic.
bool supported(const Weight& w);

// Y = X * W^T for one token (N = 1) on a supported() macko weight; other N are refused. Honours
// MatmulOptions::dependent_launch.
Status run(const Problem& p, Stream stream);

}  // namespace sparrow::kernels::macko_balanced
