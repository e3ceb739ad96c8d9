#include "kernels/device_info.hpp"

#include <array>
#include <atomic>
#include <cstdlib>
#include <string>

#include "core/cuda_check.hpp"

namespace sparrow::kernels {

namespace {
constexpr int kMaxDevices = 64;
// One slot per device ordinal; sm_count == 0 means "not read yet". Racing first calls both read
// the same attributes, so a plain store of the same value is harmless; atomics keep it defined.
std::array<std::atomic<int>, kMaxDevices> g_sm_count{};
std::array<std::atomic<int>, kMaxDevices> g_max_smem{};
std::array<std::atomic<int>, kMaxDevices> g_max_smem_sm{};
std::array<std::atomic<int>, kMaxDevices> g_l2{};
std::array<std::atomic<int>, kMaxDevices> g_cc_major{};
std::array<std::atomic<int>, kMaxDevices> g_cc_minor{};
std::array<std::atomic<int>, kMaxDevices> g_reserved_smem{};
}  // namespace

Result<DeviceInfo> current_device_info() {
  int dev = 0;
  SPARROW_CUDA_RETURN_IF_ERROR(cudaGetDevice(&dev));
  DeviceInfo info;
  if (dev >= 0 && dev < kMaxDevices) {
    info.sm_count = g_sm_count[dev].load(std::memory_order_relaxed);
    info.max_smem_per_block = g_max_smem[dev].load(std::memory_order_relaxed);
    info.max_smem_per_sm = g_max_smem_sm[dev].load(std::memory_order_relaxed);
    info.l2_bytes = g_l2[dev].load(std::memory_order_relaxed);
    info.cc_major = g_cc_major[dev].load(std::memory_order_relaxed);
    info.cc_minor = g_cc_minor[dev].load(std::memory_order_relaxed);
    info.reserved_smem_per_block = g_reserved_smem[dev].load(std::memory_order_relaxed);
    if (info.sm_count > 0) return info;
  }
  SPARROW_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&info.sm_count, cudaDevAttrMultiProcessorCount, dev));
  SPARROW_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(
      &info.max_smem_per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  SPARROW_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(
      &info.max_smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
  SPARROW_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&info.l2_bytes, cudaDevAttrL2CacheSize, dev));
  SPARROW_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&info.cc_major, cudaDevAttrComputeCapabilityMajor, dev));
  SPARROW_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&info.cc_minor, cudaDevAttrComputeCapabilityMinor, dev));
  SPARROW_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(
      &info.reserved_smem_per_block, cudaDevAttrReservedSharedMemoryPerBlock, dev));
  if (dev >= 0 && dev < kMaxDevices) {
    g_max_smem[dev].store(info.max_smem_per_block, std::memory_order_relaxed);
    g_max_smem_sm[dev].store(info.max_smem_per_sm, std::memory_order_relaxed);
    g_l2[dev].store(info.l2_bytes, std::memory_order_relaxed);
    g_cc_major[dev].store(info.cc_major, std::memory_order_relaxed);
    g_cc_minor[dev].store(info.cc_minor, std::memory_order_relaxed);
    g_reserved_smem[dev].store(info.reserved_smem_per_block, std::memory_order_relaxed);
    g_sm_count[dev].store(info.sm_count, std::memory_order_relaxed);
  }
  return info;
}

int env_knob(const char* name, int unset) {
  const char* e = std::getenv(name);
  return e ? std::atoi(e) : unset;
}

Result<int> carveout_percent(const void* kernel, int threads, size_t dynamic_smem) {
  static const int fixed = env_knob("SPARROW_SMEM_CARVEOUT", -2);
  static const int floor = env_knob("SPARROW_SMEM_CARVEOUT_FLOOR", kCarveoutFloorPercent);
  if (fixed >= -1) return fixed > 100 ? 100 : fixed;
  SPARROW_ASSIGN_OR_RETURN(const DeviceInfo d, current_device_info());
  cudaFuncAttributes attr{};
  SPARROW_CUDA_RETURN_IF_ERROR(cudaFuncGetAttributes(&attr, kernel));
  // Without a preference set on the kernel the calculator assumes the largest shared memory, so
  // this is the residency registers, threads and shared memory allow together.
  int blocks = 0;
  SPARROW_CUDA_RETURN_IF_ERROR(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, dynamic_smem));
  const int64_t per_block =
      int64_t(attr.sharedSizeBytes) + int64_t(dynamic_smem) + d.reserved_smem_per_block;
  return carveout_percent_for(blocks, per_block, d.max_smem_per_sm, floor);
}

bool dependent_launch_enabled() {
  static const bool off = [] {
    const char* e = std::getenv("SPARROW_PDL");
    return e && std::string(e) == "0";
  }();
  if (off) return false;
  const auto info = current_device_info();
  return info.ok() && info.value().cc_major >= 9;
}

}  // namespace sparrow::kernels
