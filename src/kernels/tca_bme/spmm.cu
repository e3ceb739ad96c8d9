// tca_bme.mma run function: argument checks (shared with tca_bme.wgmma), then the dtype's
// launcher (spmm_kernel.cuh).
#include <cstdint>
#include <string>
#include <variant>

#include "kernels/kernel.hpp"
#include "kernels/tca_bme/spmm.hpp"
#include "kernels/tca_bme/spmm_kernel.cuh"

namespace sparrow::kernels {

namespace tca_bme_mma {

Status prepare(const Problem& p, const char* name, WeightArgs& wa, tc::XYArgs& a) {
  SPARROW_RETURN_IF_ERROR(check_problem(p, Format::tca_bme));
  const std::string n = name;
  const auto& w = std::get<tca_bme::Matrix>(p.w);
  const Shape& s = w.shape;
  if (s.dtype != DType::fp16 && s.dtype != DType::bf16) {
    return invalid_argument(n + ": fp16 or bf16 only");
  }
  if (s.rows > INT32_MAX || s.cols > INT32_MAX || p.n() > INT32_MAX || w.groups_m > 65535) {
    return invalid_argument(n + ": M, K and N must be below 2^31 and M below 65535 * 64");
  }
  if (w.groups_m != (s.rows + 63) / 64 || w.groups_k != (s.cols + 63) / 64 ||
      w.group_offsets.size() != size_t(w.groups() + 1) ||
      w.bitmaps.size() != size_t(w.groups() * 64)) {
    return invalid_argument(n + ": the weight's arrays do not match its shape");
  }
  // The stages hold max_group_values values; 0 with non-zeros means derive() never ran.
  if (w.max_group_values < 0 || w.max_group_values > tca_bme::kGroupRows * tca_bme::kGroupCols ||
      (w.max_group_values == 0 && w.nnz > 0)) {
    return invalid_argument(n + ": the weight's max_group_values (" +
                            std::to_string(w.max_group_values) +
                            ") is not derived from its group offsets (tca_bme::derive)");
  }
  const double density = double(w.nnz) / (double(s.rows) * double(s.cols));
  wa = WeightArgs{w.bitmaps.data(), w.group_offsets.data(), w.values.data(), int(w.groups_k),
                  int((w.max_group_values + 7) / 8 * 8), swap_pairs_for(density),
                  warp_columns_for(density)};
  a = tc::xy_args(p, s.rows, s.cols);
  return Status::success();
}

}  // namespace tca_bme_mma

Status run_tca_bme_mma(const Problem& p, Stream stream) {
  tca_bme_mma::WeightArgs wa;
  tc::XYArgs a;
  SPARROW_RETURN_IF_ERROR(tca_bme_mma::prepare(p, "tca_bme.mma", wa, a));
  const auto& w = std::get<tca_bme::Matrix>(p.w);
  auto* st = reinterpret_cast<cudaStream_t>(stream);
  const bool dep = p.opt.dependent_launch;
  return w.shape.dtype == DType::bf16 ? tca_bme_mma::launch_bf16(wa, a, int(w.groups_m), dep, st)
                                      : tca_bme_mma::launch_fp16(wa, a, int(w.groups_m), dep, st);
}

}  // namespace sparrow::kernels
