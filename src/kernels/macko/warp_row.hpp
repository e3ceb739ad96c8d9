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
  static constexpr int kStepsInFlight = 4;             // steps loaded before the first is used
  static constexpr int kXSharedBudget = 96 * 1024;     // bytes of X^T a block may stage
};

struct LaunchPlan {
  int64_t blocks = 0;     // persistent: each warp then strides over an equal number of rows
  bool x_shared = false;  // X^T staged in shared memory (else gathered through L1)
  int smem_bytes = 0;
};

// Bytes of X^T (K x nb elements of es bytes) a block stages in shared memory, or 0 when that
// exceeds kXSharedBudget or the device's per-block limit (X is then gathered through L1).
int x_shared_bytes(int64_t k, int nb, int es, int smem_per_block);

// Grid for M rows when `resident_blocks_per_sm` blocks of the chosen instance fit an SM (from the
// occupancy calculator): one wave, with the same number of rows for every warp.
LaunchPlan plan(int64_t m, int sm_count, int resident_blocks_per_sm, int smem_bytes);

Status run(const Problem& p, Stream stream);

}  // namespace sparrow::kernels::macko_warp_row
