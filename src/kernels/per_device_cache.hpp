// A host-side value about one kernel on the current device (its residency from the occupancy
// calculator, ...), computed on first use and kept: such queries cost microseconds, and a decode
// step launches hundreds of kernels. Each call site keeps its own table (the function-local
// statics belong to the template instance, and a lambda's type is unique to its site).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <tuple>
#include <vector>

#include "core/cuda_check.hpp"
#include "kernels/warp_residency.hpp"
#include "sparrow/status.hpp"

namespace sparrow::kernels {

// compute() -> Result<V>, run once per (device, kernel, variant) under a lock; an error is
// returned and not kept, so a later call tries again. `variant` tells apart values of one kernel
// that depend on a launch parameter (e.g. its dynamic shared memory per warp).
template <class V, class Kernel, class Compute>
Result<V> per_device_kernel_value(Kernel kernel, Compute&& compute, int64_t variant = 0) {
  static std::mutex mu;
  // (device, kernel, variant, value)
  static std::vector<std::tuple<int, const void*, int64_t, V>> known;
  int dev = 0;
  SPARROW_CUDA_RETURN_IF_ERROR(cudaGetDevice(&dev));
  const void* key = reinterpret_cast<const void*>(kernel);
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& [d, k, var, v] : known) {
    if (d == dev && k == key && var == variant) return v;
  }
  SPARROW_ASSIGN_OR_RETURN(V v, compute());
  known.emplace_back(dev, key, variant, v);
  return v;
}

// A kernel's residency for every block size 1..max_warps (<= kMaxWarps; the occupancy
// calculator's blocks per SM with `smem_per_warp` bytes of dynamic shared memory per warp), once
// per device, kernel, `smem_per_warp` and max_warps: a host call per launch would cost
// microseconds. Raises the kernel's dynamic shared memory limit to what max_warps warps need on
// the way (when it uses any; never lowers it, so a launch with more shared memory per warp,
// computed earlier, stays valid).
template <int kMaxWarps, class Kernel>
Result<WarpResidency<kMaxWarps>> measure_warp_residency(Kernel kernel, size_t smem_per_warp,
                                                        int max_warps = kMaxWarps) {
  using R = WarpResidency<kMaxWarps>;
  return per_device_kernel_value<R>(
      kernel,
      [&]() -> Result<R> {
        const int most = max_warps < kMaxWarps ? max_warps : kMaxWarps;
        if (smem_per_warp > 0) {
          cudaFuncAttributes attr{};
          SPARROW_CUDA_RETURN_IF_ERROR(cudaFuncGetAttributes(&attr, kernel));
          const int need = int(smem_per_warp * size_t(most));
          if (attr.maxDynamicSharedSizeBytes < need) {
            SPARROW_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
                kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, need));
          }
        }
        R r{};
        for (int w = 1; w <= most; ++w) {
          SPARROW_CUDA_RETURN_IF_ERROR(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
              &r.blocks_per_sm[w], kernel, w * 32, smem_per_warp * size_t(w)));
        }
        return r;
      },
      (int64_t(smem_per_warp) << 8) | int64_t(max_warps & 0xFF));
}

}  // namespace sparrow::kernels
