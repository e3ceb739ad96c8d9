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
  // Device scratch (16-byte aligned) for the kernels that expand a compressed weight to dense and
  // run cuBLAS on it (<format>.expand_cublas, for prefill-sized N). Without one, or with less than
  // a whole expanded W (M x round_up(K, 8) elements), matmul never picks them.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  // Programmatic dependent launch (sm_90+): the kernel may start while the previous kernel on
  // `stream` still runs and read the weight's bytes early, touching X, Y and the bias only after
  // that kernel has finished. Hides launch and first-load latency in chains of short kernels (an
  // engine's decode step). Set it only when no kernel right before the call writes the weight.
  // Kernels without a dependent-launch path ignore it; SPARROW_PDL=0 turns it off everywhere. It
  // also picks a dense weight's kernel as measured under it (dense.gemv up to 8 tokens; a plain
  // launch takes cuBLAS on shapes where dense.gemv measured slower plainly) and leaves out
  // kernels the engine measured slower under it than plain runs predicted (tca_bme.mma at N <= 8).
  bool dependent_launch = false;
  // RMSNorm of X inside the matmul: Y = diag(1 / rms(X)) * X * W^T with rms(x) =
  // sqrt(mean(x^2) + rms_eps) over each row's K elements, i.e. the matmul of RMSNorm(X) when the
  // norm's gain is already folded into W's columns (scale_columns). It saves a decode step the
  // separate norm kernel. Only some kernels take it (matmul_takes_input_rms); with it matmul
  // runs the fastest measured kernel that does unless another measured more than 1.1x faster,
  // and refuses it with unsupported where the kernel it would run does not take it.
  bool input_rms = false;
  float rms_eps = 0.0f;  // >= 0
  // SwiGLU of a stacked [gate; up] weight inside the matmul (W has M = 2F rows, gate rows first):
  // Y (N x F) = silu(X * W[0:F]^T) * (X * W[F:2F]^T) element-wise, each half rounded to Y's dtype
  // before the product as a separate matmul and SwiGLU kernel would. It saves a decode step the
  // separate SwiGLU kernel. Only some kernels take it (matmul_takes_output_swiglu); the others,
  // and bias or accumulate with it, are refused before anything runs.
  bool output_swiglu = false;
};

// W on the device (to_device), X (N x K) and Y (N x M) device views of W's dtype. Asynchronous on
// `stream`, no allocation, no host synchronisation, capturable in a CUDA graph. Bad arguments
// (null or element-misaligned pointers, shape or dtype mismatch, a host weight) return
// invalid_argument before anything is launched. The workspace, when given, must stay untouched by
// other work on other streams until the call has finished on `stream`.
Status matmul(const MatrixView& y, const Weight& w, const ConstMatrixView& x, Stream stream,
              const MatmulOptions& opt = {});

// Whether matmul, asked for MatmulOptions::input_rms with these options otherwise, runs a kernel
// that takes it for this weight at N = n (host-side, no GPU needed): dense.gemv, tca_bme.decode, and
// macko.warp_row where it runs its row kernels (N = 1; 2..4 on K <= 8192; 5..8 there too for
// weights with >= 64 rows per SM at density >= 0.25, the SM count of the current GPU, or one
// without a GPU).
bool matmul_takes_input_rms(const Weight& w, int64_t n, const MatmulOptions& opt = {});

// Whether matmul, asked for MatmulOptions::output_swiglu with these options otherwise, runs a
// kernel that takes it for this weight at N = n (host-side, no GPU needed): dense.gemv, for a
// weight with an even number of rows.
bool matmul_takes_output_swiglu(const Weight& w, int64_t n, const MatmulOptions& opt = {});

}  // namespace sparrow
