// The list of every kernel in the build. Add a kernel here when you add its launcher.
#include "kernels/kernel.hpp"

namespace sparrow::kernels {

Status run_tca_bme_mma(const Problem& p, Stream stream);    // tca_bme/spmm.cu
Status run_tiled_csl_mma(const Problem& p, Stream stream);  // tiled_csl/spmm.cu

const std::vector<KernelInfo>& all_kernels() {
  static const std::vector<KernelInfo> kernels = {
      {"tca_bme.mma", Format::tca_bme, 8, 512, run_tca_bme_mma},
      {"tiled_csl.mma", Format::tiled_csl, 8, 512, run_tiled_csl_mma},
  };
  return kernels;
}

}  // namespace sparrow::kernels
