// sparrow prune: prune a Hugging Face model directory and write a sparse checkpoint whose linear
// layers are stored in sparrow formats (docs/checkpoints.md).
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "sparrow/commands.hpp"
#include "sparrow/dispatch.hpp"
#include "sparrow/progress.hpp"
#include "sparrow/prune.hpp"

namespace sparrow::cli {

namespace {

struct PruneArgs {
  std::string model, out, method = "magnitude", structure = "unstructured", format = "auto",
                          schedule = "uniform", calibration, granularity;
  double sparsity = 0.5;
  std::vector<std::string> ignore;
  bool force = false, reprune = false, quiet = false;
  uint64_t seed = 0;
  std::optional<int64_t> batch;  // --batch (only with --format fastest)
};

std::string human(uint64_t b) {
  char buf[32];
  if (b >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", double(b) / double(1ull << 30));
  else if (b >= (1ull << 20)) std::snprintf(buf, sizeof buf, "%.2f MiB", double(b) / double(1ull << 20));
  else std::snprintf(buf, sizeof buf, "%.1f KiB", double(b) / 1024.0);
  return buf;
}

int run_prune(const PruneArgs& a) {
  auto bad = [](const std::string& m) {
    std::fprintf(stderr, "sparrow prune: %s\n", m.c_str());
    return kExitBadArgs;
  };
  prune::ModelPruneOptions o;
  o.model_dir = a.model;
  o.out_dir = a.out;
  o.sparsity = a.sparsity;
  auto m = prune::parse_method(a.method);
  if (!m) return bad("--method must be magnitude, random or wanda (got '" + a.method + "')");
  o.method = *m;
  auto st = prune::parse_structure(a.structure);
  if (!st.ok()) return bad(st.status().message());
  o.structure = st.value();
  if (!a.granularity.empty()) {
    if (a.granularity == "layer") o.granularity = prune::Granularity::layer;
    else if (a.granularity == "row") o.granularity = prune::Granularity::row;
    else return bad("--granularity must be layer or row");
  }
  o.format = a.format;
  if (a.batch && a.format != "fastest") return bad("--batch applies to --format fastest");
  if (a.batch) o.batch = *a.batch;
  o.schedule = a.schedule;
  o.ignore = a.ignore;
  o.calibration = a.calibration;
  o.force = a.force;
  o.reprune = a.reprune;
  o.seed = a.seed;

  install_interrupt_handler();
  o.interrupted = &g_interrupted;
  ProgressBar bar("prune");
  auto r = prune::prune_model(o, [&](size_t done, size_t total, const std::string& name) {
    bar.update(double(done) / double(total), name);
  });
  bar.finish();
  if (!r.ok()) {
    std::fprintf(stderr, "sparrow prune: %s\n", r.status().message().c_str());
    return r.status().code() == Code::invalid_argument ? kExitBadArgs : 1;
  }
  const prune::ModelPruneReport& rep = r.value();
  if (!a.quiet) {
    std::printf("%-44s %13s %7s %7s %-9s %11s %11s %s\n", "layer", "shape", "target", "sparsity",
                "format", "bytes", "after", "note");
    for (const auto& l : rep.layers) {
      const std::string shape = std::to_string(l.rows) + "x" + std::to_string(l.cols);
      std::printf("%-44s %13s %6.1f%% %6.1f%% %-9s %11llu %11llu %s\n", l.name.c_str(),
                  shape.c_str(), 100 * l.target, 100 * l.sparsity, l.format.c_str(),
                  (unsigned long long)l.bytes_before, (unsigned long long)l.bytes_after,
                  l.note.c_str());
    }
  }
  double prune_ms = 0, encode_ms = 0;
  for (const auto& l : rep.layers) {
    prune_ms += l.prune_ms;
    encode_ms += l.encode_ms;
  }
  std::printf("pruned layers: %zu, %s -> %s (%.3f of dense)\n", rep.layers.size(),
              human(rep.linear_before).c_str(), human(rep.linear_after).c_str(),
              rep.linear_before ? double(rep.linear_after) / double(rep.linear_before) : 1.0);
  std::printf("all tensors:   %s -> %s (%.3f)\n", human(rep.total_before).c_str(),
              human(rep.total_after).c_str(),
              rep.total_before ? double(rep.total_after) / double(rep.total_before) : 1.0);
  std::printf("time: %.2f s wall (summed over layers: mask %.0f ms, encode %.0f ms); wrote %s\n",
              rep.seconds,
              prune_ms, encode_ms, a.out.c_str());
  return 0;
}

}  // namespace

void register_prune(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<PruneArgs>();
  CLI::App* cmd = app.add_subcommand(
      "prune",
      "Prune a Hugging Face model directory and write a sparse checkpoint (linear layers in "
      "sparrow formats; embeddings, lm_head, norms and biases are never pruned)");
  cmd->footer(
      "Methods: magnitude (|W|; --granularity layer by default: one threshold per matrix), "
      "random (exact count), wanda (|W| * ||X_j||_2, per-row by default).\n"
      "wanda reads precomputed input-channel norms from --calibration FILE: a JSON object "
      "{\"model.layers.0.mlp.up_proj.weight\": [K non-negative floats], ...} (the \".weight\" "
      "suffix may be left out) or a .safetensors file of F32 [K] tensors with those names. "
      "`sparrow calibrate -m DIR --text FILE -o norms.json` computes them with the engine.\n"
      "Schedules: uniform; owl (lower sparsity for the first and last layers, higher in the "
      "middle, same mean); or a JSON file {\"layer regex\": sparsity} (first match wins, others "
      "get --sparsity).\n"
      "--format auto picks, per layer, the smallest of csr/macko/tca_bme/tiled_csl (+ nm for "
      "N:M) that can encode it, and keeps the layer dense when none is smaller than dense. "
      "--format fastest picks, per matmul of the GPU engine (q/k/v stacked, o, gate/up "
      "stacked, down), the format the engine decodes fastest at --batch tokens (the shipped "
      "rule table of this machine's GPU, of the GPU SPARROW_RULE_TABLE_GPU names, or without "
      "either the " +
      rule_table_gpus().front() +
      "'s; for a layer whose shapes and batch whole-model engine "
      "runs cover, the four matmuls' assignment those runs measured fastest), and keeps it dense "
      "where no sparse kernel measured faster than cuBLAS. qkv=F,o=F,gate_up=F,down=F names a format per engine matmul (q, k, v "
      "take qkv's, gate and up gate_up's), as bench-model's --format does.\n"
      "Exit codes: 0 ok, 2 bad arguments, 1 bad input data or I/O failure (nothing is written).");
  cmd->add_option("--model", args->model, "input model directory (config.json + safetensors)")
      ->required();
  cmd->add_option("--out", args->out, "output directory (written atomically)")->required();
  cmd->add_option("--sparsity", args->sparsity, "target fraction of zeros, in [0, 1)")
      ->capture_default_str();
  cmd->add_option("--method", args->method, "magnitude | random | wanda")->capture_default_str();
  cmd->add_option("--granularity", args->granularity,
                  "layer | row (default: layer for magnitude/random, row for wanda)");
  cmd->add_option("--structure", args->structure, "unstructured | N:M[:L] (along K) | block:BxB")
      ->capture_default_str();
  cmd->add_option("--format", args->format,
                  "auto | fastest | dense | csr | macko | tca_bme | tiled_csl | nm | "
                  "qkv=F,o=F,gate_up=F,down=F")
      ->capture_default_str();
  cmd->add_option("--batch", args->batch,
                  "--format fastest: the decode batch size (tokens per matmul) to pick for "
                  "(default 1)");
  cmd->add_option("--schedule", args->schedule, "uniform | owl | FILE.json")->capture_default_str();
  cmd->add_option("--ignore", args->ignore, "regex of tensor names to keep dense (repeatable)");
  cmd->add_option("--calibration", args->calibration, "wanda input-channel norms (see below)");
  cmd->add_option("--seed", args->seed, "seed for --method random")
      ->check(seed_validator())
      ->capture_default_str();
  cmd->add_flag("--force", args->force, "replace an existing output directory");
  cmd->add_flag("--reprune", args->reprune,
                "prune layers that are already at least as sparse as the target (default: kept)");
  cmd->add_flag("--quiet", args->quiet, "print only the totals, not the per-layer table");
  cmd->callback([args, &exit_code] { exit_code = run_prune(*args); });
}

}  // namespace sparrow::cli
