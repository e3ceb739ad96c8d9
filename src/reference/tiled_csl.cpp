// STUB: replaced with the real walk of the tiled_csl format.
#include "reference/row_entries.hpp"

namespace sparrow::reference {
void row_entries(const tiled_csl::Matrix&, int64_t, RowEntries&) {}
}  // namespace sparrow::reference
