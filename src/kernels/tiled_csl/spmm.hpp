// tiled_csl.mma launchers, one per dtype (spmm_fp16.cu, spmm_bf16.cu: split so that nvcc compiles
// the two instantiation sets in parallel); spmm.cu is the KernelInfo run function.
#pragma once

#include <cuda_runtime.h>

#include "kernels/tensor_core/mma.cuh"
#include "sparrow/status.hpp"

namespace sparrow::kernels::tiled_csl_mma {

struct WeightArgs;
Status launch_fp16(const WeightArgs& w, const tc::XYArgs& a, int tiles_m, cudaStream_t s);
Status launch_bf16(const WeightArgs& w, const tc::XYArgs& a, int tiles_m, cudaStream_t s);

}  // namespace sparrow::kernels::tiled_csl_mma
