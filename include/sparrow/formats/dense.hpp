// dense: the uncompressed matrix, rows padded to a multiple of 8 elements so every row starts
// 16-byte aligned (vector loads in the GEMV kernel). The baseline every sparse format must beat.
#pragma once

#include "sparrow/formats/common.hpp"

namespace sparrow::dense {

constexpr int64_t kRowAlign = 8;  // elements

struct Matrix {
  Shape shape;
  int64_t ld = 0;          // round_up(cols, kRowAlign)
  Buffer<uint8_t> values;  // (rows, ld) row-major, dtype elements, padding elements are 0

  size_t storage_bytes() const { return values.bytes(); }
};

Result<Matrix> encode(const ConstMatrixView& w);  // fp16, bf16 or fp32
Result<HostMatrix> decode(const Matrix& m);
Status validate(const Matrix& m);

}  // namespace sparrow::dense
