// <format>.expand_cublas: Y = X * W^T for a compressed W by expanding W (or a band of its rows) to
// dense in a caller-given workspace and running cuBLAS on it. Flash-LLM's "load as sparse,
// compute as dense" taken to the whole matrix: for prefill-sized N the tensor-core GEMM is
// compute-bound, so one extra pass that writes the dense weight (2 bytes per element, hitting L2
// for the part that fits) costs less than a sparse kernel whose inner loop decodes per token tile.
// See docs/kernels.md ("expand_cublas").
#pragma once

#include <cstdint>

#include "kernels/kernel.hpp"

namespace sparrow::kernels::expand {

// Rows of one band: tca_bme's 64-row group tiles must not straddle bands, and cuBLAS is given
// row offsets that keep Y 128-byte aligned.
constexpr int64_t kBandRows = 64;

// The expanded weight's leading dimension: K rounded up to 8 elements (16-byte rows for cuBLAS).
int64_t expanded_ld(int64_t k);

// Writes rows [r0, r1) of the device weight `w` (csr, macko or tca_bme) as a dense row-major
// (r1 - r0) x ld matrix of W's dtype at `dst` (16-byte aligned; columns K..ld are written as 0).
// r0 is a multiple of kBandRows. Asynchronous on `stream`.
Status expand_rows(const Weight& w, int64_t r0, int64_t r1, void* dst, int64_t ld, Stream stream);

// The whole expanded W (full) and one band (min).
WorkspaceNeed workspace(const Weight& w);

// The registry's run functions: check the problem, then band by band expand_rows + cuBLAS.
Status run_csr(const Problem& p, Stream stream);
Status run_macko(const Problem& p, Stream stream);
Status run_tca_bme(const Problem& p, Stream stream);

}  // namespace sparrow::kernels::expand
