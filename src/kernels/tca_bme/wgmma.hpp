// tca_bme.wgmma (wgmma_kernel.cuh) and tca_bme.wgmma_smem (smem_wgmma_kernel.cuh): launchers per
// dtype, built for sm_90a only (wgmma_fp16.sm90a.cu, wgmma_bf16.sm90a.cu), and the KernelInfo
// functions (wgmma.cu).
#pragma once

#include <cuda_runtime.h>

#include "kernels/kernel.hpp"
#include "kernels/tca_bme/spmm.hpp"

namespace sparrow::kernels::tca_bme_wgmma {

Status launch_fp16(const tca_bme_mma::WeightArgs& w, const tc::XYArgs& a, int groups_m,
                   bool dependent, cudaStream_t s);
Status launch_bf16(const tca_bme_mma::WeightArgs& w, const tc::XYArgs& a, int groups_m,
                   bool dependent, cudaStream_t s);
// Whether the current device runs sm_90a code (compute capability 9.0 exactly: wgmma code built
// for 9.0a runs on no other GPU); both Hopper kernels' KernelInfo::available.
bool available();
Status run(const Problem& p, Stream stream);

}  // namespace sparrow::kernels::tca_bme_wgmma

namespace sparrow::kernels::tca_bme_wgmma_smem {

Status launch_fp16(const tca_bme_mma::WeightArgs& w, const tc::XYArgs& a, int groups_m,
                   bool dependent, cudaStream_t s);
Status launch_bf16(const tca_bme_mma::WeightArgs& w, const tc::XYArgs& a, int groups_m,
                   bool dependent, cudaStream_t s);
Status run(const Problem& p, Stream stream);

}  // namespace sparrow::kernels::tca_bme_wgmma_smem
