// Programmatic dependent launch (PDL, sm_90 and later). A decode step is a chain of short
// kernels, each waiting for the previous one: without PDL every kernel starts only after the
// previous one has finished and its launch has gone through the front end, a few µs per link that
// no kernel spends reading weights. Launched with PDL, a kernel's blocks may start while the
// previous kernel still runs; they do what does not depend on it (load their first weight bytes,
// row extents) and then wait for it at `wait_for_previous()`, which returns once the previous
// grid has finished and its writes are visible. A kernel lets the next one launch early with
// `let_next_launch()`.
//
// Rules for a kernel launched with `launch_kernel(true, ...)`:
//   - nothing before `wait_for_previous()` may read what earlier kernels write (activations) or
//     write anything at all; weights and sizes are fine;
//   - every kernel of the chain must be launched this way or normally (a normally launched kernel
//     waits for the whole previous grid, as always). Waiting is transitive: the previous kernel
//     itself finished only after its own wait, so everything before it has finished too.
// On sm_80 the instructions compile to nothing and the launch attribute is not set.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "kernels/device_info.hpp"
#include "kernels/per_device_cache.hpp"

namespace sparrow::kernels {

__device__ __forceinline__ void wait_for_previous() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void let_next_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The prologue of a kernel whose first loads are activations (element-wise kernels): the next
// kernel may launch now, this one waits for the previous.
__device__ __forceinline__ void begin_dependent() {
  let_next_launch();
  wait_for_previous();
}

// Appends the PDL attribute to a launch's attributes (attrs[n], then ++n) when `dependent` and
// dependent_launch_enabled(): the one place that decides whether a launch is dependent.
inline void add_dependent_attribute(bool dependent, cudaLaunchAttribute* attrs, unsigned& n) {
  if (!dependent || !dependent_launch_enabled()) return;
  attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[n].val.programmaticStreamSerializationAllowed = 1;
  ++n;
}

// Appends the launch's shared-memory carveout preference (carveout_percent in device_info.hpp,
// computed once per device, kernel, block size and dynamic shared memory) to attrs[n].
template <class Kernel>
cudaError_t add_carveout_attribute(Kernel kernel, dim3 block, size_t smem,
                                   cudaLaunchAttribute* attrs, unsigned& n) {
  const int threads = int(block.x * block.y * block.z);
  const auto pct = per_device_kernel_value<int>(
      kernel,
      [&] { return carveout_percent(reinterpret_cast<const void*>(kernel), threads, smem); },
      (int64_t(threads) << 40) | int64_t(smem));
  if (!pct.ok()) return cudaErrorInvalidValue;
  if (pct.value() < 0) return cudaSuccess;
  attrs[n].id = cudaLaunchAttributePreferredSharedMemoryCarveout;
  attrs[n].val.sharedMemCarveout = unsigned(pct.value());
  ++n;
  return cudaSuccess;
}

// kernel<<<grid, block, smem, stream>>>(args...), with the PDL attribute when `dependent` and
// dependent_launch_enabled(), and the carveout the launch needs (add_carveout_attribute). Returns
// the launch error, as cudaGetLastError would after <<<>>>.
template <class... Params, class... Args>
cudaError_t launch_kernel(bool dependent, void (*kernel)(Params...), dim3 grid, dim3 block,
                          size_t smem, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  unsigned n_attr = 0;
  add_dependent_attribute(dependent, attr, n_attr);
  if (const cudaError_t e = add_carveout_attribute(kernel, block, smem, attr, n_attr);
      e != cudaSuccess) {
    return e;
  }
  cfg.attrs = attr;
  cfg.numAttrs = n_attr;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

}  // namespace sparrow::kernels
