// Device allocation and copies behind Buffer<T>. Synchronous on purpose: these run when a weight
// is uploaded, never per matmul call.
#include <cuda_runtime.h>

#include "sparrow/buffer.hpp"

namespace sparrow::detail {

static Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::success();
  const Code code = (e == cudaErrorMemoryAllocation) ? Code::out_of_memory
                    : (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver)
                        ? Code::no_device
                        : Code::cuda_error;
  cudaGetLastError();  // clear the sticky-free error so later calls are not poisoned
  return {code, std::string(what) + ": " + cudaGetErrorString(e)};
}

Result<std::shared_ptr<void>> device_alloc(size_t bytes) {
  void* p = nullptr;
  Status s = cuda_status(cudaMalloc(&p, bytes), "cudaMalloc");
  if (!s.ok()) {
    if (s.code() == Code::out_of_memory) {
      return Status(Code::out_of_memory,
                    "device allocation of " + std::to_string(bytes) + " bytes failed: " +
                        s.message());
    }
    return s;
  }
  return std::shared_ptr<void>(p, [](void* q) { cudaFree(q); });
}

Status copy_to_device(void* dst, const void* src, size_t bytes) {
  return cuda_status(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "copy to device");
}

Status copy_to_host(void* dst, const void* src, size_t bytes) {
  return cuda_status(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "copy to host");
}

}  // namespace sparrow::detail
