// csr: compressed sparse rows. Column indices are 32-bit, or 16-bit when K <= 65536 (what
// IndexWidth::automatic picks), which takes the per-non-zero cost from 6 to 4 bytes in fp16.
//
//   row_ptr[i] .. row_ptr[i+1]   the non-zeros of row i, columns strictly increasing
//   col16 / col32                column of each non-zero (exactly one of the two is used)
//   values                       dtype elements (fp16, bf16 or fp32)
#pragma once

#include "sparrow/formats/common.hpp"

namespace sparrow::csr {

enum class IndexWidth : uint8_t { automatic, bits16, bits32 };

struct Matrix {
  Shape shape;
  int index_bits = 32;        // 16 or 32
  Buffer<uint32_t> row_ptr;   // (rows + 1)
  Buffer<uint16_t> col16;     // (nnz) when index_bits == 16
  Buffer<uint32_t> col32;     // (nnz) when index_bits == 32
  Buffer<uint8_t> values;     // (nnz) dtype elements
  // Derived from row_ptr (derive()), not stored in files: the longest row's non-zeros, which
  // csr.vector's launch rule reads on the host (row_ptr may live on the GPU).
  int64_t max_row_nnz = 0;

  int64_t nnz() const { return int64_t(values.size() / dtype_size(shape.dtype)); }
  size_t storage_bytes() const {
    return row_ptr.bytes() + col16.bytes() + col32.bytes() + values.bytes();
  }
};

Result<Matrix> encode(const ConstMatrixView& w, IndexWidth width = IndexWidth::automatic);
Result<HostMatrix> decode(const Matrix& m);
Status validate(const Matrix& m);
// Sets the derived field (max_row_nnz) from the host row_ptr (nothing for a device matrix). Safe
// on a malformed row_ptr; validate reports it.
void derive(Matrix& m);

}  // namespace sparrow::csr
