// STUB: replaced by the real nm format.
#include "sparrow/formats/nm.hpp"

namespace sparrow::nm {
Result<Matrix> encode(const ConstMatrixView&, const Pattern&) { return unsupported("nm: not implemented yet"); }
Result<HostMatrix> decode(const Matrix&) { return unsupported("nm: not implemented yet"); }
Status validate(const Matrix&) { return unsupported("nm: not implemented yet"); }
}  // namespace sparrow::nm
namespace sparrow::nm {
std::optional<Pattern> parse_pattern(std::string_view) { return std::nullopt; }
Status check_pattern(const Pattern&) { return unsupported("nm: not implemented yet"); }
}  // namespace sparrow::nm
