#include "core/comma_list.hpp"

namespace sparrow {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  const size_t e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  if (trim(s).empty()) return out;
  for (size_t at = 0;;) {
    const size_t comma = s.find(',', at);
    out.push_back(trim(s.substr(at, comma == std::string::npos ? std::string::npos : comma - at)));
    if (comma == std::string::npos) return out;
    at = comma + 1;
  }
}

KeyValue split_key_value(const std::string& item) {
  const size_t eq = item.find('=');
  if (eq == std::string::npos) return {trim(item), "", false};
  return {trim(item.substr(0, eq)), trim(item.substr(eq + 1)), true};
}

}  // namespace sparrow
