// sparrow::matmul. For now the first registered kernel of the weight's format runs; the rule
// table and autotuner (tensor-core issue) replace this choice.
#include "kernels/kernel.hpp"

namespace sparrow {

Status matmul(const MatrixView& y, const Weight& w, const ConstMatrixView& x, Stream stream,
              const MatmulOptions& opt) {
  const Format f = format_of(w);
  for (const auto& k : kernels::all_kernels()) {
    if (k.format == f) return k.run(kernels::Problem{w, x, y, opt}, stream);
  }
  return unsupported(std::string("no GPU kernel for the ") + format_name(f) + " format yet");
}

}  // namespace sparrow
