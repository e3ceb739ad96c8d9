// The GPU test binary. On a machine without a usable GPU it says so and exits 0 without running
// anything, so the same binary serves CI (no GPU) and scripts/gpu-test.sh (on the device).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>

int main(int argc, char** argv) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    std::printf("sparrow_gpu_tests: no usable CUDA GPU (%s): skipping all GPU tests\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return 0;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("sparrow_gpu_tests: running on %s (sm_%d%d, %d SMs)\n", prop.name, prop.major,
              prop.minor, prop.multiProcessorCount);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
