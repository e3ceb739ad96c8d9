// gpu::stamp (SPARROW_ENGINE_STAMPS): a stamp waits for the kernel before it, so the interval
// between two stamps around a kernel covers that kernel, and stamps come out in order.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "engine/gpu_ops.hpp"

using namespace sparrow;

TEST(EngineStamp, StampsWaitForThePreviousKernelAndKeepOrder) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) GTEST_SKIP() << "no GPU";
  // swiglu over 32 M elements reads and writes ~200 MB: tens of µs on any GPU we build for.
  const int64_t cols = int64_t(1) << 25;
  void *gate = nullptr, *up = nullptr, *out = nullptr;
  uint64_t* slots = nullptr;
  ASSERT_EQ(cudaMalloc(&gate, size_t(cols) * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&up, size_t(cols) * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&out, size_t(cols) * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&slots, 4 * sizeof(uint64_t)), cudaSuccess);
  cudaMemset(gate, 0x3c, size_t(cols) * 2);  // 0x3c3c as fp16: ~1.06, never NaN
  cudaMemset(up, 0x3c, size_t(cols) * 2);
  cudaMemset(slots, 0, 4 * sizeof(uint64_t));
  cudaStream_t s;
  cudaStreamCreate(&s);
  // Warm-up: the first launch of each kernel pays for loading it.
  ASSERT_TRUE(engine::gpu::stamp(slots, 3, s).ok());
  ASSERT_TRUE(engine::gpu::swiglu(out, gate, up, 1, cols, cols, DType::fp16, s).ok());
  ASSERT_TRUE(engine::gpu::stamp(slots, 0, s).ok());
  ASSERT_TRUE(engine::gpu::stamp(slots, 1, s).ok());  // nothing in between: a link only
  ASSERT_TRUE(engine::gpu::swiglu(out, gate, up, 1, cols, cols, DType::fp16, s).ok());
  ASSERT_TRUE(engine::gpu::stamp(slots, 2, s).ok());
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  std::vector<uint64_t> t(4);
  cudaMemcpy(t.data(), slots, 4 * sizeof(uint64_t), cudaMemcpyDeviceToHost);
  EXPECT_GT(t[0], 0u);
  EXPECT_LE(t[0], t[1]);
  EXPECT_LE(t[1], t[2]);
  // The kernel's interval is longer than the empty one and than 10 µs (it moves ~200 MB).
  EXPECT_GT(t[2] - t[1], t[1] - t[0]);
  EXPECT_GT(t[2] - t[1], 10000u) << "swiglu took " << (t[2] - t[1]) << " ns between stamps";
  std::printf("stamp link %.2f µs, swiglu of 32 M elements %.2f µs between stamps\n",
              double(t[1] - t[0]) / 1e3, double(t[2] - t[1]) / 1e3);
  // Bad slots are refused.
  EXPECT_FALSE(engine::gpu::stamp(nullptr, 0, s).ok());
  EXPECT_FALSE(engine::gpu::stamp(slots, -1, s).ok());
  cudaStreamDestroy(s);
  cudaFree(gate);
  cudaFree(up);
  cudaFree(out);
  cudaFree(slots);
}
