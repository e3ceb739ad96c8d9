// STUB: replaced by the real tiled_csl format.
#include "sparrow/formats/tiled_csl.hpp"

namespace sparrow::tiled_csl {
Result<Matrix> encode(const ConstMatrixView&, bool) { return unsupported("tiled_csl: not implemented yet"); }
Result<HostMatrix> decode(const Matrix&) { return unsupported("tiled_csl: not implemented yet"); }
Status validate(const Matrix&) { return unsupported("tiled_csl: not implemented yet"); }
}  // namespace sparrow::tiled_csl
