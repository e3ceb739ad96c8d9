// One measurement of the rule table (src/dispatch/rule_table_data.inc, written by
// scripts/make_rule_table.py), and a hook for tests to look choices up in a table of their own.
#pragma once

#include <cstddef>
#include <cstdint>

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
