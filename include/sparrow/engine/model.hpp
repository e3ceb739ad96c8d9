// The Llama-family decoder (Llama 2/3, Mistral, Qwen2 shapes) as sparrow runs it: the shapes and
// hyper-parameters from the HF config, and the weights, where every linear layer (q, k, v, o,
// gate, up, down, lm_head) is a sparrow::Weight in its own format (dense or any sparse format).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sparrow/io/config.hpp"
#include "sparrow/matrix.hpp"
#include "sparrow/status.hpp"
#include "sparrow/weight.hpp"

namespace sparrow::engine {

// Rotary position embedding: theta and HF's `rope_scaling` (type "default", "linear", "llama3").
struct RopeConfig {
  double theta = 10000.0;
  std::string type = "default";
  double factor = 1.0;
  double low_freq_factor = 1.0;       // llama3
  double high_freq_factor = 4.0;      // llama3
  int64_t original_max_position = 0;  // llama3: the context the model was trained with
};

struct LlamaConfig {
  std::string model_type = "llama";  // "llama", "mistral", "qwen2"
  int64_t hidden = 0;
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t intermediate = 0;
  int64_t vocab = 0;
  int64_t context = 0;  // max positions the engine runs (min of max_position_embeddings and
                        // the sliding window when one is set: attention then never slides)
  RopeConfig rope;
  double rms_eps = 1e-5;
  bool tied_embeddings = false;
  bool qkv_bias = false;  // Qwen2: q/k/v projections have a bias
  // config.json's eos_token_id and generation_config.json's (load_model; empty: none);
  // generate stops a sequence at any of them.
  std::vector<int32_t> eos_ids;

  int64_t q_dim() const { return heads * head_dim; }
  int64_t kv_dim() const { return kv_heads * head_dim; }
  // Positive sizes, heads divisible by kv_heads, even head_dim, a known rope type.
  Status check() const;
};

// RoPE inverse frequencies (head_dim / 2 values), computed like HF (fp32) including the scaling
// of `rope.type`. Position p rotates the pair (i, i + head_dim/2) by angle p * inv_freq[i].
Result<std::vector<float>> rope_inv_freq(const LlamaConfig& c);

struct Layer {
  std::vector<float> attn_norm, mlp_norm;  // (hidden) RMSNorm weights
  Weight q, k, v, o;                       // (q_dim, hidden), (kv_dim, hidden) x2, (hidden, q_dim)
  Weight gate, up, down;                   // (inter, hidden) x2, (hidden, inter)
  std::vector<float> q_bias, k_bias, v_bias;  // empty unless config.qkv_bias
};

struct Model {
  std::string name;  // for tables: the directory's name or the synth preset
  LlamaConfig config;
  DType dtype = DType::fp16;  // of the embeddings and dense weights (activations on the GPU)
  HostMatrix embed;           // (vocab, hidden)
  std::vector<float> final_norm;
  Weight lm_head;  // (vocab, hidden); a dense copy of `embed` when tied
  std::vector<Layer> layers;
  bool byte_level = false;  // vocab 256 and no tokenizer file: token id = byte value

  // The linear layers of the decoder blocks (not lm_head), in order, with HF-style names.
  std::vector<std::pair<std::string, const Weight*>> linear_layers() const;
  // Bytes of every weight (embeddings, norms, all linear layers in their formats, with the
  // derived arrays a format keeps next to them on the GPU: derived_bytes).
  size_t weight_bytes() const;
  // The same model stored dense in `dtype`.
  size_t dense_weight_bytes() const;
  // Fraction of zeros over the decoder's linear layers (decodes sparse layers once).
  double sparsity() const;
};

// Where build_model gets named tensors from: a dense or sparse checkpoint, or a synthetic model.
class TensorSource {
 public:
  virtual ~TensorSource() = default;
  virtual bool has(const std::string& name) const = 0;
  // A 2-D weight in whatever format it is stored in (dense or sparse), on the host.
  virtual Result<Weight> matrix(const std::string& name) const = 0;
  // A 1-D tensor (norm weights, biases) as fp32.
  virtual Result<std::vector<float>> vector(const std::string& name) const = 0;
};

// Checks every tensor's presence, shape and dtype against the config (errors name the tensor
// and both shapes) and assembles the model. HF names: model.embed_tokens.weight,
// model.layers.{i}.{input_layernorm,post_attention_layernorm}.weight,
// model.layers.{i}.self_attn.{q,k,v,o}_proj.weight (+ q/k/v .bias for Qwen2),
// model.layers.{i}.mlp.{gate,up,down}_proj.weight, model.norm.weight, lm_head.weight.
Result<Model> build_model(const LlamaConfig& config, const TensorSource& source);

// The engine's config of a parsed config.json (or a `sparrow synth` preset's): unsupported for
// what the engine does not run (other families, activations, MLP biases), the sliding window as
// the context limit, eos ids past the vocabulary dropped.
Result<LlamaConfig> llama_config(const io::ModelConfig& in);

// Why the GPU engine cannot stack every layer's q, k, v into one matmul and gate, up into another
// (its default; each stack needs one format that can be stacked, and q/k/v biases all present or
// all absent), naming the first layer and tensors that prevent it; empty when it can. Without the
// stacks every layer runs its projections one by one (more launches, no folded norm): slower.
std::string stacking_blocker(const Model& m);

// Loads a model directory: config.json, and a dense HF safetensors checkpoint (one file or
// shards with model.safetensors.index.json) or a sparse sparrow checkpoint. Refuses unsupported
// architectures with the list of supported ones.
Result<Model> load_model(const std::string& dir);

}  // namespace sparrow::engine
