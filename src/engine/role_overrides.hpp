// Experiment knobs of the GPU engine that change what runs for one role of linear layer, so an
// A/B of a kernel choice inside the engine needs no rebuilt rule table:
//   SPARROW_ENGINE_KERNELS="o=tca_bme.mma,down=tca_bme.decode"   that role's matmuls run the named
//     kernel instead of matmul's pick (a folded norm stays folded only if the kernel takes
//     input_rms, else the norm kernel runs before it);
//   SPARROW_ENGINE_SKIP="o,down"   that role's matmuls are not launched at all: the step's time
//     without them, i.e. their cost in the engine's own sequence of kernels, from the difference
//     (the outputs are then meaningless). Two non-matmul ops may be skipped the same way:
//     "attention" (with the RoPE / cache-append kernel when it runs separately; the combine
//     kernel too) and "swiglu".
// Roles: qkv, q, k, v, o, gate_up, gate, up, down, lm_head (qkv and gate_up are the stacked
// projections the engine runs when it fuses them, q/k/v/gate/up otherwise). Read when a GPU
// backend is made; a bad value makes that fail with invalid_argument.
#pragma once

#include <string>

#include "kernels/kernel.hpp"
#include "sparrow/status.hpp"

namespace sparrow::engine {

enum class LayerRole { qkv, q, k, v, o, gate_up, gate, up, down, lm_head, count };
const char* role_name(LayerRole r);

struct RoleOverrides {
  const kernels::KernelInfo* kernel[int(LayerRole::count)] = {};  // null: matmul's pick
  bool skip[int(LayerRole::count)] = {};
  bool skip_attention = false, skip_swiglu = false;  // the non-matmul ops SKIP may name
  bool any() const;
  bool skips() const;  // some role is skipped: the engine's outputs are meaningless
  // "o=tca_bme.mma; skip down" style summary for the engine's stderr note ("" when none).
  std::string describe() const;
};

// `kernels`: comma-separated role=kernel; `skip`: comma-separated roles (either may be empty).
// Unknown roles or kernels, a role named twice, or a role both forced and skipped are
// invalid_argument.
Result<RoleOverrides> parse_role_overrides(const std::string& kernels, const std::string& skip);

// parse_role_overrides of SPARROW_ENGINE_KERNELS and SPARROW_ENGINE_SKIP (unset = empty).
Result<RoleOverrides> role_overrides_from_env();

}  // namespace sparrow::engine
