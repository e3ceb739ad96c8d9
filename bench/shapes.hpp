// Weight shapes of real models (from their Hugging Face config.json), for `sparrow bench`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sparrow/status.hpp"

namespace sparrow::bench {

struct LayerShape {
  std::string name;  // "llama2-7b.q_proj", or "MxK" for a shape given by hand
  int64_t m = 0;     // out features
  int64_t k = 0;     // in features
};

// The models `--shapes` knows by name, each with its distinct linear-layer shapes.
std::vector<std::string> known_models();

// "llama2-7b", "llama3-8b", "llama2-70b" (= "llama3-70b"), "opt-30b", "MxK", comma-separated
// mixes of these. Shapes repeated across entries are kept once.
Result<std::vector<LayerShape>> parse_shapes(const std::string& text);

}  // namespace sparrow::bench
