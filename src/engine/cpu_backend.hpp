// The CPU backend with a hook on the inputs of the linear layers (for calibration statistics).
#pragma once

#include <functional>

#include "sparrow/engine/backend.hpp"

namespace sparrow::engine {

// Called before each decoder linear layer with its input: `which` is 0..6 for q, k, v, o, gate,
// up, down; x is (T, K) fp32, row-major.
using LinearInputObserver =
    std::function<void(size_t layer, int which, const float* x, int64_t T, int64_t K)>;

Result<std::unique_ptr<Backend>> make_observed_cpu_backend(std::shared_ptr<const Model> model,
                                                           const BackendOptions& opt,
                                                           LinearInputObserver observer);

}  // namespace sparrow::engine
