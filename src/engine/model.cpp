// The model description: config checks, RoPE frequencies, and assembling a Model from named
// tensors with every shape checked.
#include "sparrow/engine/model.hpp"

#include <cmath>
#include <cstring>

namespace sparrow::engine {

namespace {

std::string shape_str(int64_t r, int64_t c) {
  return "(" + std::to_string(r) + ", " + std::to_string(c) + ")";
}

// Zeros in one weight. Dense and csr are counted from their arrays; the other formats are
// decoded once (this runs at load time only).
Result<int64_t> count_zeros(const Weight& w) {
  const Shape& s = shape_of(w);
  if (const auto* c = std::get_if<csr::Matrix>(&w)) return s.rows * s.cols - c->nnz();
  SPARROW_ASSIGN_OR_RETURN(HostMatrix m, decode(w));
  int64_t zeros = 0;
  const ConstMatrixView v = m.view();
  for (int64_t r = 0; r < v.rows; ++r)
    for (int64_t col = 0; col < v.cols; ++col) zeros += v.zero_at(r, col);
  return zeros;
}

}  // namespace

Status LlamaConfig::check() const {
  if (hidden <= 0 || layers <= 0 || heads <= 0 || kv_heads <= 0 || head_dim <= 0 ||
      intermediate <= 0 || vocab <= 0 || context <= 0) {
    return invalid_argument("model config has a non-positive size (hidden " +
                            std::to_string(hidden) + ", layers " + std::to_string(layers) +
                            ", heads " + std::to_string(heads) + ", kv heads " +
                            std::to_string(kv_heads) + ", head_dim " + std::to_string(head_dim) +
                            ", intermediate " + std::to_string(intermediate) + ", vocab " +
                            std::to_string(vocab) + ", context " + std::to_string(context) + ")");
  }
  if (heads % kv_heads != 0) {
    return invalid_argument("num_attention_heads (" + std::to_string(heads) +
                            ") is not a multiple of num_key_value_heads (" +
                            std::to_string(kv_heads) + ")");
  }
  if (head_dim % 2 != 0) {
    return invalid_argument("head_dim must be even for rotary embeddings (got " +
                            std::to_string(head_dim) + ")");
  }
  if (rope.type != "default" && rope.type != "linear" && rope.type != "llama3") {
    return unsupported("rope scaling type '" + rope.type +
                       "' is not supported (supported: default, linear, llama3)");
  }
  if (rope.type == "llama3" && (rope.original_max_position <= 0 || rope.factor <= 0 ||
                                rope.high_freq_factor <= rope.low_freq_factor)) {
    return invalid_argument(
        "llama3 rope scaling needs factor > 0, high_freq_factor > "
        "low_freq_factor and original_max_position_embeddings > 0");
  }
  if (rope.type == "linear" && rope.factor <= 0) {
    return invalid_argument("linear rope scaling needs factor > 0");
  }
  return {};
}

Result<std::vector<float>> rope_inv_freq(const LlamaConfig& c) {
  SPARROW_RETURN_IF_ERROR(c.check());
  const int64_t half = c.head_dim / 2;
  std::vector<float> inv(size_t(half), 0.0f);
  // As HF: base ** (2i / dim) in fp32, then 1 / that.
  for (int64_t i = 0; i < half; ++i) {
    const float expo = float(2 * i) / float(c.head_dim);
    inv[size_t(i)] = 1.0f / std::pow(float(c.rope.theta), expo);
  }
  if (c.rope.type == "linear") {
    for (float& f : inv) f = float(f / c.rope.factor);
  } else if (c.rope.type == "llama3") {
    // Long wavelengths are slowed down by `factor`, short ones kept, the band between them
    // interpolated smoothly (Llama 3.1's scheme).
    const double old_ctx = double(c.rope.original_max_position);
    const double low_wavelen = old_ctx / c.rope.low_freq_factor;
    const double high_wavelen = old_ctx / c.rope.high_freq_factor;
    for (float& f : inv) {
      const double wavelen = 2.0 * M_PI / double(f);
      if (wavelen < high_wavelen) continue;
      if (wavelen > low_wavelen) {
        f = float(double(f) / c.rope.factor);
        continue;
      }
      const double smooth = (old_ctx / wavelen - c.rope.low_freq_factor) /
                            (c.rope.high_freq_factor - c.rope.low_freq_factor);
      f = float((1.0 - smooth) * double(f) / c.rope.factor + smooth * double(f));
    }
  }
  return inv;
}

std::vector<std::pair<std::string, const Weight*>> Model::linear_layers() const {
  std::vector<std::pair<std::string, const Weight*>> out;
  for (size_t i = 0; i < layers.size(); ++i) {
    const Layer& l = layers[i];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    out.emplace_back(p + "self_attn.q_proj.weight", &l.q);
    out.emplace_back(p + "self_attn.k_proj.weight", &l.k);
    out.emplace_back(p + "self_attn.v_proj.weight", &l.v);
    out.emplace_back(p + "self_attn.o_proj.weight", &l.o);
    out.emplace_back(p + "mlp.gate_proj.weight", &l.gate);
    out.emplace_back(p + "mlp.up_proj.weight", &l.up);
    out.emplace_back(p + "mlp.down_proj.weight", &l.down);
  }
  return out;
}

size_t Model::weight_bytes() const {
  const size_t es = dtype_size(dtype);
  size_t bytes = embed.bytes() + final_norm.size() * es;
  if (!config.tied_embeddings) bytes += storage_bytes(lm_head);
  for (const Layer& l : layers) {
    bytes += (l.attn_norm.size() + l.mlp_norm.size()) * es;
    bytes += (l.q_bias.size() + l.k_bias.size() + l.v_bias.size()) * es;
  }
  for (const auto& [name, w] : linear_layers()) bytes += storage_bytes(*w) + derived_bytes(*w);
  return bytes;
}

size_t Model::dense_weight_bytes() const {
  const LlamaConfig& c = config;
  const int64_t per_layer = c.hidden * c.q_dim() * 2 + c.hidden * c.kv_dim() * 2 +
                            3 * c.hidden * c.intermediate + 2 * c.hidden +
                            (c.qkv_bias ? c.q_dim() + 2 * c.kv_dim() : 0);
  const int64_t total =
      c.layers * per_layer + c.vocab * c.hidden * (c.tied_embeddings ? 1 : 2) + c.hidden;
  return size_t(total) * dtype_size(dtype);
}

double Model::sparsity() const {
  int64_t zeros = 0, total = 0;
  for (const auto& [name, w] : linear_layers()) {
    auto z = count_zeros(*w);
    if (!z.ok()) return -1.0;
    zeros += z.value();
    total += shape_of(*w).rows * shape_of(*w).cols;
  }
  return total ? double(zeros) / double(total) : 0.0;
}

std::string stacking_blocker(const Model& m) {
  struct Part {
    const char* name;
    const Weight* w;
  };
  // "" when the parts can be stacked, else what stops them.
  auto blocker = [](std::initializer_list<Part> parts) -> std::string {
    const Format f = format_of(*parts.begin()->w);
    bool alike = true;
    for (const Part& p : parts) alike = alike && format_of(*p.w) == f;
    if (alike && can_concat_rows(f)) return "";
    std::string s;
    for (const Part& p : parts)
      s += std::string(s.empty() ? "" : ", ") + p.name + " " + format_name(format_of(*p.w));
    return s + (alike ? " (that format cannot be stacked)" : " (different formats)");
  };
  for (size_t i = 0; i < m.layers.size(); ++i) {
    const Layer& l = m.layers[i];
    const std::string at = "layer " + std::to_string(i) + ": ";
    std::string b = blocker({{"q_proj", &l.q}, {"k_proj", &l.k}, {"v_proj", &l.v}});
    if (!b.empty()) return at + b;
    b = blocker({{"gate_proj", &l.gate}, {"up_proj", &l.up}});
    if (!b.empty()) return at + b;
    if (l.q_bias.empty() != l.k_bias.empty() || l.q_bias.empty() != l.v_bias.empty())
      return at + "q/k/v biases are not all present or all absent";
  }
  return "";
}

Result<Model> build_model(const LlamaConfig& config, const TensorSource& src) {
  SPARROW_RETURN_IF_ERROR(config.check());
  Model m;
  m.config = config;
  const LlamaConfig& c = config;

  auto need = [&](const std::string& name) -> Status {
    if (!src.has(name)) {
      return Status(Code::invalid_argument, "checkpoint is missing tensor '" + name + "'");
    }
    return {};
  };
  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols) -> Result<Weight> {
    SPARROW_RETURN_IF_ERROR(need(name));
    SPARROW_ASSIGN_OR_RETURN(Weight w, src.matrix(name));
    const Shape& s = shape_of(w);
    if (s.rows != rows || s.cols != cols) {
      return invalid_argument("tensor '" + name + "' has shape " + shape_str(s.rows, s.cols) +
                              " but the config needs " + shape_str(rows, cols));
    }
    if (s.dtype != m.dtype) {
      return invalid_argument("tensor '" + name + "' is " + dtype_name(s.dtype) +
                              " but the embeddings are " + dtype_name(m.dtype) +
                              "; mixed weight dtypes are not supported");
    }
    return w;
  };
  auto vec = [&](const std::string& name, int64_t n) -> Result<std::vector<float>> {
    SPARROW_RETURN_IF_ERROR(need(name));
    SPARROW_ASSIGN_OR_RETURN(std::vector<float> v, src.vector(name));
    if (int64_t(v.size()) != n) {
      return invalid_argument("tensor '" + name + "' has " + std::to_string(v.size()) +
                              " elements but the config needs " + std::to_string(n));
    }
    return v;
  };

  // Embeddings first: their dtype is the model's dtype.
  {
    const std::string name = "model.embed_tokens.weight";
    SPARROW_RETURN_IF_ERROR(need(name));
    SPARROW_ASSIGN_OR_RETURN(Weight e, src.matrix(name));
    const Shape& s = shape_of(e);
    if (s.rows != c.vocab || s.cols != c.hidden) {
      return invalid_argument("tensor '" + name + "' has shape " + shape_str(s.rows, s.cols) +
                              " but the config needs " + shape_str(c.vocab, c.hidden));
    }
    m.dtype = s.dtype;
    SPARROW_ASSIGN_OR_RETURN(m.embed, decode(e));
  }
  SPARROW_ASSIGN_OR_RETURN(m.final_norm, vec("model.norm.weight", c.hidden));
  if (c.tied_embeddings) {
    SPARROW_ASSIGN_OR_RETURN(m.lm_head, encode(Format::dense, m.embed.view()));
  } else {
    SPARROW_ASSIGN_OR_RETURN(m.lm_head, matrix("lm_head.weight", c.vocab, c.hidden));
  }

  m.layers.resize(size_t(c.layers));
  for (int64_t i = 0; i < c.layers; ++i) {
    Layer& l = m.layers[size_t(i)];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    SPARROW_ASSIGN_OR_RETURN(l.attn_norm, vec(p + "input_layernorm.weight", c.hidden));
    SPARROW_ASSIGN_OR_RETURN(l.mlp_norm, vec(p + "post_attention_layernorm.weight", c.hidden));
    SPARROW_ASSIGN_OR_RETURN(l.q, matrix(p + "self_attn.q_proj.weight", c.q_dim(), c.hidden));
    SPARROW_ASSIGN_OR_RETURN(l.k, matrix(p + "self_attn.k_proj.weight", c.kv_dim(), c.hidden));
    SPARROW_ASSIGN_OR_RETURN(l.v, matrix(p + "self_attn.v_proj.weight", c.kv_dim(), c.hidden));
    SPARROW_ASSIGN_OR_RETURN(l.o, matrix(p + "self_attn.o_proj.weight", c.hidden, c.q_dim()));
    SPARROW_ASSIGN_OR_RETURN(l.gate, matrix(p + "mlp.gate_proj.weight", c.intermediate, c.hidden));
    SPARROW_ASSIGN_OR_RETURN(l.up, matrix(p + "mlp.up_proj.weight", c.intermediate, c.hidden));
    SPARROW_ASSIGN_OR_RETURN(l.down, matrix(p + "mlp.down_proj.weight", c.hidden, c.intermediate));
    if (c.qkv_bias) {
      SPARROW_ASSIGN_OR_RETURN(l.q_bias, vec(p + "self_attn.q_proj.bias", c.q_dim()));
      SPARROW_ASSIGN_OR_RETURN(l.k_bias, vec(p + "self_attn.k_proj.bias", c.kv_dim()));
      SPARROW_ASSIGN_OR_RETURN(l.v_bias, vec(p + "self_attn.v_proj.bias", c.kv_dim()));
    }
  }
  return m;
}

}  // namespace sparrow::engine
