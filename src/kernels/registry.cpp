// The list of every kernel in the build. Add a kernel here when you add its launcher.
#include "kernels/csr/vector.hpp"
#include "kernels/dense/cublas.hpp"
#include "kernels/dense/gemv.hpp"
#include "kernels/expand/expand.hpp"
#include "kernels/kernel.hpp"
#include "kernels/macko/warp_row.hpp"
#include "kernels/tca_bme/decode.hpp"

namespace sparrow::kernels {

Status run_tca_bme_mma(const Problem& p, Stream stream);    // tca_bme/spmm.cu
Status run_tiled_csl_mma(const Problem& p, Stream stream);  // tiled_csl/spmm.cu
namespace tca_bme_wgmma {                                    // tca_bme/wgmma.cu
bool available();
Status run(const Problem& p, Stream stream);
}  // namespace tca_bme_wgmma
namespace tca_bme_wgmma_smem {
Status run(const Problem& p, Stream stream);
}  // namespace tca_bme_wgmma_smem

const std::vector<KernelInfo>& all_kernels() {
  static const std::vector<KernelInfo> kernels = {
      // dense.gemv is built for N <= 8: at 9..16 (two M tiles per warp) it measured 0.87-1.0x
      // cuBLAS on the Llama shapes (session 6), so matmul sends those N to cuBLAS.
      {"dense.gemv", Format::dense, 1, 8, dense_gemv::run, nullptr, dense_gemv::takes_input_rms,
       nullptr, dense_gemv::takes_output_swiglu},
      {"csr.vector", Format::csr, 1, 16, csr_vector::run},
      {"macko.warp_row", Format::macko, 1, 16, macko_warp_row::run, nullptr,
       macko_warp_row::takes_input_rms},
      {"tca_bme.decode", Format::tca_bme, 1, 16, tca_bme_decode::run, nullptr,
       tca_bme_decode::takes_input_rms},
      {"tca_bme.mma", Format::tca_bme, 8, 512, run_tca_bme_mma},
      // Hopper only (sm_90a wgmma); elsewhere matmul skips it and it returns unsupported.
      {"tca_bme.wgmma", Format::tca_bme, 32, 1 << 20, tca_bme_wgmma::run, nullptr, nullptr,
       tca_bme_wgmma::available},
      {"tca_bme.wgmma_smem", Format::tca_bme, 64, 1 << 20, tca_bme_wgmma_smem::run, nullptr,
       nullptr, tca_bme_wgmma::available},
      {"tiled_csl.mma", Format::tiled_csl, 8, 512, run_tiled_csl_mma},
      // Expand to dense in the caller's workspace, then cuBLAS: prefill-sized N on stored-sparse
      // weights (chosen only when MatmulOptions carries a workspace).
      {"csr.expand_cublas", Format::csr, 64, 1 << 20, expand::run_csr, expand::workspace},
      {"macko.expand_cublas", Format::macko, 64, 1 << 20, expand::run_macko, expand::workspace},
      {"tca_bme.expand_cublas", Format::tca_bme, 64, 1 << 20, expand::run_tca_bme,
       expand::workspace},
      // cuBLAS: the baseline and the dense fallback (prefill-sized N too).
      {"dense.cublas", Format::dense, 1, 1 << 20, &dense_cublas},
  };
  return kernels;
}

}  // namespace sparrow::kernels
