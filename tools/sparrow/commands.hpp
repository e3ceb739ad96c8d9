// Each subcommand lives in its own file and registers itself on the root app. `exit_code` is set
// by the subcommand's callback; bad arguments exit 2, a missing GPU exits 3.
#pragma once

#include <CLI/CLI.hpp>

#include <sstream>
#include <string>
#include <vector>

#include "sparrow/status.hpp"

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

// The words of a list option, split the same way by every command: "1,2,3", "1, 2, 3" or
// "1 2 3". An empty field of a comma list ("1,,2", "1,2,") is an error, not skipped: it is more
// likely a lost value than something to ignore. `what` names the option in messages, `noun` one
// of its values ("--tokens: empty id in '1,,2'").
inline Result<std::vector<std::string>> split_cli_list(const std::string& text, const char* what,
                                                       const char* noun = "value") {
  std::vector<std::string> words;
  const bool commas = text.find(',') != std::string::npos;
  for (size_t at = 0;;) {
    const size_t comma = text.find(',', at);
    std::istringstream field(text.substr(at, comma == std::string::npos ? comma : comma - at));
    const size_t before = words.size();
    for (std::string w; field >> w;) words.push_back(w);
    if (commas && words.size() == before) {
      return invalid_argument(std::string(what) + ": empty " + noun + " in '" + text + "'");
    }
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  if (words.empty()) return invalid_argument(std::string(what) + " is empty");
  return words;
}

// split_cli_list's words read as numbers of type T; a word that is not one whole T is an error.
template <class T>
Result<std::vector<T>> parse_cli_list(const std::string& text, const char* what) {
  SPARROW_ASSIGN_OR_RETURN(const std::vector<std::string> words, split_cli_list(text, what));
  std::vector<T> out;
  for (const std::string& w : words) {
    std::istringstream one(w);
    T v{};
    if (!(one >> v) || !one.eof()) {
      return invalid_argument(std::string(what) + ": bad value '" + w + "'");
    }
    out.push_back(v);
  }
  return out;
}

// The full command line, as typed (main() sets it; benchmark headers print it).
inline std::string& command_line() {
  static std::string line;
  return line;
}

}  // namespace sparrow::cli
