// Pruning: which weights of a matrix to zero (masks), per-layer sparsity schedules, and the
// model-level driver behind `sparrow prune`.
//
// Scores: magnitude |W_ij|; wanda |W_ij| * ||X_j||_2 (the L2 norm of input channel j over a
// calibration set, Sun et al. 2023); random: a seeded uniform draw. The lowest-scoring elements
// (or vectors, or blocks) are zeroed, exactly round(sparsity * count) of them, ties broken by
// position so results are deterministic.
#pragma once

#include <csignal>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sparrow/formats/nm.hpp"
#include "sparrow/matrix.hpp"
#include "sparrow/status.hpp"
#include "sparrow/weight.hpp"

namespace sparrow::prune {

enum class Method : uint8_t { magnitude, random, wanda };
// layer: one threshold over the whole matrix; row: the same fraction pruned in every output row
// (what Wanda does).
enum class Granularity : uint8_t { layer, row };

struct Structure {
  enum class Kind : uint8_t { unstructured, nm, block } kind = Kind::unstructured;
  nm::Pattern nm{};  // N:M along K, vectors of L rows
  int block_rows = 1, block_cols = 1;
};

const char* method_name(Method m);
std::optional<Method> parse_method(std::string_view s);
// "unstructured", "N:M", "N:M:L", "block:BxB" / "block:B"
Result<Structure> parse_structure(std::string_view s);
std::string structure_name(const Structure& s);

struct MaskOptions {
  Method method = Method::magnitude;
  Granularity granularity = Granularity::layer;
  Structure structure;
  double sparsity = 0.5;  // ignored for N:M (fixed at 1 - N/M)
  uint64_t seed = 0;      // random
  const std::vector<float>* input_norms = nullptr;  // wanda: ||X_j||_2, one per column
};

// Keep-mask, row-major rows x cols, 1 = keep. Errors: sparsity outside [0, 1), wanda without
// norms of the right length, N:M whose M does not divide K.
Result<std::vector<uint8_t>> compute_mask(const ConstMatrixView& w, const MaskOptions& opt);
// A copy of `w` with the masked-out elements set to zero.
Result<HostMatrix> apply_mask(const ConstMatrixView& w, const std::vector<uint8_t>& keep);
// Fraction of exactly-zero elements.
double zero_fraction(const ConstMatrixView& w);

// ---- schedules --------------------------------------------------------------------------------

// OWL-like: per decoder layer i of n, target + lambda * (mean(u) - u_i) with u_i = |2i/(n-1) - 1|,
// i.e. lower sparsity at the first and last layers and higher in the middle, the same mean
// (layers have equal sizes in these models); lambda shrinks so every value stays in [0, 0.99].
std::vector<double> owl_schedule(int64_t num_layers, double target, double lambda = 0.1);

// A schedule: the sparsity of a tensor by name. FILE schedules are a JSON object
// {"regex": sparsity, ...}; the first regex (in file order) found in the name wins, unmatched
// tensors get the default.
class Schedule {
 public:
  static Schedule uniform(double s);
  static Schedule owl(int64_t num_layers, double target);
  static Result<Schedule> from_file(const std::string& path, double default_sparsity);
  double sparsity_for(const std::string& tensor_name) const;
  std::string describe() const;

 private:
  std::string kind_ = "uniform";
  double default_ = 0.5;
  std::vector<double> per_layer_;
  std::vector<std::pair<std::string, double>> rules_;
};

// Layer index in "model.layers.<i>." / "decoder.layers.<i>." names; -1 if none.
int64_t layer_index(const std::string& name);

// Wanda input norms: JSON {"<tensor name>": [K floats], ...} or a safetensors file of F32 [K]
// tensors named like the weights.
Result<std::map<std::string, std::vector<float>>> load_input_norms(const std::string& path);

// ---- the model driver -------------------------------------------------------------------------

struct ModelPruneOptions {
  std::string model_dir, out_dir;
  double sparsity = 0.5;
  Method method = Method::magnitude;
  std::optional<Granularity> granularity;  // default: layer for magnitude/random, row for wanda
  Structure structure;
  // auto | fastest | dense | csr | macko | tca_bme | tiled_csl | nm | qkv=F,o=F,gate_up=F,down=F.
  // fastest: per engine matmul (sparrow/dispatch.hpp's EngineMatmul: q, k, v alike, gate, up
  // alike) the format the GPU engine decodes fastest at `batch` tokens per matmul (the rule
  // table), from the layers' target sparsity; dense where no sparse kernel measured faster. The
  // list names a format per engine matmul (matmul_format_list).
  std::string format = "auto";
  int64_t batch = 1;  // fastest: the decode batch size the formats are picked for
  std::string schedule = "uniform";  // uniform | owl | path to a JSON file
  std::vector<std::string> ignore;   // regexes: matching tensors are copied unchanged
  std::string calibration;           // wanda norms file
  bool force = false;                // replace an existing output directory
  bool reprune = false;              // prune tensors that are already sparse enough
  uint64_t seed = 0;
  // Checked between tensors: when it becomes non-zero (a signal handler sets it), the run stops
  // with an error and removes its temporary directory.
  const volatile std::sig_atomic_t* interrupted = nullptr;
};

struct LayerReport {
  std::string name;
  int64_t rows = 0, cols = 0;
  double target = 0, sparsity = 0;  // requested, achieved
  std::string format;               // "dense" when kept dense
  std::string note;                 // why (kept dense, already sparse, ...)
  uint64_t bytes_before = 0, bytes_after = 0;
  double prune_ms = 0, encode_ms = 0;
};

struct ModelPruneReport {
  std::vector<LayerReport> layers;
  uint64_t linear_before = 0, linear_after = 0;  // pruned-candidate tensors
  uint64_t total_before = 0, total_after = 0;    // all tensors (data bytes)
  double seconds = 0;
};

// Exit-code classes for the CLI: invalid_argument -> bad arguments (2), others -> bad data (1).
// `progress(done, total, name)` is called after each tensor.
Result<ModelPruneReport> prune_model(
    const ModelPruneOptions& opt,
    const std::function<void(size_t, size_t, const std::string&)>& progress = nullptr);

}  // namespace sparrow::prune
