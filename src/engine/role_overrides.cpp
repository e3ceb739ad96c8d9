#include "engine/role_overrides.hpp"

#include <cstdlib>
#include <sstream>
#include <vector>

namespace sparrow::engine {

namespace {

constexpr const char* kRoleNames[int(LayerRole::count)] = {
    "qkv", "q", "k", "v", "o", "gate_up", "gate", "up", "down", "lm_head"};

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  const size_t e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(trim(item));
  return out;
}

Result<int> role_index(const std::string& name, const char* knob) {
  for (int i = 0; i < int(LayerRole::count); ++i) {
    if (name == kRoleNames[i]) return i;
  }
  std::string known;
  for (const char* r : kRoleNames) known += std::string(known.empty() ? "" : ", ") + r;
  const bool skip = std::string(knob) == "SPARROW_ENGINE_SKIP";
  return invalid_argument(std::string(knob) + ": unknown layer role '" + name + "' (roles: " +
                          known + (skip ? "; ops: attention, swiglu" : "") + ")");
}

}  // namespace

const char* role_name(LayerRole r) {
  const int i = int(r);
  return i >= 0 && i < int(LayerRole::count) ? kRoleNames[i] : "?";
}

bool RoleOverrides::skips() const {
  for (bool s : skip) {
    if (s) return true;
  }
  return skip_attention || skip_swiglu;
}

bool RoleOverrides::any() const {
  for (const kernels::KernelInfo* k : kernel) {
    if (k) return true;
  }
  return skips();
}

std::string RoleOverrides::describe() const {
  std::string forced, skipped;
  for (int i = 0; i < int(LayerRole::count); ++i) {
    if (kernel[i]) {
      forced += std::string(forced.empty() ? "" : ", ") + kRoleNames[i] + "=" + kernel[i]->name;
    }
    if (skip[i]) skipped += std::string(skipped.empty() ? "" : ", ") + kRoleNames[i];
  }
  if (skip_attention) skipped += std::string(skipped.empty() ? "" : ", ") + "attention";
  if (skip_swiglu) skipped += std::string(skipped.empty() ? "" : ", ") + "swiglu";
  std::string out = forced;
  if (!skipped.empty()) out += std::string(out.empty() ? "" : "; ") + "skip " + skipped;
  return out;
}

Result<RoleOverrides> parse_role_overrides(const std::string& kernels_list,
                                           const std::string& skip_list) {
  RoleOverrides o;
  for (const std::string& item : split_list(kernels_list)) {
    const size_t eq = item.find('=');
    const std::string role = eq == std::string::npos ? item : trim(item.substr(0, eq));
    const std::string kname = eq == std::string::npos ? "" : trim(item.substr(eq + 1));
    if (role.empty() || kname.empty()) {
      return invalid_argument("SPARROW_ENGINE_KERNELS: '" + item +
                              "' is not role=kernel (e.g. o=tca_bme.mma)");
    }
    SPARROW_ASSIGN_OR_RETURN(const int r, role_index(role, "SPARROW_ENGINE_KERNELS"));
    const kernels::KernelInfo* k = kernels::find_kernel(kname.c_str());
    if (k == nullptr) {
      return invalid_argument("SPARROW_ENGINE_KERNELS: no kernel named '" + kname + "'");
    }
    if (o.kernel[r] != nullptr) {
      return invalid_argument(std::string("SPARROW_ENGINE_KERNELS: role ") + kRoleNames[r] +
                              " is named twice");
    }
    o.kernel[r] = k;
  }
  for (const std::string& item : split_list(skip_list)) {
    bool* op = item == "attention" ? &o.skip_attention : item == "swiglu" ? &o.skip_swiglu : nullptr;
    if (op) {
      if (*op) return invalid_argument("SPARROW_ENGINE_SKIP: " + item + " is named twice");
      *op = true;
      continue;
    }
    SPARROW_ASSIGN_OR_RETURN(const int r, role_index(item, "SPARROW_ENGINE_SKIP"));
    if (o.kernel[r]) {
      return invalid_argument(std::string("SPARROW_ENGINE_SKIP: role ") + kRoleNames[r] +
                              " is also forced in SPARROW_ENGINE_KERNELS");
    }
    o.skip[r] = true;
  }
  return o;
}

Result<RoleOverrides> role_overrides_from_env() {
  const char* k = std::getenv("SPARROW_ENGINE_KERNELS");
  const char* s = std::getenv("SPARROW_ENGINE_SKIP");
  return parse_role_overrides(k ? k : "", s ? s : "");
}

}  // namespace sparrow::engine
