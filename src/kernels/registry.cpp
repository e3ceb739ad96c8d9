// The list of every kernel in the build. Add a kernel here when you add its launcher.
#include "kernels/csr/vector.hpp"
#include "kernels/dense/gemv.hpp"
#include "kernels/kernel.hpp"

namespace sparrow::kernels {

const std::vector<KernelInfo>& all_kernels() {
  static const std::vector<KernelInfo> kernels = {
      {"dense.gemv", Format::dense, 1, 16, dense_gemv::run},
      {"csr.vector", Format::csr, 1, 16, csr_vector::run},
  };
  return kernels;
}

}  // namespace sparrow::kernels
