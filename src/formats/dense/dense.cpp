#include "sparrow/formats/dense.hpp"

#include <cstring>
#include <string>

namespace sparrow::dense {

static int64_t round_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

Result<Matrix> encode(const ConstMatrixView& w) {
  SPARROW_RETURN_IF_ERROR(check_encode_input(w, /*allow_fp32=*/true, "dense"));
  Matrix m;
  m.shape = {w.rows, w.cols, w.dtype};
  m.ld = round_up(w.cols, kRowAlign);
  const size_t es = dtype_size(w.dtype);
  std::vector<uint8_t> v(size_t(w.rows * m.ld) * es, 0);
  for (int64_t r = 0; r < w.rows; ++r) {
    std::memcpy(v.data() + size_t(r * m.ld) * es,
                static_cast<const uint8_t*>(w.data) + size_t(r * w.ld) * es, size_t(w.cols) * es);
  }
  m.values = Buffer<uint8_t>(std::move(v));
  return m;
}

Status validate(const Matrix& m) {
  if (m.shape.rows <= 0 || m.shape.cols <= 0) return corrupt_data("dense: non-positive shape");
  if (m.ld != round_up(m.shape.cols, kRowAlign)) {
    return corrupt_data("dense: leading dimension " + std::to_string(m.ld) + " is not cols " +
                        std::to_string(m.shape.cols) + " rounded up to 8");
  }
  const size_t want = size_t(m.shape.rows * m.ld) * dtype_size(m.shape.dtype);
  if (m.values.size() != want) {
    return corrupt_data("dense: values hold " + std::to_string(m.values.size()) +
                        " bytes, the shape needs " + std::to_string(want));
  }
  return Status::success();
}

Result<HostMatrix> decode(const Matrix& m) {
  SPARROW_RETURN_IF_ERROR(validate(m));
  HostMatrix out(m.shape.dtype, m.shape.rows, m.shape.cols);
  const size_t es = dtype_size(m.shape.dtype);
  for (int64_t r = 0; r < m.shape.rows; ++r) {
    std::memcpy(static_cast<uint8_t*>(out.data()) + size_t(r * m.shape.cols) * es,
                m.values.data() + size_t(r * m.ld) * es, size_t(m.shape.cols) * es);
  }
  return out;
}

}  // namespace sparrow::dense
