// sparrow bench: times every registered kernel and the baselines (cuBLAS, cuSPARSE, a streaming
// read) on real-model shapes under the protocol of docs/benchmarking.md. The work is in bench/.
#include <cstdio>
#include <memory>
#include <string>

#include "bench/runner.hpp"
#include "sparrow/commands.hpp"

namespace sparrow::cli {

namespace {

struct BenchArgs {
  std::string shapes = "llama2-7b";
  std::string n = "1,2,4,8,16";
  std::string sparsity = "0.5,0.7,0.9";
  std::string pattern = "random";
  std::string formats = "all";
  std::string dtype = "fp16";
  int reps = 50;
  uint64_t seed = 1;
  bool dependent_launch = false;
  std::string json, csv;
};

int run(const BenchArgs& a) {
  auto bad = [](const std::string& msg) {
    std::fprintf(stderr, "sparrow bench: %s\n", msg.c_str());
    return kExitBadArgs;
  };
  bench::BenchOptions o;
  auto shapes = bench::parse_shapes(a.shapes);
  if (!shapes.ok()) return bad(shapes.status().message());
  o.shapes = shapes.value();
  auto ns = parse_cli_list<int64_t>(a.n, "--n");
  if (!ns.ok()) return bad(ns.status().message());
  o.ns = ns.value();
  for (auto n : o.ns) {
    if (n < 1) return bad("--n: every N must be >= 1");
  }
  auto sparsities = parse_cli_list<double>(a.sparsity, "--sparsity");
  if (!sparsities.ok()) return bad(sparsities.status().message());
  o.sparsities = sparsities.value();
  for (double s : o.sparsities) {
    if (!(s >= 0.0 && s < 1.0)) return bad("--sparsity: every value must be in [0, 1)");
  }
  auto patterns = split_cli_list(a.pattern, "--pattern");
  if (!patterns.ok()) return bad(patterns.status().message());
  o.patterns = patterns.value();
  auto dt = parse_dtype(a.dtype);
  if (!dt || *dt == DType::fp32) return bad("--dtype must be fp16 or bf16");
  o.dtype = *dt;
  if (a.reps < 1) return bad("--reps must be >= 1 (the protocol asks for >= 50)");
  o.reps = a.reps;
  o.seed = a.seed;
  o.dependent_launch = a.dependent_launch;
  o.formats = a.formats;
  o.json_path = a.json;
  o.csv_path = a.csv;
  o.command_line = command_line();
  return bench::run_bench(o);
}

}  // namespace

void register_bench(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Time every kernel and the baselines (cuBLAS, cuSPARSE, streaming read) on model "
               "shapes: us, GB/s, % of the bandwidth floor, speedup vs cuBLAS, error");
  cmd->add_option("--shapes", args->shapes,
                  "llama2-7b | llama3-8b | llama2-70b | llama3-70b | opt-30b | MxK, comma list")
      ->capture_default_str();
  cmd->add_option("--n", args->n, "token counts N, comma list")->capture_default_str();
  cmd->add_option("--sparsity", args->sparsity, "fractions of zeros, comma list")
      ->capture_default_str();
  cmd->add_option("--pattern", args->pattern, "random | magnitude | block:BxB | nm:N:M[:L], comma list")
      ->capture_default_str();
  cmd->add_option("--formats", args->formats,
                  "all | best | comma list of formats (dense, csr, macko, ...), kernel names "
                  "(macko.warp_row) or cusparse; dense.cublas always runs as the baseline")
      ->capture_default_str();
  cmd->add_option("--dtype", args->dtype, "fp16 | bf16")->capture_default_str();
  cmd->add_option("--reps", args->reps, "timed replays per row (median; protocol: >= 50)")
      ->capture_default_str();
  cmd->add_option("--seed", args->seed, "weight and activation generator seed")->capture_default_str();
  cmd->add_flag("--dependent-launch", args->dependent_launch,
                "launch sparrow's kernels with programmatic dependent launch, as the engine does "
                "(each call may start while the previous one finishes; cuBLAS and cuSPARSE rows "
                "launch as usual)");
  cmd->add_option("--json", args->json, "write every row and the header as JSON to this file");
  cmd->add_option("--csv", args->csv, "write every row as CSV (header as # lines) to this file");
  cmd->callback([args, &exit_code] { exit_code = run(*args); });
}

}  // namespace sparrow::cli
