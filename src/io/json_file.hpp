// Reading a small JSON file (config.json, generation_config.json, tokenizer.json,
// tokenizer_config.json) whose top level must be an object.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "sparrow/status.hpp"

namespace sparrow::io {

// io_error when the file cannot be read, corrupt_data when it is not a JSON object; both name it.
Result<nlohmann::json> read_json_object(const std::string& path);

}  // namespace sparrow::io
