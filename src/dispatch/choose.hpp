// The allocation-free kernel choice behind matmul (the public pick_kernel adds the reason text).
#pragma once

#include "kernels/kernel.hpp"

namespace sparrow {

// The kernel matmul runs for weight w at N = n with this much workspace (kernels that need more are
// skipped), launched plainly or as a dependent launch (MatmulOptions::dependent_launch: it decides
// a dense weight's kernel, rule_table.cpp says why), for a caller that normalises X inside the
// matmul (`input_rms`: the fastest kernel that takes it unless another measured more than 1.1x
// faster) or not. Null when the build has no kernel for the format.
const kernels::KernelInfo* choose_kernel(const Weight& w, int64_t n, size_t workspace_bytes,
                                         bool dependent_launch = false, bool input_rms = false);

}  // namespace sparrow
