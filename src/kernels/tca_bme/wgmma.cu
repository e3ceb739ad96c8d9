// tca_bme.wgmma run function: the checks tca_bme.mma runs, a Hopper check, then the dtype's
// launcher (wgmma_kernel.cuh, instantiated in the *.sm90a.cu files).
#include "kernels/tca_bme/wgmma.hpp"

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
