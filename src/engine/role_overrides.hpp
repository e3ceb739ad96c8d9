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
//   SPARROW_ENGINE_READ_ONLY="qkv,o,gate_up,down"   that role's matmuls are replaced by a kernel
//     that reads every byte of the weight's arrays and computes nothing (gpu::read_arrays; the
//     outputs are then meaningless): the step as it would run if those matmuls took only the time
//     of a plain read of their weights in the same chain of dependent launches, i.e. what any
//     kernel for that format could reach without changing the engine's sequence of kernels.
//   SPARROW_ENGINE_READ_PLAN="blocks_per_sm=1,early_kib=96,stage=shared"   how those reads run
//     (gpu::ReadPlan): 256-thread blocks per SM (1..8, default 8: every SM full), KiB per SM read
//     before the wait for the previous kernel (a number, or "all", the default), and where the
//     early bytes go: "registers" (loaded and dropped, the default) or "shared" (staged in
//     shared memory with cp.async, as a kernel holding its weight on chip would; needs a number
//     of KiB). Only with SPARROW_ENGINE_READ_ONLY.
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
  bool read_only[int(LayerRole::count)] = {};
  // SPARROW_ENGINE_READ_PLAN (the read-only roles' gpu::ReadPlan).
  int read_blocks_per_sm = 8;
  int64_t read_early_kib_per_sm = -1;  // -1: every byte before the wait
  bool read_stage_shared = false;
  bool skip_attention = false, skip_swiglu = false;  // the non-matmul ops SKIP may name
  bool any() const;
  // Some role is skipped or only read: the engine's outputs are meaningless.
  bool outputs_meaningless() const;
  // "o=tca_bme.mma; skip down; read only qkv" style summary for the engine's stderr note ("" when
  // none).
  std::string describe() const;
};

// `kernels`: comma-separated role=kernel; `skip` and `read_only`: comma-separated roles (any may
// be empty). Unknown roles or kernels, an empty field ("o,,down", "o=x,"), a role named twice,
// or a role in more than one list are invalid_argument.
Result<RoleOverrides> parse_role_overrides(const std::string& kernels, const std::string& skip,
                                           const std::string& read_only = "");

// Reads a SPARROW_ENGINE_READ_PLAN value ("key=value,..."; empty: the defaults) into `o`, which
// must have a read-only role when the plan is not empty. Unknown keys, values out of range, and
// stage=shared without a number of KiB are invalid_argument.
Status parse_read_plan(const std::string& plan, RoleOverrides& o);

// parse_role_overrides of SPARROW_ENGINE_KERNELS, SPARROW_ENGINE_SKIP and
// SPARROW_ENGINE_READ_ONLY, then parse_read_plan of SPARROW_ENGINE_READ_PLAN (unset = empty).
Result<RoleOverrides> role_overrides_from_env();

}  // namespace sparrow::engine
