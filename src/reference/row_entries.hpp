// Each format's reference walk: the stored elements of one row, read from the format's own
// structure (bitmaps, deltas, locations, ...), never through decode(). The reference matmul is
// built on these, so "reference of format F == dense reference" checks F's traversal logic.
// Inputs are validated before the walk.
#pragma once

#include <cstdint>
#include <vector>

#include "sparrow/weight.hpp"

namespace sparrow::reference {

struct RowEntries {
  std::vector<int64_t> cols;
  std::vector<double> values;
  void clear() {
    cols.clear();
    values.clear();
  }
};

// Appends (col, value) for every element the format stores in row r (explicit zeros allowed,
// columns in any order, each column at most once).
void row_entries(const dense::Matrix& m, int64_t r, RowEntries& out);
void row_entries(const csr::Matrix& m, int64_t r, RowEntries& out);
void row_entries(const macko::Matrix& m, int64_t r, RowEntries& out);
void row_entries(const tca_bme::Matrix& m, int64_t r, RowEntries& out);
void row_entries(const tiled_csl::Matrix& m, int64_t r, RowEntries& out);
void row_entries(const nm::Matrix& m, int64_t r, RowEntries& out);

}  // namespace sparrow::reference
