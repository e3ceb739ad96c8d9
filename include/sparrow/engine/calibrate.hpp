// Calibration statistics for Wanda pruning: the L2 norm of every input channel of every decoder
// linear layer over a calibration text (Sun et al. 2023: score |W_ij| * ||X_j||_2).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "sparrow/engine/model.hpp"

namespace sparrow::engine {

// Runs `ids` through the CPU backend in non-overlapping windows of `ctx` tokens and returns, per
// linear layer name ("model.layers.0.self_attn.q_proj.weight", ...), sqrt(sum over tokens of
// x_j^2) for each input channel j (K values), in the form `sparrow prune --calibration` reads.
Result<std::map<std::string, std::vector<float>>> input_channel_norms(
    std::shared_ptr<const Model> model, const std::vector<int32_t>& ids, int64_t ctx);

}  // namespace sparrow::engine
