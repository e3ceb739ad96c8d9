// How sparrow chooses: which kernel `matmul` runs for a weight (per format and N), and which
// format a layer should be stored in. Both come from a shipped rule table of measurements, one per
// GPU they were measured on (src/dispatch/rule_table_<gpu>.inc, generated from `sparrow bench` CSV
// by scripts/make_rule_table.py; scripts/rule-table.sh lists the runs and the engine-measured
// exceptions): a lookup reads the table of the GPU that is the calling thread's current CUDA
// device, the first shipped table (the H100's) when there is none or no table was measured on it,
// or the one SPARROW_RULE_TABLE_GPU names (a GPU name as rule_table_gpus() lists them: to plan
// for a GPU on a machine without it). Every choice carries the reason it was made.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "sparrow/weight.hpp"

namespace sparrow {

// Fraction of stored non-zeros: nnz / (M * K). 1 for dense, N/M for nm.
double density_of(const Weight& w);

struct KernelPick {
  std::string kernel;             // registry name, e.g. "macko.warp_row"
  double measured_speedup = 0.0;  // vs cuBLAS in the table's cell; 0 when not measured
  std::string reason;
};

// The kernel matmul runs for a weight of format `f`, this density and shape (rows x cols; 0 x 0:
// unknown, the medians over the benchmarked shapes) at N tokens, given a workspace large enough
// for every kernel (matmul skips kernels whose workspace it was not given), for a call with
// MatmulOptions::input_rms (`input_rms`: the fastest kernel that can take it unless another
// measured more than 1.1x faster, since it would bring a norm kernel back) or without, launched
// plainly or as a dependent launch (MatmulOptions::dependent_launch: a dense weight takes the
// registry's kernel for N, and kernels the engine measured slower than the table's plain runs
// predicted are left out). Fails with unsupported when the build has no GPU kernel for the format.
Result<KernelPick> pick_kernel(Format f, double density, int64_t n, int64_t rows = 0,
                               int64_t cols = 0, bool input_rms = false,
                               bool dependent_launch = false);

struct FormatPick {
  Format format = Format::dense;
  std::string kernel;
  double measured_speedup = 1.0;
  std::string reason;
};

// Plan time: the format whose measured kernel is fastest for a layer of this density and shape
// (rows x cols, as pick_kernel) at N tokens; dense (cuBLAS) whenever no sparse format was measured
// faster. `allow_nm` when the layer is N:M. `input_rms` and `dependent_launch` describe the calls
// the layer will get, as pick_kernel's do: each format is judged by the kernel matmul will run
// for such a call (the engine: dependent launches, the norm folded into q/k/v and gate/up), not
// by one it leaves out there.
FormatPick pick_format(double density, int64_t n, bool allow_nm = false, int64_t rows = 0,
                       int64_t cols = 0, bool input_rms = false, bool dependent_launch = false);

// The matmuls of a Llama-family decoder layer as sparrow's GPU engine runs them: q, k and v
// stacked into one (qkv), o, gate and up stacked into one (gate_up), down. qkv and gate_up take the
// RMSNorm folded in (input_rms) and every matmul is a dependent launch; stacking needs the stacked
// layers in one format.
enum class EngineMatmul { qkv, o, gate_up, down };

// The engine matmul a Hugging Face tensor name feeds ("model.layers.3.self_attn.k_proj.weight":
// qkv), or nullopt for any other tensor.
std::optional<EngineMatmul> engine_matmul_of(const std::string& tensor_name);

// "qkv=F,o=F,gate_up=F,down=F": a format per engine matmul (EngineMatmul's order), each of the
// four named once, F a format name (bench-model's and prune's --format, to apply what
// SPARROW_ENGINE_STAMPS measured per matmul). nullopt when `format` is not a list (no '=');
// otherwise the formats, or an invalid_argument that names what is wrong.
std::optional<Result<std::array<Format, 4>>> matmul_format_list(const std::string& format);

// The layers one engine matmul stacks (q, k, v; or gate, up; or o or down alone): add each, then
// pick the format that decodes them fastest at N tokens, pick_format as the engine calls that
// matmul (the stacked shape: the layers' rows added up; their density weighted by size).
struct EngineMatmulLayers {
  EngineMatmul matmul = EngineMatmul::o;
  int64_t rows = 0, cols = 0;
  double nonzeros = 0, elements = 0;

  void add(int64_t layer_rows, int64_t layer_cols, double density);
  // Whether the engine folds the RMSNorm into this matmul (qkv, gate_up: input_rms).
  bool normed() const;
  // Non-zeros over elements of the layers added (1 when none were).
  double density() const;
  FormatPick pick(int64_t n, bool allow_nm = false) const;
};

// A decoder layer's four engine matmuls (EngineMatmul's order: qkv, o, gate_up, down) picked
// together. Where the shipped engine cells of the GPU whose rule table answers (rule_table_gpu())
// cover the layer (whole-model `sparrow bench-model` runs:
// a layer of near shapes, rows within 2x and columns within sqrt(2) of the measured model's four
// matmuls, as the rule table's shape cells; the nearest measured sparsity, at most 0.1 from the
// layer's; the same N) the layer takes the measured assignment that ran fastest, dense unless one
// beat dense, and among assignments within 5 % of the fastest (pick_format's bytes margin) the one
// that held the fewest weight bytes. Elsewhere each matmul takes its own pick(). Why: at N >= 8 the
// per-matmul cells (kernels timed alone) have mispredicted the engine both ways (a mix of dense
// and tca_bme ran slower than either; every layer tca_bme ran faster than the dense the cells
// chose at batch 32 and 90 %: bench/NOTES-decode.md, session 42). Each pick's reason says which.
// A matmul with no layers added (rows 0) matches no cell.
std::array<FormatPick, 4> pick_engine_layer(const std::array<EngineMatmulLayers, 4>& layer,
                                            int64_t n, bool allow_nm = false);

// The GPU and dates of the shipped table that answers lookups on this thread now.
const char* rule_table_gpu();
const char* rule_table_date();
// The GPUs sparrow ships rule tables for, the default first.
std::vector<std::string> rule_table_gpus();
// Ok unless SPARROW_RULE_TABLE_GPU is set to a GPU no shipped table was measured on; then an
// invalid_argument that names the shipped ones (the lookups then ignore the variable, with one
// warning on stderr). The CLI checks it before any work.
Status rule_table_env_status();

}  // namespace sparrow
