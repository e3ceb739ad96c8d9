// STUB: replaced by the real tca_bme format.
#include "sparrow/formats/tca_bme.hpp"

namespace sparrow::tca_bme {
Result<Matrix> encode(const ConstMatrixView&) { return unsupported("tca_bme: not implemented yet"); }
Result<HostMatrix> decode(const Matrix&) { return unsupported("tca_bme: not implemented yet"); }
Status validate(const Matrix&) { return unsupported("tca_bme: not implemented yet"); }
}  // namespace sparrow::tca_bme
