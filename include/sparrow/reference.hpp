// The CPU reference: Y = X * W^T (+ bias) (+ Y if accumulate), for every format, walking the
// format's own structure and accumulating in double. Every kernel is tested against it.
#pragma once

#include <vector>

#include "sparrow/matrix.hpp"
#include "sparrow/weight.hpp"

namespace sparrow::reference {

struct Options {
  const void* bias = nullptr;  // (M) elements of bias_dtype, or null
  DType bias_dtype = DType::fp32;
  bool accumulate = false;     // Y += X * W^T instead of Y = X * W^T
  // MatmulOptions::input_rms: row n of X * W^T is divided by sqrt(mean(x_n^2) + rms_eps) (before
  // bias and accumulate).
  bool input_rms = false;
  double rms_eps = 0.0;
};

// X: N x K, Y: N x M (host views). Y's dtype may differ from X's; results are rounded once.
Status matmul(const Weight& w, const ConstMatrixView& x, const MatrixView& y,
              const Options& opt = {});

// The same product kept in double (N x M, row-major), for error measurements. `y_in` is the
// initial Y when opt.accumulate is set.
Result<std::vector<double>> matmul_f64(const Weight& w, const ConstMatrixView& x,
                                       const Options& opt = {},
                                       const ConstMatrixView* y_in = nullptr);

// ||y - ref|| / ||ref|| over all elements (0 when both are zero); infinity if y has a NaN/Inf
// where ref is finite.
double normalized_error(const ConstMatrixView& y, const std::vector<double>& ref);

}  // namespace sparrow::reference
