// The token-count buckets the CUDA-core decode kernels (csr.vector, macko.warp_row) are built
// for. A kernel instance for bucket B keeps B accumulators per lane and runs any n <= B tokens
// (loads for tokens >= n are skipped); more than 16 tokens run as further passes of 16.
#pragma once

#include <cstdint>

namespace sparrow::kernels {

constexpr int kMaxTokensPerPass = 16;

// 1 -> 1, 2..4 -> 4, 5..8 -> 8, 9..16 -> 16 (callers split n > 16 into passes first).
constexpr int token_bucket(int64_t n) { return n <= 1 ? 1 : n <= 4 ? 4 : n <= 8 ? 8 : 16; }

}  // namespace sparrow::kernels
