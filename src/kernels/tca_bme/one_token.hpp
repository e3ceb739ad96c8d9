// tca_bme's one-token CUDA-core kernel (one_token.cu): for N = 1 on weights too small for the
// streaming kernel of tca_bme.decode to keep its warps busy (decode.cu chooses).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/kernel.hpp"
#include "sparrow/formats/tca_bme.hpp"

namespace sparrow::kernels::tca_bme_one_token {

struct Config {
  static constexpr int kRowsPerBlock = 16;   // one tensor-core strip of a 64-row group row
  static constexpr int kMaxWarps = 16;       // warps of a block, splitting the groups along K
  static constexpr int kTargetWarpsPerSm = 32;
  // Values of one strip of one group: at most 16 x 64, plus one chunk for 16-byte alignment.
  static constexpr int kStripChunks = 16 * 64 / 8 + 1;  // 16-byte chunks
  // Bits of a lane's walk whose shared-memory loads are issued together (a divisor of 32).
  static constexpr int kWalkBatch = 4;
};

struct LaunchPlan {
  int64_t blocks = 0;  // one per 16-row strip
  int warps = 0;
};
// Blocks of w warps that fit one SM at once, for w = 1..kMaxWarps (index 0 unused): the
// occupancy calculator's answer for this kernel on the device.
struct Residency {
  int blocks_per_sm[Config::kMaxWarps + 1] = {};
};
// One block per 16-row strip; warps per block: the most (up to kMaxWarps and the groups along K)
// with which every block is resident in one wave, else enough to give each SM ~kTargetWarpsPerSm.
LaunchPlan plan(int64_t m, int64_t groups_k, int sm_count, const Residency& r);

// Y (1 x M) = x (1 x K) * W^T; x and y device pointers of W's dtype (T = __half, __nv_bfloat16).
// `dependent`: a programmatic dependent launch (kernels/dependent_launch.cuh); `rms`: normalise x
// first (MatmulOptions::input_rms).
template <class T>
Status launch(const tca_bme::Matrix& w, const T* x, T* y, const T* bias, bool accumulate,
              int sm_count, bool dependent, bool rms, float rms_eps, cudaStream_t stream);

}  // namespace sparrow::kernels::tca_bme_one_token
