// tca_bme.mma launchers, one per dtype (spmm_fp16.cu, spmm_bf16.cu: split so that nvcc compiles
// the two instantiation sets in parallel); spmm.cu is the KernelInfo run function.
#pragma once

#include <cuda_runtime.h>

#include "kernels/kernel.hpp"
#include "kernels/tensor_core/mma.cuh"
#include "sparrow/status.hpp"

namespace sparrow::kernels::tca_bme_mma {

// The weight as the tensor-core kernels (tca_bme.mma, tca_bme.wgmma) read it.
struct WeightArgs {
  const uint64_t* bitmaps;
  const uint32_t* group_offsets;
  const uint16_t* values;
  int groups_k;
  int value_cap;  // a stage's values: max_group_values rounded up to 8, at most 4096
  // The decode reads a tile's second column half rows 8-15 first (write_warp_records<SWAP>):
  // where the weight's density makes that the order with fewer bank conflicts.
  bool swap_pairs;
  // tca_bme.mma at 17..32 columns: the warps take 2 x 2 tiles of the group instead of a tile row
  // each (Config::WC = 2), where the weight's density makes that faster (warp_columns_for).
  bool warp_columns;
};

// Whether a weight of this density decodes with swapped records (see swap_pairs): between these
// densities scripts/tca_bank_conflicts.py counts fewer wavefronts per value load with the swap
// (1.5-1.6 against 1.7-2.0). Measured on the H100 (bench/NOTES-tc.md): swapped everywhere, session
// 20 took 0.90-0.99x the time at density 0.5 and up to 1.13x at 0.3; gated like this, session 21
// took 0.93-1.02x (tca_bme.mma) and 0.96-1.01x (tca_bme.wgmma) at 0.5 and the 7B engine at batch 32
// ran 3 % faster.
constexpr double kSwapPairsMinDensity = 0.34, kSwapPairsMaxDensity = 0.55;
inline bool swap_pairs_for(double density) {
  return density >= kSwapPairsMinDensity && density <= kSwapPairsMaxDensity;
}

// Whether tca_bme.mma runs 17..32 columns with 2 x 2 warp tiles (Config::WC): each warp then reads
// half the X tile's B fragments, with twice the accumulators. Measured on the H100 (session 43,
// bench/NOTES-tc.md), time against one tile row per warp on the four Llama shapes at N = 32:
// 0.91-0.95x at density 0.3 and 0.1, 1.00-1.05x at 0.5 (swapped records there); at N = 16
// 0.98-1.04x, so 16 columns keep the row layout.
constexpr double kWarpColumnsMaxDensity = kSwapPairsMinDensity;
inline bool warp_columns_for(double density) { return density < kWarpColumnsMaxDensity; }

// The argument checks both tensor-core kernels run (messages start with `name`), then their
// arguments.
Status prepare(const Problem& p, const char* name, WeightArgs& w, tc::XYArgs& a);

// `dependent`: a programmatic dependent launch (MatmulOptions::dependent_launch).
Status launch_fp16(const WeightArgs& w, const tc::XYArgs& a, int groups_m, bool dependent,
                   cudaStream_t s);
Status launch_bf16(const WeightArgs& w, const tc::XYArgs& a, int groups_m, bool dependent,
                   cudaStream_t s);

}  // namespace sparrow::kernels::tca_bme_mma
