// load_model: a model directory (HF config.json + a dense or sparse sparrow checkpoint, read with
// sparrow::io) -> engine::Model.
#include <sys/stat.h>

#include <algorithm>

#include "sparrow/engine/model.hpp"
#include "sparrow/io/checkpoint.hpp"
#include "sparrow/io/config.hpp"

namespace sparrow::engine {

namespace {

bool file_exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

// The tensors of an io::ModelWeights: dense ones are returned as dense Weights, sparse ones in
// the format they were stored in.
class CheckpointSource final : public TensorSource {
 public:
  explicit CheckpointSource(io::ModelWeights w) : w_(std::move(w)) {}
  bool has(const std::string& name) const override { return w_.contains(name); }
  Result<Weight> matrix(const std::string& name) const override {
    SPARROW_ASSIGN_OR_RETURN(io::LoadedTensor t, w_.load(name));
    if (auto* weight = std::get_if<Weight>(&t)) return std::move(*weight);
    const io::HostTensor& h = std::get<io::HostTensor>(t);
    auto view = h.matrix();
    if (!view.ok()) {
      return invalid_argument("tensor '" + name + "': " + view.status().message());
    }
    return encode(Format::dense, view.value());
  }
  Result<std::vector<float>> vector(const std::string& name) const override {
    SPARROW_ASSIGN_OR_RETURN(io::HostTensor h, w_.load_dense(name));
    auto dt = io::to_dtype(h.dtype);
    if (!dt) {
      return invalid_argument("tensor '" + name + "' has dtype " + io::tensor_dtype_name(h.dtype) +
                              "; expected F16, BF16 or F32");
    }
    if (h.shape.size() != 1) {
      return invalid_argument("tensor '" + name + "' should be 1-D but has " +
                              std::to_string(h.shape.size()) + " dimensions");
    }
    std::vector<float> v(static_cast<size_t>(h.numel()));
    for (size_t i = 0; i < v.size(); ++i) v[i] = load_as_float(h.bytes.data(), *dt, i);
    return v;
  }

 private:
  io::ModelWeights w_;
};

}  // namespace

Result<LlamaConfig> llama_config(const io::ModelConfig& in) {
  if (in.family != io::Family::llama) {
    return unsupported("model_type '" + in.model_type +
                       "' is not a Llama-family decoder; the engine runs llama, mistral and qwen2");
  }
  if (in.hidden_act != "silu") {
    return unsupported("hidden_act '" + in.hidden_act +
                       "' is not supported (the engine runs silu)");
  }
  if (in.mlp_bias) return unsupported("mlp_bias is not supported by the engine");
  if (in.attention_bias && in.model_type != "qwen2") {
    return unsupported("attention_bias (an o_proj bias) is only supported for qwen2 shapes");
  }
  LlamaConfig c;
  c.model_type = in.model_type;
  c.hidden = in.hidden_size;
  c.layers = in.num_layers;
  c.heads = in.num_heads;
  c.kv_heads = in.num_kv_heads;
  c.head_dim = in.head_dim;
  c.intermediate = in.intermediate_size;
  c.vocab = in.vocab_size;
  c.context = in.max_position_embeddings;
  // With a sliding window shorter than the context, attention never slides if the engine stops
  // at the window: exact, at the price of a shorter context.
  if (in.sliding_window > 0 && in.sliding_window < c.context) c.context = in.sliding_window;
  c.rope.theta = in.rope_theta;
  c.rope.type = in.rope_scaling.type;
  c.rope.factor = in.rope_scaling.factor;
  c.rope.low_freq_factor = in.rope_scaling.low_freq_factor;
  c.rope.high_freq_factor = in.rope_scaling.high_freq_factor;
  c.rope.original_max_position = in.rope_scaling.original_max_position_embeddings;
  c.rms_eps = in.norm_eps;
  c.tied_embeddings = in.tie_word_embeddings;
  c.qkv_bias = in.attention_bias;
  for (int64_t id : in.eos_token_ids)
    if (id < c.vocab) c.eos_ids.push_back(int32_t(id));  // others can never be generated
  SPARROW_RETURN_IF_ERROR(c.check());
  return c;
}

Result<Model> load_model(const std::string& dir) {
  SPARROW_ASSIGN_OR_RETURN(io::ModelConfig cfg, io::load_config(dir));
  // Generation stops at the EOS ids of config.json and of generation_config.json (transformers'
  // generate() reads the latter, where Llama 3 instruct adds <|eot_id|> to config.json's).
  SPARROW_ASSIGN_OR_RETURN(std::vector<int64_t> more_eos, io::load_generation_eos(dir));
  for (int64_t id : more_eos)
    if (std::find(cfg.eos_token_ids.begin(), cfg.eos_token_ids.end(), id) ==
        cfg.eos_token_ids.end()) {
      cfg.eos_token_ids.push_back(id);
    }
  SPARROW_ASSIGN_OR_RETURN(LlamaConfig c, llama_config(cfg));
  SPARROW_ASSIGN_OR_RETURN(io::ModelWeights w, io::ModelWeights::open(dir));
  CheckpointSource src(std::move(w));
  SPARROW_ASSIGN_OR_RETURN(Model m, build_model(c, src));
  std::string name = dir;
  while (name.size() > 1 && name.back() == '/') name.pop_back();
  if (auto slash = name.rfind('/'); slash != std::string::npos) name = name.substr(slash + 1);
  m.name = name;
  m.byte_level = c.vocab == 256 && !file_exists(dir + "/tokenizer.model") &&
                 !file_exists(dir + "/tokenizer.json");
  return m;
}

}  // namespace sparrow::engine
