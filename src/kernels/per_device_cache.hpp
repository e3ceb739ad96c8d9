// A host-side value about one kernel on the current device (its residency from the occupancy
// calculator, ...), computed on first use and kept: such queries cost microseconds, and a decode
// step launches hundreds of kernels. Each call site keeps its own table (the function-local
// statics belong to the template instance, and a lambda's type is unique to its site).
#pragma once

#include <cuda_runtime.h>

#include <mutex>
#include <tuple>
#include <vector>

#include "core/cuda_check.hpp"
#include "sparrow/status.hpp"

namespace sparrow::kernels {

// compute() -> Result<V>, run once per (device, kernel) under a lock; an error is returned and
// not kept, so a later call tries again.
template <class V, class Kernel, class Compute>
Result<V> per_device_kernel_value(Kernel kernel, Compute&& compute) {
  static std::mutex mu;
  static std::vector<std::tuple<int, const void*, V>> known;  // (device, kernel, value)
  int dev = 0;
  SPARROW_CUDA_RETURN_IF_ERROR(cudaGetDevice(&dev));
  const void* key = reinterpret_cast<const void*>(kernel);
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& [d, k, v] : known) {
    if (d == dev && k == key) return v;
  }
  SPARROW_ASSIGN_OR_RETURN(V v, compute());
  known.emplace_back(dev, key, v);
  return v;
}

}  // namespace sparrow::kernels
