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
};

// The argument checks both tensor-core kernels run (messages start with `name`), then their
// arguments.
Status prepare(const Problem& p, const char* name, WeightArgs& w, tc::XYArgs& a);

// `dependent`: a programmatic dependent launch (MatmulOptions::dependent_launch).
Status launch_fp16(const WeightArgs& w, const tc::XYArgs& a, int groups_m, bool dependent,
                   cudaStream_t s);
Status launch_bf16(const WeightArgs& w, const tc::XYArgs& a, int groups_m, bool dependent,
                   cudaStream_t s);

}  // namespace sparrow::kernels::tca_bme_mma
