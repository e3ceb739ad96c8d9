// `sparrow bench`: kernel-level benchmark of every registered kernel and the baselines (cuBLAS,
// cuSPARSE, a streaming read) under one protocol (timing.hpp, docs/benchmarking.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/shapes.hpp"
#include "sparrow/dtype.hpp"

namespace sparrow::bench {

struct BenchOptions {
  std::vector<LayerShape> shapes;
  std::vector<int64_t> ns;
  std::vector<double> sparsities;
  std::vector<std::string> patterns;  // "random", "magnitude", ...
  std::string formats = "all";        // all | best | comma list of formats / kernel names
  DType dtype = DType::fp16;
  int reps = 50;
  double row_budget_s = 0.1;   // timed replays per row beyond this only for fast rows (timing.hpp)
  uint64_t seed = 1;
  // Sparse and dense kernels launched with MatmulOptions::dependent_launch, as the engine's decode
  // step launches them: each call in a replay may start while the previous one finishes, so work a
  // kernel does before its wait (weight loads) overlaps the previous call. cuBLAS, cuSPARSE and
  // the streaming read have no dependent launch: compare their rows with a run without it.
  bool dependent_launch = false;
  std::string json_path, csv_path;
  std::string command_line;
};

// Exit code: 0 all rows ok (skipped rows allowed), 1 a row failed (error above tolerance or a
// kernel error), 2 bad arguments, 3 no GPU.
int run_bench(const BenchOptions& opt);

}  // namespace sparrow::bench
