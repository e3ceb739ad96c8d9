// A small random Llama-family model in memory, for engine tests that must not need files.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/rng.hpp"
#include "sparrow/engine/model.hpp"
#include "sparrow/patterns.hpp"

namespace sparrow::test {

class MapSource final : public engine::TensorSource {
 public:
  std::map<std::string, HostMatrix> matrices;
  std::map<std::string, std::vector<float>> vectors;

  bool has(const std::string& n) const override {
    return matrices.count(n) != 0 || vectors.count(n) != 0;
  }
  Result<Weight> matrix(const std::string& n) const override {
    auto it = matrices.find(n);
    if (it == matrices.end()) return invalid_argument("no matrix " + n);
    return encode(Format::dense, it->second.view());
  }
  Result<std::vector<float>> vector(const std::string& n) const override {
    auto it = vectors.find(n);
    if (it == vectors.end()) return invalid_argument("no vector " + n);
    return it->second;
  }
};

inline engine::LlamaConfig tiny_config() {
  engine::LlamaConfig c;
  c.hidden = 48;
  c.layers = 2;
  c.heads = 4;
  c.kv_heads = 2;
  c.head_dim = 12;
  c.intermediate = 72;
  c.vocab = 61;
  c.context = 64;
  c.rms_eps = 1e-5;
  return c;
}

// Weights ~ N(0, 1/sqrt(cols)) so activations stay O(1); norms around 1.
inline MapSource random_source(const engine::LlamaConfig& c, uint64_t seed,
                               DType dtype = DType::fp16) {
  MapSource s;
  Rng rng(seed);
  auto mat = [&](const std::string& name, int64_t rows, int64_t cols) {
    HostMatrix m(dtype, rows, cols);
    const double sd = 1.0 / std::sqrt(double(cols));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < cols; ++k) m.set(r, k, float(rng.normal() * sd));
    s.matrices[name] = std::move(m);
  };
  auto vec = [&](const std::string& name, int64_t n, double mean, double sd) {
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = round_to_dtype(float(mean + sd * rng.normal()), dtype);
    s.vectors[name] = v;
  };
  mat("model.embed_tokens.weight", c.vocab, c.hidden);
  vec("model.norm.weight", c.hidden, 1.0, 0.1);
  if (!c.tied_embeddings) mat("lm_head.weight", c.vocab, c.hidden);
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    vec(p + "input_layernorm.weight", c.hidden, 1.0, 0.1);
    vec(p + "post_attention_layernorm.weight", c.hidden, 1.0, 0.1);
    mat(p + "self_attn.q_proj.weight", c.q_dim(), c.hidden);
    mat(p + "self_attn.k_proj.weight", c.kv_dim(), c.hidden);
    mat(p + "self_attn.v_proj.weight", c.kv_dim(), c.hidden);
    mat(p + "self_attn.o_proj.weight", c.hidden, c.q_dim());
    mat(p + "mlp.gate_proj.weight", c.intermediate, c.hidden);
    mat(p + "mlp.up_proj.weight", c.intermediate, c.hidden);
    mat(p + "mlp.down_proj.weight", c.hidden, c.intermediate);
    if (c.qkv_bias) {
      vec(p + "self_attn.q_proj.bias", c.q_dim(), 0.0, 0.1);
      vec(p + "self_attn.k_proj.bias", c.kv_dim(), 0.0, 0.1);
      vec(p + "self_attn.v_proj.bias", c.kv_dim(), 0.0, 0.1);
    }
  }
  return s;
}

}  // namespace sparrow::test
