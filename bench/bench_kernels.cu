// The benchmark's own small kernels: a spin kernel that lets the host queue ahead, a pattern fill,
// and the streaming-read kernel that measures the bandwidth ceiling.
#include <algorithm>
#include <vector>

#include "bench/timing.hpp"
#include "core/cuda_check.hpp"
#include "kernels/stream_read.cuh"

namespace sparrow::bench {

namespace {

__global__ void spin_kernel(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

__global__ void fill_pattern_kernel(uint32_t* p, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    p[i] = uint32_t(i) * 2654435761u | 1u;  // odd: never zero
  }
}

// Each thread keeps kernels::kStreamReadUnroll independent 16-byte loads in flight; the XOR of
// everything it read is compared with a value it cannot have, so the compiler keeps every load.
constexpr int kReadThreads = 256;
__global__ void stream_read_kernel(const uint4* __restrict__ p, size_t n, uint32_t* sink) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  const uint32_t acc = kernels::stream_read_xor(
      p, 0, n, blockIdx.x * size_t(blockDim.x) + threadIdx.x, stride);
  if (acc == 0x9E3779B9u && sink) *sink = acc;
}

}  // namespace

Status enqueue_spin(cudaStream_t stream, double microseconds, int sm_clock_mhz) {
  spin_kernel<<<1, 1, 0, stream>>>((long long)(microseconds * std::max(sm_clock_mhz, 1000)));
  SPARROW_CUDA_CHECK_LAUNCH("spin_kernel");
  return Status::success();
}

Status fill_pattern(void* data, size_t bytes, cudaStream_t stream) {
  fill_pattern_kernel<<<1024, 256, 0, stream>>>(static_cast<uint32_t*>(data), bytes / 4);
  SPARROW_CUDA_CHECK_LAUNCH("fill_pattern_kernel");
  return Status::success();
}

Status enqueue_stream_read(const void* data, size_t bytes, int sm_count, cudaStream_t stream) {
  // Enough resident threads to fill every SM (2048 threads each on sm_80/sm_90).
  const int blocks = sm_count * (2048 / kReadThreads);
  stream_read_kernel<<<blocks, kReadThreads, 0, stream>>>(static_cast<const uint4*>(data),
                                                          bytes / 16, nullptr);
  SPARROW_CUDA_CHECK_LAUNCH("stream_read_kernel");
  return Status::success();
}

Result<double> measure_read_bandwidth(size_t bytes, int reps, int sm_count, cudaStream_t stream) {
  void* buf = nullptr;
  SPARROW_CUDA_RETURN_IF_ERROR(cudaMalloc(&buf, bytes));
  std::unique_ptr<void, decltype(&cudaFree)> guard(buf, &cudaFree);
  SPARROW_RETURN_IF_ERROR(fill_pattern(buf, bytes, stream));
  std::vector<cudaEvent_t> ev(size_t(reps) + 1);
  for (auto& e : ev) SPARROW_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e));
  for (int i = 0; i < 3; ++i) SPARROW_RETURN_IF_ERROR(enqueue_stream_read(buf, bytes, sm_count, stream));
  SPARROW_CUDA_RETURN_IF_ERROR(cudaEventRecord(ev[0], stream));
  for (int r = 0; r < reps; ++r) {
    SPARROW_RETURN_IF_ERROR(enqueue_stream_read(buf, bytes, sm_count, stream));
    SPARROW_CUDA_RETURN_IF_ERROR(cudaEventRecord(ev[size_t(r) + 1], stream));
  }
  SPARROW_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    float t = 0;
    SPARROW_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&t, ev[size_t(r)], ev[size_t(r) + 1]));
    ms.push_back(t);
  }
  for (auto& e : ev) cudaEventDestroy(e);
  std::sort(ms.begin(), ms.end());
  const double median_ms = ms[ms.size() / 2];
  return double(bytes) / (median_ms * 1e-3) / 1e9;
}

}  // namespace sparrow::bench
