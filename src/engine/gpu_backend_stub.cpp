#include <cuda_runtime.h>

#include "sparrow/engine/backend.hpp"
namespace sparrow::engine {
bool gpu_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}
Result<std::unique_ptr<Backend>> make_gpu_backend(std::shared_ptr<const Model>, const BackendOptions&) {
  return unsupported("the GPU backend is not built yet");
}
}  // namespace sparrow::engine
