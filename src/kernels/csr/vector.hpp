// csr.vector: Y = X * W^T for a CSR weight, a warp per row, 16-byte loads of values and column
// indices, fp16 / bf16 / fp32 values, 16- or 32-bit columns, N = 1..16 per pass (any N).
// The simple baseline: X is gathered through L1. See docs/kernels.md ("csr.vector").
#pragma once

#include <cstdint>

#include "kernels/kernel.hpp"

namespace sparrow::kernels::csr_vector {

struct Config {
  static constexpr int kWarpsPerBlock = 8;  // rows per block
  static constexpr int kChunk = 8;          // consecutive non-zeros a lane loads per step
};

int64_t blocks_for(int64_t rows);  // ceil(rows / kWarpsPerBlock)

Status run(const Problem& p, Stream stream);

}  // namespace sparrow::kernels::csr_vector
