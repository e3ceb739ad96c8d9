// STUB: replaced with the real walk of the macko format.
#include "reference/row_entries.hpp"

namespace sparrow::reference {
void row_entries(const macko::Matrix&, int64_t, RowEntries&) {}
}  // namespace sparrow::reference
