// csr.vector: Y = X * W^T for a CSR weight, a warp (or 2 or 4, pieces) per row, 16-byte loads of values and column
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

// Blocks for `rows` rows split into `pieces` warps each: ceil(rows * pieces / kWarpsPerBlock).
int64_t blocks_for(int64_t rows, int pieces = 1);
// Warps per row: `requested` when it is 1, 2 or 4 (SPARROW_CSR_PIECES, an experiment knob);
// else the most of 4, 2 with which every row's warps fit the GPU's `resident_warps` at once;
// else, for uneven rows (the longest >= 1.5x the average), 4 for several `tokens`, and at one
// token 4 or 2 where the average row has that many 256-entry steps; else 1. Measured on the
// H100: bench/NOTES-decode.md, session 40.
int pieces_for(int64_t rows, int64_t nnz, int64_t max_row_nnz, int64_t resident_warps,
               int tokens, int requested = 0);
// SPARROW_CSR_PIECES (read once; 0 when unset).
int pieces_override();

Status run(const Problem& p, Stream stream);

}  // namespace sparrow::kernels::csr_vector
