// What the launch planners need to know about the current device, read once per device and
// cached (cudaDeviceGetAttribute is cheap but not free, and a decode step makes hundreds of calls).
#pragma once

#include <cuda_runtime.h>

#include "sparrow/status.hpp"

namespace sparrow::kernels {

struct DeviceInfo {
  int sm_count = 0;
  int max_smem_per_block = 0;  // bytes a block may opt in to (cudaDevAttrMaxSharedMemoryPerBlockOptin)
  int max_smem_per_sm = 0;     // bytes per SM (cudaDevAttrMaxSharedMemoryPerMultiprocessor)
  int l2_bytes = 0;            // cudaDevAttrL2CacheSize
  int cc_major = 0;            // compute capability major (9: Hopper, thread-block clusters)
  int cc_minor = 0;            // and minor (sm_90a code such as wgmma runs on 9.0 only)
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

// Experiment knobs (read once), for launch_kernel: SPARROW_SMEM_CARVEOUT=P sets the preferred
// shared-memory carveout (cudaFuncAttributePreferredSharedMemoryCarveout, percent of the largest
// shared memory) to P on each kernel launched without dynamic shared memory, and
// SPARROW_SMEM_CARVEOUT_DYNAMIC=P on each launched with it, once per kernel. Unset: no
// preference, the driver's choice. Returns the attribute call's error.
cudaError_t prefer_carveout(const void* kernel, bool dynamic_smem);

}  // namespace sparrow::kernels
