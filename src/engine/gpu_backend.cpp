// The GPU backend: weights uploaded once in their own formats, every linear layer through
// sparrow::matmul, the other ops from gpu_ops. Prefill runs in chunks; a decode step (one token
// per sequence) is captured once per batch size in a CUDA graph and replayed, reading the
// position and the tokens from device memory, so decoding allocates nothing per token.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/cuda_check.hpp"
#include "core/parallel.hpp"
#include "engine/attention_plan.hpp"
#include "engine/gpu_ops.hpp"
#include "engine/prefill_attention.hpp"
#include "engine/role_overrides.hpp"
#include "engine/step_stamps.hpp"
#include "kernels/device_info.hpp"
#include "kernels/kernel.hpp"
#include "kernels/macko/swiglu_mlp.hpp"
#include "kernels/macko/warp_row.hpp"
#include "sparrow/engine/backend.hpp"
#include "sparrow/matmul.hpp"

namespace sparrow::engine {

bool gpu_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

namespace {

// An owning device allocation.
struct DeviceArray {
  std::shared_ptr<void> mem;
  size_t bytes = 0;
  static Result<DeviceArray> alloc(size_t bytes) {
    DeviceArray a;
    a.bytes = bytes;
    if (bytes == 0) return a;
    void* p = nullptr;
    SPARROW_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, bytes));
    a.mem = std::shared_ptr<void>(p, [](void* q) { cudaFree(q); });
    return a;
  }
  template <class T = void>
  T* get() const {
    return static_cast<T*>(mem.get());
  }
};

Result<DeviceArray> upload_floats(const std::vector<float>& v) {
  SPARROW_ASSIGN_OR_RETURN(DeviceArray a, DeviceArray::alloc(v.size() * sizeof(float)));
  if (!v.empty())
    SPARROW_CUDA_RETURN_IF_ERROR(cudaMemcpy(a.get(), v.data(), a.bytes, cudaMemcpyHostToDevice));
  return a;
}

// A bias vector rounded to the activation dtype (matmul's bias has Y's dtype).
Result<DeviceArray> upload_as(const std::vector<float>& v, DType t) {
  std::vector<uint8_t> bytes(v.size() * dtype_size(t));
  for (size_t i = 0; i < v.size(); ++i) store_from_float(bytes.data(), t, i, v[i]);
  SPARROW_ASSIGN_OR_RETURN(DeviceArray a, DeviceArray::alloc(bytes.size()));
  if (!bytes.empty())
    SPARROW_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(a.get(), bytes.data(), a.bytes, cudaMemcpyHostToDevice));
  return a;
}

struct DeviceLayer {
  // With fused projections, qkv = [q; k; v] and gate_up = [gate; up] stacked along M (one matmul
  // each) and q, k, v, gate, up are empty.
  Weight q, k, v, o, gate, up, down, qkv, gate_up;
  DeviceArray attn_norm, mlp_norm;     // fp32
  // The norm's gain is folded into qkv's / gate_up's columns (fused projections only): those
  // matmuls read the residual x and normalise it on the fly (MatmulOptions::input_rms) where
  // their kernel takes it, else they read rms_norm(x) with a unit gain.
  bool attn_folded = false, mlp_folded = false;
  DeviceArray q_bias, k_bias, v_bias;  // dtype, or empty; with fused projections q_bias holds all three
};

// Projections are fused unless SPARROW_ENGINE_FUSE=0 (experiment knob; read once).
bool fusion_requested() {
  static const bool v = [] {
    const char* e = std::getenv("SPARROW_ENGINE_FUSE");
    return !(e && std::string(e) == "0");
  }();
  return v;
}

// Decode steps fold RoPE and the cache append into attention unless SPARROW_ENGINE_FOLD_ROPE=0
// (experiment knob for A/B runs; read once).
bool fold_rope_requested() {
  static const bool v = [] {
    const char* e = std::getenv("SPARROW_ENGINE_FOLD_ROPE");
    return !(e && std::string(e) == "0");
  }();
  return v;
}

// Each RMSNorm's gain is folded into the columns of the stacked matmul that reads its output, so
// decode steps skip the norm kernel (the matmul normalises), unless SPARROW_ENGINE_FOLD_NORM=0
// (experiment knob for A/B runs; read once).
bool fold_norm_requested() {
  static const bool v = [] {
    const char* e = std::getenv("SPARROW_ENGINE_FOLD_NORM");
    return !(e && std::string(e) == "0");
  }();
  return v;
}

// SPARROW_ENGINE_STAMPS=1: time each op of the decode step in the engine's chain (step_stamps.hpp;
// experiment knob, read once).
bool stamps_requested() {
  static const bool v = kernels::env_knob("SPARROW_ENGINE_STAMPS", 0) == 1;
  return v;
}

// SPARROW_ENGINE_FUSED_MLP=1: at batch 1 a layer whose gate_up and down are both macko runs its
// MLP (gate_up, swiglu, down) as one persistent kernel, macko.swiglu_mlp (experiment knob).
bool fused_mlp_requested() {
  static const bool v = kernels::env_knob("SPARROW_ENGINE_FUSED_MLP", 0) == 1;
  return v;
}

// The stacked gate_up matmul writes silu(gate) * up itself where its kernel takes
// MatmulOptions::output_swiglu (dense.gemv), so no SwiGLU kernel runs, unless
// SPARROW_ENGINE_SWIGLU_IN_MATMUL=0 (experiment knob for A/B runs; read when a backend is made,
// so a test can compare both in one process).
bool swiglu_in_matmul_requested() {
  return kernels::env_knob("SPARROW_ENGINE_SWIGLU_IN_MATMUL", 1) != 0;
}

// Keys per decode attention split (decode_splits): SPARROW_ENGINE_ATTN_SPLIT_KEYS=K (>= 16;
// experiment knob, read when a backend is made).
int64_t decode_split_keys_requested() {
  return std::max(16, kernels::env_knob("SPARROW_ENGINE_ATTN_SPLIT_KEYS", 256));
}

// A fixed split count for every decode step: SPARROW_ENGINE_ATTN_SPLITS=N (experiment knob, read
// when a backend is made; 0, the default, is decode_splits' rule).
int64_t decode_splits_forced() {
  return std::max(0, kernels::env_knob("SPARROW_ENGINE_ATTN_SPLITS", 0));
}

// Prefill passes' attention on the tensor cores (prefill_attention.hpp) where it fits and pays
// (prefill_on_tensor_cores), unless SPARROW_ENGINE_PREFILL_ATTENTION=0 (experiment knob, read when
// a backend is made): then the split-K kernel, as decode steps use.
bool prefill_attention_requested() {
  return kernels::env_knob("SPARROW_ENGINE_PREFILL_ATTENTION", 1) != 0;
}

// Warps per decode attention block: SPARROW_ENGINE_ATTN_WARPS=4|8|16 (experiment knob, read when a
// backend is made; anything else is 16).
int decode_attention_warps_requested() {
  const int w = kernels::env_knob("SPARROW_ENGINE_ATTN_WARPS", 16);
  return w == 4 || w == 8 ? w : 16;
}

// decode_greedy enqueues each step before the host reads the previous one's picks, unless
// SPARROW_ENGINE_PIPELINE=0 (experiment knob for A/B runs: then it loops over forward_greedy,
// a host round trip per step; read when a backend is made).
bool pipeline_requested() { return kernels::env_knob("SPARROW_ENGINE_PIPELINE", 1) != 0; }

// Whether the norm before weights of this format is folded into them (scale_columns).
bool foldable(Format f) { return fold_norm_requested() && can_scale_columns(f); }

// W diag(gain) in place when foldable; false, with W unchanged, otherwise or when a product would
// not fit the dtype (scale_columns refuses it).
bool fold_gain(Weight& w, const std::vector<float>& gain) {
  return foldable(format_of(w)) && scale_columns(w, gain).ok();
}

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string gib(size_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", double(b) / double(size_t(1) << 30));
  return buf;
}

// The layers' macko step_rows as the host model holds them (counted in Model::weight_bytes).
size_t host_step_rows_bytes(const Model& m) {
  size_t n = 0;
  for (const auto& [name, w] : m.linear_layers()) {
    if (const auto* mm = std::get_if<macko::Matrix>(w)) n += mm->step_rows.bytes();
  }
  return n;
}

// Clears a macko weight's step_rows where no kernel on this GPU reads them (macko.warp_row's
// entry split takes uneven rows that fit one wave of its row kernel: on the 7B model's stacked
// weights, o_proj and down_proj only), so the GPU holds 16 bytes per 256 entries only there.
// Returns the step_rows bytes the weight keeps (0 for the other formats).
size_t drop_unread_step_rows(Weight& w, int sm_count) {
  auto* mm = std::get_if<macko::Matrix>(&w);
  if (mm == nullptr) return 0;
  if (!kernels::macko_warp_row::may_read_step_rows(*mm, sm_count)) mm->step_rows = {};
  return mm->step_rows.bytes();
}

class GpuBackend final : public Backend {
 public:
  GpuBackend(std::shared_ptr<const Model> m, const BackendOptions& opt, int64_t context,
             const RoleOverrides& overrides)
      : model_(std::move(m)), max_batch_(opt.max_batch), context_(context), overrides_(overrides) {
    const int64_t budget = std::max<int64_t>(opt.prefill_chunk, opt.max_batch);
    // Rows per pass (activations are sized for them); a pass of `batch` sequences takes
    // rows_ / batch tokens of each (chunk_for), so a batch smaller than max_batch still prefills
    // in full-sized passes.
    rows_ = int64_t(max_batch_) * std::max<int64_t>(1, budget / opt.max_batch);
  }
  ~GpuBackend() override {
    for (const auto& [b, st] : stamps_by_batch_)
      std::fputs(st.report("batch " + std::to_string(b)).c_str(), stderr);
    for (auto& [key, g] : graphs_) cudaGraphExecDestroy(g);
    if (pinned_) cudaFreeHost(pinned_);
    if (history_) cudaFreeHost(history_);
    for (cudaEvent_t e : step_done_)
      if (e) cudaEventDestroy(e);
    if (stream_) cudaStreamDestroy(stream_);
  }

  Status init() {
    const Model& m = *model_;
    const LlamaConfig& c = m.config;
    dt_ = m.dtype;
    if (dt_ == DType::fp32) {
      return unsupported(
          "the GPU backend runs fp16 or bf16 models; this one is fp32 (use "
          "--backend cpu, or convert the checkpoint)");
    }
    shape_ = {c.heads, c.kv_heads, c.head_dim, context_};
    // Decode attention: up to one split per decode_split_keys_ keys of the context (decode_splits
    // picks the count per position). Prefill passes the tensor-core kernel does not take
    // (prefill_on_tensor_cores, prefill_attention_fits) use up to 4 splits of fixed ranges.
    max_decode_splits_ = std::max((context_ + decode_split_keys_ - 1) / decode_split_keys_,
                                  decode_splits_forced_);
    splits_prefill_ = std::min<int64_t>(4, (context_ + 127) / 128);
    split_len_prefill_ = (context_ + splits_prefill_ - 1) / splits_prefill_;

    SPARROW_ASSIGN_OR_RETURN(const kernels::DeviceInfo dev, kernels::current_device_info());
    SPARROW_ASSIGN_OR_RETURN(const int attention_per_sm,
                             gpu::attention_blocks_per_sm(shape_, dt_, decode_attention_warps_));
    decode_wave_blocks_ = int64_t(attention_per_sm) * dev.sm_count;
    // What the run needs, checked against free device memory before anything is uploaded (the
    // host model's bytes: at least what the GPU will hold).
    const size_t es = dtype_size(dt_);
    mem_.model_bytes = m.weight_bytes();
    mem_.kv_cache_bytes = size_t(2 * c.layers * max_batch_ * context_ * c.kv_dim()) * es;
    const std::string blocker = fusion_requested() ? stacking_blocker(m) : "";
    fused_ = fusion_requested() && blocker.empty() && !m.layers.empty();
    if (!blocker.empty()) {
      std::fprintf(stderr,
                   "sparrow: q/k/v and gate/up run as separate matmuls in every layer (slower), "
                   "because %s; stacking needs each group in one format that stacks (sparrow prune "
                   "--format fastest picks one)\n",
                   blocker.c_str());
    }
    qkv_cols_ = c.q_dim() + 2 * c.kv_dim();
    const int64_t widest = std::max({c.hidden, c.q_dim(), c.intermediate});
    const size_t partial_floats =
        std::max(gpu::attention_partials_floats(max_batch_, shape_, max_decode_splits_),
                 gpu::attention_partials_floats(rows_, shape_, splits_prefill_));
    // Activation columns: x, h, last, attn, gate, logits, plus q, k, v, up (separate projections)
    // or the fused [q | k | v] and [gate | up] outputs.
    const int64_t projection_cols =
        fused_ ? qkv_cols_ + 2 * c.intermediate : c.q_dim() + 2 * c.kv_dim() + c.intermediate;
    mem_.workspace_bytes =
        size_t(rows_) *
            size_t(3 * c.hidden + c.q_dim() + c.intermediate + c.vocab + projection_cols) * es +
        partial_floats * sizeof(float) + size_t(rows_) * 16 + size_t(widest);
    // Prefill passes may expand a compressed layer to dense and run cuBLAS on it (the
    // <format>.expand_cublas kernels): one scratch the size of the largest such layer, shared by
    // all. Decode-only runs (a handful of rows per pass) never pick those kernels.
    if (rows_ >= kExpandMinRows) {
      // The largest scratch a kernel of the weight's format asks for.
      auto need = [](const Weight& w) {
        size_t n = 0;
        for (const auto& k : kernels::all_kernels())
          if (k.format == format_of(w)) n = std::max(n, kernels::workspace_need(k, w).full);
        return n;
      };
      for (const Layer& l : m.layers) {
        for (const Weight* w : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down})
          expand_bytes_ = std::max(expand_bytes_, need(*w));
        // A stacked weight expands all of its parts' rows at once (the stackable formats' scratch
        // is rows x row bytes, so the parts' sum is exact).
        if (fused_)
          expand_bytes_ = std::max({expand_bytes_, need(l.q) + need(l.k) + need(l.v),
                                    need(l.gate) + need(l.up)});
      }
      expand_bytes_ = std::max(expand_bytes_, need(m.lm_head));
      mem_.workspace_bytes += expand_bytes_;
    }
    size_t free_b = 0, total_b = 0;
    SPARROW_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_b, &total_b));
    const size_t need = mem_.model_bytes + mem_.kv_cache_bytes + mem_.workspace_bytes;
    if (need > free_b) {
      return Status(Code::out_of_memory,
                    "the model needs " + gib(need) + " of GPU memory (weights " +
                        gib(mem_.model_bytes) + " + KV cache " + gib(mem_.kv_cache_bytes) +
                        " for batch " + std::to_string(max_batch_) + " x context " +
                        std::to_string(context_) + " + activations " + gib(mem_.workspace_bytes) +
                        ") but only " + gib(free_b) + " of " + gib(total_b) +
                        " is free; try a smaller --batch or a sparser model");
    }

    SPARROW_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    // Weights, each linear layer in its own format. Each layer's weights are first prepared on the
    // host: q/k/v and gate/up stacked with the norms' gains folded in (a 7B layer's: ~1 s of one
    // core), o and down (and unstacked projections) copied, so that every upload is a move
    // (to_device(Weight&&): a copy made inside the upload page-faulted at ~1.4 GB/s on the H100
    // machine). A window of layers is prepared at once on the host's threads, the next window
    // while this one's weights are copied to the device; the window bounds how many prepared host
    // copies exist at a time (two windows' at most).
    layers_.resize(m.layers.size());
    struct Prepared {
      Weight qkv, gate_up;          // stacked
      Weight q, k, v, gate, up;     // not stacked
      Weight o, down;
      bool attn_folded = false, mlp_folded = false;
      size_t step_rows_bytes = 0;  // macko step_rows these weights take to the GPU
    };
    struct Window {
      std::vector<Prepared> layers;
      double seconds = 0;  // host time it took
    };
    constexpr size_t kWindow = 4;
    const size_t n_layers = m.layers.size();
    auto prepare_window = [this, &m, sm_count = dev.sm_count](size_t w0) -> Result<Window> {
      const double t0 = seconds_now();
      Window win;
      win.layers.resize(std::min(m.layers.size(), w0 + kWindow) - w0);
      SPARROW_RETURN_IF_ERROR(parallel_for(int64_t(win.layers.size()), 0, [&](int64_t j) -> Status {
        const Layer& l = m.layers[w0 + size_t(j)];
        Prepared& p = win.layers[size_t(j)];
        if (fused_) {
          SPARROW_ASSIGN_OR_RETURN(p.qkv, concat_rows({&l.q, &l.k, &l.v}));
          p.attn_folded = fold_gain(p.qkv, l.attn_norm);
          SPARROW_ASSIGN_OR_RETURN(p.gate_up, concat_rows({&l.gate, &l.up}));
          p.mlp_folded = fold_gain(p.gate_up, l.mlp_norm);
        } else {
          p.q = l.q, p.k = l.k, p.v = l.v, p.gate = l.gate, p.up = l.up;
        }
        p.o = l.o, p.down = l.down;
        for (Weight* w : {&p.qkv, &p.gate_up, &p.q, &p.k, &p.v, &p.gate, &p.up, &p.o, &p.down})
          p.step_rows_bytes += drop_unread_step_rows(*w, sm_count);
        return Status::success();
      }));
      win.seconds = seconds_now() - t0;
      return win;
    };
    // (A pending window's future waits for it on every return path below.)
    std::future<Result<Window>> next;
    size_t uploaded_step_rows_bytes = 0;  // macko step_rows the layers took to the GPU
    if (n_layers > 0) next = std::async(std::launch::async, prepare_window, size_t(0));
    for (size_t w0 = 0; w0 < n_layers; w0 += kWindow) {
      const size_t w1 = std::min(n_layers, w0 + kWindow);
      auto ready = next.get();
      SPARROW_RETURN_IF_ERROR(ready.status());
      if (w1 < n_layers) next = std::async(std::launch::async, prepare_window, w1);
      std::vector<Prepared> prepared = std::move(ready.value().layers);
      for (const Prepared& p : prepared) uploaded_step_rows_bytes += p.step_rows_bytes;
      load_.prepare_s += ready.value().seconds;
      const double t_copy = seconds_now();
      for (size_t i = w0; i < w1; ++i) {
        const Layer& l = m.layers[i];
        DeviceLayer& d = layers_[i];
        Prepared& p = prepared[i - w0];
        if (fused_) {
          d.attn_folded = p.attn_folded;
          d.mlp_folded = p.mlp_folded;
          SPARROW_ASSIGN_OR_RETURN(d.qkv, to_device(std::move(p.qkv)));
          SPARROW_ASSIGN_OR_RETURN(d.gate_up, to_device(std::move(p.gate_up)));
          std::vector<float> bias = l.q_bias;
          bias.insert(bias.end(), l.k_bias.begin(), l.k_bias.end());
          bias.insert(bias.end(), l.v_bias.begin(), l.v_bias.end());
          SPARROW_ASSIGN_OR_RETURN(d.q_bias, upload_as(bias, dt_));
        } else {
          SPARROW_ASSIGN_OR_RETURN(d.q, to_device(std::move(p.q)));
          SPARROW_ASSIGN_OR_RETURN(d.k, to_device(std::move(p.k)));
          SPARROW_ASSIGN_OR_RETURN(d.v, to_device(std::move(p.v)));
          SPARROW_ASSIGN_OR_RETURN(d.gate, to_device(std::move(p.gate)));
          SPARROW_ASSIGN_OR_RETURN(d.up, to_device(std::move(p.up)));
          SPARROW_ASSIGN_OR_RETURN(d.q_bias, upload_as(l.q_bias, dt_));
          SPARROW_ASSIGN_OR_RETURN(d.k_bias, upload_as(l.k_bias, dt_));
          SPARROW_ASSIGN_OR_RETURN(d.v_bias, upload_as(l.v_bias, dt_));
        }
        SPARROW_ASSIGN_OR_RETURN(d.o, to_device(std::move(p.o)));
        SPARROW_ASSIGN_OR_RETURN(d.down, to_device(std::move(p.down)));
        SPARROW_ASSIGN_OR_RETURN(d.attn_norm, upload_floats(l.attn_norm));
        SPARROW_ASSIGN_OR_RETURN(d.mlp_norm, upload_floats(l.mlp_norm));
      }
      load_.copy_s += seconds_now() - t_copy;
    }
    // The weights as uploaded: macko's step_rows only where the entry split may read them.
    mem_.model_bytes = mem_.model_bytes - host_step_rows_bytes(m) + uploaded_step_rows_bytes;
    if (foldable(format_of(m.lm_head))) {
      const double t0 = seconds_now();
      Weight head = m.lm_head;  // a host copy to fold the final norm's gain into
      final_folded_ = fold_gain(head, m.final_norm);  // unchanged when it refuses
      const double t1 = seconds_now();
      SPARROW_ASSIGN_OR_RETURN(lm_head_, to_device(std::move(head)));
      load_.prepare_s += t1 - t0;
      load_.copy_s += seconds_now() - t1;
    } else {
      const double t0 = seconds_now();
      SPARROW_ASSIGN_OR_RETURN(lm_head_, to_device(m.lm_head));
      load_.copy_s += seconds_now() - t0;
    }
    SPARROW_ASSIGN_OR_RETURN(ones_, upload_floats(std::vector<float>(size_t(c.hidden), 1.0f)));
    SPARROW_ASSIGN_OR_RETURN(embed_, DeviceArray::alloc(m.embed.bytes()));
    SPARROW_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(embed_.get(), m.embed.data(), m.embed.bytes(), cudaMemcpyHostToDevice));
    SPARROW_ASSIGN_OR_RETURN(final_norm_, upload_floats(m.final_norm));
    SPARROW_ASSIGN_OR_RETURN(std::vector<float> inv, rope_inv_freq(c));
    SPARROW_ASSIGN_OR_RETURN(inv_freq_, upload_floats(inv));

    // KV caches and activations.
    const size_t kv_layer = size_t(max_batch_ * context_ * c.kv_dim()) * es;
    k_cache_.resize(size_t(c.layers));
    v_cache_.resize(size_t(c.layers));
    for (int64_t i = 0; i < c.layers; ++i) {
      SPARROW_ASSIGN_OR_RETURN(k_cache_[size_t(i)], DeviceArray::alloc(kv_layer));
      SPARROW_ASSIGN_OR_RETURN(v_cache_[size_t(i)], DeviceArray::alloc(kv_layer));
    }
    auto act = [&](DeviceArray& a, int64_t cols) -> Status {
      SPARROW_ASSIGN_OR_RETURN(a, DeviceArray::alloc(size_t(rows_ * cols) * es));
      return {};
    };
    SPARROW_RETURN_IF_ERROR(act(x_, c.hidden));
    SPARROW_RETURN_IF_ERROR(act(h_, c.hidden));
    SPARROW_RETURN_IF_ERROR(act(last_, c.hidden));
    SPARROW_RETURN_IF_ERROR(act(attn_, c.q_dim()));
    SPARROW_RETURN_IF_ERROR(act(gate_, c.intermediate));
    SPARROW_RETURN_IF_ERROR(act(logits_, c.vocab));
    if (fused_) {
      SPARROW_RETURN_IF_ERROR(act(qkv_, qkv_cols_));
      SPARROW_RETURN_IF_ERROR(act(gate_up_, 2 * c.intermediate));
    } else {
      SPARROW_RETURN_IF_ERROR(act(q_, c.q_dim()));
      SPARROW_RETURN_IF_ERROR(act(k_, c.kv_dim()));
      SPARROW_RETURN_IF_ERROR(act(v_, c.kv_dim()));
      SPARROW_RETURN_IF_ERROR(act(up_, c.intermediate));
    }
    SPARROW_ASSIGN_OR_RETURN(partials_, DeviceArray::alloc(partial_floats * sizeof(float)));
    SPARROW_ASSIGN_OR_RETURN(expand_, DeviceArray::alloc(expand_bytes_));
    SPARROW_ASSIGN_OR_RETURN(tokens_, DeviceArray::alloc(size_t(rows_) * sizeof(int32_t)));
    SPARROW_ASSIGN_OR_RETURN(next_, DeviceArray::alloc(size_t(max_batch_) * sizeof(int32_t)));
    SPARROW_ASSIGN_OR_RETURN(pos_, DeviceArray::alloc(sizeof(int32_t)));
    SPARROW_ASSIGN_OR_RETURN(arrived_, DeviceArray::alloc(sizeof(uint32_t)));
    SPARROW_CUDA_RETURN_IF_ERROR(cudaMemset(arrived_.get(), 0, sizeof(uint32_t)));
    if (fused_mlp_requested()) {  // macko.swiglu_mlp's grid barrier: zeroed once, kept
      SPARROW_ASSIGN_OR_RETURN(mlp_barrier_,
                               DeviceArray::alloc(kernels::macko_swiglu_mlp::kBarrierWords * 4));
      SPARROW_CUDA_RETURN_IF_ERROR(
          cudaMemset(mlp_barrier_.get(), 0, kernels::macko_swiglu_mlp::kBarrierWords * 4));
    }
    if (stamps_requested()) {  // a stamp per op: at most 9 per layer, embed, lm_head, argmax
      stamp_capacity_ = int(10 * layers_.size() + 8);
      SPARROW_ASSIGN_OR_RETURN(stamps_, DeviceArray::alloc(size_t(stamp_capacity_) * 8));
    }
    // Pinned staging: position, then tokens.
    SPARROW_CUDA_RETURN_IF_ERROR(
        cudaMallocHost(&pinned_, sizeof(int32_t) * size_t(rows_ + 1 + max_batch_)));
    // The decode steps' picks, written by the device into host memory (GreedyFeed::history).
    SPARROW_CUDA_RETURN_IF_ERROR(
        cudaHostAlloc(reinterpret_cast<void**>(&history_),
                      sizeof(int32_t) * size_t(kHistoryRows * max_batch_), cudaHostAllocMapped));
    SPARROW_CUDA_RETURN_IF_ERROR(cudaHostGetDevicePointer(
        reinterpret_cast<void**>(&history_device_), history_, 0));
    for (cudaEvent_t& e : step_done_)
      SPARROW_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    SPARROW_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    note_memory();
    return {};
  }

  const char* name() const override { return "gpu"; }
  const Model& model() const override { return *model_; }
  int max_batch() const override { return max_batch_; }
  int64_t context() const override { return context_; }
  int64_t position() const override { return position_; }
  void reset() override { position_ = 0; }
  MemoryReport memory() const override { return mem_; }
  LoadReport load_report() const override { return load_; }

  Result<size_t> decode_weight_bytes() const override {
    size_t bytes = 0;
    for (const DeviceLayer& L : layers_)
      for (const Weight* w : {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down, &L.qkv, &L.gate_up})
        for (const ArrayBytes& a : arrays_of(*w)) bytes += a.bytes;
    for (const ArrayBytes& a : arrays_of(lm_head_)) bytes += a.bytes;
    return bytes;
  }

  Status forward(const int32_t* tokens, int batch, int64_t count, bool all_logits,
                 std::vector<float>& logits) override {
    SPARROW_RETURN_IF_ERROR(check_forward_args(*this, tokens, batch, count));
    const int64_t V = model_->config.vocab;
    logits.assign(size_t(batch) * size_t(all_logits ? count : 1) * size_t(V), 0.0f);
    std::vector<uint8_t> host;
    for (int64_t done = 0; done < count;) {
      const int64_t c = std::min(chunk_for(batch), count - done);
      SPARROW_RETURN_IF_ERROR(stage(tokens, batch, count, done, c));
      const bool want = all_logits || done + c == count;
      SPARROW_RETURN_IF_ERROR(run_pass(batch, c, all_logits, false, position_));
      if (want) {
        const int64_t rows = all_logits ? int64_t(batch) * c : batch;
        host.resize(size_t(rows * V) * dtype_size(dt_));
        SPARROW_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host.data(), logits_.get(), host.size(),
                                                     cudaMemcpyDeviceToHost, stream_));
        SPARROW_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
        for (int64_t r = 0; r < rows; ++r) {
          // Row r of this pass: sequence b = r / c (all_logits) or r.
          const int64_t b = all_logits ? r / c : r, t = all_logits ? done + r % c : 0;
          float* dst = &logits[size_t((b * (all_logits ? count : 1) + t) * V)];
          for (int64_t i = 0; i < V; ++i)
            dst[i] = load_as_float(host.data(), dt_, size_t(r * V + i));
        }
      }
      done += c;
      position_ += c;
    }
    SPARROW_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    note_memory();
    return {};
  }

  Status forward_greedy(const int32_t* tokens, int batch, int64_t count,
                        std::vector<int32_t>& next) override {
    SPARROW_RETURN_IF_ERROR(check_forward_args(*this, tokens, batch, count));
    for (int64_t done = 0; done < count;) {
      const int64_t c = std::min(chunk_for(batch), count - done);
      SPARROW_RETURN_IF_ERROR(stage(tokens, batch, count, done, c));
      if (c == 1 && graphs_enabled_) {
        SPARROW_RETURN_IF_ERROR(replay_decode(batch, position_));
      } else {
        SPARROW_RETURN_IF_ERROR(run_pass(batch, c, false, true, position_));
      }
      done += c;
      position_ += c;
    }
    next.resize(size_t(batch));
    int32_t* out = static_cast<int32_t*>(pinned_) + rows_ + 1;
    SPARROW_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out, next_.get(), size_t(batch) * sizeof(int32_t),
                                                 cudaMemcpyDeviceToHost, stream_));
    SPARROW_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    std::memcpy(next.data(), out, size_t(batch) * sizeof(int32_t));
    if (count == 1 && stamp_capacity_ > 0) SPARROW_RETURN_IF_ERROR(record_stamps(batch));
    return check_picks(next.data(), batch);
  }

  Status decode_greedy(const int32_t* first, int batch, int64_t steps,
                       const StepFn& on_step) override {
    SPARROW_RETURN_IF_ERROR(check_decode_args(*this, first, batch, steps));
    // Stamps are read after each step: the base class's loop of forward_greedy.
    if (steps == 0 || !pipeline_ || stamp_capacity_ > 0)
      return Backend::decode_greedy(first, batch, steps, on_step);
    SPARROW_RETURN_IF_ERROR(stage(first, batch, 1, 0, 1));
    // Each step's argmax feeds the next on the device (gpu::GreedyFeed): step i + 1 is enqueued
    // before the host waits for step i, so the host's wait, its reading of the picks and the
    // next launch overlap the GPU's work instead of leaving it idle between steps.
    const int64_t start = position_;
    int64_t issued = 0;
    auto issue = [&]() -> Status {
      SPARROW_RETURN_IF_ERROR(replay_decode(batch, start + issued));
      SPARROW_CUDA_RETURN_IF_ERROR(cudaEventRecord(step_done_[issued % 2], stream_));
      ++issued;
      return {};
    };
    Status s = issue();
    for (int64_t i = 0; s.ok() && i < steps; ++i) {
      if (issued < steps) s = issue();
      if (!s.ok()) break;
      s = cuda_status(cudaEventSynchronize(step_done_[i % 2]), "decode step");
      if (!s.ok()) break;
      position_ = start + i + 1;
      const int32_t* picks = history_ + ((start + i) % kHistoryRows) * max_batch_;
      s = check_picks(picks, batch);
      if (!s.ok() || !on_step(picks)) break;
    }
    // A step enqueued past the last one seen is discarded: it wrote the cache row at position_,
    // which the next step writes again.
    const cudaError_t e = cudaStreamSynchronize(stream_);
    SPARROW_RETURN_IF_ERROR(s);
    return cuda_status(e, "decode steps");
  }

 private:
  // The device argmax finds no largest logit when all are NaN and returns an id past the
  // vocabulary: say what happened instead of handing that id to the next step.
  Status check_picks(const int32_t* picks, int batch) const {
    for (int b = 0; b < batch; ++b) {
      if (picks[b] < 0 || picks[b] >= model_->config.vocab) {
        return corrupt_data("sequence " + std::to_string(b) + ": every logit at position " +
                            std::to_string(position_ - 1) +
                            " is NaN, so there is no greedy token (the model's weights hold "
                            "NaN or its " + dtype_name(dt_) + " activations overflowed)");
      }
    }
    return {};
  }

  // Copies the position and this chunk's tokens (row b * c + i = tokens[b * count + done + i])
  // to the device, through pinned memory.
  Status stage(const int32_t* tokens, int batch, int64_t count, int64_t done, int64_t c) {
    SPARROW_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));  // pinned buffer is free
    int32_t* p = static_cast<int32_t*>(pinned_);
    p[0] = int32_t(position_);
    for (int b = 0; b < batch; ++b)
      for (int64_t i = 0; i < c; ++i) p[1 + b * c + i] = tokens[b * count + done + i];
    SPARROW_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(pos_.get(), p, sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
    SPARROW_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(tokens_.get(), p + 1,
                                                 size_t(batch * c) * sizeof(int32_t),
                                                 cudaMemcpyHostToDevice, stream_));
    return {};
  }

  MatrixView view(const DeviceArray& a, int64_t rows, int64_t cols) const {
    return {a.get(), dt_, rows, cols, cols};
  }
  ConstMatrixView view_of(const void* p, int64_t rows, int64_t cols) const {
    return {p, dt_, rows, cols, cols};
  }

  // What the matmuls after an RMSNorm read: the residual itself, normalised inside them
  // (input_rms), or h_ = rms_norm(x).
  struct NormedInput {
    const void* data;
    bool input_rms;
    float eps;
    MatmulOptions options(MatmulOptions o) const {
      o.input_rms = input_rms;
      o.rms_eps = eps;
      return o;
    }
  };
  // `folded_into`: the one (stacked) weight the norm's gain is folded into, or null. When its
  // kernel takes input_rms at `rows` rows the matmul normalises x itself and no norm kernel runs
  // (a decode step's common case); otherwise rms_norm writes h_ first, with a unit gain when the
  // gain is folded.
  Result<NormedInput> normed(const void* x, const DeviceArray& gain, const Weight* folded_into,
                             LayerRole role, int64_t rows, float eps) {
    const kernels::KernelInfo* forced = overrides_.kernel[int(role)];
    if (folded_into && (forced ? kernels::takes_input_rms(*forced, *folded_into, rows)
                               : matmul_takes_input_rms(*folded_into, rows, with_scratch()))) {
      return NormedInput{x, true, eps};
    }
    SPARROW_RETURN_IF_ERROR(gpu::rms_norm(x, folded_into ? ones_.get<float>() : gain.get<float>(),
                                          eps, h_.get(), rows, model_->config.hidden, dt_,
                                          stream_));
    return NormedInput{h_.get(), false, eps};
  }

  // matmul for one role of linear layer, or what SPARROW_ENGINE_KERNELS / SKIP say for it
  // (engine/role_overrides.hpp).
  Status layer_matmul(LayerRole role, const MatrixView& y, const Weight& w,
                      const ConstMatrixView& x, const MatmulOptions& opt) {
    if (overrides_.skip[int(role)]) return {};
    if (overrides_.read_only[int(role)]) return read_only(w);
    const kernels::KernelInfo* k = overrides_.kernel[int(role)];
    if (k == nullptr) return matmul(y, w, x, stream_, opt);
    if (k->format != format_of(w)) {
      return invalid_argument(std::string("SPARROW_ENGINE_KERNELS: ") + role_name(role) +
                              " holds " + format_name(format_of(w)) + " weights; " + k->name +
                              " reads " + format_name(k->format));
    }
    if (!kernels::available_here(*k)) {
      return unsupported(std::string("SPARROW_ENGINE_KERNELS: ") + k->name +
                         " does not run on this GPU");
    }
    return k->run(kernels::Problem{w, x, y, opt}, stream_);
  }

  // Whether layer L's stacked gate_up matmul over R rows writes the SwiGLU itself
  // (output_swiglu): its kernel (the forced one, else matmul's) takes it, and no override skips
  // or replaces gate_up or the SwiGLU.
  bool swiglu_in_matmul(const DeviceLayer& L, int64_t R, const MatmulOptions& opt) const {
    const int gu = int(LayerRole::gate_up);
    if (!swiglu_in_matmul_ || !fused_ || overrides_.skip_swiglu ||
        overrides_.skip[gu] || overrides_.read_only[gu]) {
      return false;
    }
    const kernels::KernelInfo* forced = overrides_.kernel[gu];
    return forced ? kernels::takes_output_swiglu(*forced, L.gate_up, R)
                  : matmul_takes_output_swiglu(L.gate_up, R, opt);
  }

  // The macko.swiglu_mlp call for layer L's MLP over R rows (SPARROW_ENGINE_FUSED_MLP), or none
  // when the layer's MLP runs as separate kernels.
  std::optional<kernels::macko_swiglu_mlp::Call> fused_mlp_call(const DeviceLayer& L, int64_t R,
                                                                const NormedInput& in) {
    if (!mlp_barrier_.get() || R != 1 || !fused_) return std::nullopt;
    for (LayerRole r : {LayerRole::gate_up, LayerRole::down})
      if (overrides_.skip[int(r)] || overrides_.read_only[int(r)] || overrides_.kernel[int(r)])
        return std::nullopt;
    const auto* gu = std::get_if<macko::Matrix>(&L.gate_up);
    const auto* dn = std::get_if<macko::Matrix>(&L.down);
    if (!gu || !dn || !kernels::macko_swiglu_mlp::check(*gu, *dn).ok()) return std::nullopt;
    kernels::macko_swiglu_mlp::Call c;
    c.gate_up = gu;
    c.down = dn;
    c.input = in.data;
    c.x = x_.get();
    c.h = gate_.get();
    c.barrier = mlp_barrier_.get<uint32_t>();
    c.input_rms = in.input_rms;
    c.rms_eps = in.eps;
    c.dependent_launch = true;
    return c;
  }

  // SPARROW_ENGINE_READ_ONLY: every array of the weight read, nothing computed.
  Status read_only(const Weight& w) {
    gpu::ReadArrays a;
    for (const ArrayBytes& arr : arrays_of(w)) {
      if (a.count == gpu::kMaxReadArrays)
        return unsupported("SPARROW_ENGINE_READ_ONLY: a weight with more than " +
                           std::to_string(gpu::kMaxReadArrays) + " arrays");
      a.data[a.count] = arr.data;
      a.bytes[a.count] = arr.bytes;
      ++a.count;
    }
    gpu::ReadPlan plan;
    plan.blocks_per_sm = overrides_.read_blocks_per_sm;
    if (overrides_.read_early_kib_per_sm >= 0)
      plan.early_bytes_per_sm = size_t(overrides_.read_early_kib_per_sm) * 1024;
    plan.stage_in_shared = overrides_.read_stage_shared;
    return gpu::read_arrays(a, plan, stream_);
  }

  // The stamp after op `name` of a decode step (SPARROW_ENGINE_STAMPS); nothing otherwise.
  Status mark(const char* name) {
    if (!stamping_) return {};
    const int i = stamping_->add(name, stamp_capacity_);
    return i < 0 ? Status{} : gpu::stamp(stamps_.get<uint64_t>(), i, stream_);
  }
  // After a decode step (the host has synced): its stamps into the batch size's intervals.
  Status record_stamps(int batch) {
    StepStamps& st = stamps_by_batch_[batch];
    std::vector<uint64_t> t(size_t(st.count()));
    SPARROW_CUDA_RETURN_IF_ERROR(cudaMemcpy(t.data(), stamps_.get(), t.size() * 8,
                                            cudaMemcpyDeviceToHost));
    st.record(t);
    return {};
  }

  // Splits of a decode step's attention for `batch` sequences at position `pos`
  // (attention_plan.hpp); each split's blocks share the keys evenly.
  int64_t decode_splits(int batch, int64_t pos) const {
    if (decode_splits_forced_ > 0) return decode_splits_forced_;
    return decode_attention_splits(batch, shape_.heads, pos, decode_split_keys_,
                                   decode_wave_blocks_, max_decode_splits_);
  }

  // One pass over `batch` x `c` rows already staged at position `pos` (the host's copy of what
  // was staged): the whole model, then lm_head for every row (all_logits) or the last row of each
  // sequence, then (greedy) argmax into next_.
  Status run_pass(int batch, int64_t c, bool all_logits, bool greedy, int64_t pos) {
    const LlamaConfig& cfg = model_->config;
    const int64_t R = int64_t(batch) * c;
    const float eps = float(cfg.rms_eps);
    const gpu::RowLayout rows{batch, c, pos_.get<int32_t>()};
    const bool decode = c == 1;
    // Decode shares each row's keys evenly by the splits (split_len 0): at position 544 of a
    // 4096 context, fixed ranges of 128 keys leave 27 of 32 splits empty.
    const int64_t split_len = decode ? 0 : split_len_prefill_;
    const int64_t n_splits = decode ? decode_splits(batch, pos) : splits_prefill_;
    stamping_ = stamp_capacity_ > 0 && decode ? &stamps_by_batch_[batch] : nullptr;
    if (stamping_) stamping_->begin_step();
    SPARROW_RETURN_IF_ERROR(mark("start"));
    SPARROW_RETURN_IF_ERROR(
        gpu::embed(tokens_.get<int32_t>(), embed_.get(), x_.get(), R, cfg.hidden, dt_, stream_));
    SPARROW_RETURN_IF_ERROR(mark("embed"));
    for (size_t li = 0; li < layers_.size(); ++li) {
      const DeviceLayer& L = layers_[li];
      SPARROW_ASSIGN_OR_RETURN(
          const NormedInput attn_in,
          normed(x_.get(), L.attn_norm, L.attn_folded ? &L.qkv : nullptr, LayerRole::qkv, R,
                 eps));
      const ConstMatrixView h = view_of(attn_in.data, R, cfg.hidden);
      MatmulOptions qo = attn_in.options(with_scratch()), ko = attn_in.options(with_scratch()),
                    vo = attn_in.options(with_scratch());
      qo.bias = L.q_bias.get();
      ko.bias = L.k_bias.get();
      vo.bias = L.v_bias.get();
      void *q = q_.get(), *k = k_.get(), *v = v_.get();
      gpu::RowLayout qkv_rows = rows;
      if (fused_) {  // one matmul; q, k, v are column blocks of its rows
        SPARROW_RETURN_IF_ERROR(
            layer_matmul(LayerRole::qkv, view(qkv_, R, qkv_cols_), L.qkv, h, qo));
        SPARROW_RETURN_IF_ERROR(mark("qkv"));
        const size_t es = dtype_size(dt_);
        q = qkv_.get();
        k = static_cast<char*>(q) + size_t(cfg.q_dim()) * es;
        v = static_cast<char*>(k) + size_t(cfg.kv_dim()) * es;
        qkv_rows.q_ld = qkv_rows.kv_ld = qkv_cols_;
      } else {
        SPARROW_RETURN_IF_ERROR(layer_matmul(LayerRole::q, view(q_, R, cfg.q_dim()), L.q, h, qo));
        SPARROW_RETURN_IF_ERROR(layer_matmul(LayerRole::k, view(k_, R, cfg.kv_dim()), L.k, h, ko));
        SPARROW_RETURN_IF_ERROR(layer_matmul(LayerRole::v, view(v_, R, cfg.kv_dim()), L.v, h, vo));
        SPARROW_RETURN_IF_ERROR(mark("q,k,v"));
      }
      // Decode: rotation and cache append happen inside attention (one kernel fewer per layer);
      // prefill blocks attend to keys of other rows of the pass, so they are appended first.
      const bool fold = decode && fold_rope_requested();
      const gpu::DecodeRope rope{k, v, k_cache_[li].get(), v_cache_[li].get(),
                                 inv_freq_.get<float>()};
      if (!fold && !overrides_.skip_attention) {
        SPARROW_RETURN_IF_ERROR(gpu::rope_and_cache(q, k, v, k_cache_[li].get(),
                                                    v_cache_[li].get(), inv_freq_.get<float>(),
                                                    qkv_rows, shape_, dt_, stream_));
        SPARROW_RETURN_IF_ERROR(mark("rope"));
      }
      const bool tensor_core_attention =
          !decode && prefill_attention_ && prefill_on_tensor_cores(R) &&
          gpu::prefill_attention_fits(q, k_cache_[li].get(), v_cache_[li].get(), qkv_rows, shape_);
      if (!overrides_.skip_attention && tensor_core_attention) {
        SPARROW_RETURN_IF_ERROR(gpu::prefill_attention(q, k_cache_[li].get(), v_cache_[li].get(),
                                                       attn_.get(), qkv_rows, shape_, dt_,
                                                       stream_));
      } else if (!overrides_.skip_attention) {  // SPARROW_ENGINE_SKIP=attention (role_overrides)
        SPARROW_RETURN_IF_ERROR(gpu::attention(q, k_cache_[li].get(), v_cache_[li].get(),
                                               attn_.get(), partials_.get<float>(), qkv_rows,
                                               shape_, split_len, n_splits, dt_, stream_,
                                               fold ? &rope : nullptr,
                                               decode ? decode_attention_warps_ : 4));
        SPARROW_RETURN_IF_ERROR(mark("attention"));
      }
      MatmulOptions residual = with_scratch();
      residual.accumulate = true;  // x += attn * Wo^T
      SPARROW_RETURN_IF_ERROR(layer_matmul(LayerRole::o, view(x_, R, cfg.hidden), L.o,
                                           view(attn_, R, cfg.q_dim()), residual));
      SPARROW_RETURN_IF_ERROR(mark("o"));
      SPARROW_ASSIGN_OR_RETURN(
          const NormedInput mlp_in,
          normed(x_.get(), L.mlp_norm, L.mlp_folded ? &L.gate_up : nullptr, LayerRole::gate_up,
                 R, eps));
      const ConstMatrixView hm = view_of(mlp_in.data, R, cfg.hidden);
      if (const auto mlp = fused_mlp_call(L, R, mlp_in)) {  // gate_up, swiglu, down in one kernel
        SPARROW_RETURN_IF_ERROR(kernels::macko_swiglu_mlp::run(*mlp, stream_));
        SPARROW_RETURN_IF_ERROR(mark("mlp"));
        continue;
      }
      const MatmulOptions gate_up_opt = mlp_in.options(with_scratch());
      if (swiglu_in_matmul(L, R, gate_up_opt)) {  // gate_ = silu(gate) * up from one matmul
        MatmulOptions o = gate_up_opt;
        o.output_swiglu = true;
        SPARROW_RETURN_IF_ERROR(layer_matmul(LayerRole::gate_up,
                                             view(gate_, R, cfg.intermediate), L.gate_up, hm, o));
        SPARROW_RETURN_IF_ERROR(mark("gate_up"));
      } else if (fused_) {  // one matmul into [gate | up] rows, then gate_ = silu(gate) * up
        SPARROW_RETURN_IF_ERROR(layer_matmul(LayerRole::gate_up,
                                             view(gate_up_, R, 2 * cfg.intermediate), L.gate_up,
                                             hm, gate_up_opt));
        SPARROW_RETURN_IF_ERROR(mark("gate_up"));
        const void* up = static_cast<const char*>(gate_up_.get()) +
                         size_t(cfg.intermediate) * dtype_size(dt_);
        if (!overrides_.skip_swiglu) {  // SPARROW_ENGINE_SKIP=swiglu (role_overrides.hpp)
          SPARROW_RETURN_IF_ERROR(gpu::swiglu(gate_.get(), gate_up_.get(), up, R,
                                              cfg.intermediate, 2 * cfg.intermediate, dt_,
                                              stream_));
          SPARROW_RETURN_IF_ERROR(mark("swiglu"));
        }
      } else {
        SPARROW_RETURN_IF_ERROR(layer_matmul(LayerRole::gate, view(gate_, R, cfg.intermediate),
                                             L.gate, hm, mlp_in.options(with_scratch())));
        SPARROW_RETURN_IF_ERROR(layer_matmul(LayerRole::up, view(up_, R, cfg.intermediate), L.up,
                                             hm, mlp_in.options(with_scratch())));
        SPARROW_RETURN_IF_ERROR(mark("gate,up"));
        if (!overrides_.skip_swiglu) {
          SPARROW_RETURN_IF_ERROR(gpu::swiglu(gate_.get(), gate_.get(), up_.get(), R,
                                              cfg.intermediate, cfg.intermediate, dt_, stream_));
          SPARROW_RETURN_IF_ERROR(mark("swiglu"));
        }
      }
      SPARROW_RETURN_IF_ERROR(layer_matmul(LayerRole::down, view(x_, R, cfg.hidden), L.down,
                                           view(gate_, R, cfg.intermediate), residual));
      SPARROW_RETURN_IF_ERROR(mark("down"));
    }
    int64_t out_rows = R;
    const DeviceArray* src = &x_;
    if (!all_logits && c > 1) {
      SPARROW_RETURN_IF_ERROR(
          gpu::gather_last_rows(x_.get(), last_.get(), batch, c, cfg.hidden, dt_, stream_));
      src = &last_;
      out_rows = batch;
    }
    SPARROW_ASSIGN_OR_RETURN(
        const NormedInput head_in,
        normed(src->get(), final_norm_, final_folded_ ? &lm_head_ : nullptr, LayerRole::lm_head,
               out_rows, eps));
    SPARROW_RETURN_IF_ERROR(layer_matmul(LayerRole::lm_head, view(logits_, out_rows, cfg.vocab),
                                         lm_head_, view_of(head_in.data, out_rows, cfg.hidden),
                                         head_in.options(with_scratch())));
    SPARROW_RETURN_IF_ERROR(mark("lm_head"));
    if (greedy) {
      // A decode step also feeds its picks to the next one (decode_greedy).
      const gpu::GreedyFeed feed{tokens_.get<int32_t>(), pos_.get<int32_t>(), history_device_,
                                 kHistoryRows, max_batch_, arrived_.get<uint32_t>()};
      SPARROW_RETURN_IF_ERROR(gpu::argmax(logits_.get(), next_.get<int32_t>(), out_rows,
                                          cfg.vocab, dt_, stream_, decode ? &feed : nullptr));
      SPARROW_RETURN_IF_ERROR(mark("argmax"));
    }
    stamping_ = nullptr;
    return {};
  }

  // The decode step for `batch` sequences at position `pos` as a CUDA graph, captured on first
  // use; a graph per batch size and attention split count (decode_splits). If capture fails (a
  // kernel that is not capturable), graphs are turned off and steps run eagerly.
  Status replay_decode(int batch, int64_t pos) {
    const std::pair<int, int64_t> key{batch, decode_splits(batch, pos)};
    auto it = graphs_.find(key);
    if (it == graphs_.end()) {
      SPARROW_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
      SPARROW_CUDA_RETURN_IF_ERROR(
          cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
      Status s = run_pass(batch, 1, false, true, pos);
      cudaGraph_t graph = nullptr;
      const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
      cudaGraphExec_t exec = nullptr;
      if (s.ok() && end == cudaSuccess && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess) {
        cudaGraphDestroy(graph);
        it = graphs_.emplace(key, exec).first;
      } else {
        if (graph) cudaGraphDestroy(graph);
        cudaGetLastError();  // clear the capture error
        if (!s.ok()) return s;
        std::fprintf(stderr, "sparrow: CUDA graph capture failed (%s); decoding without graphs\n",
                     cudaGetErrorString(end));
        graphs_enabled_ = false;
        return run_pass(batch, 1, false, true, pos);
      }
    }
    SPARROW_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(it->second, stream_));
    return {};
  }

  void note_memory() {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
      mem_.peak_device_bytes = std::max(mem_.peak_device_bytes, total_b - free_b);
  }

  std::shared_ptr<const Model> model_;
  int max_batch_;
  int64_t context_, rows_ = 1, position_ = 0;

  // Tokens of each sequence per pass for a batch of `batch` sequences.
  int64_t chunk_for(int batch) const { return std::max<int64_t>(1, rows_ / batch); }
  DType dt_ = DType::fp16;
  gpu::AttentionShape shape_;
  // Decode attention: keys per split (decode_splits) and blocks of 16 warps, which measured
  // faster than 4 or 8 (bench/NOTES-decode.md, session 53).
  const int64_t decode_split_keys_ = decode_split_keys_requested();
  const int decode_attention_warps_ = decode_attention_warps_requested();
  const int64_t decode_splits_forced_ = decode_splits_forced();
  const bool prefill_attention_ = prefill_attention_requested();
  int64_t decode_wave_blocks_ = 1;  // attention split blocks that fit the GPU at once
  int64_t max_decode_splits_ = 1, split_len_prefill_ = 1, splits_prefill_ = 1;
  MemoryReport mem_;
  LoadReport load_;
  cudaStream_t stream_ = nullptr;
  void* pinned_ = nullptr;
  // decode_greedy: the picks of the last kHistoryRows steps (position % kHistoryRows, max_batch),
  // host memory the device writes (history_device_ is its device address); two steps in flight.
  static constexpr int64_t kHistoryRows = 4;
  int32_t* history_ = nullptr;
  int32_t* history_device_ = nullptr;
  DeviceArray arrived_;  // GreedyFeed::arrived
  cudaEvent_t step_done_[2] = {nullptr, nullptr};
  const bool pipeline_ = pipeline_requested();
  std::vector<DeviceLayer> layers_;
  Weight lm_head_;
  DeviceArray embed_, final_norm_, inv_freq_;
  bool final_folded_ = false;  // the final norm's gain is folded into lm_head's columns
  DeviceArray ones_;           // (hidden) unit gain for the norms whose gain is folded
  std::vector<DeviceArray> k_cache_, v_cache_;
  DeviceArray x_, h_, last_, q_, attn_, k_, v_, gate_, up_, logits_, partials_, tokens_, next_,
      pos_;
  // Fused projections (every layer or none): outputs (rows, q_dim + 2 kv_dim) and (rows, 2 I).
  bool fused_ = false;
  int64_t qkv_cols_ = 0;
  DeviceArray qkv_, gate_up_;
  // Scratch of the expand_cublas kernels (empty when no pass has enough rows to pick them).
  static constexpr int64_t kExpandMinRows = 32;
  DeviceArray expand_;
  size_t expand_bytes_ = 0;

  // Options for every matmul of a pass: the caller's bias/accumulate, the expand scratch, and a
  // dependent launch (the weights are uploaded once by copies, never written by a kernel, so a
  // matmul may read them while the previous kernel of the step still runs).
  MatmulOptions with_scratch(MatmulOptions o = {}) const {
    o.workspace = expand_.get();
    o.workspace_bytes = expand_bytes_;
    o.dependent_launch = true;
    return o;
  }
  std::map<std::pair<int, int64_t>, cudaGraphExec_t> graphs_;  // (batch, attention splits)
  // SPARROW_ENGINE_STAMPS: a slot per stamp of a decode step, the names and intervals per batch
  // size, and the step being built (null outside decode passes).
  DeviceArray stamps_;
  const bool swiglu_in_matmul_ = swiglu_in_matmul_requested();
  DeviceArray mlp_barrier_;  // SPARROW_ENGINE_FUSED_MLP: macko.swiglu_mlp's grid barrier
  int stamp_capacity_ = 0;
  std::map<int, StepStamps> stamps_by_batch_;
  StepStamps* stamping_ = nullptr;
  bool graphs_enabled_ = true;
  const RoleOverrides overrides_;  // SPARROW_ENGINE_KERNELS / SKIP (experiments)
};

}  // namespace

Result<std::unique_ptr<Backend>> make_gpu_backend(std::shared_ptr<const Model> model,
                                                  const BackendOptions& opt) {
  if (!model) return invalid_argument("make_gpu_backend: no model");
  if (opt.max_batch < 1) return invalid_argument("max_batch must be >= 1");
  if (!gpu_available())
    return Status(Code::no_device, "no CUDA GPU is available (use --backend cpu)");
  const int64_t ctx = opt.context == 0 ? model->config.context : opt.context;
  if (ctx < 1 || ctx > model->config.context) {
    return invalid_argument("context " + std::to_string(ctx) + " is outside 1.." +
                            std::to_string(model->config.context) + " (the model's context)");
  }
  SPARROW_ASSIGN_OR_RETURN(RoleOverrides overrides, role_overrides_from_env());
  auto b = std::make_unique<GpuBackend>(std::move(model), opt, ctx, overrides);
  if (overrides.any()) {
    std::fprintf(stderr,
                 "sparrow: engine experiment (SPARROW_ENGINE_KERNELS / _SKIP / _READ_ONLY / "
                 "_READ_PLAN): %s%s\n",
                 overrides.describe().c_str(),
                 overrides.outputs_meaningless()
                     ? "; skipped or read-only layers make the outputs meaningless"
                     : "");
  }
  SPARROW_RETURN_IF_ERROR(b->init());
  return std::unique_ptr<Backend>(std::move(b));
}

}  // namespace sparrow::engine
