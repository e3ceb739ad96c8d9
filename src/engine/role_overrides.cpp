#include "engine/role_overrides.hpp"

#include <cstdlib>
#include <vector>

#include "core/comma_list.hpp"

namespace sparrow::engine {

namespace {

constexpr const char* kRoleNames[int(LayerRole::count)] = {
    "qkv", "q", "k", "v", "o", "gate_up", "gate", "up", "down", "lm_head"};

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

bool RoleOverrides::outputs_meaningless() const {
  for (int i = 0; i < int(LayerRole::count); ++i) {
    if (skip[i] || read_only[i]) return true;
  }
  return skip_attention || skip_swiglu;
}

bool RoleOverrides::any() const {
  for (const kernels::KernelInfo* k : kernel) {
    if (k) return true;
  }
  return outputs_meaningless();
}

std::string RoleOverrides::describe() const {
  std::string forced, skipped, read;
  for (int i = 0; i < int(LayerRole::count); ++i) {
    if (kernel[i]) {
      forced += std::string(forced.empty() ? "" : ", ") + kRoleNames[i] + "=" + kernel[i]->name;
    }
    if (skip[i]) skipped += std::string(skipped.empty() ? "" : ", ") + kRoleNames[i];
    if (read_only[i]) read += std::string(read.empty() ? "" : ", ") + kRoleNames[i];
  }
  if (skip_attention) skipped += std::string(skipped.empty() ? "" : ", ") + "attention";
  if (skip_swiglu) skipped += std::string(skipped.empty() ? "" : ", ") + "swiglu";
  std::string out = forced;
  if (!skipped.empty()) out += std::string(out.empty() ? "" : "; ") + "skip " + skipped;
  if (!read.empty()) {
    out += std::string(out.empty() ? "" : "; ") + "read only " + read + " (" +
           std::to_string(read_blocks_per_sm) + " blocks per SM, " +
           (read_early_kib_per_sm < 0 ? std::string("every byte")
                                      : std::to_string(read_early_kib_per_sm) + " KiB per SM") +
           " before the wait" + (read_stage_shared ? ", staged in shared memory" : "") + ")";
  }
  return out;
}

Result<RoleOverrides> parse_role_overrides(const std::string& kernels_list,
                                           const std::string& skip_list,
                                           const std::string& read_list) {
  RoleOverrides o;
  for (const std::string& item : split_list(kernels_list)) {
    const auto [role, kname, has_value] = split_key_value(item);
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
  for (const std::string& item : split_list(read_list)) {
    SPARROW_ASSIGN_OR_RETURN(const int r, role_index(item, "SPARROW_ENGINE_READ_ONLY"));
    if (o.kernel[r] || o.skip[r] || o.read_only[r]) {
      const char* why = o.read_only[r] ? " is named twice"
                                       : " is also forced or skipped (SPARROW_ENGINE_KERNELS / "
                                         "SPARROW_ENGINE_SKIP)";
      return invalid_argument(std::string("SPARROW_ENGINE_READ_ONLY: role ") + kRoleNames[r] + why);
    }
    o.read_only[r] = true;
  }
  return o;
}

Status parse_read_plan(const std::string& plan, RoleOverrides& o) {
  if (trim(plan).empty()) return {};
  bool any_read = false;
  for (bool r : o.read_only) any_read = any_read || r;
  if (!any_read) {
    return invalid_argument(
        "SPARROW_ENGINE_READ_PLAN applies to SPARROW_ENGINE_READ_ONLY's roles, and none is named");
  }
  auto bad = [](const std::string& item, const char* why) {
    return invalid_argument("SPARROW_ENGINE_READ_PLAN: '" + item + "': " + why);
  };
  auto number = [](const std::string& v, int64_t& out) {
    if (v.empty() || v.size() > 9 || v.find_first_not_of("0123456789") != std::string::npos)
      return false;
    out = std::stoll(v);
    return true;
  };
  for (const std::string& item : split_list(plan)) {
    const auto [key, val, has_value] = split_key_value(item);
    int64_t n = 0;
    if (key == "blocks_per_sm") {
      if (!number(val, n) || n < 1 || n > 8) return bad(item, "blocks_per_sm is 1..8");
      o.read_blocks_per_sm = int(n);
    } else if (key == "early_kib") {
      if (val == "all") {
        o.read_early_kib_per_sm = -1;
      } else if (number(val, n)) {
        o.read_early_kib_per_sm = n;
      } else {
        return bad(item, "early_kib is a number of KiB per SM or 'all'");
      }
    } else if (key == "stage") {
      if (val != "registers" && val != "shared") return bad(item, "stage is registers or shared");
      o.read_stage_shared = val == "shared";
    } else {
      return bad(item, "keys: blocks_per_sm, early_kib, stage");
    }
  }
  if (o.read_stage_shared && o.read_early_kib_per_sm < 0) {
    return invalid_argument(
        "SPARROW_ENGINE_READ_PLAN: stage=shared needs early_kib (the KiB per SM staged)");
  }
  return {};
}

Result<RoleOverrides> role_overrides_from_env() {
  const char* k = std::getenv("SPARROW_ENGINE_KERNELS");
  const char* s = std::getenv("SPARROW_ENGINE_SKIP");
  const char* r = std::getenv("SPARROW_ENGINE_READ_ONLY");
  const char* p = std::getenv("SPARROW_ENGINE_READ_PLAN");
  SPARROW_ASSIGN_OR_RETURN(RoleOverrides o,
                           parse_role_overrides(k ? k : "", s ? s : "", r ? r : ""));
  SPARROW_RETURN_IF_ERROR(parse_read_plan(p ? p : "", o));
  return o;
}

}  // namespace sparrow::engine
