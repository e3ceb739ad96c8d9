// sparrow::matmul: picks the kernel for the weight's format and N from the rule table
// (rule_table.cpp) and runs it. The choice costs a scan of a small table and no allocation on the
// common path.
#include "kernels/kernel.hpp"
#include "dispatch/choose.hpp"
#include "sparrow/dispatch.hpp"

namespace sparrow {

Status matmul(const MatrixView& y, const Weight& w, const ConstMatrixView& x, Stream stream,
              const MatmulOptions& opt) {
  const kernels::KernelInfo* k = choose_kernel(w, x.rows, opt.workspace ? opt.workspace_bytes : 0);
  if (k == nullptr) {
    return unsupported(std::string("no GPU kernel for the ") + format_name(format_of(w)) +
                       " format in this build");
  }
  return k->run(kernels::Problem{w, x, y, opt}, stream);
}

}  // namespace sparrow
