#include "sparrow/matrix.hpp"

#include <cstring>

namespace sparrow {

Status check_view(const ConstMatrixView& v, const char* what) {
  if (v.rows <= 0 || v.cols <= 0) {
    return invalid_argument(std::string(what) + " must have positive sizes (got " +
                            std::to_string(v.rows) + " x " + std::to_string(v.cols) + ")");
  }
  if (v.data == nullptr) return invalid_argument(std::string(what) + " data pointer is null");
  if (v.ld < v.cols) {
    return invalid_argument(std::string(what) + " leading dimension " + std::to_string(v.ld) +
                            " is smaller than its column count " + std::to_string(v.cols));
  }
  return Status::success();
}

HostMatrix::HostMatrix(DType dtype, int64_t rows, int64_t cols)
    : dtype_(dtype), rows_(rows), cols_(cols), bytes_(size_t(rows * cols) * dtype_size(dtype)) {}

bool same_values(const ConstMatrixView& a, const ConstMatrixView& b) {
  if (a.rows != b.rows || a.cols != b.cols) return false;
  for (int64_t r = 0; r < a.rows; ++r) {
    for (int64_t c = 0; c < a.cols; ++c) {
      const float x = a.at(r, c), y = b.at(r, c);
      if (x == y) continue;
      if (x != x && y != y) continue;  // both NaN
      return false;
    }
  }
  return true;
}

}  // namespace sparrow
