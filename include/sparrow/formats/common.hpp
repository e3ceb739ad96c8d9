// Pieces every format shares.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "sparrow/buffer.hpp"
#include "sparrow/dtype.hpp"
#include "sparrow/matrix.hpp"
#include "sparrow/status.hpp"

namespace sparrow {

enum class Format : uint8_t { dense, csr, macko, tca_bme, tiled_csl, nm };

const char* format_name(Format f);  // "dense", "csr", ...
std::optional<Format> parse_format(std::string_view name);
constexpr Format kAllFormats[] = {Format::dense,   Format::csr,       Format::macko,
                                  Format::tca_bme, Format::tiled_csl, Format::nm};

// Logical shape and element type of an encoded weight, common to all formats.
struct Shape {
  int64_t rows = 0;  // M (out features)
  int64_t cols = 0;  // K (in features)
  DType dtype = DType::fp16;
};

// d_eff = storage_bytes / (M * K * sizeof(value)): the fraction of the dense bytes a kernel must
// read. Below 1 is a saving.
inline double effective_density(size_t storage_bytes, const Shape& s) {
  return double(storage_bytes) / (double(s.rows) * double(s.cols) * double(dtype_size(s.dtype)));
}

// Checks a dense input before encoding: a host view with positive sizes, of an allowed dtype.
Status check_encode_input(const ConstMatrixView& w, bool allow_fp32, const char* format);

}  // namespace sparrow
