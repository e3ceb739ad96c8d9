// The timing protocol every candidate and baseline goes through (docs/benchmarking.md):
//
//   * cold L2: the caller provides `copies` identical copies of the weight whose bytes together
//     exceed 3x the L2, and `call(i)` runs the kernel on copy i;
//   * one CUDA graph per candidate holds `calls_per_replay` calls that rotate over the copies
//     (a multiple of `copies`, at least kMinCallsPerReplay, so a replay starts where the previous
//     one's data has long left the L2 and graph-launch overhead is amortised);
//   * warm-up replays, then `reps` replays queued back to back behind a short spin kernel (so the
//     host is never the bottleneck), each bracketed by CUDA events;
//   * a sample is one replay's time / calls_per_replay; the result is the median of the samples.
// A candidate that cannot be captured is timed with the same calls launched directly, and the
// row says so.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <memory>
#include <string>

#include "sparrow/status.hpp"

namespace sparrow::bench {

constexpr int kMinCallsPerReplay = 8;
// A call slower than this (measured in the direct warm-up) is not repeated to reach
// kMinCallsPerReplay: launch overhead is irrelevant next to it, and a replay is then one round
// over the copies.
constexpr double kSlowCallUs = 1000.0;

constexpr int kMinSlowReps = 5;

struct Timing {
  double median_us = 0, p10_us = 0, p90_us = 0;  // per call
  int copies = 0, calls_per_replay = 0, replays = 0;
  bool graph = true;
  std::string note;  // why it was not a graph, when it was not
};

using CallFn = std::function<Status(int copy, cudaStream_t stream)>;

class RotatedCalls {
 public:
  // Runs every copy once directly (warm-up, and handle/module creation outside capture), then
  // captures the graph.
  static Result<std::unique_ptr<RotatedCalls>> prepare(CallFn call, int copies,
                                                      cudaStream_t stream);
  ~RotatedCalls();
  RotatedCalls(const RotatedCalls&) = delete;
  RotatedCalls& operator=(const RotatedCalls&) = delete;

  // One replay (all calls_per_replay calls), asynchronous.
  Status replay();
  // Warm-up and `reps` timed replays. A candidate so slow that `reps` replays would take more
  // than `budget_s` gets fewer (at least kMinSlowReps; the row's note says so): such rows are
  // 10-1000x off the floor and their exact median does not matter.
  Result<Timing> time(int reps, int sm_clock_mhz, double budget_s);

 private:
  RotatedCalls() = default;
  CallFn call_;
  int copies_ = 0, calls_ = 0;
  cudaStream_t stream_ = nullptr;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  std::string note_;
};

// A one-thread kernel that spins for about `microseconds` (used to let the host queue a whole
// timing loop before the GPU reaches it). bench_kernels.cu.
Status enqueue_spin(cudaStream_t stream, double microseconds, int sm_clock_mhz);

// Reads `bytes` (a multiple of 16) at `data` with 16-byte loads and discards the result: the
// streaming-read kernel that defines the bandwidth ceiling. bench_kernels.cu.
Status enqueue_stream_read(const void* data, size_t bytes, int sm_count, cudaStream_t stream);

// Fills device memory with a non-zero pattern (never time reads of zeros).
Status fill_pattern(void* data, size_t bytes, cudaStream_t stream);

// Device read bandwidth in GB/s: the median of `reps` timed reads of a buffer of `bytes` (far
// larger than the L2, so every read comes from DRAM).
Result<double> measure_read_bandwidth(size_t bytes, int reps, int sm_count, cudaStream_t stream);

// The read ceiling every table and bound is measured against: measure_read_bandwidth of a
// kCeilingBytes buffer, median of kCeilingReps (`sparrow bench`'s header line, bench-model's tg
// bound).
constexpr size_t kCeilingBytes = size_t(1) << 30;
constexpr int kCeilingReps = 20;
inline Result<double> measure_read_ceiling(int sm_count, cudaStream_t stream) {
  return measure_read_bandwidth(kCeilingBytes, kCeilingReps, sm_count, stream);
}

}  // namespace sparrow::bench
