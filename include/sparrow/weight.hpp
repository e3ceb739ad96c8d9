// Weight: one encoded weight matrix in any format, and the operations every format has.
#pragma once

#include <string>
#include <variant>
#include <vector>

#include "sparrow/formats/csr.hpp"
#include "sparrow/formats/dense.hpp"
#include "sparrow/formats/macko.hpp"
#include "sparrow/formats/nm.hpp"
#include "sparrow/formats/tca_bme.hpp"
#include "sparrow/formats/tiled_csl.hpp"

namespace sparrow {

using Weight = std::variant<dense::Matrix, csr::Matrix, macko::Matrix, tca_bme::Matrix,
                            tiled_csl::Matrix, nm::Matrix>;

// Format-specific encoding choices; the defaults are what `encode(Format, w)` uses.
struct EncodeOptions {
  csr::IndexWidth csr_index = csr::IndexWidth::automatic;
  bool tiled_csl_reorder = true;
  nm::Pattern nm_pattern{};
};

Result<Weight> encode(Format f, const ConstMatrixView& w, const EncodeOptions& opt = {});
Result<HostMatrix> decode(const Weight& w);  // host weights only
Status validate(const Weight& w);            // host weights only

Format format_of(const Weight& w);
const Shape& shape_of(const Weight& w);
size_t storage_bytes(const Weight& w);
// Bytes of derived arrays kept with the weight (macko's row order; 0 for the other formats): not
// in files, but on the GPU next to storage_bytes.
size_t derived_bytes(const Weight& w);
double d_eff(const Weight& w);
// The d_eff a weight of format f is expected to have at density d (non-zeros / elements; fp16,
// DESIGN.md's estimates): dense 1, csr 2d (16-bit columns), macko 1.25d (+ 0.05 of gap padding
// below d = 0.2), tca_bme d + 1/16, tiled_csl 2d, nm 2:4's d (1 + 2/16). For choosing formats
// before encoding; d_eff(w) is the exact value of an encoded weight.
double expected_d_eff(Format f, double density);
Location location_of(const Weight& w);

// Stacks host weights of one format, dtype and column count along the rows (M): the result is
// the weight of the matrix [parts[0]; parts[1]; ...], built from the encoded arrays without
// decoding (dense, csr, macko; tca_bme when every part but the last has a multiple of 64 rows,
// otherwise tca_bme parts are decoded, stacked and encoded again). tiled_csl and nm return
// `unsupported`.
Result<Weight> concat_rows(const std::vector<const Weight*>& parts);
bool can_concat_rows(Format f);  // whether concat_rows stacks weights of this format

// W' = W diag(gain): multiplies column c of a host weight by gain[c] in place, keeping its
// pattern. This folds an RMSNorm's gain into the matmul that reads the norm's output, which can
// then normalise on the fly (MatmulOptions::input_rms). dense, macko and tca_bme only (the
// formats whose kernels take input_rms); the others return unsupported. A product that does not
// fit the dtype, a stored macko or tca_bme value that would round to zero, or a non-finite gain
// returns invalid_argument and leaves W unchanged.
Status scale_columns(Weight& w, const std::vector<float>& gain);
bool can_scale_columns(Format f);  // whether scale_columns scales weights of this format

// Every stored and derived array of the weight (pointer, bytes), wherever they live; empty arrays
// are left out. What a kernel reading this weight may touch, e.g. for an experiment that reads
// the bytes without computing.
struct ArrayBytes {
  const void* data = nullptr;
  size_t bytes = 0;
};
std::vector<ArrayBytes> arrays_of(const Weight& w);

// Copies every array of the weight to the current CUDA device (or back). The const overload first
// copies the weight on the host (its result owns its arrays); the rvalue one uploads from w's own
// arrays and frees each as it goes (no host copy: for a 7B model's weights that copy's fresh pages
// made up most of the upload's time).
Result<Weight> to_device(const Weight& w);
Result<Weight> to_device(Weight&& w);
Result<Weight> to_host(const Weight& w);

}  // namespace sparrow
