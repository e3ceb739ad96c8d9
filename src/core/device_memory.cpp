// Device allocation and copies behind Buffer<T>. Synchronous on purpose: these run when a weight
// is uploaded, never per matmul call.
#include "core/cuda_check.hpp"
#include "sparrow/buffer.hpp"

namespace sparrow::detail {

Result<std::shared_ptr<void>> device_alloc(size_t bytes) {
  void* p = nullptr;
  Status s = cuda_status(cudaMalloc(&p, bytes), "cudaMalloc");
  if (!s.ok()) {
    cudaGetLastError();  // an allocation failure is not sticky; clear it for later calls
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
