// <format>.expand_cublas: band by band, expand W's rows into the workspace, then one cuBLAS GEMM
// writes the matching columns of Y (Y[:, r0:r1] is a strided view of Y with the same ld). One band
// (the whole matrix) when the workspace allows: bands sized to stay in L2 between the expansion and
// the GEMM measured slower once the expansion ran near the memory bandwidth (H100, 11008x4096 at
// 50 %, N = 256: tca_bme 122 us in bands of a third of L2, 96 us in one pass; macko 126 vs 95 us;
// bench/NOTES-decode.md, session 7): a band's rows are the expansion's parallelism.
#include <algorithm>
#include <string>

#include "kernels/dense/cublas.hpp"
#include "kernels/expand/expand.hpp"

namespace sparrow::kernels::expand {

WorkspaceNeed workspace(const Weight& w) {
  const Shape& s = shape_of(w);
  const size_t row_bytes = size_t(expanded_ld(s.cols)) * dtype_size(s.dtype);
  return {size_t(s.rows) * row_bytes, size_t(std::min(s.rows, kBandRows)) * row_bytes};
}

namespace {

Status run_expanded(const Problem& p, Format f, Stream stream) {
  SPARROW_RETURN_IF_ERROR(check_problem(p, f));
  const Shape& s = shape_of(p.w);
  const WorkspaceNeed need = workspace(p.w);
  const std::string name = std::string(format_name(f)) + ".expand_cublas";
  if (p.opt.workspace == nullptr || p.opt.workspace_bytes < need.min) {
    return invalid_argument(name + " needs a device workspace (MatmulOptions::workspace) of at least " +
                            std::to_string(need.min) + " bytes, " + std::to_string(need.full) +
                            " for one pass; got " + std::to_string(p.opt.workspace_bytes));
  }
  if (reinterpret_cast<uintptr_t>(p.opt.workspace) % 16 != 0) {
    return invalid_argument(name + ": the workspace must be 16-byte aligned");
  }
  const int64_t ld = expanded_ld(s.cols);
  const size_t es = dtype_size(s.dtype);
  const size_t row_bytes = size_t(ld) * es;
  int64_t band = int64_t(std::min(need.full, p.opt.workspace_bytes) / row_bytes);
  if (band < s.rows) band = band / kBandRows * kBandRows;

  for (int64_t r0 = 0; r0 < s.rows; r0 += band) {
    const int64_t r1 = std::min(s.rows, r0 + band);
    SPARROW_RETURN_IF_ERROR(expand_rows(p.w, r0, r1, p.opt.workspace, ld, stream));
    MatrixView y = p.y;
    y.data = static_cast<char*>(p.y.data) + size_t(r0) * es;
    y.cols = r1 - r0;
    MatmulOptions opt = p.opt;
    if (opt.bias) opt.bias = static_cast<const char*>(opt.bias) + size_t(r0) * es;
    SPARROW_RETURN_IF_ERROR(
        detail::cublas_gemm(p.opt.workspace, r1 - r0, s.cols, ld, p.x, y, opt, stream));
  }
  return Status::success();
}

}  // namespace

Status run_csr(const Problem& p, Stream stream) { return run_expanded(p, Format::csr, stream); }
Status run_macko(const Problem& p, Stream stream) {
  return run_expanded(p, Format::macko, stream);
}
Status run_tca_bme(const Problem& p, Stream stream) {
  return run_expanded(p, Format::tca_bme, stream);
}

}  // namespace sparrow::kernels::expand
