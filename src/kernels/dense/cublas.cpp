#include "kernels/dense/cublas.hpp"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>
#include <unordered_map>

#include "core/cuda_check.hpp"

namespace sparrow::kernels {

namespace {

// cuBLAS wants a workspace it can keep across calls; with one set explicitly it never allocates
// during a call, which is what makes GemmEx capturable in a CUDA graph. 32 MiB is what NVIDIA
// recommends for Hopper; smaller skinny GEMMs use far less.
constexpr size_t kWorkspaceBytes = size_t(32) << 20;

Status cublas_status(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::success();
  return {Code::cuda_error, std::string(what) + ": " + cublasGetStatusString(s)};
}

struct CachedHandle {
  cublasHandle_t handle = nullptr;
  void* workspace = nullptr;
};

// One handle per (thread, device): cuBLAS handles are not safe to share between threads that set
// different streams. They are deliberately never destroyed: destroying them in a thread_local or
// static destructor can run after the CUDA runtime has shut down at process exit.
Result<cublasHandle_t> handle_for_current_device() {
  thread_local std::unordered_map<int, CachedHandle> handles;
  int device = 0;
  SPARROW_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  auto it = handles.find(device);
  if (it != handles.end()) return it->second.handle;

  // Creating a handle or allocating inside a stream capture would break the capture.
  CachedHandle h;
  SPARROW_RETURN_IF_ERROR(cublas_status(cublasCreate(&h.handle), "cublasCreate"));
  SPARROW_CUDA_RETURN_IF_ERROR(cudaMalloc(&h.workspace, kWorkspaceBytes));
  SPARROW_RETURN_IF_ERROR(cublas_status(
      cublasSetWorkspace(h.handle, h.workspace, kWorkspaceBytes), "cublasSetWorkspace"));
  handles.emplace(device, h);
  return h.handle;
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::fp16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::fp32: return CUDA_R_32F;
  }
  return CUDA_R_32F;
}

}  // namespace

Status dense_cublas_prepare() { return handle_for_current_device().status(); }

Status detail::cublas_gemm(const void* w, int64_t M, int64_t K, int64_t ldw,
                           const ConstMatrixView& x, const MatrixView& y,
                           const MatmulOptions& opt, Stream stream) {
  SPARROW_ASSIGN_OR_RETURN(cublasHandle_t handle, handle_for_current_device());
  SPARROW_RETURN_IF_ERROR(cublas_status(cublasSetStream(handle, stream), "cublasSetStream"));

  const int64_t N = x.rows;
  if (M > INT32_MAX || K > INT32_MAX || N > INT32_MAX || ldw > INT32_MAX || x.ld > INT32_MAX ||
      y.ld > INT32_MAX) {
    return unsupported("cuBLAS: a dimension exceeds cuBLAS's 32-bit sizes");
  }

  float beta = opt.accumulate ? 1.0f : 0.0f;
  if (opt.bias) {
    SPARROW_RETURN_IF_ERROR(
        detail::fill_bias_rows(y, opt.bias, /*overwrite=*/!opt.accumulate, stream));
    beta = 1.0f;
  }
  const float alpha = 1.0f;
  const cudaDataType_t t = cuda_type(y.dtype);
  // Row-major Y (N x M) is column-major Y^T (M x N) = W * X^T. Row-major W (M x K, ld) read as
  // column-major is W^T (K x M), hence op T; row-major X (N x K) read column-major is X^T (K x N).
  return cublas_status(
      cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, int(M), int(N), int(K), &alpha, w, t,
                   int(ldw), x.data, t, int(x.ld), &beta, y.data, t, int(y.ld),
                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      "cublasGemmEx");
}

Status dense_cublas(const Problem& p, Stream stream) {
  SPARROW_RETURN_IF_ERROR(check_problem(p, Format::dense));
  const auto& w = std::get<dense::Matrix>(p.w);
  return detail::cublas_gemm(w.values.data(), w.shape.rows, w.shape.cols, w.ld, p.x, p.y, p.opt,
                             stream);
}

}  // namespace sparrow::kernels
