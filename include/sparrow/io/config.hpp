// Hugging Face config.json for the model families sparrow runs: the Llama family (llama, mistral,
// qwen2: pre-norm decoder, RMSNorm, rotary embeddings, SwiGLU MLP, grouped-query attention) and
// OPT (learned positions, LayerNorm, ReLU MLP, biases). Anything else is refused with the list of
// supported architectures.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sparrow/dtype.hpp"
#include "sparrow/status.hpp"

namespace sparrow::io {

enum class Family : uint8_t { llama, opt };

// Rotary scaling as in HF's `rope_scaling` / `rope_parameters` (type "default" means none).
struct RopeScaling {
  std::string type = "default";  // "default", "linear", "dynamic", "llama3", "yarn", ...
  double factor = 1.0;
  double low_freq_factor = 1.0;   // llama3
  double high_freq_factor = 4.0;  // llama3
  int64_t original_max_position_embeddings = 0;
};

struct ModelConfig {
  Family family = Family::llama;
  std::string model_type;    // "llama", "mistral", "qwen2", "opt"
  std::string architecture;  // architectures[0], e.g. "LlamaForCausalLM" ("" if absent)
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;  // = num_heads when absent
  int64_t head_dim = 0;      // = hidden_size / num_heads when absent
  int64_t intermediate_size = 0;  // OPT: ffn_dim
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rope_theta = 10000.0;  // top-level `rope_theta` or `rope_parameters.rope_theta`
  RopeScaling rope_scaling;
  double norm_eps = 1e-5;       // rms_norm_eps (llama family) or 1e-5 (OPT LayerNorm)
  bool tie_word_embeddings = false;
  std::string hidden_act = "silu";  // OPT: activation_function ("relu")
  bool attention_bias = false;      // qwen2: true (q/k/v biases); OPT: enable_bias
  bool mlp_bias = false;
  std::optional<DType> dtype;       // torch_dtype / dtype when fp16/bf16/fp32
  int64_t sliding_window = 0;       // mistral/qwen2 when set, else 0
  // OPT only
  int64_t word_embed_proj_dim = 0;
  bool do_layer_norm_before = true;
  std::optional<int64_t> bos_token_id;
  // eos_token_id: one id, a list (Llama 3 instruct models end turns with several), or none
  // (absent or null): generation stops at any of them.
  std::vector<int64_t> eos_token_ids;
};

std::vector<std::string> supported_model_types();  // {"llama", "mistral", "qwen2", "opt"}

// Parses config.json text; checks that sizes are positive and consistent (heads divide, ...).
Result<ModelConfig> parse_config(const std::string& json_text);
// `path` is a config.json file or a model directory containing one.
Result<ModelConfig> load_config(const std::string& path);

// The eos_token_id of `dir`/generation_config.json (an id, a list, or null), which can name
// EOS ids that config.json lacks (Llama 3 instruct lists <|eot_id|> there). Empty when the
// file or the field is absent; corrupt_data naming the file when it is not JSON or the field
// is not ids.
Result<std::vector<int64_t>> load_generation_eos(const std::string& dir);

// The 2-D weight tensors a checkpoint of this config must hold, with their shapes (rows, cols),
// in HF naming ("model.layers.0.self_attn.q_proj.weight", ...). lm_head is listed only when the
// embeddings are not tied.
struct ExpectedTensor {
  std::string name;
  int64_t rows = 0, cols = 0;
  bool linear = false;  // a projection inside a decoder layer (a pruning candidate)
};
std::vector<ExpectedTensor> expected_matrices(const ModelConfig& c);

}  // namespace sparrow::io
