#include "reference/row_entries.hpp"

namespace sparrow::reference {

void row_entries(const csr::Matrix& m, int64_t r, RowEntries& out) {
  const uint32_t* rp = m.row_ptr.data();
  for (uint32_t e = rp[r]; e < rp[r + 1]; ++e) {
    out.cols.push_back(m.index_bits == 16 ? m.col16.data()[e] : m.col32.data()[e]);
    out.values.push_back(load_as_float(m.values.data(), m.shape.dtype, e));
  }
}

}  // namespace sparrow::reference
