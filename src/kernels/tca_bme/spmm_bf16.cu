// The bf16 instantiations of tca_bme.mma.
#include "kernels/tca_bme/spmm.hpp"
#include "kernels/tca_bme/spmm_kernel.cuh"

namespace sparrow::kernels::tca_bme_mma {

Status launch_bf16(const WeightArgs& w, const tc::XYArgs& a, int groups_m, bool dependent,
                   cudaStream_t s) {
  return launch_for_n<__nv_bfloat16>(w, a, groups_m, dependent, s);
}

}  // namespace sparrow::kernels::tca_bme_mma
