// The shared-memory carveout a launch names (kernels/device_info.hpp, carveout_percent): the
// arithmetic, apart from the device queries, so that it is tested without a GPU.
#pragma once

#include <cstdint>

namespace sparrow::kernels {

// The least carveout a launch names: consecutive small kernels of a chain then share one L1 /
// shared-memory split instead of draining SMs to switch between splits (H200, session 50: 0 %
// ran the 7B engine 1.7 % slower than 25 %).
constexpr int kCarveoutFloorPercent = 25;

// Percent of an SM's `sm_smem_bytes` of shared memory that `blocks` resident blocks of
// `bytes_per_block` each (static + dynamic + reserved) need, rounded up (the driver rounds a
// percentage up to the next split the SM supports), at least `floor`, at most 100; -1 (no
// preference) when the SM's size is unknown.
constexpr int carveout_percent_for(int64_t blocks, int64_t bytes_per_block, int64_t sm_smem_bytes,
                                   int floor = kCarveoutFloorPercent) {
  if (sm_smem_bytes <= 0) return -1;
  int64_t pct = (blocks * bytes_per_block * 100 + sm_smem_bytes - 1) / sm_smem_bytes;
  if (pct < floor) pct = floor;
  return int(pct > 100 ? 100 : pct);
}

}  // namespace sparrow::kernels
