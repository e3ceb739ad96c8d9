// read_json_object (json_file.hpp).
#include "io/json_file.hpp"

#include <fstream>
#include <sstream>

namespace sparrow::io {

Result<nlohmann::json> read_json_object(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status(Code::io_error, "cannot read '" + path + "'");
  std::ostringstream text;
  text << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return corrupt_data("'" + path + "' is not a JSON object");
  }
  return j;
}

}  // namespace sparrow::io
