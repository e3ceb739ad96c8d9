// The CPU reference backend: the Llama forward pass in fp32, written to be read. Linear layers
// use a plain fp32 dense copy of each decoded weight (sparse formats are decoded once at start;
// a walk of each format per token would be far too slow for CI).
#include "engine/cpu_backend.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "sparrow/engine/backend.hpp"

namespace sparrow::engine {

namespace {

// A linear layer's weights as fp32, W^T packed in panels of kPanel output columns: panel p is
// (K, kPanel) contiguous, so the product walks memory linearly. Columns past M are zero.
constexpr int64_t kPanel = 16;

struct DenseF32 {
  int64_t rows = 0, cols = 0;  // M, K
  std::vector<float> panels;   // (ceil(M / kPanel), K, kPanel)
};

Result<DenseF32> to_f32(const Weight& w) {
  SPARROW_ASSIGN_OR_RETURN(HostMatrix m, decode(w));
  DenseF32 d;
  d.rows = m.rows();
  d.cols = m.cols();
  const int64_t n_panels = (d.rows + kPanel - 1) / kPanel;
  d.panels.assign(size_t(n_panels * d.cols * kPanel), 0.0f);
  const ConstMatrixView v = m.view();
  for (int64_t r = 0; r < d.rows; ++r)
    for (int64_t c = 0; c < d.cols; ++c)
      d.panels[size_t(((r / kPanel) * d.cols + c) * kPanel + r % kPanel)] = v.at(r, c);
  return d;
}

// NT tokens x one panel: y[t][m] = sum over k in order of x[t][k] * W[m][k]. Every output is a
// plain sequential fp32 sum, so a token's result does not depend on NT (prefill == decode bit
// for bit); the 16 columns x NT tokens of independent sums vectorise.
// Eight fp32 lanes (GCC vector extension): two AVX registers or four SSE registers.
typedef float Vec8 __attribute__((vector_size(32)));
static_assert(kPanel == 16, "panel_product holds a panel row in two Vec8");

// NT tokens x one panel: y[t][m] = sum over k in order of x[t][k] * W[m][k]. Every output is a
// plain sequential fp32 sum, so a token's result does not depend on NT (prefill == decode bit
// for bit). AVX2 where the CPU has it, baseline SSE2 elsewhere; multiply and add stay separate
// (no FMA), so both clones round identically.
template <int NT>
__attribute__((target_clones("avx2", "default"))) void panel_product(const float* panel,
                                                                     const float* x, int64_t K,
                                                                     float* y, int64_t ldy,
                                                                     int64_t cols) {
  Vec8 acc[NT][2] = {};
  for (int64_t k = 0; k < K; ++k) {
    Vec8 w0, w1;  // (kPanel) = one row of the panel
    std::memcpy(&w0, panel + k * kPanel, sizeof w0);
    std::memcpy(&w1, panel + k * kPanel + 8, sizeof w1);
    for (int t = 0; t < NT; ++t) {
      const float xv = x[t * K + k];
      acc[t][0] += xv * w0;
      acc[t][1] += xv * w1;
    }
  }
  for (int t = 0; t < NT; ++t)
    for (int64_t j = 0; j < cols; ++j) y[t * ldy + j] = acc[t][j / 8][j % 8];
}

// Y (T x M) = X (T x K) * W^T + bias.
void linear(const DenseF32& W, const float* x, int64_t T, float* y,
            const std::vector<float>& bias) {
  const int64_t M = W.rows, K = W.cols;
  for (int64_t p = 0; p * kPanel < M; ++p) {
    const float* panel = &W.panels[size_t(p * K * kPanel)];
    const int64_t m0 = p * kPanel, cols = std::min(kPanel, M - m0);
    int64_t t = 0;
    for (; t + 4 <= T; t += 4) panel_product<4>(panel, x + t * K, K, y + t * M + m0, M, cols);
    for (; t < T; ++t) panel_product<1>(panel, x + t * K, K, y + t * M + m0, M, cols);
  }
  if (!bias.empty())
    for (int64_t t = 0; t < T; ++t)
      for (int64_t m = 0; m < M; ++m) y[t * M + m] += bias[size_t(m)];
}

// Dot product with eight independent fp32 partial sums (fixed order), for attention scores.
float dot1(const float* w, const float* x, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t k = 0;
  for (; k + 8 <= n; k += 8)
    for (int l = 0; l < 8; ++l) acc[l] += w[k + l] * x[k + l];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; k < n; ++k) s += w[k] * x[k];
  return s;
}

// HF's LlamaRMSNorm in fp32: x / sqrt(mean(x^2) + eps) * weight.
void rms_norm(const float* x, const std::vector<float>& weight, double eps, int64_t n, float* out) {
  float ss = 0.0f;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(ss / float(n) + float(eps));
  for (int64_t i = 0; i < n; ++i) out[i] = weight[size_t(i)] * (x[i] * inv);
}

struct LayerF32 {
  DenseF32 q, k, v, o, gate, up, down;
};

// One sequence's KV cache: (position, kv_heads * head_dim) per layer, grown as tokens arrive.
struct SequenceCache {
  std::vector<std::vector<float>> k, v;  // per layer
};

class CpuBackend final : public Backend {
 public:
  CpuBackend(std::shared_ptr<const Model> m, int max_batch, int64_t context,
             LinearInputObserver observer)
      : model_(std::move(m)),
        max_batch_(max_batch),
        context_(context),
        observer_(std::move(observer)) {}

  Status init() {
    const Model& m = *model_;
    layers_.resize(m.layers.size());
    for (size_t i = 0; i < m.layers.size(); ++i) {
      const Layer& l = m.layers[i];
      LayerF32& f = layers_[i];
      SPARROW_ASSIGN_OR_RETURN(f.q, to_f32(l.q));
      SPARROW_ASSIGN_OR_RETURN(f.k, to_f32(l.k));
      SPARROW_ASSIGN_OR_RETURN(f.v, to_f32(l.v));
      SPARROW_ASSIGN_OR_RETURN(f.o, to_f32(l.o));
      SPARROW_ASSIGN_OR_RETURN(f.gate, to_f32(l.gate));
      SPARROW_ASSIGN_OR_RETURN(f.up, to_f32(l.up));
      SPARROW_ASSIGN_OR_RETURN(f.down, to_f32(l.down));
    }
    SPARROW_ASSIGN_OR_RETURN(lm_head_, to_f32(m.lm_head));
    SPARROW_ASSIGN_OR_RETURN(inv_freq_, rope_inv_freq(m.config));
    reset();
    return {};
  }

  const char* name() const override { return "cpu"; }
  const Model& model() const override { return *model_; }
  int max_batch() const override { return max_batch_; }
  int64_t context() const override { return context_; }
  int64_t position() const override { return position_; }
  void reset() override {
    position_ = 0;
    caches_.assign(size_t(max_batch_), SequenceCache{});
    for (auto& c : caches_) {
      c.k.assign(layers_.size(), {});
      c.v.assign(layers_.size(), {});
    }
  }

  MemoryReport memory() const override {
    MemoryReport r;
    r.held_as = "fp32 dense";
    for (const LayerF32& l : layers_) {
      for (const DenseF32* d : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down})
        r.model_bytes += d->panels.size() * sizeof(float);
    }
    r.model_bytes += lm_head_.panels.size() * sizeof(float) + model_->embed.bytes();
    for (const auto& c : caches_)
      for (size_t i = 0; i < c.k.size(); ++i)
        r.kv_cache_bytes += (c.k[i].capacity() + c.v[i].capacity()) * sizeof(float);
    return r;
  }

  Status forward(const int32_t* tokens, int batch, int64_t count, bool all_logits,
                 std::vector<float>& logits) override {
    SPARROW_RETURN_IF_ERROR(check_forward_args(*this, tokens, batch, count));
    const int64_t V = model_->config.vocab;
    logits.assign(size_t(batch * (all_logits ? count : 1) * V), 0.0f);
    for (int b = 0; b < batch; ++b) {
      float* out = logits.data() + size_t(b) * size_t((all_logits ? count : 1) * V);
      forward_sequence(caches_[size_t(b)], tokens + b * count, count, all_logits, out);
    }
    position_ += count;
    return {};
  }

 private:
  void rope(float* x, int64_t heads, int64_t pos) const {
    const int64_t hd = model_->config.head_dim, half = hd / 2;
    for (int64_t i = 0; i < half; ++i) {
      // As HF: the angle is computed in fp32 (position * inv_freq).
      const float angle = float(pos) * inv_freq_[size_t(i)];
      const float c = std::cos(angle), s = std::sin(angle);
      for (int64_t h = 0; h < heads; ++h) {
        float* v = x + h * hd;
        const float x1 = v[i], x2 = v[i + half];
        v[i] = x1 * c - x2 * s;
        v[i + half] = x2 * c + x1 * s;
      }
    }
  }

  void forward_sequence(SequenceCache& cache, const int32_t* tok, int64_t T, bool all_logits,
                        float* out) {
    const Model& m = *model_;
    const LlamaConfig& c = m.config;
    const int64_t H = c.hidden, QD = c.q_dim(), KVD = c.kv_dim(), I = c.intermediate;
    const int64_t hd = c.head_dim, group = c.heads / c.kv_heads;
    const int64_t p0 = position_;

    std::vector<float> x(size_t(T * H)), h(size_t(T * H)), q(size_t(T * QD)), k(size_t(T * KVD)),
        v(size_t(T * KVD)), attn(size_t(T * QD)), proj(size_t(T * H)), g(size_t(T * I)),
        u(size_t(T * I)), scores;
    const ConstMatrixView e = m.embed.view();
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < H; ++i) x[size_t(t * H + i)] = e.at(tok[t], i);

    const float scale = 1.0f / std::sqrt(float(hd));
    for (size_t li = 0; li < layers_.size(); ++li) {
      const Layer& L = m.layers[li];
      const LayerF32& F = layers_[li];
      for (int64_t t = 0; t < T; ++t)
        rms_norm(&x[size_t(t * H)], L.attn_norm, c.rms_eps, H, &h[size_t(t * H)]);
      observe(li, 0, h.data(), T, H);  // q, k, v read the same input
      linear(F.q, h.data(), T, q.data(), L.q_bias);
      linear(F.k, h.data(), T, k.data(), L.k_bias);
      linear(F.v, h.data(), T, v.data(), L.v_bias);
      for (int64_t t = 0; t < T; ++t) {
        rope(&q[size_t(t * QD)], c.heads, p0 + t);
        rope(&k[size_t(t * KVD)], c.kv_heads, p0 + t);
      }
      std::vector<float>& kc = cache.k[li];
      std::vector<float>& vc = cache.v[li];
      kc.insert(kc.end(), k.begin(), k.end());
      vc.insert(vc.end(), v.begin(), v.end());

      // Causal attention: token t (absolute position p0 + t) sees positions 0 .. p0 + t.
      for (int64_t t = 0; t < T; ++t) {
        const int64_t n_keys = p0 + t + 1;
        scores.resize(size_t(n_keys));
        for (int64_t head = 0; head < c.heads; ++head) {
          const float* qh = &q[size_t(t * QD + head * hd)];
          const int64_t kvh = head / group;
          float mx = -INFINITY;
          for (int64_t j = 0; j < n_keys; ++j) {
            scores[size_t(j)] = dot1(qh, &kc[size_t(j * KVD + kvh * hd)], hd) * scale;
            mx = std::max(mx, scores[size_t(j)]);
          }
          float sum = 0.0f;
          for (int64_t j = 0; j < n_keys; ++j) {
            scores[size_t(j)] = std::exp(scores[size_t(j)] - mx);
            sum += scores[size_t(j)];
          }
          float* oh = &attn[size_t(t * QD + head * hd)];
          std::fill(oh, oh + hd, 0.0f);
          for (int64_t j = 0; j < n_keys; ++j) {
            const float p = scores[size_t(j)] / sum;
            const float* vj = &vc[size_t(j * KVD + kvh * hd)];
            for (int64_t d = 0; d < hd; ++d) oh[d] += p * vj[d];
          }
        }
      }
      observe(li, 3, attn.data(), T, QD);
      linear(F.o, attn.data(), T, proj.data(), {});
      for (size_t i = 0; i < x.size(); ++i) x[i] += proj[i];

      for (int64_t t = 0; t < T; ++t)
        rms_norm(&x[size_t(t * H)], L.mlp_norm, c.rms_eps, H, &h[size_t(t * H)]);
      observe(li, 4, h.data(), T, H);  // gate and up read the same input
      linear(F.gate, h.data(), T, g.data(), {});
      linear(F.up, h.data(), T, u.data(), {});
      for (size_t i = 0; i < g.size(); ++i) {
        const float gi = g[i];
        g[i] = gi / (1.0f + std::exp(-gi)) * u[i];  // SiLU(gate) * up
      }
      observe(li, 6, g.data(), T, I);
      linear(F.down, g.data(), T, proj.data(), {});
      for (size_t i = 0; i < x.size(); ++i) x[i] += proj[i];
    }

    const int64_t first = all_logits ? 0 : T - 1;
    const int64_t rows = T - first;
    std::vector<float> normed(size_t(rows * H));
    for (int64_t t = first; t < T; ++t)
      rms_norm(&x[size_t(t * H)], m.final_norm, c.rms_eps, H, &normed[size_t((t - first) * H)]);
    linear(lm_head_, normed.data(), rows, out, {});
  }

  void observe(size_t layer, int first, const float* x, int64_t T, int64_t K) const {
    if (!observer_) return;
    observer_(layer, first, x, T, K);
    if (first == 0) {
      observer_(layer, 1, x, T, K);
      observer_(layer, 2, x, T, K);
    } else if (first == 4) {
      observer_(layer, 5, x, T, K);
    }
  }

  std::shared_ptr<const Model> model_;
  int max_batch_;
  int64_t context_;
  LinearInputObserver observer_;
  int64_t position_ = 0;
  std::vector<LayerF32> layers_;
  DenseF32 lm_head_;
  std::vector<float> inv_freq_;
  std::vector<SequenceCache> caches_;
};

}  // namespace

Status check_forward_args(const Backend& b, const int32_t* tokens, int batch, int64_t count) {
  if (batch < 1 || batch > b.max_batch()) {
    return invalid_argument("batch " + std::to_string(batch) + " is outside 1.." +
                            std::to_string(b.max_batch()) + " (the backend's max batch)");
  }
  if (count < 1) return invalid_argument("forward needs at least one token");
  if (b.position() + count > b.context()) {
    return invalid_argument(std::to_string(b.position()) + " cached + " + std::to_string(count) +
                            " new tokens exceed the context of " + std::to_string(b.context()) +
                            " tokens");
  }
  const int64_t vocab = b.model().config.vocab;
  for (int64_t i = 0; i < int64_t(batch) * count; ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab) {
      return invalid_argument("token id " + std::to_string(tokens[i]) +
                              " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    }
  }
  return {};
}

Status check_decode_args(const Backend& b, const int32_t* first, int batch, int64_t steps) {
  if (steps < 0) return invalid_argument("decode steps must be >= 0 (got " +
                                         std::to_string(steps) + ")");
  if (steps == 0) return {};
  SPARROW_RETURN_IF_ERROR(check_forward_args(b, first, batch, 1));
  if (b.position() + steps > b.context()) {
    return invalid_argument(std::to_string(b.position()) + " cached + " + std::to_string(steps) +
                            " decode steps exceed the context of " + std::to_string(b.context()) +
                            " tokens");
  }
  return {};
}

Result<std::unique_ptr<Backend>> make_cpu_backend(std::shared_ptr<const Model> model,
                                                  const BackendOptions& opt) {
  return make_observed_cpu_backend(std::move(model), opt, nullptr);
}

Result<std::unique_ptr<Backend>> make_observed_cpu_backend(std::shared_ptr<const Model> model,
                                                           const BackendOptions& opt,
                                                           LinearInputObserver observer) {
  if (!model) return invalid_argument("make_cpu_backend: no model");
  if (opt.max_batch < 1) return invalid_argument("max_batch must be >= 1");
  int64_t ctx = opt.context == 0 ? model->config.context : opt.context;
  if (ctx < 1 || ctx > model->config.context) {
    return invalid_argument("context " + std::to_string(ctx) + " is outside 1.." +
                            std::to_string(model->config.context) + " (the model's context)");
  }
  auto b = std::make_unique<CpuBackend>(std::move(model), opt.max_batch, ctx, std::move(observer));
  SPARROW_RETURN_IF_ERROR(b->init());
  return std::unique_ptr<Backend>(std::move(b));
}

}  // namespace sparrow::engine
