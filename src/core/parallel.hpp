// Host-side parallel loop for load-time work (model transforms, weight folding): plain threads,
// no pool kept between calls.
#pragma once

#include <cstdint>
#include <functional>

#include "sparrow/status.hpp"

namespace sparrow {

// Runs fn(i) for every i in [0, n) on `threads` threads (<= 0: one per hardware thread; never
// more than n), handing out indices one at a time. Returns the first error any call returned;
// the other calls still run.
Status parallel_for(int64_t n, int threads, const std::function<Status(int64_t)>& fn);

}  // namespace sparrow
