// STUB: replaced by the real macko format.
#include "sparrow/formats/macko.hpp"

namespace sparrow::macko {
Result<Matrix> encode(const ConstMatrixView&) { return unsupported("macko: not implemented yet"); }
Result<HostMatrix> decode(const Matrix&) { return unsupported("macko: not implemented yet"); }
Status validate(const Matrix&) { return unsupported("macko: not implemented yet"); }
}  // namespace sparrow::macko
