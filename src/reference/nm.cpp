// Reference walk of nm: row r belongs to row block r / L; for every group read the N packed
// indices of that block and take the kept value of row r at each, skipping columns past K.
#include "formats/nm/nm_bits.hpp"
#include "reference/row_entries.hpp"

namespace sparrow::reference {

void row_entries(const nm::Matrix& m, int64_t r, RowEntries& out) {
  const int64_t N = m.pattern.n, M = m.pattern.m, K = m.shape.cols, kc = m.kept_cols();
  const uint32_t* words = m.indices.data() + size_t(r / m.pattern.l) * size_t(m.words_per_block);
  const uint16_t* values = m.values.data() + size_t(r) * size_t(kc);
  for (int64_t g = 0; g < m.groups; ++g) {
    for (int64_t j = 0; j < N; ++j) {
      const int64_t col = g * M + nm::get_index(words, (g * N + j) * m.index_bits, m.index_bits);
      if (col >= K) continue;  // a zero filler past the last column
      out.cols.push_back(col);
      out.values.push_back(load_as_float(values, m.shape.dtype, size_t(g * N + j)));
    }
  }
}

}  // namespace sparrow::reference
