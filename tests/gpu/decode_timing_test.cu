// A quick timing of the decode kernels against cuBLAS, for the kernel author's notes
// (bench/NOTES-decode.md); the official numbers come from `sparrow bench`. Runs only when
// SPARROW_DECODE_TIMING=1 (it takes a while), e.g.
//   SPARROW_DECODE_TIMING=1 sparrow_gpu_tests --gtest_filter='DecodeTiming.*'
// Protocol as in DESIGN.md: weights rotated over >= 150 MB of copies (3x the H100's 50 MB L2),
// every candidate captured in a CUDA graph that calls it once per copy, CUDA events around each
// replay, median of 50 replays; floor = storage bytes / measured streaming-read bandwidth.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

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

constexpr size_t kRotateBytes = 150u << 20;

__global__ void read_kernel(const uint4* p, size_t n, unsigned* sink) {
  uint32_t acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const uint4 v = p[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u) *sink = acc;  // keeps the loads; practically never true
}

double read_bandwidth_gbs() {
  const size_t bytes = size_t(1) << 30;
  void* p = nullptr;
  unsigned* sink = nullptr;
  cudaMalloc(&p, bytes);
  cudaMalloc(&sink, 4);
  cudaMemset(p, 1, bytes);
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const double us = test::time_rotated(1, [&](int, cudaStream_t s) {
    read_kernel<<<sms * 4, 512, 0, s>>>(static_cast<const uint4*>(p), bytes / 16, sink);
  });
  cudaFree(p);
  cudaFree(sink);
  return double(bytes) / us / 1e3;
}

}  // namespace

TEST(DecodeTiming, KernelsVsCublas) {
  const char* on = std::getenv("SPARROW_DECODE_TIMING");
  if (!on || std::string(on) != "1") GTEST_SKIP() << "set SPARROW_DECODE_TIMING=1 to run";
  const double bw = read_bandwidth_gbs();
  std::printf("streaming read bandwidth: %.0f GB/s\n", bw);
  cublasHandle_t h;
  ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  std::printf("%-15s %6s %6s %3s %5s %3s %10s %9s %8s %7s %8s\n", "kernel", "M", "K", "N", "spars", "pat",
              "bytes", "us", "GB/s", "%floor", "vs cuBLAS");
  const std::pair<int64_t, int64_t> shapes[] = {{4096, 4096}, {11008, 4096}, {4096, 11008}};
  for (const auto& shape : shapes) {
    const int64_t m = shape.first, k = shape.second;
    for (int variant = 0; variant < 5; ++variant) {
      // random at 50/70/90 %, and magnitude (uneven rows) at 50/70 % on 11008 x 4096 only.
      const bool magnitude = variant >= 3;
      if (magnitude && m != 11008) continue;
      const double sp = magnitude ? (variant == 3 ? 0.5 : 0.7) : (variant == 0 ? 0.5 : variant == 1 ? 0.7 : 0.9);
      const HostMatrix hw = magnitude ? patterns::magnitude(DType::fp16, m, k, sp, 11)
                                      : patterns::random(DType::fp16, m, k, sp, 11);
      const char* pat = magnitude ? "mag" : "rnd";
      double cublas_us[3] = {0, 0, 0};
      for (const char* name : {"cublas", "dense.gemv", "macko.warp_row", "tca_bme.decode",
                               "csr.vector"}) {
        const bool is_cublas = std::string(name) == "cublas";
        // SPARROW_DECODE_TIMING_ONLY=<kernel name>: time only that kernel (and cuBLAS).
        const char* only = std::getenv("SPARROW_DECODE_TIMING_ONLY");
        if (!is_cublas && only && *only && std::string(only) != name) continue;
        const kernels::KernelInfo* ki = is_cublas ? nullptr : kernels::find_kernel(name);
        const Format f = is_cublas ? Format::dense : ki->format;
        auto enc = encode(f, hw.view());
        ASSERT_TRUE(enc.ok()) << enc.status().to_string();
        const size_t bytes = storage_bytes(enc.value());
        const int copies = int(std::max<size_t>(3, (kRotateBytes + bytes - 1) / bytes));
        std::vector<Weight> dws;
        for (int c = 0; c < copies; ++c) {
          auto dw = to_device(enc.value());
          ASSERT_TRUE(dw.ok());
          dws.push_back(std::move(dw).value());
        }
        for (int ni = 0; ni < 3; ++ni) {
          const int n = ni == 0 ? 1 : ni == 1 ? 8 : 16;
          test::DeviceMatrix x =
              test::DeviceMatrix::upload(patterns::dense_random(DType::fp16, n, k, 12));
          test::DeviceMatrix y = test::DeviceMatrix::alloc(DType::fp16, n, m);
          double us;
          if (is_cublas) {
            const float alpha = 1.f, beta = 0.f;
            us = test::time_rotated(copies, [&](int c, cudaStream_t s) {
              const auto& dm = std::get<dense::Matrix>(dws[c]);
              cublasSetStream(h, s);
              cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, int(m), n, int(k), &alpha,
                           dm.values.data(), CUDA_R_16F, int(dm.ld), x.view.data, CUDA_R_16F,
                           int(k), &beta, y.view.data, CUDA_R_16F, int(m), CUBLAS_COMPUTE_32F,
                           CUBLAS_GEMM_DEFAULT);
            });
            cublas_us[ni] = us;
          } else {
            us = test::time_rotated(copies, [&](int c, cudaStream_t s) {
              const Status st = ki->run(kernels::Problem{dws[c], x.view, y.view, {}}, s);
              if (!st.ok()) std::printf("%s: %s\n", name, st.to_string().c_str());
            });
          }
          const double floor_us = double(bytes) / bw / 1e3;
          std::printf("%-15s %6lld %6lld %3d %5.2f %3s %10zu %9.2f %8.0f %6.0f%% %8.2fx\n", name,
                      (long long)m, (long long)k, n, sp, pat, bytes, us, double(bytes) / us / 1e3,
                      100.0 * floor_us / us, cublas_us[ni] / us);
          std::fflush(stdout);
        }
      }
    }
  }
  cublasDestroy(h);
}
