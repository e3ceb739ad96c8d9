// <format>.expand_cublas: band by band, expand W's rows into the workspace, then one cuBLAS GEMM
// writes the matching columns of Y (Y[:, r0:r1] is a strided view of Y with the same ld). One band
// (the whole matrix) when the workspace allows: bands sized to stay in L2 between the expansion and
// the GEMM measured slower once the expansion ran near the memory bandwidth (H100, 11008x4096 at
// 50 %, N = 256: tca_bme 122 us in bands of a third of L2, 96 us in one pass; macko 126 vs 95 us;
// bench/NOTES-tc.md, session 7): a band's rows are the expansion's parallelism.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/cuda_check.hpp"
#include "kernels/dense/cublas.hpp"
#include "kernels/expand/expand.hpp"

namespace sparrow::kernels::expand {

WorkspaceNeed workspace(const Weight& w) {
  const Shape& s = shape_of(w);
  const size_t row_bytes = size_t(expanded_ld(s.cols)) * dtype_size(s.dtype);
  return {size_t(s.rows) * row_bytes, size_t(std::min(s.rows, kBandRows)) * row_bytes};
}

namespace {

// Overlap: with a workspace for two bands, band i + 1 is expanded on a side stream while cuBLAS
// multiplies band i on the caller's stream (fork / join through events, so it also works inside a
// CUDA-graph capture). kOverlapBands bands of the weight; SPARROW_EXPAND_OVERLAP=0 turns it off
// (experiments; read once).
constexpr int64_t kOverlapBands = 4;
constexpr int64_t kOverlapMinRows = 1024;  // smaller weights: one pass

bool overlap_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("SPARROW_EXPAND_OVERLAP");
    return e == nullptr || std::string(e) != "0";
  }();
  return on;
}

// The side stream and events of one host thread on one device, made on first use and kept (a
// call allocates nothing). Per thread: two threads' calls never share the events' order.
struct OverlapStreams {
  int device = -1;
  cudaStream_t side = nullptr;
  cudaEvent_t start = nullptr, expanded[2] = {nullptr, nullptr}, consumed[2] = {nullptr, nullptr};
  ~OverlapStreams() {
    // Best effort at thread exit (the context may already be gone).
    for (cudaEvent_t e : {start, expanded[0], expanded[1], consumed[0], consumed[1]})
      if (e) cudaEventDestroy(e);
    if (side) cudaStreamDestroy(side);
  }
};

// Null when none exist yet and `stream` is being captured into a graph (they are made outside a
// capture; that call then runs one pass).
Result<OverlapStreams*> overlap_streams(cudaStream_t stream) {
  thread_local std::vector<std::unique_ptr<OverlapStreams>> per_device;
  int dev = 0;
  SPARROW_CUDA_RETURN_IF_ERROR(cudaGetDevice(&dev));
  for (auto& o : per_device)
    if (o->device == dev) return o.get();
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  SPARROW_CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(stream, &capturing));
  if (capturing != cudaStreamCaptureStatusNone) return static_cast<OverlapStreams*>(nullptr);
  auto o = std::make_unique<OverlapStreams>();
  o->device = dev;
  SPARROW_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&o->side, cudaStreamNonBlocking));
  for (cudaEvent_t* e : {&o->start, &o->expanded[0], &o->expanded[1], &o->consumed[0],
                         &o->consumed[1]}) {
    SPARROW_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
  }
  per_device.push_back(std::move(o));
  return per_device.back().get();
}

// One band's GEMM: Y[:, r0:r1] (+)= X * W[r0:r1]^T from the expanded rows at `rows`.
Status gemm_band(const Problem& p, const void* rows, int64_t r0, int64_t r1, int64_t ld,
                 cudaStream_t stream) {
  const size_t es = dtype_size(shape_of(p.w).dtype);
  MatrixView y = p.y;
  y.data = static_cast<char*>(p.y.data) + size_t(r0) * es;
  y.cols = r1 - r0;
  MatmulOptions opt = p.opt;
  if (opt.bias) opt.bias = static_cast<const char*>(opt.bias) + size_t(r0) * es;
  return detail::cublas_gemm(rows, r1 - r0, shape_of(p.w).cols, ld, p.x, y, opt,
                             reinterpret_cast<Stream>(stream));
}

Status run_expanded(const Problem& p, Format f, Stream stream) {
  SPARROW_RETURN_IF_ERROR(check_problem(p, f));
  const Shape& s = shape_of(p.w);
  const WorkspaceNeed need = workspace(p.w);
  const std::string name = std::string(format_name(f)) + ".expand_cublas";
  if (p.opt.workspace == nullptr || p.opt.workspace_bytes < need.min) {
    return invalid_argument(name + " needs a device workspace (MatmulOptions::workspace) of at least " +
                            std::to_string(need.min) + " bytes, " + std::to_string(need.full) +
                            " for one pass; got " + std::to_string(p.opt.workspace_bytes));
  }
  if (reinterpret_cast<uintptr_t>(p.opt.workspace) % 16 != 0) {
    return invalid_argument(name + ": the workspace must be 16-byte aligned");
  }
  const int64_t ld = expanded_ld(s.cols);
  const size_t row_bytes = size_t(ld) * dtype_size(s.dtype);
  auto* main = reinterpret_cast<cudaStream_t>(stream);

  // Two alternating band buffers when the workspace holds them.
  const int64_t overlap_band =
      (s.rows + kOverlapBands - 1) / kOverlapBands / kBandRows * kBandRows + kBandRows;
  OverlapStreams* o = nullptr;
  if (overlap_enabled() && s.rows >= kOverlapMinRows &&
      p.opt.workspace_bytes >= 2 * size_t(overlap_band) * row_bytes) {
    SPARROW_ASSIGN_OR_RETURN(o, overlap_streams(main));
  }
  if (o != nullptr) {
    char* buf[2] = {static_cast<char*>(p.opt.workspace),
                    static_cast<char*>(p.opt.workspace) + size_t(overlap_band) * row_bytes};
    // The side stream starts after everything already queued on the caller's stream.
    SPARROW_CUDA_RETURN_IF_ERROR(cudaEventRecord(o->start, main));
    SPARROW_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(o->side, o->start, 0));
    int band = 0;
    for (int64_t r0 = 0; r0 < s.rows; r0 += overlap_band, ++band) {
      const int64_t r1 = std::min(s.rows, r0 + overlap_band);
      const int b = band % 2;
      if (band >= 2) {  // buffer b was read by the GEMM of band - 2
        SPARROW_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(o->side, o->consumed[b], 0));
      }
      SPARROW_RETURN_IF_ERROR(
          expand_rows(p.w, r0, r1, buf[b], ld, reinterpret_cast<Stream>(o->side)));
      SPARROW_CUDA_RETURN_IF_ERROR(cudaEventRecord(o->expanded[b], o->side));
      SPARROW_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(main, o->expanded[b], 0));
      SPARROW_RETURN_IF_ERROR(gemm_band(p, buf[b], r0, r1, ld, main));
      SPARROW_CUDA_RETURN_IF_ERROR(cudaEventRecord(o->consumed[b], main));
    }
    // Every side-stream operation is followed by a wait of the caller's stream: joined.
    return Status::success();
  }

  int64_t band = int64_t(std::min(need.full, p.opt.workspace_bytes) / row_bytes);
  if (band < s.rows) band = band / kBandRows * kBandRows;
  for (int64_t r0 = 0; r0 < s.rows; r0 += band) {
    const int64_t r1 = std::min(s.rows, r0 + band);
    SPARROW_RETURN_IF_ERROR(expand_rows(p.w, r0, r1, p.opt.workspace, ld, stream));
    SPARROW_RETURN_IF_ERROR(gemm_band(p, p.opt.workspace, r0, r1, ld, main));
  }
  return Status::success();
}

}  // namespace

Status run_csr(const Problem& p, Stream stream) { return run_expanded(p, Format::csr, stream); }
Status run_macko(const Problem& p, Stream stream) {
  return run_expanded(p, Format::macko, stream);
}
Status run_tca_bme(const Problem& p, Stream stream) {
  return run_expanded(p, Format::tca_bme, stream);
}

}  // namespace sparrow::kernels::expand
