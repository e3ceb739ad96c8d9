#include "engine/step_stamps.hpp"

#include <cstdio>

namespace sparrow::engine {

int StepStamps::add(const std::string& name, int capacity) {
  if (count() >= capacity) return -1;
  names_.push_back(name);
  return count() - 1;
}

void StepStamps::record(const std::vector<uint64_t>& t) {
  if (t.size() != names_.size() || t.size() < 2) return;
  for (size_t i = 1; i < t.size(); ++i)
    if (t[i] < t[i - 1]) return;
  for (size_t i = 1; i < t.size(); ++i) {
    Op* op = nullptr;
    for (Op& o : ops_)
      if (o.name == names_[i]) op = &o;
    if (!op) {
      ops_.push_back(Op{names_[i]});
      op = &ops_.back();
    }
    op->total_ns += double(t[i] - t[i - 1]);
    ++op->launches;
  }
  step_ns_ += double(t.back() - t.front());
  ++steps_;
}

std::string StepStamps::report(const std::string& what) const {
  if (steps_ == 0) return "";
  std::string out = "sparrow: engine stamps, " + what + ", " + std::to_string(steps_) +
                    " decode steps (µs on the step's critical path since the previous stamp):\n";
  char buf[160];
  const double step_us = step_ns_ / double(steps_) / 1e3;
  for (const Op& o : ops_) {
    const double per_launch = o.total_ns / double(o.launches) / 1e3;
    const double per_step = o.total_ns / double(steps_) / 1e3;
    std::snprintf(buf, sizeof buf, "  %-10s %8.2f µs x %5.1f per step = %9.1f µs (%5.1f %%)\n",
                  o.name.c_str(), per_launch, double(o.launches) / double(steps_), per_step,
                  step_us > 0 ? 100.0 * per_step / step_us : 0.0);
    out += buf;
  }
  std::snprintf(buf, sizeof buf, "  step       %9.1f µs\n", step_us);
  out += buf;
  return out;
}

}  // namespace sparrow::engine
