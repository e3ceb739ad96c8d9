// The fp16 instantiations of tca_bme.wgmma (compiled for sm_90a only: CMakeLists.txt).
#include "kernels/tca_bme/wgmma.hpp"
#include "kernels/tca_bme/smem_wgmma_kernel.cuh"
#include "kernels/tca_bme/wgmma_kernel.cuh"

namespace sparrow::kernels::tca_bme_wgmma {

Status launch_fp16(const tca_bme_mma::WeightArgs& w, const tc::XYArgs& a, int groups_m,
                   bool dependent, cudaStream_t s) {
  return launch_for_n<__half>(w, a, groups_m, dependent, s);
}

}  // namespace sparrow::kernels::tca_bme_wgmma

namespace sparrow::kernels::tca_bme_wgmma_smem {

Status launch_fp16(const tca_bme_mma::WeightArgs& w, const tc::XYArgs& a, int groups_m,
                   bool dependent, cudaStream_t s) {
  return launch_for_n<__half>(w, a, groups_m, dependent, s);
}

}  // namespace sparrow::kernels::tca_bme_wgmma_smem
