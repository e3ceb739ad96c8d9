// macko.warp_row: Y = X * W^T for a macko weight (CSR with 4-bit column deltas), MACKO's warp per
// row with 16-byte loads and shuffle prefix sums, extended to N = 1..16 tokens per pass so each
// decoded weight is used for every token. See docs/kernels.md ("macko.warp_row").
#pragma once

#include <cstdint>

#include "kernels/kernel.hpp"

namespace sparrow::kernels::macko_warp_row {

struct Config {
  static constexpr int kWarpsPerBlock = 16;
  static constexpr int kMaxBlocksPerSm = 4;            // 64 warps: the SM's limit
  static constexpr int kChunk = 8;                     // entries a lane decodes per step (16 B)
  static constexpr int kXSharedBudget = 96 * 1024;     // bytes of X^T a block may stage
};

struct LaunchPlan {
  int64_t blocks = 0;     // persistent: each warp then strides over rows
  bool x_shared = false;  // X^T staged in shared memory (else gathered through L1)
  int smem_bytes = 0;
};

// For M rows, K columns, token bucket nb (1, 4, 8, 16) and element size es, on a device with the
// given SM count and shared memory per block (opt-in) and per SM.
LaunchPlan plan(int64_t m, int64_t k, int nb, int es, int sm_count, int smem_per_block,
                int smem_per_sm);

Status run(const Problem& p, Stream stream);

}  // namespace sparrow::kernels::macko_warp_row
