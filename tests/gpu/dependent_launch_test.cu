// Programmatic dependent launch (kernels/dependent_launch.cuh): a kernel launched with it may
// start while the previous kernel runs, so one that reads its input before waiting reads stale
// data. Here the previous kernel lets the next one launch at once, spins for ~20 µs and only then
// writes X; X holds NaN before that. A matmul (dependent_launch) or engine op that gathered X
// early would see the NaN. On GPUs without PDL (before sm_90) the same test runs as ordinary
// stream order and still passes.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/gpu_ops.hpp"
#include "gpu/decode_kernel_checks.hpp"
#include "gpu/gpu_test_util.hpp"
#include "kernels/dependent_launch.cuh"
#include "kernels/device_info.hpp"
#include "kernels/kernel.hpp"
#include "sparrow/matmul.hpp"

using namespace sparrow;
using namespace sparrow::test;

namespace {

// Lets the next kernel launch, waits ~spin clocks, then copies n 16-bit values src -> dst.
__global__ void slow_producer(uint16_t* dst, const uint16_t* src, int64_t n, long long spin) {
  kernels::let_next_launch();
  const long long t0 = clock64();
  while (clock64() - t0 < spin) {
  }
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
}

// ~20 µs at the H100's clocks: long enough that a dependent kernel's blocks are resident and
// running before X is written.
constexpr long long kSpinClocks = 40000;

cudaError_t produce_late(void* dst, const void* src, int64_t n, cudaStream_t s) {
  return kernels::launch_kernel(true, slow_producer, dim3(1), dim3(256), 0, s,
                                static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), n,
                                kSpinClocks);
}

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

}  // namespace

TEST(DependentLaunch, MatmulWaitsForTheKernelThatWritesX) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  std::printf("  dependent launch %s on this GPU\n",
              kernels::dependent_launch_enabled() ? "enabled" : "not available (ordinary order)");
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  struct Case {
    Format format;
    int64_t rows, cols;
    double sparsity;
    const char* pattern;
    int64_t tokens;
    const char* kernel = nullptr;  // a named kernel instead of matmul's pick
  };
  // macko: a warp per row (50 %), half warps (95 %), uneven rows, and few long rows (row pieces);
  // 4 and 3 tokens (the row kernel with X^T in shared memory).
  // dense (dense.gemv, which loads its first weights before waiting): 1 and 8 tokens (matmul runs
  // it up to 8).
  const Case cases[] = {{Format::macko, 3001, 4099, 0.5, "random", 1},
                        {Format::macko, 3001, 4099, 0.95, "random", 1},
                        {Format::macko, 2005, 3003, 0.7, "magnitude", 1},
                        {Format::macko, 300, 20011, 0.5, "random", 1},
                        {Format::macko, 3001, 4099, 0.7, "magnitude", 4},
                        {Format::macko, 1000, 4099, 0.5, "random", 3},
                        {Format::dense, 3001, 4099, 0.0, "random", 1},
                        {Format::dense, 1003, 4096, 0.0, "random", 8},
                        // tca_bme: the one-token kernel (N = 1 on few groups), the streaming
                        // kernel with one and two n8 tiles (N = 2, 8, 13), tca_bme.mma (N = 40).
                        {Format::tca_bme, 3001, 4099, 0.5, "random", 1, "tca_bme.decode"},
                        {Format::tca_bme, 3001, 4099, 0.7, "magnitude", 2, "tca_bme.decode"},
                        {Format::tca_bme, 1003, 4096, 0.5, "random", 8, "tca_bme.decode"},
                        {Format::tca_bme, 1003, 4099, 0.9, "random", 13, "tca_bme.decode"},
                        {Format::tca_bme, 1003, 4099, 0.5, "random", 40, "tca_bme.mma"}};
  uint64_t seed = 900;
  for (const Case& c : cases) {
    for (DType t : {DType::fp16, DType::bf16}) {
      const std::string what = std::string(format_name(c.format)) + " " + dtype_name(t) + " " +
                               std::to_string(c.rows) + "x" + std::to_string(c.cols) + " " +
                               c.pattern + " " + std::to_string(c.sparsity) + " N=" +
                               std::to_string(c.tokens) + (c.kernel ? std::string(" ") + c.kernel : "");
      const HostMatrix hw = make_weight(t, c.pattern, c.rows, c.cols, c.sparsity, seed);
      auto hostw = encode(c.format, hw.view());
      ASSERT_TRUE(hostw.ok()) << hostw.status().to_string();
      auto dw = to_device(hostw.value());
      ASSERT_TRUE(dw.ok()) << dw.status().to_string();
      const HostMatrix x = patterns::dense_random(t, c.tokens, c.cols, seed + 1);
      const DeviceMatrix src = DeviceMatrix::upload(x);
      DeviceMatrix dx = DeviceMatrix::alloc(t, c.tokens, c.cols);
      DeviceMatrix dy = DeviceMatrix::alloc(t, c.tokens, c.rows);
      dx.poison();
      dy.poison();
      CUDA_OK(cudaDeviceSynchronize());
      CUDA_OK(produce_late(dx.view.data, src.view.data, c.tokens * c.cols, s));
      MatmulOptions opt;
      opt.dependent_launch = true;
      const kernels::KernelInfo* k = c.kernel ? kernels::find_kernel(c.kernel) : nullptr;
      if (c.kernel) ASSERT_NE(k, nullptr) << c.kernel;
      const Status st = k ? k->run(kernels::Problem{dw.value(), dx.view, dy.view, opt}, s)
                          : matmul(dy.view, dw.value(), dx.view, s, opt);
      ASSERT_TRUE(st.ok()) << what << ": " << st.to_string();
      CUDA_OK(cudaStreamSynchronize(s));
      auto ref = reference::matmul_f64(hostw.value(), x.view());
      ASSERT_TRUE(ref.ok());
      const HostMatrix y = dy.download();
      EXPECT_LE(reference::normalized_error(y.view(), ref.value()), tolerance(t)) << what;
      seed += 10;
    }
  }
  cudaStreamDestroy(s);
}

// The engine's element-wise kernels start with begin_dependent(): rms_norm right after a late
// producer of its input.
TEST(DependentLaunch, RmsNormWaitsForTheKernelThatWritesItsInput) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const int64_t hidden = 4099;
  for (DType t : {DType::fp16, DType::bf16}) {
    const HostMatrix x = patterns::dense_random(t, 1, hidden, 31);
    const HostMatrix wh = patterns::dense_random(DType::fp32, 1, hidden, 32);
    const DeviceMatrix src = DeviceMatrix::upload(x), w = DeviceMatrix::upload(wh);
    DeviceMatrix dx = DeviceMatrix::alloc(t, 1, hidden), out = DeviceMatrix::alloc(t, 1, hidden);
    dx.poison();
    out.poison();
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(produce_late(dx.view.data, src.view.data, hidden, s));
    const Status st = engine::gpu::rms_norm(dx.view.data, static_cast<const float*>(w.view.data),
                                            1e-5f, out.view.data, 1, hidden, t, s);
    ASSERT_TRUE(st.ok()) << st.to_string();
    CUDA_OK(cudaStreamSynchronize(s));
    // Reference in double, rounded as the kernel rounds (normalise, round, scale).
    double ss = 0;
    for (int64_t i = 0; i < hidden; ++i) ss += double(x.at(0, i)) * x.at(0, i);
    const double inv = 1.0 / std::sqrt(ss / double(hidden) + 1e-5);
    std::vector<double> ref(static_cast<size_t>(hidden), 0.0);
    for (int64_t i = 0; i < hidden; ++i) ref[size_t(i)] = double(wh.at(0, i)) * x.at(0, i) * inv;
    const HostMatrix y = out.download();
    EXPECT_LE(reference::normalized_error(y.view(), ref), 2 * tolerance(t)) << dtype_name(t);
  }
  cudaStreamDestroy(s);
}

// read_arrays (the SPARROW_ENGINE_READ_ONLY experiment) reads only weights before its wait, but it
// must still wait: a kernel after it waits only for read_arrays, so if read_arrays finished before
// the slow producer, the norm behind it would read X's NaN. Every plan: all bytes early, some,
// none, staged in shared memory, 1 or 8 blocks per SM. Also: bad arguments are refused.
TEST(DependentLaunch, ReadArraysKeepsTheChainInOrder) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const int64_t hidden = 4099;
  const DType t = DType::fp16;
  const HostMatrix x = patterns::dense_random(t, 1, hidden, 41);
  const HostMatrix gain = patterns::dense_random(DType::fp32, 1, hidden, 42);
  // Arrays of odd sizes (a tail that is not a multiple of 16 bytes), larger than what is staged.
  const HostMatrix w1 = patterns::dense_random(t, 3000, 333, 43);
  const HostMatrix w2 = patterns::dense_random(t, 1, 7, 44);
  const DeviceMatrix src = DeviceMatrix::upload(x), g = DeviceMatrix::upload(gain);
  const DeviceMatrix d1 = DeviceMatrix::upload(w1), d2 = DeviceMatrix::upload(w2);
  engine::gpu::ReadArrays a;
  a.data[0] = d1.view.data;
  a.bytes[0] = size_t(3000) * 333 * 2;
  a.data[1] = d2.view.data;
  a.bytes[1] = 7 * 2;
  a.count = 2;
  struct PlanCase {
    int blocks_per_sm;
    size_t early;
    bool shared;
  };
  for (const PlanCase pc : {PlanCase{8, SIZE_MAX, false}, PlanCase{1, SIZE_MAX, false},
                            PlanCase{1, 0, false}, PlanCase{2, 4096, false},
                            PlanCase{1, 16384, true}, PlanCase{4, 16384, true}}) {
    engine::gpu::ReadPlan plan;
    plan.blocks_per_sm = pc.blocks_per_sm;
    plan.early_bytes_per_sm = pc.early;
    plan.stage_in_shared = pc.shared;
    const std::string early = pc.early == SIZE_MAX ? "all" : std::to_string(pc.early);
    const std::string what = std::to_string(pc.blocks_per_sm) + " blocks/SM, early " + early +
                             (pc.shared ? ", shared" : "");
    DeviceMatrix dx = DeviceMatrix::alloc(t, 1, hidden), out = DeviceMatrix::alloc(t, 1, hidden);
    dx.poison();
    out.poison();
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(produce_late(dx.view.data, src.view.data, hidden, s));
    const Status st = engine::gpu::read_arrays(a, plan, s);
    ASSERT_TRUE(st.ok()) << what << ": " << st.to_string();
    const Status norm = engine::gpu::rms_norm(dx.view.data, static_cast<const float*>(g.view.data),
                                              1e-5f, out.view.data, 1, hidden, t, s);
    ASSERT_TRUE(norm.ok()) << norm.to_string();
    CUDA_OK(cudaStreamSynchronize(s));
    const HostMatrix y = out.download();
    for (int64_t i = 0; i < hidden; ++i)
      ASSERT_TRUE(std::isfinite(y.at(0, i)))
          << what << ": the norm after read_arrays read X before it was written (" << i << ")";
  }

  engine::gpu::ReadArrays bad = a;
  bad.count = engine::gpu::kMaxReadArrays + 1;
  EXPECT_EQ(engine::gpu::read_arrays(bad, {}, s).code(), Code::invalid_argument);
  bad = a;
  bad.data[1] = nullptr;
  EXPECT_EQ(engine::gpu::read_arrays(bad, {}, s).code(), Code::invalid_argument);
  engine::gpu::ReadPlan plan;
  plan.blocks_per_sm = 9;
  EXPECT_EQ(engine::gpu::read_arrays(a, plan, s).code(), Code::invalid_argument);
  plan = {};
  plan.stage_in_shared = true;  // every byte cannot be staged
  EXPECT_EQ(engine::gpu::read_arrays(a, plan, s).code(), Code::invalid_argument);
  plan.early_bytes_per_sm = size_t(1) << 30;  // more than a block's shared memory
  EXPECT_EQ(engine::gpu::read_arrays(a, plan, s).code(), Code::invalid_argument);
  cudaStreamDestroy(s);
}
