// tokenizer_config.json -> TokenizerConfig (tokenizer_config.hpp).
#include "engine/tokenizer_config.hpp"

#include <nlohmann/json.hpp>

#include "io/json_file.hpp"

namespace sparrow::engine {

using nlohmann::json;

Result<TokenizerConfig> read_tokenizer_config(const std::string& path) {
  SPARROW_ASSIGN_OR_RETURN(const json j, io::read_json_object(path));
  TokenizerConfig c;
  if (j.contains("add_bos_token") && !j["add_bos_token"].is_null()) {
    if (!j["add_bos_token"].is_boolean()) {
      return corrupt_data("'" + path + "': add_bos_token is not true/false");
    }
    c.add_bos_token = j["add_bos_token"].get<bool>();
  }
  if (j.contains("bos_token") && !j["bos_token"].is_null()) {
    // transformers writes a plain string or, for an AddedToken, an object with its content.
    const json& b = j["bos_token"];
    if (b.is_string()) {
      c.bos_token = b.get<std::string>();
    } else if (b.is_object() && b.contains("content") && b["content"].is_string()) {
      c.bos_token = b["content"].get<std::string>();
    } else {
      return corrupt_data("'" + path + "': bos_token is neither a string nor {\"content\": ...}");
    }
  }
  return c;
}

}  // namespace sparrow::engine
