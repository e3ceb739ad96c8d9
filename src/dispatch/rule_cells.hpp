// One measurement of the rule table (src/dispatch/rule_table_data.inc, written by
// scripts/make_rule_table.py), how far a measurement speaks (the rule table's cells and the engine
// cells of engine_layer.cpp alike), and a hook for tests to look choices up in a table of their own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "sparrow/weight.hpp"

namespace sparrow {

struct RuleCell {
  Format format;
  const char* kernel;
  int64_t n;
  double sparsity;
  int64_t rows, cols;  // the benchmarked shape; 0, 0: the median over shapes
  double speedup;      // vs cuBLAS in the same run
  int shapes;          // shapes behind the value
  // Plain launches only: the engine (dependent launch) measured the kernel slower here than the
  // table's plain runs predicted (scripts/rule-table.sh's --leave-out-dependent).
  bool plain_only = false;
  // Measured with dependent launches (`sparrow bench --dependent-launch`, the engine's launch
  // mode): only dependent launches read these cells, and they read them first (rule_table.cpp).
  bool dependent = false;
};

// A measurement speaks for sparsities within this distance of its own (cells are 0.2 apart).
constexpr double kMaxSparsityDistance = 0.1;
// A measured shape speaks for weights with rows within 2x and columns within sqrt(2) of it (log2
// distances): the 7B's fused 12288- and 22016-row projections take 11008 x 4096's cells, a
// 32000 x 4096 lm_head none (the medians).
constexpr double kMaxRowsLog2 = 1.0;
constexpr double kMaxColsLog2 = 0.5;
// Choices measured within this factor of the fastest count as equally fast, and the one expected
// (pick_format) or measured (pick_engine_layer) to store the fewest bytes wins (the table's cells
// move by ~3 % from run to run: cuBLAS's own time, their denominator, does).
constexpr double kBytesTieMargin = 1.05;

// log2 distance (rows plus columns) of a weight of rows x cols to a measured shape, or a negative
// value when the shape does not speak for it (or either shape is unknown: 0 or less).
double shape_distance(int64_t rows, int64_t cols, int64_t measured_rows, int64_t measured_cols);

// printf-style formatting of one number for the choices' reasons.
std::string fmt(const char* f, double a);

// Tests only: while an object lives, every lookup (pick_kernel, pick_format, matmul's choice)
// reads `cells` instead of the shipped table. `cells` must outlive it and hold each format's cells
// in one run, as make_rule_table.py writes them. Its dependent-launch cells answer dependent
// launches of N up to dependent_max_n (the shipped table's --dependent-up-to). Not thread-safe: no
// lookup may run while one is made or destroyed.
class ScopedRuleTable {
 public:
  ScopedRuleTable(const RuleCell* cells, size_t count, int64_t dependent_max_n = INT64_MAX);
  ~ScopedRuleTable();
  ScopedRuleTable(const ScopedRuleTable&) = delete;
  ScopedRuleTable& operator=(const ScopedRuleTable&) = delete;
};

}  // namespace sparrow
