#include "bench/timing.hpp"

#include <algorithm>
#include <vector>

#include "core/cuda_check.hpp"

namespace sparrow::bench {

Result<std::unique_ptr<RotatedCalls>> RotatedCalls::prepare(CallFn call, int copies,
                                                           cudaStream_t stream) {
  if (copies < 1) return invalid_argument("RotatedCalls: copies must be >= 1");
  std::unique_ptr<RotatedCalls> r(new RotatedCalls());
  r->call_ = std::move(call);
  r->copies_ = copies;
  r->stream_ = stream;

  // Direct warm-up: the first call may create library handles or load modules, which must not
  // happen inside the capture. A second, timed round tells slow candidates apart.
  for (int i = 0; i < copies; ++i) SPARROW_RETURN_IF_ERROR(r->call_(i, stream));
  SPARROW_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  cudaEvent_t e0, e1;
  SPARROW_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e0));
  SPARROW_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e1));
  SPARROW_CUDA_RETURN_IF_ERROR(cudaEventRecord(e0, stream));
  for (int i = 0; i < copies; ++i) SPARROW_RETURN_IF_ERROR(r->call_(i, stream));
  SPARROW_CUDA_RETURN_IF_ERROR(cudaEventRecord(e1, stream));
  SPARROW_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  float ms = 0;
  SPARROW_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, e0, e1));
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  const bool slow = double(ms) * 1e3 / copies > kSlowCallUs;
  r->calls_ = slow ? copies : copies * ((kMinCallsPerReplay + copies - 1) / copies);

  // Thread-local capture mode: an allocation or synchronisation made by the candidate during
  // the capture invalidates it, which is exactly what "capturable" must rule out.
  SPARROW_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  Status st;
  for (int i = 0; i < r->calls_ && st.ok(); ++i) st = r->call_(i % copies, stream);
  const cudaError_t end = cudaStreamEndCapture(stream, &r->graph_);
  cudaError_t inst = cudaErrorUnknown;
  if (st.ok() && end == cudaSuccess) inst = cudaGraphInstantiate(&r->exec_, r->graph_, 0);
  if (!st.ok() || end != cudaSuccess || inst != cudaSuccess) {
    r->note_ = "not capturable (" +
               (!st.ok() ? st.to_string()
                         : std::string(cudaGetErrorString(end != cudaSuccess ? end : inst))) +
               "): timed as direct launches";
    cudaGetLastError();  // the failed capture leaves an error behind; it is reported in the note
    if (r->graph_) cudaGraphDestroy(r->graph_);
    r->graph_ = nullptr;
    r->exec_ = nullptr;
    // The stream must still work for direct launches.
    SPARROW_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  }
  return r;
}

RotatedCalls::~RotatedCalls() {
  if (exec_) cudaGraphExecDestroy(exec_);
  if (graph_) cudaGraphDestroy(graph_);
}

Status RotatedCalls::replay() {
  if (exec_) {
    SPARROW_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(exec_, stream_));
    return Status::success();
  }
  for (int i = 0; i < calls_; ++i) SPARROW_RETURN_IF_ERROR(call_(i % copies_, stream_));
  return Status::success();
}

Result<Timing> RotatedCalls::time(int reps, int sm_clock_mhz, double budget_s) {
  if (reps < 1) return invalid_argument("reps must be >= 1");
  // Warm-up: one timed replay, then two more unless that one alone was long.
  std::string note = note_;
  {
    cudaEvent_t e0, e1;
    SPARROW_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e0));
    SPARROW_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e1));
    SPARROW_CUDA_RETURN_IF_ERROR(cudaEventRecord(e0, stream_));
    SPARROW_RETURN_IF_ERROR(replay());
    SPARROW_CUDA_RETURN_IF_ERROR(cudaEventRecord(e1, stream_));
    SPARROW_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    float ms = 0;
    SPARROW_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, e0, e1));
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    const double replay_s = double(ms) * 1e-3;
    if (replay_s * reps > budget_s) {
      const int fewer = std::max(kMinSlowReps, int(budget_s / std::max(replay_s, 1e-9)));
      if (fewer < reps) {
        reps = fewer;
        note += (note.empty() ? "" : "; ") + std::string("slow: median of ") +
                std::to_string(reps) + " replays";
      }
    }
    if (replay_s < 0.01) {
      for (int i = 0; i < 2; ++i) SPARROW_RETURN_IF_ERROR(replay());
    }
  }
  SPARROW_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));

  std::vector<cudaEvent_t> ev(size_t(reps) + 1);
  for (auto& e : ev) SPARROW_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e));
  // Long enough for the host to queue every replay (a graph launch plus an event record costs
  // the host a few microseconds; direct launches cost that per call).
  const double queue_us = 200.0 + reps * (exec_ ? 10.0 : 6.0 * calls_);
  Status st = enqueue_spin(stream_, std::min(queue_us, 50000.0), sm_clock_mhz);
  if (st.ok()) st = cuda_status(cudaEventRecord(ev[0], stream_), "cudaEventRecord");
  for (int r = 0; r < reps && st.ok(); ++r) {
    st = replay();
    if (st.ok()) st = cuda_status(cudaEventRecord(ev[size_t(r) + 1], stream_), "cudaEventRecord");
  }
  if (st.ok()) st = cuda_status(cudaStreamSynchronize(stream_), "timed replays");
  std::vector<double> us;
  for (int r = 0; r < reps && st.ok(); ++r) {
    float ms = 0;
    st = cuda_status(cudaEventElapsedTime(&ms, ev[size_t(r)], ev[size_t(r) + 1]), "elapsed");
    us.push_back(double(ms) * 1e3 / calls_);
  }
  for (auto& e : ev) cudaEventDestroy(e);
  SPARROW_RETURN_IF_ERROR(st);

  std::sort(us.begin(), us.end());
  Timing t;
  t.median_us = 0.5 * (us[(us.size() - 1) / 2] + us[us.size() / 2]);
  t.p10_us = us[us.size() / 10];
  t.p90_us = us[std::min(us.size() - 1, us.size() * 9 / 10)];
  t.copies = copies_;
  t.calls_per_replay = calls_;
  t.replays = reps;
  t.graph = exec_ != nullptr;
  t.note = note;
  return t;
}

}  // namespace sparrow::bench
