// The list of every kernel in the build. Add a kernel here when you add its launcher.
#include "kernels/kernel.hpp"

#include "kernels/dense/cublas.hpp"

namespace sparrow::kernels {

const std::vector<KernelInfo>& all_kernels() {
  static const std::vector<KernelInfo> kernels = {
      // cuBLAS: the baseline and the dense fallback (prefill-sized N too).
      {"dense.cublas", Format::dense, 1, 1 << 20, &dense_cublas},
  };
  return kernels;
}

}  // namespace sparrow::kernels
