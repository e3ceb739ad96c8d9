// The list of every kernel in the build. Add a kernel here when you add its launcher.
#include "kernels/kernel.hpp"

namespace sparrow::kernels {

const std::vector<KernelInfo>& all_kernels() {
  static const std::vector<KernelInfo> kernels = {
  };
  return kernels;
}

}  // namespace sparrow::kernels
