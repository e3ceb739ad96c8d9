// The cuSPARSE baseline: CSR SpMV (N = 1) or SpMM (N > 1) on the same problem as the other
// candidates, through the generic API, with its work buffer allocated once, outside timing.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

#include "sparrow/matrix.hpp"
#include "sparrow/weight.hpp"

namespace sparrow::bench {

class CusparseCsr {
 public:
  // `copies`: device csr weights with 32-bit column indices (cuSPARSE has no 16-bit CSR), all
  // the same matrix; X (N x K) and Y (N x M) device views.
  static Result<std::unique_ptr<CusparseCsr>> create(const std::vector<Weight>& copies,
                                                    const ConstMatrixView& x, const MatrixView& y);
  ~CusparseCsr();
  CusparseCsr(const CusparseCsr&) = delete;
  CusparseCsr& operator=(const CusparseCsr&) = delete;

  Status run(int copy, cudaStream_t stream);
  const char* kernel_name() const { return spmv_ ? "cusparse.spmv" : "cusparse.spmm"; }

 private:
  CusparseCsr() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  bool spmv_ = true;
};

}  // namespace sparrow::bench
