// tca_bme's one-token CUDA-core kernel (one_token.cu): for N = 1 on weights too small for the
// streaming kernel of tca_bme.decode to keep its warps busy (decode.cu chooses).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/kernel.hpp"
#include "kernels/warp_residency.hpp"
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
  // The bulk-copy kernel (sm_90): stage buffers per warp, so one group's copy is in flight while
  // the previous group is walked. Measured on the H100 (session 41, N = 1, 50 % random, time
  // against the register kernel): 2 stages 0.91-0.93x on 11008..22016 x 4096, 3 stages 0.95-1.03x,
  // 4 stages 1.05-1.07x (fewer warps fit); the 7B engine with every layer tca_bme at 50 % 251 ->
  // 280 t/s with 2 stages, 249 with 3 (its stages sized by the fullest strip).
  static constexpr int kBulkStages = 2;
  // Where the bulk-copy kernel runs (use_bulk_copy): weights at least this dense (the H100,
  // session 41: 0.86-0.97x the register kernel's time at 35-55 % sparsity on 11008 and 22016
  // rows, 1.00-1.04x at 60 %, 1.03-1.07x at 65 %, 1.05-1.24x at 70-90 %) ...
  static constexpr double kBulkMinDensity = 0.45;
  // ... and, on a plain launch, at least this many rows per SM (4 strips): 4096-row weights took
  // 1.01-1.09x the time at 40-55 % sparsity, where each of the 2 blocks per SM walks only
  // 4..11 groups per warp. Under a dependent launch (the engine), where its first copies overlap
  // the previous kernel, it runs at any row count: the 7B engine with every layer tca_bme at 50 %
  // ran 282.5 t/s with it on every layer, 279.7 with the 4096-row layers left out (250.7 without).
  static constexpr int kBulkMinRowsPerSm = 64;
};

// How a tca_bme.decode kernel fills its shared-memory stages: by every lane's 16-byte copies
// (`per_lane`: the one-token kernel's loads into registers and shared stores, the streaming
// kernel's cp.async; every GPU) or by lane 0's bulk copies of the copy engine, counted on an
// mbarrier per stage (`bulk`: sm_90; below it bulk falls back to per_lane). `automatic`: the
// kernel's rule (one-token: use_bulk_copy; streaming: bulk on sm_90).
enum class StageCopy { automatic, per_lane, bulk };

// Whether an automatic launch takes the bulk copies: an sm_90 device (cc_major >= 9), density
// nnz / (rows cols) >= kBulkMinDensity, and a dependent launch or rows >= kBulkMinRowsPerSm per SM.
bool use_bulk_copy(int64_t nnz, int64_t rows, int64_t cols, int sm_count, int cc_major,
                   bool dependent);
// 16-byte chunks of one bulk-copy stage for a weight whose fullest strip holds max_strip_values.
uint32_t bulk_stage_chunks(int64_t max_strip_values);

struct LaunchPlan {
  int64_t blocks = 0;  // one per 16-row strip
  int warps = 0;
};
// Blocks of w warps that fit one SM at once, for w = 1..kMaxWarps (index 0 unused): the
// occupancy calculator's answer for this kernel on the device (measure_warp_residency).
using Residency = WarpResidency<Config::kMaxWarps>;
// One block per 16-row strip; warps per block: the most (up to kMaxWarps and the groups along K)
// with which every block is resident in one wave, else enough to give each SM ~kTargetWarpsPerSm.
LaunchPlan plan(int64_t m, int64_t groups_k, int sm_count, const Residency& r);

// Y (1 x M) = x (1 x K) * W^T; x and y device pointers of W's dtype (T = __half, __nv_bfloat16).
// `dependent`: a programmatic dependent launch (kernels/dependent_launch.cuh); `rms`: normalise x
// first (MatmulOptions::input_rms).
template <class T>
Status launch(const tca_bme::Matrix& w, const T* x, T* y, const T* bias, bool accumulate,
              int sm_count, bool dependent, bool rms, float rms_eps, StageCopy copy,
              cudaStream_t stream);

}  // namespace sparrow::kernels::tca_bme_one_token
