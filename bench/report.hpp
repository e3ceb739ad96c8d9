// The rows `sparrow bench` produces and how they are written: the human table on stdout, JSON,
// and CSV (streamed row by row so a run cut short keeps what it measured).
#pragma once

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace sparrow::bench {

// One measured (or skipped) candidate on one problem. docs/benchmarking.md defines the columns.
struct Row {
  std::string shape, pattern, dtype, format, kernel;
  int64_t m = 0, k = 0, n = 0;
  double sparsity = 0;
  size_t weight_bytes = 0, bytes = 0;
  double us = -1, p10_us = -1, p90_us = -1, gbps = 0, floor_us = 0, pct_floor = 0, speedup = 0;
  double error = -1;
  std::string error_scope;
  int copies = 0, calls_per_replay = 0;
  bool graph = false, best = false;
  std::string status = "ok";  // ok | FAIL | skip | inexact (a baseline above tolerance)
  std::string note;
};

void print_table_header();
void print_row(const Row& r);
nlohmann::json row_json(const Row& r);
void write_csv_header(std::ofstream& f, const std::vector<std::string>& header);
void write_csv_row(std::ofstream& f, const Row& r);  // no-op when f is not open

}  // namespace sparrow::bench
