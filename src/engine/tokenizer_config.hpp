// The parts of a model directory's tokenizer_config.json (written by transformers) that change
// how sparrow tokenizes: whether BOS is added, and which token it is.
#pragma once

#include <optional>
#include <string>

#include "sparrow/status.hpp"

namespace sparrow::engine {

struct TokenizerConfig {
  std::optional<bool> add_bos_token;  // absent or null: the tokenizer's own default
  std::string bos_token;              // "" when absent or null
};

// Reads `path`; corrupt_data naming the file when it is not a JSON object or add_bos_token /
// bos_token have the wrong type (bos_token: a string or {"content": string}).
Result<TokenizerConfig> read_tokenizer_config(const std::string& path);

}  // namespace sparrow::engine
