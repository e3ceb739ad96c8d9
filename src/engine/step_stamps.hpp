// Where a decode step's time goes inside the engine's own chain of kernels
// (SPARROW_ENGINE_STAMPS=1, an experiment knob of the GPU backend). After each op of the step the
// backend launches a one-warp kernel that waits for the op (dependent launch, so the op after it
// may still start early) and writes %globaltimer into a slot; the interval between two stamps is
// the op's time on the step's critical path, its launch link included. The kernel benchmark
// times a kernel after a copy of itself; this times it after its real neighbours (see
// bench/NOTES-decode.md, sessions 30 and 31, for cases where the two disagreed). Each stamp adds
// its own link (~1 µs), and reading the stamps syncs the host after every step, so tokens/s with
// the knob on are not comparable with runs without it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sparrow::engine {

class StepStamps {
 public:
  // The names of a step's stamps restart (a decode step is being built or captured).
  void begin_step() { names_.clear(); }
  // The slot of the stamp after op `name`, or -1 when `capacity` slots are taken.
  int add(const std::string& name, int capacity);
  int count() const { return int(names_.size()); }
  // One step's stamps (ns, count() of them, in slot order): slot i's interval (t[i] - t[i - 1];
  // slot 0 is the step's start and has none) goes to its name. Stamps that go backwards (a
  // step that was not run whole) are not counted.
  void record(const std::vector<uint64_t>& t);
  int64_t steps() const { return steps_; }
  // One line per name in first-stamp order: mean µs per launch, launches per step, µs per step
  // and its share of the step; then the step's mean total. Empty before any record().
  std::string report(const std::string& what) const;

 private:
  struct Op {
    std::string name;
    double total_ns = 0;  // over every recorded step
    int64_t launches = 0;
  };
  std::vector<std::string> names_;  // per slot
  std::vector<Op> ops_;             // per distinct name, first-stamp order
  int64_t steps_ = 0;
  double step_ns_ = 0;  // sum of recorded steps' first-to-last intervals
};

}  // namespace sparrow::engine
