// The CPU tests assert picks measured on the H100 (the dispatch tests, the engine's "fastest"
// formats, the CLI runs that print them), whatever GPU the host running them has: every lookup in
// this binary, and in the `sparrow` processes it starts, reads the H100's shipped table. Set before
// main, so before the first lookup reads it (shipped_tables.cpp reads it once).
#include <cstdlib>

namespace {
const bool pinned = [] {
  return ::setenv("SPARROW_RULE_TABLE_GPU", "NVIDIA H100 80GB HBM3", 1) == 0;
}();
}  // namespace
