// matmul_format_list (sparrow/dispatch.hpp): "qkv=F,o=F,gate_up=F,down=F", one format per engine
// matmul, for bench-model's and prune's --format.
#include <array>
#include <optional>
#include <string>

#include "core/comma_list.hpp"
#include "sparrow/dispatch.hpp"

namespace sparrow {

std::optional<Result<std::array<Format, 4>>> matmul_format_list(const std::string& format) {
  if (format.find('=') == std::string::npos) return std::nullopt;
  const char* names[4] = {"qkv", "o", "gate_up", "down"};
  std::array<Format, 4> out{};
  bool seen[4] = {};
  auto bad = [&](const std::string& why) -> Result<std::array<Format, 4>> {
    return invalid_argument("format list '" + format + "': " + why +
                            " (expected qkv=F,o=F,gate_up=F,down=F with F a format name)");
  };
  for (const std::string& item : split_list(format)) {
    const auto [name, value, has_value] = split_key_value(item);
    if (!has_value) return bad("'" + item + "' has no '='");
    int which = -1;
    for (int i = 0; i < 4; ++i)
      if (name == names[i]) which = i;
    if (which < 0) return bad("unknown matmul '" + name + "'");
    if (seen[which]) return bad("'" + name + "' named twice");
    const auto f = parse_format(value);
    if (!f) return bad("unknown format '" + value + "'");
    seen[which] = true;
    out[size_t(which)] = *f;
  }
  for (int i = 0; i < 4; ++i)
    if (!seen[i]) return bad("'" + std::string(names[i]) + "' missing");
  return out;
}

}  // namespace sparrow
