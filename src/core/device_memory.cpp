// Device allocation and copies behind Buffer<T>. Synchronous on purpose: these run when a weight
// is uploaded, never per matmul call.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/cuda_check.hpp"
#include "core/parallel.hpp"
#include "sparrow/buffer.hpp"

namespace sparrow::detail {

Result<std::shared_ptr<void>> device_alloc(size_t bytes) {
  void* p = nullptr;
  Status s = cuda_status(cudaMalloc(&p, bytes), "cudaMalloc");
  if (!s.ok()) {
    cudaGetLastError();  // an allocation failure is not sticky; clear it for later calls
    if (s.code() == Code::out_of_memory) {
      return Status(Code::out_of_memory,
                    "device allocation of " + std::to_string(bytes) + " bytes failed: " +
                        s.message());
    }
    return s;
  }
  return std::shared_ptr<void>(p, [](void* q) { cudaFree(q); });
}

namespace {

// Large copies to the device go through a ring of page-locked slots: host threads copy a slot's
// piece in while the DMA engine sends the previous one. Measured on the H100 machine (session 36,
// the 7B engine's load, which prepares the next layers on the other cores meanwhile): the copies
// of the dense model took 4.3 s with plain cudaMemcpy from pageable memory, 4.3 s through the
// ring filled by one thread and 3.0 s by four (50 %: 2.2 / 2.8 / 1.3 s).
constexpr size_t kStagedMinBytes = size_t(4) << 20;  // smaller copies: one cudaMemcpy
constexpr size_t kSlotBytes = size_t(16) << 20;
constexpr int kSlots = 2;

// SPARROW_UPLOAD_STAGING: 0 copies with plain cudaMemcpy; N > 0 stages through the ring with N
// host threads filling each slot (experiment knob, read once; unset: 4).
int staging_threads() {
  static const int v = [] {
    const char* e = std::getenv("SPARROW_UPLOAD_STAGING");
    return e ? std::max(0, std::atoi(e)) : 4;
  }();
  return v;
}

struct StagingRing {
  int device = -1;            // the device the stream and events belong to
  bool failed = false;        // could not be made: plain copies from then on
  char* pinned = nullptr;     // kSlots x kSlotBytes, page-locked
  cudaStream_t stream = nullptr;
  cudaEvent_t sent[kSlots] = {};  // recorded after each slot's copy: the slot may be refilled
};

// One ring per process, made on first use for the device current then (a few tens of MB of
// page-locked memory, never freed: the CUDA context may be gone at exit). Null when it cannot be
// made or belongs to another device: the caller copies plainly then. Call with ring_mutex held.
std::mutex ring_mutex;
StagingRing* ring_for_current_device() {
  static StagingRing ring;
  int dev = -1;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  if (ring.device == dev) return &ring;
  if (ring.device >= 0 || ring.failed) return nullptr;
  ring.failed = true;  // until everything below exists
  void* p = nullptr;
  if (cudaHostAlloc(&p, kSlots * kSlotBytes, cudaHostAllocPortable) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  ring.pinned = static_cast<char*>(p);
  if (cudaStreamCreateWithFlags(&ring.stream, cudaStreamNonBlocking) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  for (auto& e : ring.sent) {
    if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
  }
  ring.failed = false;
  ring.device = dev;
  return &ring;
}

void host_copy(char* dst, const char* src, size_t bytes, int threads) {
  if (threads <= 1) {
    std::memcpy(dst, src, bytes);
    return;
  }
  const size_t part = (bytes + size_t(threads) - 1) / size_t(threads);
  (void)parallel_for(threads, threads, [&](int64_t i) {
    const size_t b = size_t(i) * part;
    if (b < bytes) std::memcpy(dst + b, src + b, std::min(part, bytes - b));
    return Status::success();
  });
}

Status staged_copy(StagingRing& ring, char* dst, const char* src, size_t bytes, int threads) {
  Status st;
  for (size_t off = 0, i = 0; off < bytes && st.ok(); off += kSlotBytes, ++i) {
    const size_t n = std::min(kSlotBytes, bytes - off);
    const int slot = int(i % kSlots);
    char* stage = ring.pinned + size_t(slot) * kSlotBytes;
    // The slot's previous piece has reached the device (an event never recorded is complete).
    st = cuda_status(cudaEventSynchronize(ring.sent[slot]), "copy to device");
    if (!st.ok()) break;
    host_copy(stage, src + off, n, threads);
    st = cuda_status(cudaMemcpyAsync(dst + off, stage, n, cudaMemcpyHostToDevice, ring.stream),
                     "copy to device");
    if (st.ok()) st = cuda_status(cudaEventRecord(ring.sent[slot], ring.stream), "copy to device");
  }
  // Every piece is on the device (or the copy failed) before the slots are reused or we return.
  const Status sync = cuda_status(cudaStreamSynchronize(ring.stream), "copy to device");
  return st.ok() ? sync : st;
}

}  // namespace

Status copy_to_device(void* dst, const void* src, size_t bytes) {
  const int threads = staging_threads();
  if (bytes >= kStagedMinBytes && threads > 0) {
    std::lock_guard<std::mutex> lock(ring_mutex);
    if (StagingRing* ring = ring_for_current_device()) {
      return staged_copy(*ring, static_cast<char*>(dst), static_cast<const char*>(src), bytes,
                         threads);
    }
  }
  return cuda_status(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "copy to device");
}

Status copy_to_host(void* dst, const void* src, size_t bytes) {
  return cuda_status(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "copy to host");
}

}  // namespace sparrow::detail
