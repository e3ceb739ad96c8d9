#include "sparrow/engine/backend.hpp"
namespace sparrow::engine {
Result<std::unique_ptr<Backend>> make_gpu_backend(std::shared_ptr<const Model>, const BackendOptions&) {
  return unsupported("the GPU backend is not built yet");
}
}  // namespace sparrow::engine
