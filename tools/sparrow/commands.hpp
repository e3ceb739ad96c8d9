// Each subcommand lives in its own file and registers itself on the root app. `exit_code` is set
// by the subcommand's callback; bad arguments exit 2, a missing GPU exits 3.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace sparrow::cli {

constexpr int kExitBadArgs = 2;
constexpr int kExitNoGpu = 3;

void register_formats(CLI::App& app, int& exit_code);
void register_run(CLI::App& app, int& exit_code);         // tools/sparrow/run.cpp
void register_perplexity(CLI::App& app, int& exit_code);  // tools/sparrow/perplexity.cpp
void register_bench_model(CLI::App& app, int& exit_code);  // tools/sparrow/bench_model.cpp
void register_calibrate(CLI::App& app, int& exit_code);    // tools/sparrow/calibrate.cpp
void register_synth(CLI::App& app, int& exit_code);
void register_prune(CLI::App& app, int& exit_code);
void register_bench(CLI::App& app, int& exit_code);

// For --seed options: CLI11 would read "-1" into a uint64_t as 2^64 - 1 without a word.
inline CLI::Validator seed_validator() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        return s.find('-') == std::string::npos ? "" : "a seed is a non-negative integer";
      },
      "SEED");
}

// The full command line, as typed (main() sets it; benchmark headers print it).
inline std::string& command_line() {
  static std::string line;
  return line;
}

}  // namespace sparrow::cli
