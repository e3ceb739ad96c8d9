#include "sparrow/formats/csr.hpp"

#include <cstring>
#include <limits>
#include <string>

#include "formats/row_ptr.hpp"

namespace sparrow::csr {

Result<Matrix> encode(const ConstMatrixView& w, IndexWidth width) {
  SPARROW_RETURN_IF_ERROR(check_encode_input(w, /*allow_fp32=*/true, "csr"));
  Matrix m;
  m.shape = {w.rows, w.cols, w.dtype};
  const bool fits16 = w.cols <= 65536;
  if (width == IndexWidth::bits16 && !fits16) {
    return invalid_argument("csr: 16-bit column indices need K <= 65536 (K = " +
                            std::to_string(w.cols) + "); use 32-bit indices");
  }
  m.index_bits = (width == IndexWidth::bits32 || !fits16) ? 32 : 16;

  // First pass counts, so every array is allocated once.
  std::vector<uint32_t> row_ptr(size_t(w.rows) + 1, 0);
  uint64_t nnz = 0;
  for (int64_t r = 0; r < w.rows; ++r) {
    for (int64_t c = 0; c < w.cols; ++c) nnz += !w.zero_at(r, c);
    if (nnz > std::numeric_limits<uint32_t>::max()) {
      return unsupported("csr: more than 2^32 - 1 non-zeros do not fit 32-bit row pointers");
    }
    row_ptr[size_t(r) + 1] = uint32_t(nnz);
  }
  const size_t es = dtype_size(w.dtype);
  std::vector<uint8_t> values(nnz * es);
  std::vector<uint16_t> col16(m.index_bits == 16 ? nnz : 0);
  std::vector<uint32_t> col32(m.index_bits == 32 ? nnz : 0);
  size_t e = 0;
  for (int64_t r = 0; r < w.rows; ++r) {
    const uint8_t* row = static_cast<const uint8_t*>(w.data) + size_t(r * w.ld) * es;
    for (int64_t c = 0; c < w.cols; ++c) {
      if (w.zero_at(r, c)) continue;
      std::memcpy(&values[e * es], row + size_t(c) * es, es);
      if (m.index_bits == 16) {
        col16[e] = uint16_t(c);  // c <= 65535
      } else {
        col32[e] = uint32_t(c);
      }
      ++e;
    }
  }
  m.row_ptr = Buffer<uint32_t>(std::move(row_ptr));
  m.values = Buffer<uint8_t>(std::move(values));
  m.col16 = Buffer<uint16_t>(std::move(col16));
  m.col32 = Buffer<uint32_t>(std::move(col32));
  derive(m);
  return m;
}

void derive(Matrix& m) {
  if (m.row_ptr.on_device()) return;
  m.max_row_nnz = longest_row(m.row_ptr.host());
}

Status validate(const Matrix& m) {
  const Shape& s = m.shape;
  if (s.rows <= 0 || s.cols <= 0) return corrupt_data("csr: non-positive shape");
  if (m.index_bits != 16 && m.index_bits != 32) {
    return corrupt_data("csr: index_bits must be 16 or 32, got " + std::to_string(m.index_bits));
  }
  if (m.index_bits == 16 && s.cols > 65536) {
    return corrupt_data("csr: 16-bit indices with K = " + std::to_string(s.cols) + " > 65536");
  }
  if (m.row_ptr.size() != size_t(s.rows) + 1) {
    return corrupt_data("csr: row_ptr has " + std::to_string(m.row_ptr.size()) +
                        " entries, expected rows + 1 = " + std::to_string(s.rows + 1));
  }
  const size_t es = dtype_size(s.dtype);
  if (m.values.size() % es != 0) return corrupt_data("csr: values size is not whole elements");
  const uint64_t nnz = m.values.size() / es;
  const size_t ncols = m.index_bits == 16 ? m.col16.size() : m.col32.size();
  const size_t nother = m.index_bits == 16 ? m.col32.size() : m.col16.size();
  if (ncols != nnz || nother != 0) {
    return corrupt_data("csr: " + std::to_string(ncols) + " column indices for " +
                        std::to_string(nnz) + " values");
  }
  const uint32_t* rp = m.row_ptr.data();
  if (rp[0] != 0) return corrupt_data("csr: row_ptr[0] is " + std::to_string(rp[0]) + ", not 0");
  if (rp[s.rows] != nnz) {
    return corrupt_data("csr: row_ptr[rows] = " + std::to_string(rp[s.rows]) +
                        " but there are " + std::to_string(nnz) + " values");
  }
  for (int64_t r = 0; r < s.rows; ++r) {
    if (rp[r + 1] < rp[r]) {
      return corrupt_data("csr: row_ptr decreases at row " + std::to_string(r));
    }
    int64_t prev = -1;
    for (uint32_t e = rp[r]; e < rp[r + 1]; ++e) {
      const int64_t c = m.index_bits == 16 ? m.col16.data()[e] : m.col32.data()[e];
      if (c <= prev || c >= s.cols) {
        return corrupt_data("csr: row " + std::to_string(r) + " has column " + std::to_string(c) +
                            (c >= s.cols ? " out of range" : " out of order"));
      }
      prev = c;
    }
  }
  if (const int64_t longest = longest_row(m.row_ptr.host()); m.max_row_nnz != longest) {
    return corrupt_data("csr: max_row_nnz is " + std::to_string(m.max_row_nnz) +
                        " but the longest row has " + std::to_string(longest) +
                        " non-zeros (call derive())");
  }
  return Status::success();
}

Result<HostMatrix> decode(const Matrix& m) {
  SPARROW_RETURN_IF_ERROR(validate(m));
  const size_t es = dtype_size(m.shape.dtype);
  HostMatrix out(m.shape.dtype, m.shape.rows, m.shape.cols);
  uint8_t* o = static_cast<uint8_t*>(out.data());
  const uint32_t* rp = m.row_ptr.data();
  for (int64_t r = 0; r < m.shape.rows; ++r) {
    for (uint32_t e = rp[r]; e < rp[r + 1]; ++e) {
      const int64_t c = m.index_bits == 16 ? m.col16.data()[e] : m.col32.data()[e];
      std::memcpy(o + size_t(r * m.shape.cols + c) * es, m.values.data() + e * es, es);
    }
  }
  return out;
}

}  // namespace sparrow::csr
