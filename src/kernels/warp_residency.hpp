// How many blocks of w warps one SM holds at once, for every block size w, and the launch rule
// that reads it: the widest blocks with which a whole grid is resident in one wave. Kernels whose
// blocks run about equally long and whose warps are latency-bound pay nearly a whole block's time
// for a second, partial wave (tca_bme.decode's strip kernels, dense.gemv). The table comes from
// the occupancy calculator (measure_warp_residency, kernels/per_device_cache.hpp); the rule is
// plain arithmetic, tested on the CPU.
#pragma once

#include <algorithm>
#include <cstdint>

namespace sparrow::kernels {

// blocks_per_sm[w]: blocks of w warps resident per SM, w = 1..kMaxWarps (index 0 unused; 0 where
// the kernel cannot run such blocks).
template <int kMaxWarps>
struct WarpResidency {
  static constexpr int kMax = kMaxWarps;
  int blocks_per_sm[kMaxWarps + 1] = {};
};

// The most warps per block w, from `most` down to `least` (clamped to 1..kMaxWarps), with which
// all `blocks` blocks are resident on `sm_count` SMs at once; 0 when no such w fits.
template <int kMaxWarps>
int one_wave_warps(const WarpResidency<kMaxWarps>& r, int64_t blocks, int sm_count, int most,
                   int least) {
  const int64_t sms = std::max(sm_count, 1);
  for (int w = std::min(most, kMaxWarps); w >= std::max(least, 1); --w) {
    if (int64_t(r.blocks_per_sm[w]) * sms >= blocks) return w;
  }
  return 0;
}

}  // namespace sparrow::kernels
