// Reference walk of one macko row: decode the 4-bit deltas in order, as a kernel would.
#include "reference/row_entries.hpp"

namespace sparrow::reference {

void row_entries(const macko::Matrix& m, int64_t r, RowEntries& out) {
  const uint32_t begin = m.row_ptr.data()[r], end = m.row_ptr.data()[r + 1];
  const uint8_t* deltas = m.deltas.data();
  int64_t col = -1;  // col_0 = delta_0, col_j = col_{j-1} + delta_j + 1
  for (uint64_t e = begin; e < end; ++e) {
    col += macko::delta_at(deltas, e) + 1;
    // Gap padding entries are stored zeros; they go in like any other entry.
    out.cols.push_back(col);
    out.values.push_back(load_as_float(m.values.data(), m.shape.dtype, e));
  }
}

}  // namespace sparrow::reference
