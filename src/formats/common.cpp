#include "sparrow/formats/common.hpp"

#include <string>

namespace sparrow {

const char* format_name(Format f) {
  switch (f) {
    case Format::dense: return "dense";
    case Format::csr: return "csr";
    case Format::macko: return "macko";
    case Format::tca_bme: return "tca_bme";
    case Format::tiled_csl: return "tiled_csl";
    case Format::nm: return "nm";
  }
  return "?";
}

std::optional<Format> parse_format(std::string_view name) {
  for (Format f : kAllFormats) {
    if (name == format_name(f)) return f;
  }
  return std::nullopt;
}

Status check_encode_input(const ConstMatrixView& w, bool allow_fp32, const char* format) {
  SPARROW_RETURN_IF_ERROR(check_view(w, "weight"));
  if (w.dtype == DType::fp32 && !allow_fp32) {
    return unsupported(std::string(format) + " stores 16-bit values only (fp16 or bf16); got fp32");
  }
  return Status::success();
}

}  // namespace sparrow
