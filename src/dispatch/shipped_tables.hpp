// The rule tables sparrow ships, one per GPU they were measured on (src/dispatch/rule_table_<gpu>
// .inc, written by scripts/rule-table.sh), and which of them answers a lookup: the one measured on
// the GPU the calling thread's current CUDA device is (by name), else the first listed. The
// choices are measured speedups, and they move with the GPU: the H200 reads memory 1.46x faster
// than the H100 with the same SMs, cuBLAS ran 1.3x faster there and sparrow's sparse kernels in
// their H100 times (bench/NOTES-decode.md, session 47), so most speedups and many picks moved.
// SPARROW_RULE_TABLE_GPU=NAME (a shipped table's GPU) answers every lookup from that
// table instead, for planning on another machine (`sparrow prune --format fastest` on a host
// without the GPU) and for tests that assert one GPU's picks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "dispatch/rule_cells.hpp"

namespace sparrow {

struct ShippedRuleTable {
  const char* gpu;   // cudaDeviceProp::name of the GPU it was measured on
  const char* date;  // the measurement dates, comma-separated
  const RuleCell* cells;
  size_t count;
  // The largest N whose dependent launches read the dependent-launch cells (rule-table.sh's
  // --dependent-up-to, where the engine contradicted them above it); larger N read the plain-launch
  // cells. Without the limit a cell answers N within 2x of its own, so dropping the cells above
  // the limit alone would not do.
  int64_t dependent_max_n;
};

const std::vector<ShippedRuleTable>& shipped_rule_tables();

// The table that answers lookups on the calling thread now (header comment). Costs a
// cudaGetDevice after the first call per device.
const ShippedRuleTable& active_rule_table();

// Tests only: while an object lives, the shipped table measured on `gpu` answers every lookup (as
// SPARROW_RULE_TABLE_GPU would; a name no table has leaves the choice as it was). Not
// thread-safe, as ScopedRuleTable.
class ScopedActiveRuleTable {
 public:
  explicit ScopedActiveRuleTable(const char* gpu);
  ~ScopedActiveRuleTable();
  ScopedActiveRuleTable(const ScopedActiveRuleTable&) = delete;
  ScopedActiveRuleTable& operator=(const ScopedActiveRuleTable&) = delete;

 private:
  const ShippedRuleTable* previous_;
};

}  // namespace sparrow
