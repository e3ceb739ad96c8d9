// sparrow bench-model: llama-bench-style prefill (ppP) and generation (tgN) throughput of a model
// directory or of a synthetic model built in memory, per sparsity, format and batch size.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bench/timing.hpp"
#include "sparrow/commands.hpp"
#include "sparrow/dispatch.hpp"
#include "sparrow/engine/generate.hpp"
#include "sparrow/engine/transform.hpp"
#include "sparrow/io/synth.hpp"
#include "sparrow/model_args.hpp"
#include "sparrow/version.hpp"

namespace sparrow::cli {

namespace {

struct BenchModelArgs {
  std::string model_dir, synth, backend = "gpu", method = "magnitude", format = "fastest";
  std::string batches = "1", sparsities, depths = "0";
  int64_t prompt = 512, gen = 128;
  int64_t prefill_chunk = engine::BackendOptions{}.prefill_chunk;
  int reps = 5, threads = 0;
  bool json = false;
};

struct Stat {
  double mean = 0, std = 0;
};
Stat stats(const std::vector<double>& v) {
  Stat s;
  for (double x : v) s.mean += x;
  s.mean /= double(v.size());
  for (double x : v) s.std += (x - s.mean) * (x - s.mean);
  s.std = v.size() > 1 ? std::sqrt(s.std / double(v.size() - 1)) : 0.0;
  return s;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Fills each sequence's cache with `depth` tokens (untimed; nothing when 0).
Status fill_depth(engine::Backend& b, int batch, int64_t depth) {
  b.reset();
  if (depth == 0) return {};
  std::vector<int32_t> tokens(size_t(batch * depth));
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = int32_t((i * 104729) % size_t(b.model().config.vocab));
  std::vector<int32_t> next;
  return b.forward_greedy(tokens.data(), batch, depth, next);
}

// Prefill: `batch` x `p` tokens after `depth` cached ones; tokens per second over all sequences.
Result<double> time_prefill(engine::Backend& b, int batch, int64_t p, int64_t depth) {
  std::vector<int32_t> tokens(size_t(batch * p));
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = int32_t((i * 7919) % size_t(b.model().config.vocab));
  std::vector<int32_t> next;
  SPARROW_RETURN_IF_ERROR(fill_depth(b, batch, depth));
  const double t0 = now_s();
  SPARROW_RETURN_IF_ERROR(b.forward_greedy(tokens.data(), batch, p, next));
  return double(batch * p) / (now_s() - t0);
}

// Generation: `n` greedy steps of one token per sequence after `depth` cached ones.
Result<double> time_generate(engine::Backend& b, int batch, int64_t n, int64_t depth) {
  std::vector<int32_t> next(size_t(batch), 1);
  SPARROW_RETURN_IF_ERROR(fill_depth(b, batch, depth));
  const double t0 = now_s();
  SPARROW_RETURN_IF_ERROR(
      b.decode_greedy(next.data(), batch, n, [](const int32_t*) { return true; }));
  return double(batch * n) / (now_s() - t0);
}

// The device's read ceiling in bytes per second, measured once per process exactly as `sparrow
// bench` measures it (bench::measure_read_ceiling: a streaming read of 1 GiB, median of 20), on
// the current device; nullopt (said once on stderr) where it cannot be, e.g. no room for the
// buffer. A first version read the model's own arrays with the engine's read_arrays kernel: 4.25
// TB/s on the H200 where this measured 4.56 in the same call (session 55, c7), a bound 7 % low.
std::optional<double> read_ceiling() {
  static const std::optional<double> measured = []() -> std::optional<double> {
    int device = 0;
    cudaDeviceProp prop{};
    cudaStream_t stream = nullptr;
    Result<double> gbps = unsupported("no device");
    if (cudaGetDevice(&device) == cudaSuccess &&
        cudaGetDeviceProperties(&prop, device) == cudaSuccess &&
        cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess) {
      gbps = bench::measure_read_ceiling(prop.multiProcessorCount, stream);
      cudaStreamDestroy(stream);
    }
    if (gbps.ok()) return gbps.value() * 1e9;
    (void)cudaGetLastError();  // a failed allocation is not the next launch's error
    std::fprintf(stderr, "sparrow bench-model: the tg bound is not measured: %s\n",
                 gbps.status().message().c_str());
    return std::nullopt;
  }();
  return measured;
}

// Batch sizes that run on one built model. With --format fastest each batch size's tokens pick
// their own formats (the rule table at N = batch), so a batch size whose picks differ from the
// previous one's gets a model of its own; otherwise all batches share one.
struct BatchGroup {
  std::vector<int> batches;
  int64_t pick_n = 0;  // the N "fastest" picked formats for (0: not fastest)
};

// How many decoder linear weights the model holds in each format: "dense 160, tca_bme 64".
std::string layer_formats(const engine::Model& m) {
  std::vector<int64_t> count(std::size(kAllFormats), 0);
  for (const engine::Layer& l : m.layers)
    for (const Weight* w : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down})
      ++count[size_t(format_of(*w))];
  std::string out;
  for (size_t f = 0; f < count.size(); ++f) {
    if (count[f] == 0) continue;
    out += std::string(out.empty() ? "" : ", ") + format_name(Format(f)) + " " +
           std::to_string(count[f]);
  }
  return out;
}

Result<std::vector<BatchGroup>> batch_groups(const BenchModelArgs& a, const engine::Model* loaded,
                                             const std::string& format, double sparsity,
                                             const std::vector<int>& batches) {
  std::vector<BatchGroup> groups;
  if (format != "fastest") {
    groups.push_back({batches, 0});
    return groups;
  }
  engine::LlamaConfig c;
  if (loaded) {
    c = loaded->config;
  } else {
    SPARROW_ASSIGN_OR_RETURN(c, engine::synth_config(a.synth));
  }
  // The mask's sparsity stands for every layer's here (prune_and_encode picks from the measured
  // one; the build line reports what it picked). Consecutive batch sizes with the same picks
  // share a model, so the rows keep -b's order.
  std::vector<Format> last;
  for (int b : batches) {
    const std::vector<Format> key = engine::fastest_formats(c, 1.0 - sparsity, b);
    if (groups.empty() || key != last) groups.push_back({{}, b});
    groups.back().batches.push_back(b);
    last = key;
  }
  return groups;
}

// Builds the model for `group` (pruned at `sparsity` in `format`), runs its batch sizes' pp and
// tg rows, and prints its memory line. 0 on success, else the exit code.
int run_group(const BenchModelArgs& a, const std::shared_ptr<const engine::Model>& loaded,
              const engine::SynthParts* synth, const prune::MaskOptions& mo, double sparsity,
              const std::string& format, const BatchGroup& group,
              const std::vector<int64_t>& depths, nlohmann::json& rows) {
  const bool gpu = a.backend != "cpu";
  std::shared_ptr<const engine::Model> model;
  const double t_build = now_s();
  if (synth) {
    const int64_t pick_n = std::max<int64_t>(group.pick_n, 1);
    auto m = engine::synth_model(*synth, format, gpu, a.threads, pick_n);
    if (!m.ok()) {
      std::fprintf(stderr, "sparrow bench-model: %s\n", m.status().to_string().c_str());
      return m.status().code() == Code::invalid_argument ? kExitBadArgs : 1;
    }
    model = std::make_shared<engine::Model>(std::move(m).value());
  } else if (sparsity > 0) {
    auto m = engine::prune_model(*loaded, mo, format, gpu, std::max<int64_t>(group.pick_n, 1));
    if (!m.ok()) {
      std::fprintf(stderr, "sparrow bench-model: %s\n", m.status().to_string().c_str());
      return 1;
    }
    model = std::make_shared<engine::Model>(std::move(m).value());
  } else {
    model = loaded;
  }
  const std::string formats = group.pick_n > 0 ? layer_formats(*model) : "";
  std::fprintf(stderr, "sparrow bench-model: %s at sparsity %.2f ready in %.1f s%s\n",
               model->name.c_str(), std::max(0.0, sparsity), now_s() - t_build,
               formats.empty() ? ""
                               : (" (fastest at N = " + std::to_string(group.pick_n) +
                                  " by the rule table of " + rule_table_gpu() +
                                  ", layer weights: " + formats + ")")
                                     .c_str());
  // Synthetic weights have no zeros of their own, so the mask's sparsity is exact; a loaded
  // model is measured (that decodes every layer once).
  const double measured_sparsity = a.synth.empty() ? model->sparsity() : std::max(0.0, sparsity);

  engine::BackendOptions opt;
  opt.max_batch = *std::max_element(group.batches.begin(), group.batches.end());
  opt.prefill_chunk = a.prefill_chunk;
  // The KV cache only needs what the tests use.
  opt.context =
      std::min<int64_t>(model->config.context, *std::max_element(depths.begin(), depths.end()) +
                                                   std::max(a.prompt, a.gen) + 1);
  int exit_code = 0;
  const double t_backend = now_s();
  auto backend = make_backend_or_report("bench-model", a.backend, model, opt, exit_code);
  if (!backend) return exit_code;
  const engine::LoadReport load = backend->load_report();
  char parts[160] = "";
  if (load.prepare_s > 0 || load.copy_s > 0) {  // the GPU backend's parts
    std::snprintf(parts, sizeof parts,
                  " (weights prepared on the host in %.1f s, allocated and copied to the device "
                  "in %.1f s)",
                  load.prepare_s, load.copy_s);
  }
  std::fprintf(stderr, "sparrow bench-model: %s backend loaded in %.1f s%s\n", backend->name(),
               now_s() - t_backend, parts);

  // The size column: the weights as the backend holds them (the GPU's uploaded bytes, which leave
  // out derived data no kernel on it reads), or the model's where the backend keeps a copy of its
  // own (the CPU backend's fp32 panels, reported on the memory line).
  const engine::MemoryReport held_mem = backend->memory();
  const size_t size_bytes = held_mem.held_as ? model->weight_bytes() : held_mem.model_bytes;
  // The tg rows' bound on the GPU: a step (batch tokens) takes at least its weights' bytes at the
  // device's read ceiling (read_ceiling). Issue 6's dense target is a fraction of it. Skipped
  // where the backend does not report its step's bytes (the CPU backend).
  struct Bound {
    size_t step_bytes = 0;
    double bytes_per_second = 0;
    double step_seconds() const { return double(step_bytes) / bytes_per_second; }
  };
  std::optional<Bound> bound;
  if (auto w = backend->decode_weight_bytes(); w.ok()) {
    if (const std::optional<double> ceiling = read_ceiling())
      bound = Bound{w.value(), *ceiling};
  }
  std::string bound_rows;  // "b1 tg128 84.3 %, ..."
  for (int batch : group.batches) {
    for (int64_t depth : depths) {
      for (int test = 0; test < 2; ++test) {
        const bool pp = test == 0;
        std::vector<double> tps;
        for (int r = 0; r <= a.reps; ++r) {  // run 0 warms up (and captures the decode graphs)
          auto t = pp ? time_prefill(*backend, batch, a.prompt, depth)
                      : time_generate(*backend, batch, a.gen, depth);
          if (!t.ok()) {
            std::fprintf(stderr, "sparrow bench-model: %s\n", t.status().to_string().c_str());
            return 1;
          }
          if (r > 0) tps.push_back(t.value());
        }
        const Stat s = stats(tps);
        // llama-bench's name for a test after `depth` cached tokens: "tg128 @ d512".
        const std::string test_name = (pp ? "pp" : "tg") + std::to_string(pp ? a.prompt : a.gen) +
                                      (depth > 0 ? " @ d" + std::to_string(depth) : "");
        std::printf("| %s | %s | %.2f | %s | %d | %s | %.2f ± %.2f |\n", model->name.c_str(),
                    human_bytes(size_bytes).c_str(), measured_sparsity, backend->name(), batch,
                    test_name.c_str(), s.mean, s.std);
        std::fflush(stdout);
        nlohmann::json row = {{"model", model->name},
                              {"weight_bytes", model->weight_bytes()},
                              {"dense_weight_bytes", model->dense_weight_bytes()},
                              {"sparsity", measured_sparsity},
                              {"method", sparsity > 0 ? a.method : "none"},
                              {"format", sparsity > 0 ? a.format : "as loaded"},
                              {"backend", backend->name()},
                              {"batch", batch},
                              {"test", test_name},
                              {"depth", depth},
                              {"tokens_per_second_mean", s.mean},
                              {"tokens_per_second_std", s.std},
                              {"runs", tps}};
        if (group.pick_n > 0) {
          row["formats"] = formats;
          row["formats_picked_for_n"] = group.pick_n;
        }
        if (bound && !pp) {
          const double bound_tps = double(batch) / bound->step_seconds();
          row["weight_read_bound_tokens_per_second"] = bound_tps;
          row["fraction_of_weight_read_bound"] = s.mean / bound_tps;
          row["step_weight_bytes"] = bound->step_bytes;
          row["read_bandwidth_bytes_per_second"] = bound->bytes_per_second;
          char part[96];
          std::snprintf(part, sizeof part, "%sb%d %s %.1f %%", bound_rows.empty() ? "" : ", ",
                        batch, test_name.c_str(), 100.0 * s.mean / bound_tps);
          bound_rows += part;
        }
        rows.push_back(row);
      }
    }
  }
  const engine::MemoryReport mem = backend->memory();
  // A backend's own copy of the weights (the CPU backend's fp32 dense panels) is named as such.
  const std::string held = mem.held_as
                               ? std::string(", held by the ") + backend->name() + " backend as " +
                                     mem.held_as + ": " + human_bytes(mem.model_bytes)
                               : "";
  // Activations and peak device memory are the GPU backend's (the CPU backend reports 0).
  const std::string device = mem.peak_device_bytes > 0
                                 ? ", activations " + human_bytes(mem.workspace_bytes) +
                                       ", peak device memory " + human_bytes(mem.peak_device_bytes)
                                 : "";
  std::printf("\n%s at sparsity %.2f: weights %s (dense %s)%s, KV cache %s%s\n\n",
              model->name.c_str(), measured_sparsity,
              human_bytes(mem.held_as ? model->weight_bytes() : mem.model_bytes).c_str(),
              human_bytes(model->dense_weight_bytes()).c_str(), held.c_str(),
              human_bytes(mem.kv_cache_bytes).c_str(), device.c_str());
  if (bound) {
    std::printf("%s at sparsity %.2f: a decode step's weights (%s) at the read bandwidth measured "
                "here (%.2f TB/s: `sparrow bench`'s ceiling, a streaming read of 1 GiB, median of "
                "20) bound it at %.1f steps/s; the tg rows at that bound: %s\n\n",
                model->name.c_str(), measured_sparsity, human_bytes(bound->step_bytes).c_str(),
                bound->bytes_per_second * 1e-12, 1.0 / bound->step_seconds(), bound_rows.c_str());
  }
  std::fflush(stdout);  // before the next model's stderr line
  rows.back()["memory"] = {{"model_bytes", mem.model_bytes},
                           {"kv_cache_bytes", mem.kv_cache_bytes},
                           {"workspace_bytes", mem.workspace_bytes},
                           {"peak_device_bytes", mem.peak_device_bytes}};
  return 0;
}

int run_bench_model(const BenchModelArgs& a) {
  auto fail_args = [](const std::string& msg) {
    std::fprintf(stderr, "sparrow bench-model: %s\n", msg.c_str());
    return kExitBadArgs;
  };
  if (a.model_dir.empty() == a.synth.empty()) return fail_args("give exactly one of -m or --synth");
  auto batches = parse_cli_list<int>(a.batches, "-b");
  if (!batches.ok()) return fail_args(batches.status().message());
  auto depths = parse_cli_list<int64_t>(a.depths, "-d");
  if (!depths.ok()) return fail_args(depths.status().message());
  for (int64_t d : depths.value())
    if (d < 0) return fail_args("-d values must be >= 0");
  std::vector<double> sparsities = {-1};  // -1: the model as loaded
  if (!a.sparsities.empty() || !a.synth.empty()) {
    auto s = parse_cli_list<double>(a.sparsities.empty() ? "0" : a.sparsities, "--sparsity");
    if (!s.ok()) return fail_args(s.status().message());
    sparsities = s.value();
    for (double v : sparsities)
      if (!(v >= 0 && v < 1)) return fail_args("--sparsity values must be in [0, 1)");
  }
  auto method = prune::parse_method(a.method);
  if (!method) return fail_args("--method must be magnitude, random or wanda");
  // Everything that can be checked before the table's header is printed.
  if (Status s = engine::check_format_choice(a.format); !s.ok()) return fail_args(s.message());
  if (!a.synth.empty()) {
    if (auto p = io::synth_preset(a.synth); !p.ok()) return fail_args(p.status().message());
  }
  if (a.prompt < 1 || a.gen < 1 || a.reps < 1) return fail_args("-p, -n and -r must be >= 1");
  for (int b : batches.value())
    if (b < 1) return fail_args("batch sizes must be >= 1");
  const bool gpu = a.backend != "cpu";

  std::shared_ptr<const engine::Model> loaded;
  if (!a.model_dir.empty()) {
    loaded = load_model_or_report("bench-model", a.model_dir);
    if (!loaded) return 1;
  }

  nlohmann::json rows = nlohmann::json::array();
  std::printf("| model | size | sparsity | backend | batch | test | t/s |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  std::fflush(stdout);
  for (double sparsity : sparsities) {
    prune::MaskOptions mo;
    mo.method = *method;
    mo.sparsity = std::max(0.0, sparsity);
    const std::string format = sparsity > 0 ? a.format : (a.synth.empty() ? "" : "dense");
    auto groups = batch_groups(a, loaded.get(), format, sparsity, batches.value());
    if (!groups.ok()) {
      std::fprintf(stderr, "sparrow bench-model: %s\n", groups.status().to_string().c_str());
      return 1;
    }
    // A synthetic model's weights are generated and pruned once per sparsity; each batch group
    // only encodes them in its formats (generation was most of a group's build time).
    std::optional<engine::SynthParts> synth;
    if (!a.synth.empty()) {
      const double t_parts = now_s();
      auto parts = engine::synth_parts(a.synth, mo, a.threads);
      if (!parts.ok()) {
        std::fprintf(stderr, "sparrow bench-model: %s\n", parts.status().to_string().c_str());
        return parts.status().code() == Code::invalid_argument ? kExitBadArgs : 1;
      }
      synth = std::move(parts).value();
      std::fprintf(stderr, "sparrow bench-model: %s weights at sparsity %.2f generated in %.1f s\n",
                   synth->name.c_str(), mo.sparsity, now_s() - t_parts);
    }
    for (const BatchGroup& group : groups.value()) {
      const engine::SynthParts* parts = synth ? &*synth : nullptr;
      if (int rc = run_group(a, loaded, parts, mo, sparsity, format, group, depths.value(), rows);
          rc != 0)
        return rc;
    }
  }
  if (a.json) {
    nlohmann::json out;
    out["command"] = command_line();
    out["git_revision"] = git_revision();
    out["version"] = kVersion;
    cudaDeviceProp prop{};
    if (gpu && cudaGetDeviceProperties(&prop, 0) == cudaSuccess) out["gpu"] = prop.name;
    out["rule_table_gpu"] = rule_table_gpu();
    out["note"] =
        "t/s counts tokens of all sequences of a batch; pp and tg run after `depth` cached tokens "
        "(0: from an empty cache)";
    out["rows"] = rows;
    std::printf("%s\n", out.dump(2).c_str());
  }
  return 0;
}

}  // namespace

void register_bench_model(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<BenchModelArgs>();
  CLI::App* cmd = app.add_subcommand(
      "bench-model",
      "Prefill (ppP) and generation (tgN) tokens/s of a model, llama-bench style. t/s counts the "
      "tokens of all sequences of a batch.");
  cmd->add_option("-m,--model", args->model_dir, "model directory");
  cmd->add_option("--synth", args->synth,
                  "build a synthetic model in memory: tiny, llama2-7b, llama3-8b");
  cmd->add_option("--sparsity", args->sparsities,
                  "comma list; prunes the model in memory (0 = dense baseline)");
  cmd->add_option("--method", args->method, "pruning method: magnitude, random")
      ->capture_default_str();
  cmd->add_option(
         "--format", args->format,
         "format of pruned layers: auto (smallest with a GPU kernel), fastest (the rule table's "
         "pick per engine matmul (qkv, o, gate_up, down) for decode at each batch size, N = "
         "batch, as the engine launches it, or a whole layer's from measured engine runs where "
         "they cover its shapes and batch; batch sizes whose picks differ get a model each), csr, "
         "macko, tca_bme, tiled_csl, dense, or one per engine matmul: "
         "qkv=F,o=F,gate_up=F,down=F")
      ->capture_default_str();
  cmd->add_option("-p,--n-prompt", args->prompt, "prompt tokens (ppP)")->capture_default_str();
  cmd->add_option("-n,--n-gen", args->gen, "generated tokens (tgN)")->capture_default_str();
  cmd->add_option("-b,--batch", args->batches, "comma list of batch sizes")->capture_default_str();
  cmd->add_option("-d,--n-depth", args->depths,
                  "comma list of cached tokens each test starts after (untimed fill; rows named "
                  "\"tg128 @ d512\"); 0 = from an empty cache")
      ->capture_default_str();
  cmd->add_option("-r,--repetitions", args->reps, "timed runs per row")->capture_default_str();
  cmd->add_option("--prefill-chunk", args->prefill_chunk,
                  "GPU: rows per prefill pass, shared by the batch's sequences (each pass expands "
                  "or decodes every weight once)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20))
      ->capture_default_str();
  cmd->add_option("--backend", args->backend, "gpu, cpu or auto")->capture_default_str();
  cmd->add_option("--threads", args->threads, "host threads building a synthetic model (0: all)");
  cmd->add_flag("--json", args->json, "also print the rows as JSON");
  cmd->callback([args, &exit_code] { exit_code = run_bench_model(*args); });
}

}  // namespace sparrow::cli
