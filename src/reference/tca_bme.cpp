// STUB: replaced with the real walk of the tca_bme format.
#include "reference/row_entries.hpp"

namespace sparrow::reference {
void row_entries(const tca_bme::Matrix&, int64_t, RowEntries&) {}
}  // namespace sparrow::reference
