// Matrix views (non-owning, row-major with a leading dimension) and an owning host matrix.
//
// The library's one convention, as in PyTorch's nn.Linear: a weight W is M x K (out x in),
// activations are token-major, X is N x K, Y is N x M, and Y = X * W^T.
#pragma once

#include <cstdint>
#include <vector>

#include "sparrow/dtype.hpp"
#include "sparrow/status.hpp"

namespace sparrow {

struct ConstMatrixView {
  const void* data = nullptr;
  DType dtype = DType::fp16;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t ld = 0;  // elements between the starts of consecutive rows (>= cols)

  float at(int64_t r, int64_t c) const { return load_as_float(data, dtype, size_t(r * ld + c)); }
  bool zero_at(int64_t r, int64_t c) const {
    return is_zero_element(data, dtype, size_t(r * ld + c));
  }
};

struct MatrixView {
  void* data = nullptr;
  DType dtype = DType::fp16;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t ld = 0;

  operator ConstMatrixView() const { return {data, dtype, rows, cols, ld}; }  // NOLINT
  float at(int64_t r, int64_t c) const { return load_as_float(data, dtype, size_t(r * ld + c)); }
  void set(int64_t r, int64_t c, float v) { store_from_float(data, dtype, size_t(r * ld + c), v); }
};

// Checks that a view is usable: non-null data, positive sizes, ld >= cols. `what` names the
// argument in the message ("W", "X", ...).
Status check_view(const ConstMatrixView& v, const char* what);

// Owning, contiguous (ld == cols) host matrix.
class HostMatrix {
 public:
  HostMatrix() = default;
  HostMatrix(DType dtype, int64_t rows, int64_t cols);  // zero-filled

  DType dtype() const { return dtype_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }
  size_t bytes() const { return bytes_.size(); }

  float at(int64_t r, int64_t c) const { return view().at(r, c); }
  void set(int64_t r, int64_t c, float v) { view().set(r, c, v); }
  bool zero_at(int64_t r, int64_t c) const { return view().zero_at(r, c); }

  MatrixView view() { return {bytes_.data(), dtype_, rows_, cols_, cols_}; }
  ConstMatrixView view() const { return {bytes_.data(), dtype_, rows_, cols_, cols_}; }

 private:
  DType dtype_ = DType::fp16;
  int64_t rows_ = 0;
  int64_t cols_ = 0;
  std::vector<uint8_t> bytes_;
};

// Element-wise equality with +0 == -0 and NaN == NaN (same bits); what "lossless" means here.
bool same_values(const ConstMatrixView& a, const ConstMatrixView& b);

}  // namespace sparrow
