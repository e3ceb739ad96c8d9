// The fp16 instantiations of tiled_csl.mma.
#include "kernels/tiled_csl/spmm.hpp"
#include "kernels/tiled_csl/spmm_kernel.cuh"

namespace sparrow::kernels::tiled_csl_mma {

Status launch_fp16(const WeightArgs& w, const tc::XYArgs& a, int tiles_m, cudaStream_t s) {
  return launch_for_n<__half>(w, a, tiles_m, s);
}

}  // namespace sparrow::kernels::tiled_csl_mma
