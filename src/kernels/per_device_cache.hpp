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

}  // namespace sparrow::kernels
