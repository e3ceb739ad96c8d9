// scale_columns: W' = W diag(gain) on a host weight, computed into a copy of the values and
// swapped in only when every product is finite, so a refusal leaves W as it was.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "sparrow/weight.hpp"

namespace sparrow {

namespace {

// value * gain rounded to t into out[index]; false when the rounded product is not finite.
bool scaled(std::vector<uint8_t>& out, const void* in, DType t, size_t index, float gain) {
  const float v = round_to_dtype(load_as_float(in, t, index) * gain, t);
  if (!std::isfinite(v)) return false;
  store_from_float(out.data(), t, index, v);
  return true;
}

Status overflow(int64_t col) {
  return invalid_argument("scale_columns: column " + std::to_string(col) +
                          " times its gain does not fit the weight's dtype; W is unchanged");
}

Status scale_dense(dense::Matrix& m, const std::vector<float>& gain) {
  const DType t = m.shape.dtype;
  std::vector<uint8_t> out = m.values.host();
  for (int64_t r = 0; r < m.shape.rows; ++r)
    for (int64_t c = 0; c < m.shape.cols; ++c)
      if (!scaled(out, m.values.data(), t, size_t(r * m.ld + c), gain[size_t(c)])) return overflow(c);
  m.values = Buffer<uint8_t>(std::move(out));
  return {};
}

// Values are 16-bit elements; a padding entry holds 0 and stays 0.
Status scale_macko(macko::Matrix& m, const std::vector<float>& gain) {
  const DType t = m.shape.dtype;
  const std::vector<uint16_t>& in = m.values.host();
  std::vector<uint8_t> out(in.size() * sizeof(uint16_t));
  const uint32_t* row_ptr = m.row_ptr.data();
  const uint8_t* deltas = m.deltas.data();
  for (int64_t r = 0; r < m.shape.rows; ++r) {
    int64_t col = -1;  // col_0 = delta_0, col_j = col_{j-1} + delta_j + 1 (as the reference walks)
    for (uint64_t e = row_ptr[r]; e < row_ptr[r + 1]; ++e) {
      col += ((deltas[e / 2] >> (e % 2 == 0 ? 0 : 4)) & 0xF) + 1;
      if (col >= m.shape.cols) return invalid_argument("scale_columns: malformed macko row");
      if (!scaled(out, in.data(), t, size_t(e), gain[size_t(col)])) return overflow(col);
    }
  }
  std::vector<uint16_t> values(in.size());
  std::memcpy(values.data(), out.data(), out.size());
  m.values = Buffer<uint16_t>(std::move(values));
  return {};
}

}  // namespace

Status scale_columns(Weight& w, const std::vector<float>& gain) {
  if (location_of(w) != Location::host) return invalid_argument("scale_columns: host weights only");
  const Shape& s = shape_of(w);
  if (int64_t(gain.size()) != s.cols) {
    return invalid_argument("scale_columns: " + std::to_string(gain.size()) + " gains for " +
                            std::to_string(s.cols) + " columns");
  }
  for (float g : gain)
    if (!std::isfinite(g)) return invalid_argument("scale_columns: a gain is not finite");
  if (auto* d = std::get_if<dense::Matrix>(&w)) return scale_dense(*d, gain);
  if (auto* m = std::get_if<macko::Matrix>(&w)) {
    SPARROW_RETURN_IF_ERROR(validate(w));
    return scale_macko(*m, gain);
  }
  return unsupported(std::string("scale_columns: ") + format_name(format_of(w)) +
                     " weights (dense and macko only)");
}

}  // namespace sparrow
