// sparrow::matmul: Y = X * W^T on the GPU for a weight in any format.
#pragma once

#include "sparrow/matrix.hpp"
#include "sparrow/weight.hpp"

struct CUstream_st;

namespace sparrow {

using Stream = CUstream_st*;  // a cudaStream_t; nullptr is the legacy default stream

struct MatmulOptions {
  const void* bias = nullptr;  // (M) on the device, same dtype as Y, or null
  bool accumulate = false;     // Y += X * W^T
};

// W on the device (to_device), X (N x K) and Y (N x M) device views of W's dtype. Asynchronous on
// `stream`, no allocation, no host synchronisation, capturable in a CUDA graph. Bad arguments
// (null or element-misaligned pointers, shape or dtype mismatch, a host weight) return
// invalid_argument before anything is launched.
Status matmul(const MatrixView& y, const Weight& w, const ConstMatrixView& x, Stream stream,
              const MatmulOptions& opt = {});

}  // namespace sparrow
