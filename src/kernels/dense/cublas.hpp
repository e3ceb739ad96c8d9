// dense.cublas: Y = X * W^T (+ bias) (+ Y) through cublasGemmEx, fp16/bf16/fp32 in, fp32 compute.
// The comparison every other kernel is measured against, and the dense fallback of dispatch.
#pragma once

#include "kernels/kernel.hpp"

namespace sparrow::kernels {

// W dense on the device (rows padded, ld = round_up(K, 8)). Capturable in a CUDA graph: the
// cuBLAS handle is cached per device and thread with a pre-set workspace, nothing is allocated
// per call (the first call on a device/thread creates the handle: make it outside capture).
Status dense_cublas(const Problem& p, Stream stream);

// Creates the calling thread's handle for the current device now (so a later call can be
// captured). Idempotent.
Status dense_cublas_prepare();

namespace detail {
// Y = X * W^T (+ bias) (+ Y) for a dense row-major W (m x k, leading dimension ldw elements) of
// Y's dtype on the device: what dense.cublas runs, and the GEMM of the expand_cublas kernels.
Status cublas_gemm(const void* w, int64_t m, int64_t k, int64_t ldw, const ConstMatrixView& x,
                   const MatrixView& y, const MatmulOptions& opt, Stream stream);

// Y[n, m] = bias[m] (overwrite) or Y[n, m] += bias[m] on `stream`; bias_epilogue.cu.
Status fill_bias_rows(const MatrixView& y, const void* bias, bool overwrite, Stream stream);
}  // namespace detail

}  // namespace sparrow::kernels
