// tca_bme.wgmma run function: the checks tca_bme.mma runs, a Hopper check, then the dtype's
// launcher (wgmma_kernel.cuh, instantiated in the *.sm90a.cu files).
#include "kernels/tca_bme/wgmma.hpp"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <string>
#include <variant>

#include "kernels/device_info.hpp"

namespace sparrow::kernels::tca_bme_wgmma {

bool available() {
  const auto info = current_device_info();
  return info.ok() && info.value().cc_major == 9 && info.value().cc_minor == 0;
}

Status run(const Problem& p, Stream stream) {
  tca_bme_mma::WeightArgs wa;
  tc::XYArgs a;
  SPARROW_RETURN_IF_ERROR(tca_bme_mma::prepare(p, "tca_bme.wgmma", wa, a));
  if (!available()) {
    SPARROW_ASSIGN_OR_RETURN(const DeviceInfo info, current_device_info());
    return unsupported("tca_bme.wgmma: needs a compute capability 9.0 GPU (Hopper, wgmma); this "
                       "one is " + std::to_string(info.cc_major) + "." +
                       std::to_string(info.cc_minor) + " (tca_bme.mma runs there)");
  }
  const auto& w = std::get<tca_bme::Matrix>(p.w);
  auto* st = reinterpret_cast<cudaStream_t>(stream);
  const bool dep = p.opt.dependent_launch;
  return w.shape.dtype == DType::bf16 ? tca_bme_wgmma::launch_bf16(wa, a, int(w.groups_m), dep, st)
                                      : tca_bme_wgmma::launch_fp16(wa, a, int(w.groups_m), dep, st);
}

}  // namespace sparrow::kernels::tca_bme_wgmma

namespace sparrow::kernels::tca_bme_wgmma_smem {

Status make_x_map(CUtensorMap& map, const tc::XYArgs& a, int box_rows) {
  // The driver's encoder, found through the runtime (no link against libcuda).
  static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                         &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      fn = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  if (encode == nullptr) {
    return unsupported("tca_bme.wgmma_smem: the driver has no cuTensorMapEncodeTiled");
  }
  const cuuint64_t dims[2] = {cuuint64_t(a.k), cuuint64_t(a.n)};
  const cuuint64_t strides[1] = {cuuint64_t(a.ldx) * 2};
  const cuuint32_t box[2] = {64, cuuint32_t(box_rows)};
  const cuuint32_t elem[2] = {1, 1};
  const CUresult r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, const_cast<uint16_t*>(a.x),
                            dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    return invalid_argument("tca_bme.wgmma_smem: cuTensorMapEncodeTiled refused X (error " +
                            std::to_string(int(r)) + ")");
  }
  return Status::success();
}

Status run(const Problem& p, Stream stream) {
  tca_bme_mma::WeightArgs wa;
  tc::XYArgs a;
  SPARROW_RETURN_IF_ERROR(tca_bme_mma::prepare(p, "tca_bme.wgmma_smem", wa, a));
  if (!tca_bme_wgmma::available()) {
    return unsupported("tca_bme.wgmma_smem: needs a compute capability 9.0 GPU (Hopper)");
  }
  const auto& w = std::get<tca_bme::Matrix>(p.w);
  auto* st = reinterpret_cast<cudaStream_t>(stream);
  const bool dep = p.opt.dependent_launch;
  // The X tile comes by TMA, which needs 16-byte aligned rows: otherwise tca_bme.mma.
  if (!a.x_vec) {
    return w.shape.dtype == DType::bf16
               ? tca_bme_mma::launch_bf16(wa, a, int(w.groups_m), dep, st)
               : tca_bme_mma::launch_fp16(wa, a, int(w.groups_m), dep, st);
  }
  return w.shape.dtype == DType::bf16
             ? tca_bme_wgmma_smem::launch_bf16(wa, a, int(w.groups_m), dep, st)
             : tca_bme_wgmma_smem::launch_fp16(wa, a, int(w.groups_m), dep, st);
}

}  // namespace sparrow::kernels::tca_bme_wgmma_smem
