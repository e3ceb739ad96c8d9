// tiled_csl.mma run function: argument checks, then the dtype's launcher (spmm_kernel.cuh).
#include <cstdint>
#include <variant>

#include "kernels/kernel.hpp"
#include "kernels/tiled_csl/spmm.hpp"
#include "kernels/tiled_csl/spmm_kernel.cuh"

namespace sparrow::kernels {

Status run_tiled_csl_mma(const Problem& p, Stream stream) {
  SPARROW_RETURN_IF_ERROR(check_problem(p, Format::tiled_csl));
  const auto& w = std::get<tiled_csl::Matrix>(p.w);
  const Shape& s = w.shape;
  if (s.dtype != DType::fp16 && s.dtype != DType::bf16) {
    return invalid_argument("tiled_csl.mma: fp16 or bf16 only");
  }
  if (s.rows > INT32_MAX || s.cols > INT32_MAX || p.n() > INT32_MAX || w.tiles_m > 65535) {
    return invalid_argument("tiled_csl.mma: M, K and N must be below 2^31 and M below 65535 * 128");
  }
  if (w.tiles_m != (s.rows + 127) / 128 || w.tiles_k != (s.cols + 63) / 64 ||
      w.tile_offsets.size() != size_t(w.tiles() + 1)) {
    return invalid_argument("tiled_csl.mma: the weight's arrays do not match its shape");
  }
  tiled_csl_mma::WeightArgs wa{w.tile_offsets.data(), w.entries.data(), int(w.tiles_k)};
  const tc::XYArgs a = tc::xy_args(p, s.rows, s.cols);
  auto* st = reinterpret_cast<cudaStream_t>(stream);
  return s.dtype == DType::bf16 ? tiled_csl_mma::launch_bf16(wa, a, int(w.tiles_m), st)
                                : tiled_csl_mma::launch_fp16(wa, a, int(w.tiles_m), st);
}

}  // namespace sparrow::kernels
