// A backend runs a Model's forward pass over a KV cache: the CPU reference (fp32, simple) or the
// GPU engine (every linear layer through sparrow::matmul in its own format).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sparrow/engine/model.hpp"
#include "sparrow/status.hpp"

namespace sparrow::engine {

struct BackendOptions {
  int max_batch = 1;            // sequences run together (each has its own KV cache)
  int64_t context = 0;          // KV-cache length per sequence; 0 = the model's context
  int64_t prefill_chunk = 512;  // GPU: tokens per prefill pass (bounds the activation memory)
};

struct MemoryReport {
  size_t model_bytes = 0;  // weights as held by the backend
  // How the backend holds them when that is not the model's own formats (the CPU backend: "fp32
  // dense"); null when it keeps the stored formats (the GPU backend).
  const char* held_as = nullptr;
  size_t kv_cache_bytes = 0;
  size_t workspace_bytes = 0;    // activations, logits
  size_t peak_device_bytes = 0;  // GPU: device memory in use at its highest (0 on the CPU)
};

// Where the backend's construction spent its time, in seconds (zeros where a part does not
// apply). The GPU backend prepares the next layers while it copies others, so the parts overlap.
struct LoadReport {
  double prepare_s = 0;  // host work on the weights (GPU: stacking q/k/v and gate/up, norm folds)
  double copy_s = 0;     // the weights' device allocations and copies
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;  // "cpu" or "gpu"
  virtual const Model& model() const = 0;
  virtual int max_batch() const = 0;
  virtual int64_t context() const = 0;
  // Tokens already in the cache of every sequence (all sequences advance together).
  virtual int64_t position() const = 0;
  // Empties the KV caches.
  virtual void reset() = 0;
  // Appends `count` tokens to each of `batch` sequences (tokens: batch x count, row-major) and
  // computes logits: (batch x count x vocab) when `all_logits`, else (batch x vocab) for the
  // last position of each sequence. Fails without changing the cache if the tokens would not
  // fit in the context or an id is outside the vocabulary.
  virtual Status forward(const int32_t* tokens, int batch, int64_t count, bool all_logits,
                         std::vector<float>& logits) = 0;
  // forward() followed by argmax of each sequence's last logits: next (batch). The GPU backend
  // does the argmax on the device and copies back only the ids.
  virtual Status forward_greedy(const int32_t* tokens, int batch, int64_t count,
                                std::vector<int32_t>& next);
  // Greedy decoding: up to `steps` decode steps, the first fed `first` (batch ids), each later
  // one fed the picks of the step before, as forward_greedy(fed, batch, 1, picks) in a loop.
  // `on_step(picks)` sees each step's picks (batch) in order; returning false stops there. The
  // position counts exactly the steps on_step saw. The GPU backend enqueues a step before the
  // host has read the previous one's picks, so the host's work between steps overlaps the GPU's;
  // a step enqueued after the one that stopped is discarded.
  using StepFn = std::function<bool(const int32_t* picks)>;
  virtual Status decode_greedy(const int32_t* first, int batch, int64_t steps,
                               const StepFn& on_step);
  virtual MemoryReport memory() const = 0;
  virtual LoadReport load_report() const { return {}; }
  // The bytes of every array of every matmul weight a decode step multiplies by (each layer's and
  // lm_head's) as the backend holds them: what bench-model's tg bound divides by the device's
  // read bandwidth. GPU only (unsupported on the CPU backend, whose fp32 panels a step reads
  // instead).
  virtual Result<size_t> decode_weight_bytes() const;
};

// fp32 arithmetic on the host; every linear layer held as a plain fp32 dense copy of its decoded
// weights (the speed a test in CI needs; the sparse formats themselves are exercised on the GPU).
Result<std::unique_ptr<Backend>> make_cpu_backend(std::shared_ptr<const Model> model,
                                                  const BackendOptions& opt = {});

// Uploads the model to the current CUDA device. Fails with a message saying how much device
// memory the model and KV cache need when they do not fit, and with no_device without a GPU.
Result<std::unique_ptr<Backend>> make_gpu_backend(std::shared_ptr<const Model> model,
                                                  const BackendOptions& opt = {});

// Checks that tokens are in [0, vocab) and that `count` more fit in the context.
Status check_forward_args(const Backend& b, const int32_t* tokens, int batch, int64_t count);
// Checks decode_greedy's arguments: steps >= 0 and, for any step, `first` as one token of each
// sequence and `steps` more positions in the context.
Status check_decode_args(const Backend& b, const int32_t* first, int batch, int64_t steps);

}  // namespace sparrow::engine

namespace sparrow::engine {
// True when a CUDA device is usable (what `--backend auto` picks the GPU by).
bool gpu_available();
}  // namespace sparrow::engine
