// A small timing harness for the tensor-core SpMM kernels against cuBLAS (the official one is
// `sparrow bench`). It lives with the GPU tests because bench/ is linked into the CLI; it runs only
// when SPARROW_TC_TIMING is set (to "quick" or "full"), and prints one line per (shape, N,
// sparsity, kernel).
//
// Protocol (DESIGN.md): cold L2 by rotating over copies of the weight totalling >= 150 MB (3x the
// 50 MB L2), one CUDA graph that launches once per copy, CUDA events around each replay, the
// median of 50 replays divided by the number of copies. cuBLAS GemmEx is timed the same way in
// the same run. The floor is the weight's storage bytes + X + Y over the measured copy bandwidth.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "gpu/gpu_test_util.hpp"
#include "gpu/rotated_timing.hpp"

using namespace sparrow;

namespace {

constexpr double kColdBytes = 150e6;

// Device-to-device copy bandwidth (bytes read + written per second), the floor's denominator.
double copy_bandwidth() {
  const size_t bytes = size_t(1) << 30;
  void *a = nullptr, *b = nullptr;
  cudaMalloc(&a, bytes);
  cudaMalloc(&b, bytes);
  cudaMemset(a, 1, bytes);
  const double us = test::time_rotated(1, [&](int, cudaStream_t s) {
    cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s);
  });
  cudaFree(a);
  cudaFree(b);
  return 2.0 * double(bytes) / (us * 1e-6);
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = s.find(',', start);
    const size_t end = comma == std::string::npos ? s.size() : comma;
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

struct Shape2 {
  int64_t m, k;
};

}  // namespace

TEST(TcSpmmTiming, VsCublas) {
  const char* mode = std::getenv("SPARROW_TC_TIMING");
  if (!mode) GTEST_SKIP() << "set SPARROW_TC_TIMING=quick|full to time";
  const bool full = std::string(mode) == "full";
  std::vector<Shape2> shapes = {{4096, 4096}, {11008, 4096}, {4096, 11008}};
  if (full) shapes.push_back({28672, 8192});
  std::vector<int64_t> ns = {8, 16, 32, 64, 128, 256, 512};
  std::vector<double> sparsities = {0.5, 0.7, 0.9};
  // Subsets for quick experiments: TC_SHAPES=4096x4096,11008x4096 TC_NS=8,32 TC_SP=0.5,0.9
  if (const char* e = std::getenv("TC_SHAPES")) {
    shapes.clear();
    for (const std::string& t : split_list(e)) {
      shapes.push_back({std::atol(t.c_str()), std::atol(t.c_str() + t.find('x') + 1)});
    }
  }
  if (const char* e = std::getenv("TC_NS")) {
    ns.clear();
    for (const std::string& t : split_list(e)) ns.push_back(std::atol(t.c_str()));
  }
  if (const char* e = std::getenv("TC_SP")) {
    sparsities.clear();
    for (const std::string& t : split_list(e)) sparsities.push_back(std::atof(t.c_str()));
  }
  const DType t = DType::fp16;
  const double bw = copy_bandwidth();
  std::printf("copy bandwidth (read+write): %.0f GB/s\n", bw / 1e9);
  std::printf("%-12s %5s %5s %-14s %9s %9s %7s %8s\n", "MxK", "N", "sp", "kernel", "us",
              "floor_us", "%floor", "vs_cublas");

  cublasHandle_t handle;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  for (const Shape2& sh : shapes) {
    const int64_t m = sh.m, k = sh.k;
    const size_t dense_bytes = size_t(m * k * 2);
    const int dense_copies = std::max(3, int(kColdBytes / double(dense_bytes)) + 1);
    std::vector<test::DeviceMatrix> wd;
    {
      HostMatrix wh = patterns::dense_random(t, m, k, 1);
      for (int c = 0; c < dense_copies; ++c) wd.push_back(test::DeviceMatrix::upload(wh));
    }
    const int64_t nmax = ns.back();
    HostMatrix xh = patterns::dense_random(t, nmax, k, 2);
    test::DeviceMatrix x = test::DeviceMatrix::upload(xh);
    test::DeviceMatrix y = test::DeviceMatrix::alloc(t, nmax, m);
    std::vector<double> cublas_us;
    for (int64_t n : ns) {
      const float alpha = 1.f, beta = 0.f;
      cublas_us.push_back(test::time_rotated(dense_copies, [&](int c, cudaStream_t s) {
        cublasSetStream(handle, s);
        cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, int(m), int(n), int(k), &alpha,
                     wd[c].view.data, CUDA_R_16F, int(k), x.view.data, CUDA_R_16F, int(k), &beta,
                     y.view.data, CUDA_R_16F, int(m), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      }));
      const double floor_us = double(dense_bytes + size_t(n * (k + m) * 2)) / bw * 1e6;
      std::printf("%5ldx%-6ld %5ld %5s %-14s %9.1f %9.1f %6.0f%% %8.2f\n", long(m), long(k),
                  long(n), "0", "dense.cublas", cublas_us.back(), floor_us,
                  100 * floor_us / cublas_us.back(), 1.0);
    }
    wd.clear();
    for (double sp : sparsities) {
      HostMatrix wh = patterns::random(t, m, k, sp, 3);
      for (Format f : {Format::tca_bme, Format::tiled_csl}) {
        auto w = encode(f, wh.view());
        if (!w.ok()) {
          std::printf("%s: %s\n", format_name(f), w.status().to_string().c_str());
          continue;
        }
        const size_t wbytes = storage_bytes(w.value());
        const int copies = std::max(3, int(kColdBytes / double(wbytes)) + 1);
        std::vector<Weight> dws;
        for (int c = 0; c < copies; ++c) dws.push_back(to_device(w.value()).value());
        const kernels::KernelInfo* info =
            kernels::find_kernel(f == Format::tca_bme ? "tca_bme.mma" : "tiled_csl.mma");
        ASSERT_NE(info, nullptr);
        for (size_t i = 0; i < ns.size(); ++i) {
          const int64_t n = ns[i];
          MatrixView yv{y.view.data, t, n, m, m};
          ConstMatrixView xv{x.view.data, t, n, k, k};
          Status st = Status::success();
          const double us = test::time_rotated(copies, [&](int c, cudaStream_t s) {
            Status r = info->run(kernels::Problem{dws[c], xv, yv, {}}, s);
            if (!r.ok()) st = r;
          });
          ASSERT_TRUE(st.ok()) << st.to_string();
          const double floor_us = double(wbytes + size_t(n * (k + m) * 2)) / bw * 1e6;
          std::printf("%5ldx%-6ld %5ld %5.2f %-14s %9.1f %9.1f %6.0f%% %8.2f\n", long(m), long(k),
                      long(n), sp, info->name, us, floor_us, 100 * floor_us / us,
                      cublas_us[i] / us);
        }
      }
    }
    std::fflush(stdout);
  }
  cublasDestroy(handle);
}
