// The allocation-free kernel choice behind matmul (the public pick_kernel adds the reason text).
#pragma once

#include "kernels/kernel.hpp"

namespace sparrow {

// Null when the build has no kernel for the format.
const kernels::KernelInfo* choose_kernel(Format f, double density, int64_t n);

}  // namespace sparrow
