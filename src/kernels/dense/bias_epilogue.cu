// The bias step of dense.cublas. cuBLAS's GemmEx has no bias epilogue, so Y is first set to (or
// increased by) the bias row and the GEMM then adds X * W^T with beta = 1. One tiny kernel keeps
// the call graph-capturable (no host work, no allocation).
#include <cuda_bf16.h>
#include <algorithm>
#include <cuda_fp16.h>

#include "core/cuda_check.hpp"
#include "kernels/dense/cublas.hpp"

namespace sparrow::kernels::detail {

namespace {

__device__ inline float to_float(__half v) { return __half2float(v); }
__device__ inline float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ inline float to_float(float v) { return v; }
template <class T> __device__ inline T from_float(float v);
template <> __device__ inline __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <> __device__ inline float from_float<float>(float v) { return v; }

// One thread per element of Y (N x M, leading dimension ld); grid-stride over the flat index.
template <class T>
__global__ void fill_bias_rows_kernel(T* y, const T* bias, int64_t n, int64_t m, int64_t ld,
                                      bool overwrite) {
  const int64_t total = n * m;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / m, c = i - r * m;
    const float b = to_float(bias[c]);
    T& out = y[r * ld + c];
    out = overwrite ? from_float<T>(b) : from_float<T>(to_float(out) + b);
  }
}

template <class T>
Status launch(const MatrixView& y, const void* bias, bool overwrite, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const int64_t total = y.rows * y.cols;
  const int blocks = int(std::min<int64_t>((total + kThreads - 1) / kThreads, 4096));
  fill_bias_rows_kernel<T><<<blocks, kThreads, 0, stream>>>(
      static_cast<T*>(y.data), static_cast<const T*>(bias), y.rows, y.cols, y.ld, overwrite);
  SPARROW_CUDA_CHECK_LAUNCH("fill_bias_rows");
  return Status::success();
}

}  // namespace

Status fill_bias_rows(const MatrixView& y, const void* bias, bool overwrite, Stream stream) {
  switch (y.dtype) {
    case DType::fp16: return launch<__half>(y, bias, overwrite, stream);
    case DType::bf16: return launch<__nv_bfloat16>(y, bias, overwrite, stream);
    case DType::fp32: return launch<float>(y, bias, overwrite, stream);
  }
  return invalid_argument("fill_bias_rows: unknown dtype");
}

}  // namespace sparrow::kernels::detail
