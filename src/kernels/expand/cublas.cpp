// <format>.expand_cublas: band by band, expand W's rows into the workspace, then one cuBLAS GEMM
// writes the matching columns of Y (Y[:, r0:r1] is a strided view of Y with the same ld). Bands
// of tca_bme are sized to stay in L2 between the expansion and the GEMM (see band_rows).
#include <algorithm>
#include <cstdlib>
#include <string>

#include "kernels/dense/cublas.hpp"
#include "kernels/device_info.hpp"
#include "kernels/expand/expand.hpp"

namespace sparrow::kernels::expand {

namespace {

// Rows per band for one pass. tca_bme: as many as fit in a third of the L2 cache (a multiple of
// 64), so a band that was just expanded is still in L2 when cuBLAS reads it and the dense weight
// never travels to DRAM and back (measured on the H100: 11008x4096 at 50 %, N = 64, 310 -> 166 us).
// csr and macko expand a warp per row, so a band's rows are its parallelism: L2-sized bands left
// the GPU half idle (170 -> 279 us on the same problem), and they expand all rows in one pass.
// All rows when the device is unknown (no GPU: planning on the host).
int64_t band_rows(Format f, int64_t rows, size_t row_bytes) {
  // SPARROW_EXPAND_BANDS=1 bands every format (experiments; read once).
  static const bool band_all = [] {
    const char* e = std::getenv("SPARROW_EXPAND_BANDS");
    return e != nullptr && std::string(e) == "1";
  }();
  if (f != Format::tca_bme && !band_all) return rows;
  auto dev = current_device_info();
  if (!dev.ok() || dev->l2_bytes <= 0) return rows;
  const int64_t fit = int64_t(size_t(dev->l2_bytes) / 3 / row_bytes) / kBandRows * kBandRows;
  return std::min(rows, std::max(fit, kBandRows));
}

}  // namespace

WorkspaceNeed workspace(const Weight& w) {
  const Shape& s = shape_of(w);
  const size_t row_bytes = size_t(expanded_ld(s.cols)) * dtype_size(s.dtype);
  return {size_t(band_rows(format_of(w), s.rows, row_bytes)) * row_bytes,
          size_t(std::min(s.rows, kBandRows)) * row_bytes};
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
