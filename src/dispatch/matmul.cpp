// sparrow::matmul: picks the kernel for the weight's format and N from the rule table
// (rule_table.cpp) and runs it. The choice costs a scan of a small table and no allocation on the
// common path.
#include <string>

#include "dispatch/choose.hpp"
#include "kernels/kernel.hpp"
#include "sparrow/dispatch.hpp"

namespace sparrow {

Status matmul(const MatrixView& y, const Weight& w, const ConstMatrixView& x, Stream stream,
              const MatmulOptions& opt) {
  const kernels::KernelInfo* k = choose_kernel(w, x.rows, opt.workspace ? opt.workspace_bytes : 0,
                                               opt.dependent_launch, opt.input_rms);
  if (k == nullptr) {
    return unsupported(std::string("no GPU kernel for the ") + format_name(format_of(w)) +
                       " format in this build");
  }
  if (opt.input_rms && !kernels::takes_input_rms(*k, w, x.rows)) {
    return unsupported(std::string("input_rms: ") + k->name + ", the kernel for this weight at N = " +
                       std::to_string(x.rows) + ", does not take it (ask matmul_takes_input_rms)");
  }
  if (opt.output_swiglu && !kernels::takes_output_swiglu(*k, w, x.rows)) {
    return unsupported(std::string("output_swiglu: ") + k->name +
                       ", the kernel for this weight at N = " + std::to_string(x.rows) +
                       ", does not take it (ask matmul_takes_output_swiglu)");
  }
  return k->run(kernels::Problem{w, x, y, opt}, stream);
}

bool matmul_takes_input_rms(const Weight& w, int64_t n, const MatmulOptions& opt) {
  // The kernel matmul would run if asked for input_rms (opt.input_rms itself does not matter).
  const kernels::KernelInfo* k =
      choose_kernel(w, n, opt.workspace ? opt.workspace_bytes : 0, opt.dependent_launch, true);
  return k != nullptr && kernels::takes_input_rms(*k, w, n);
}

bool matmul_takes_output_swiglu(const Weight& w, int64_t n, const MatmulOptions& opt) {
  // output_swiglu does not change the choice: the kernel matmul runs for these options.
  const kernels::KernelInfo* k = choose_kernel(w, n, opt.workspace ? opt.workspace_bytes : 0,
                                               opt.dependent_launch, opt.input_rms);
  return k != nullptr && kernels::takes_output_swiglu(*k, w, n);
}

}  // namespace sparrow
