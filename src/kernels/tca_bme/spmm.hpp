// tca_bme.mma launchers, one per dtype (spmm_fp16.cu, spmm_bf16.cu: split so that nvcc compiles
// the two instantiation sets in parallel); spmm.cu is the KernelInfo run function.
#pragma once

#include <cuda_runtime.h>

#include "kernels/tensor_core/mma.cuh"
#include "sparrow/status.hpp"

namespace sparrow::kernels::tca_bme_mma {

struct WeightArgs;
// `dependent`: a programmatic dependent launch (MatmulOptions::dependent_launch).
Status launch_fp16(const WeightArgs& w, const tc::XYArgs& a, int groups_m, bool dependent,
                   cudaStream_t s);
Status launch_bf16(const WeightArgs& w, const tc::XYArgs& a, int groups_m, bool dependent,
                   cudaStream_t s);

}  // namespace sparrow::kernels::tca_bme_mma
