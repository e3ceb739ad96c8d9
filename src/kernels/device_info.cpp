#include "kernels/device_info.hpp"

#include <array>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <unordered_set>
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
  if (dev >= 0 && dev < kMaxDevices) {
    g_max_smem[dev].store(info.max_smem_per_block, std::memory_order_relaxed);
    g_max_smem_sm[dev].store(info.max_smem_per_sm, std::memory_order_relaxed);
    g_l2[dev].store(info.l2_bytes, std::memory_order_relaxed);
    g_cc_major[dev].store(info.cc_major, std::memory_order_relaxed);
    g_cc_minor[dev].store(info.cc_minor, std::memory_order_relaxed);
    g_sm_count[dev].store(info.sm_count, std::memory_order_relaxed);
  }
  return info;
}

int env_knob(const char* name, int unset) {
  const char* e = std::getenv(name);
  return e ? std::atoi(e) : unset;
}

cudaError_t prefer_carveout(const void* kernel, bool dynamic_smem) {
  static const int on_static = env_knob("SPARROW_SMEM_CARVEOUT", -1);
  static const int on_dynamic = env_knob("SPARROW_SMEM_CARVEOUT_DYNAMIC", -1);
  const int p = dynamic_smem ? on_dynamic : on_static;
  if (p < 0) return cudaSuccess;
  static std::mutex mu;
  static std::unordered_set<const void*> done;
  std::lock_guard<std::mutex> lock(mu);
  if (!done.insert(kernel).second) return cudaSuccess;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, p);
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
