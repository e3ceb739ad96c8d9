#include "reference/row_entries.hpp"

namespace sparrow::reference {

void row_entries(const dense::Matrix& m, int64_t r, RowEntries& out) {
  for (int64_t c = 0; c < m.shape.cols; ++c) {
    out.cols.push_back(c);
    out.values.push_back(load_as_float(m.values.data(), m.shape.dtype, size_t(r * m.ld + c)));
  }
}

}  // namespace sparrow::reference
