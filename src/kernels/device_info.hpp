// What the launch planners need to know about the current device, read once per device and
// cached (cudaDeviceGetAttribute is cheap but not free, and a decode step makes hundreds of calls).
#pragma once

#include <cstddef>

#include "kernels/carveout.hpp"
#include "sparrow/status.hpp"

namespace sparrow::kernels {

struct DeviceInfo {
  int sm_count = 0;
  int max_smem_per_block = 0;  // bytes a block may opt in to (cudaDevAttrMaxSharedMemoryPerBlockOptin)
  int max_smem_per_sm = 0;     // bytes per SM (cudaDevAttrMaxSharedMemoryPerMultiprocessor)
  int l2_bytes = 0;            // cudaDevAttrL2CacheSize
  int cc_major = 0;            // compute capability major (9: Hopper, thread-block clusters)
  int cc_minor = 0;            // and minor (sm_90a code such as wgmma runs on 9.0 only)
  int reserved_smem_per_block = 0;  // cudaDevAttrReservedSharedMemoryPerBlock (1 KB)
};

// The current device's info; an error Status if no device is usable.
Result<DeviceInfo> current_device_info();

// Whether kernels launch with programmatic dependent launch (kernels/dependent_launch.cuh): the
// current device is sm_90 or later and SPARROW_PDL is not "0" (experiment switch, read once).
bool dependent_launch_enabled();

// An integer experiment knob from the environment (SPARROW_MACKO_PIECES, SPARROW_TCA_ONE_TOKEN,
// ...), `unset` when it is not set. Callers keep the value in a function-local static, so each
// knob is read once.
int env_knob(const char* name, int unset);

// The shared-memory carveout (percent of max_smem_per_sm, for
// cudaLaunchAttributePreferredSharedMemoryCarveout) a launch of `kernel` with `threads` threads
// and `dynamic_smem` bytes per block asks for, or -1 for no preference. An SM splits one memory
// between L1 and shared memory and keeps the split a kernel ran with while the next kernel fits
// in it: after a kernel that took most of it as shared memory (tca_bme.decode), kernels that read
// X through L1 ran on a small L1 (H200, session 50: dense.gemv on qkv 27.3 -> 36.5 us a layer,
// the 7B engine at batch 4 0.77x of dense with tca_bme on down_proj alone). So every launch names
// the shared memory its resident blocks need (the occupancy calculator's blocks per SM times
// each block's static, dynamic and reserved bytes), at least kCarveoutFloorPercent so that
// consecutive small kernels share one split rather than draining SMs to switch between splits
// (the arithmetic: carveout_percent_for in kernels/carveout.hpp). Knobs (read once):
// SPARROW_SMEM_CARVEOUT=-1 no preference (the driver's choice, as before session 50), =P
// (0..100) P for every launch; SPARROW_SMEM_CARVEOUT_FLOOR=P the floor.
// Computed once per device, kernel, block size and dynamic shared memory by the caller
// (kernels/dependent_launch.cuh); an error when the occupancy query fails.
Result<int> carveout_percent(const void* kernel, int threads, size_t dynamic_smem);

}  // namespace sparrow::kernels
