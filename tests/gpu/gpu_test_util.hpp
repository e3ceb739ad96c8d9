// Helpers for GPU tests: device matrices, NaN poisoning, and the one comparison every kernel test
// makes (kernel output vs the CPU reference in double).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "kernels/kernel.hpp"
#include "sparrow/patterns.hpp"
#include "sparrow/reference.hpp"
#include "sparrow/weight.hpp"

namespace sparrow::test {

// Normalised-error tolerances of a kernel vs the double reference. The output is rounded once to
// the dtype (relative half-ulp 2^-11 for fp16, 2^-8 for bf16) after fp32 accumulation.
inline double tolerance(DType t) { return t == DType::bf16 ? 8e-3 : 1e-3; }

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call << ": " << cudaGetErrorString(call)

// A device matrix with its own memory; `ld` may exceed cols to test strided views.
struct DeviceMatrix {
  std::shared_ptr<void> mem;
  MatrixView view;

  static DeviceMatrix alloc(DType t, int64_t rows, int64_t cols, int64_t ld = 0) {
    DeviceMatrix d;
    if (ld == 0) ld = cols;
    void* p = nullptr;
    const size_t bytes = size_t(rows * ld) * dtype_size(t);
    if (cudaMalloc(&p, bytes) != cudaSuccess) return d;
    d.mem = std::shared_ptr<void>(p, [](void* q) { cudaFree(q); });
    d.view = {p, t, rows, cols, ld};
    return d;
  }
  static DeviceMatrix upload(const HostMatrix& h, int64_t ld = 0) {
    DeviceMatrix d = alloc(h.dtype(), h.rows(), h.cols(), ld);
    const size_t es = dtype_size(h.dtype());
    cudaMemcpy2D(d.view.data, size_t(d.view.ld) * es, h.data(), size_t(h.cols()) * es,
                 size_t(h.cols()) * es, size_t(h.rows()), cudaMemcpyHostToDevice);
    return d;
  }
  // Every byte 0xFF: NaN in fp16, bf16 and fp32, so unwritten outputs show.
  void poison() const {
    cudaMemset(view.data, 0xFF, size_t(view.rows * view.ld) * dtype_size(view.dtype));
  }
  HostMatrix download() const {
    HostMatrix h(view.dtype, view.rows, view.cols);
    const size_t es = dtype_size(view.dtype);
    cudaMemcpy2D(h.data(), size_t(view.cols) * es, view.data, size_t(view.ld) * es,
                 size_t(view.cols) * es, size_t(view.rows), cudaMemcpyDeviceToHost);
    return h;
  }
};

// Gives `opt` the workspace kernel k needs for w (none for most kernels). `minimal`: the least the
// kernel accepts, so kernels that work in row bands run several bands on any M > 64; otherwise
// one pass. The buffer is poisoned (0xFF) on every call, so a kernel that reads scratch it did not
// write shows NaN; it is kept across calls and only grows: allocate before a graph capture.
inline void give_workspace(const kernels::KernelInfo& k, const Weight& w, MatmulOptions& opt,
                           bool minimal = true) {
  static void* buffer = nullptr;
  static size_t capacity = 0;
  const kernels::WorkspaceNeed need = kernels::workspace_need(k, w);
  const size_t bytes = minimal ? need.min : need.full;
  if (bytes == 0) return;
  if (bytes > capacity) {
    if (buffer) cudaFree(buffer);
    buffer = nullptr;
    capacity = 0;
    if (cudaMalloc(&buffer, bytes) != cudaSuccess) return;
    capacity = bytes;
  }
  cudaMemset(buffer, 0xFF, bytes);
  opt.workspace = buffer;
  opt.workspace_bytes = bytes;
}

struct KernelCheck {
  double error = 1e30;  // normalised error vs the double reference; infinity on NaN/Inf
  std::string failure;  // non-empty when the kernel or a CUDA call failed
};

// The eps of the input_rms checks (Llama's RMSNorm uses 1e-5 or 1e-6).
constexpr float kRmsEps = 1e-5f;

// Runs one kernel on W (host, encoded) with a fresh random X (N x K, seed), Y poisoned with NaN
// first, optional bias/accumulate, and compares with the CPU reference in double.
// `minimal_workspace`: the kernel's smallest workspace (expand_cublas in 64-row bands), else the
// one-pass size. `input_rms`: MatmulOptions::input_rms with kRmsEps, the reference likewise.
inline KernelCheck check_kernel(const kernels::KernelInfo& k, const Weight& host_w, int64_t n,
                                uint64_t seed, bool with_bias = false, bool accumulate = false,
                                bool minimal_workspace = true, bool input_rms = false) {
  KernelCheck out;
  const Shape& s = shape_of(host_w);
  HostMatrix x = patterns::dense_random(s.dtype, n, s.cols, seed);
  HostMatrix y0 = patterns::dense_random(s.dtype, n, s.rows, seed + 1);
  HostMatrix bias = patterns::dense_random(s.dtype, 1, s.rows, seed + 2);
  auto dw = to_device(host_w);
  if (!dw.ok()) {
    out.failure = dw.status().to_string();
    return out;
  }
  DeviceMatrix dx = DeviceMatrix::upload(x);
  DeviceMatrix dy = accumulate ? DeviceMatrix::upload(y0) : DeviceMatrix::alloc(s.dtype, n, s.rows);
  DeviceMatrix db = DeviceMatrix::upload(bias);
  if (!accumulate) dy.poison();
  MatmulOptions opt;
  opt.bias = with_bias ? db.view.data : nullptr;
  opt.accumulate = accumulate;
  opt.input_rms = input_rms;
  opt.rms_eps = kRmsEps;
  give_workspace(k, host_w, opt, minimal_workspace);
  Status st = k.run(kernels::Problem{dw.value(), dx.view, dy.view, opt}, nullptr);
  if (!st.ok()) {
    out.failure = st.to_string();
    return out;
  }
  const cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) {
    out.failure = std::string("kernel failed: ") + cudaGetErrorString(e);
    return out;
  }
  reference::Options ro;
  ro.bias = with_bias ? bias.data() : nullptr;
  ro.bias_dtype = s.dtype;
  ro.accumulate = accumulate;
  ro.input_rms = input_rms;
  ro.rms_eps = kRmsEps;
  const ConstMatrixView y0v = y0.view();
  auto ref = reference::matmul_f64(host_w, x.view(), ro, &y0v);
  if (!ref.ok()) {
    out.failure = ref.status().to_string();
    return out;
  }
  HostMatrix y = dy.download();
  out.error = reference::normalized_error(y.view(), ref.value());
  return out;
}

// EXPECT_TRUE(kernel_ok(check_kernel(...), dtype)) << "context";
inline ::testing::AssertionResult kernel_ok(const KernelCheck& c, DType t) {
  if (!c.failure.empty()) return ::testing::AssertionFailure() << c.failure;
  if (!(c.error <= tolerance(t))) {
    return ::testing::AssertionFailure()
           << "normalised error " << c.error << " > tolerance " << tolerance(t);
  }
  return ::testing::AssertionSuccess();
}

}  // namespace sparrow::test
