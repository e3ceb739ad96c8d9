// The shared-memory carveout every launch_kernel launch names
// (kernels/device_info.hpp, carveout_percent): the floor for a kernel that
// needs little shared memory, enough for its resident blocks for one that needs
// much, and a launch with the attribute still computes.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

#include "kernels/dependent_launch.cuh"
#include "kernels/device_info.hpp"

using namespace sparrow;

namespace {

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// y[i] = 2 * x[i] + 1 through dynamic shared memory (launched with >=
// blockDim.x floats of it).
__global__ void staged_affine(const float* x, float* y, int n) {
  extern __shared__ float stage[];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) stage[threadIdx.x] = x[i];
  __syncthreads();
  if (i < n) y[i] = 2.f * stage[threadIdx.x] + 1.f;
}

__global__ void affine(const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.f * x[i] + 1.f;
}

}  // namespace

TEST(LaunchCarveout, SmallKernelsShareTheFloor) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  const auto pct = kernels::carveout_percent(reinterpret_cast<const void*>(affine), 256, 0);
  ASSERT_TRUE(pct.ok()) << pct.status().message();
  EXPECT_EQ(pct.value(), kernels::kCarveoutFloorPercent);
}

TEST(LaunchCarveout, LargeSharedMemoryGetsWhatItsResidentBlocksNeed) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  const auto dev = kernels::current_device_info();
  ASSERT_TRUE(dev.ok());
  const size_t smem = 80 * 1024;
  if (dev.value().max_smem_per_block < int(smem)) GTEST_SKIP() << "needs 80 KB per block";
  ASSERT_EQ(
      cudaFuncSetAttribute(staged_affine, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
      cudaSuccess);
  int blocks = 0;
  ASSERT_EQ(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, staged_affine, 256, smem),
            cudaSuccess);
  ASSERT_GE(blocks, 1);
  const auto pct =
      kernels::carveout_percent(reinterpret_cast<const void*>(staged_affine), 256, smem);
  ASSERT_TRUE(pct.ok()) << pct.status().message();
  const double need = double(blocks) * double(smem + size_t(dev.value().reserved_smem_per_block));
  EXPECT_GE(pct.value() / 100.0 * dev.value().max_smem_per_sm, need - 1.0);
  EXPECT_LE(pct.value(), 100);
  EXPECT_GT(pct.value(), kernels::kCarveoutFloorPercent);

  // Launched with the attribute (launch_kernel adds it) the kernel runs and
  // computes; the output starts as NaN so an unwritten element shows.
  const int n = 132 * 256 * 3 + 17;
  std::vector<float> hx(static_cast<size_t>(n)), hy(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) hx[size_t(i)] = float((i * 37) % 101) - 50.f;
  float *x = nullptr, *y = nullptr;
  ASSERT_EQ(cudaMalloc(&x, size_t(n) * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&y, size_t(n) * 4), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(x, hx.data(), size_t(n) * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(y, 0xff, size_t(n) * 4), cudaSuccess);
  for (size_t s : {size_t(0), smem}) {
    auto* k = s ? staged_affine : affine;
    ASSERT_EQ(kernels::launch_kernel(false, k, dim3(unsigned((n + 255) / 256)), dim3(256), s,
                                     cudaStream_t(0), static_cast<const float*>(x), y, n),
              cudaSuccess);
    ASSERT_EQ(cudaMemcpy(hy.data(), y, size_t(n) * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int i = 0; i < n; ++i) ASSERT_EQ(hy[size_t(i)], 2.f * hx[size_t(i)] + 1.f) << i;
    ASSERT_EQ(cudaMemset(y, 0xff, size_t(n) * 4), cudaSuccess);
  }
  cudaFree(x);
  cudaFree(y);
}
