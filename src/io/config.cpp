// Hugging Face config.json -> ModelConfig, for the Llama family and OPT.
#include <fstream>
#include <sstream>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "io/json_file.hpp"
#include "sparrow/io/config.hpp"

namespace sparrow::io {

using nlohmann::json;

std::vector<std::string> supported_model_types() { return {"llama", "mistral", "qwen2", "opt"}; }

namespace {

std::string supported_list() {
  std::string s;
  for (const auto& t : supported_model_types()) s += (s.empty() ? "" : ", ") + t;
  return s;
}

// Reads an optional integer/float/bool field; a present field of the wrong type is an error.
Status get_int(const json& j, const char* key, int64_t& out, bool required) {
  if (!j.contains(key) || j[key].is_null()) {
    return required ? invalid_argument(std::string("config.json lacks \"") + key + "\"")
                    : Status::success();
  }
  if (!j[key].is_number_integer()) {
    return invalid_argument(std::string("config.json \"") + key + "\" is not an integer");
  }
  out = j[key].get<int64_t>();
  return Status::success();
}
Status get_double(const json& j, const char* key, double& out) {
  if (!j.contains(key) || j[key].is_null()) return Status::success();
  if (!j[key].is_number()) {
    return invalid_argument(std::string("config.json \"") + key + "\" is not a number");
  }
  out = j[key].get<double>();
  return Status::success();
}
Status get_bool(const json& j, const char* key, bool& out) {
  if (!j.contains(key) || j[key].is_null()) return Status::success();
  if (!j[key].is_boolean()) {
    return invalid_argument(std::string("config.json \"") + key + "\" is not true/false");
  }
  out = j[key].get<bool>();
  return Status::success();
}

// rope_scaling (older configs) and rope_parameters (transformers >= 5) share their keys; the
// type is "rope_type" or, in old configs, "type".
Status read_rope(const json& r, ModelConfig& c) {
  if (!r.is_object()) return invalid_argument("config.json rope scaling entry is not an object");
  if (r.contains("rope_type") && r["rope_type"].is_string()) {
    c.rope_scaling.type = r["rope_type"].get<std::string>();
  } else if (r.contains("type") && r["type"].is_string()) {
    c.rope_scaling.type = r["type"].get<std::string>();
  }
  SPARROW_RETURN_IF_ERROR(get_double(r, "rope_theta", c.rope_theta));
  SPARROW_RETURN_IF_ERROR(get_double(r, "factor", c.rope_scaling.factor));
  SPARROW_RETURN_IF_ERROR(get_double(r, "low_freq_factor", c.rope_scaling.low_freq_factor));
  SPARROW_RETURN_IF_ERROR(get_double(r, "high_freq_factor", c.rope_scaling.high_freq_factor));
  SPARROW_RETURN_IF_ERROR(get_int(r, "original_max_position_embeddings",
                                  c.rope_scaling.original_max_position_embeddings, false));
  return Status::success();
}

// eos_token_id: an integer, a list of integers, or null / absent (none).
Status read_eos(const json& j, std::vector<int64_t>& out) {
  out.clear();
  if (!j.contains("eos_token_id") || j["eos_token_id"].is_null()) return Status::success();
  const json& e = j["eos_token_id"];
  const json list = e.is_array() ? e : json::array({e});
  for (const json& id : list) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0) {
      return invalid_argument("config.json \"eos_token_id\" is not a token id or a list of them");
    }
    out.push_back(id.get<int64_t>());
  }
  return Status::success();
}

Status check_positive(int64_t v, const char* what) {
  if (v <= 0) {
    return invalid_argument(std::string("config.json ") + what + " must be positive (got " +
                            std::to_string(v) + ")");
  }
  return Status::success();
}

}  // namespace

Result<ModelConfig> parse_config(const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return invalid_argument("config.json is not a JSON object");
  ModelConfig c;
  if (!j.contains("model_type") || !j["model_type"].is_string()) {
    return invalid_argument("config.json has no \"model_type\"; supported: " + supported_list());
  }
  c.model_type = j["model_type"].get<std::string>();
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string()) {
    c.architecture = j["architectures"][0].get<std::string>();
  }
  bool known = false;
  for (const auto& t : supported_model_types()) known = known || t == c.model_type;
  if (!known) {
    return unsupported("model_type \"" + c.model_type + "\" is not supported; supported: " +
                       supported_list());
  }
  for (const char* key : {"torch_dtype", "dtype"}) {
    if (j.contains(key) && j[key].is_string()) {
      const std::string d = j[key].get<std::string>();
      if (d == "float16") c.dtype = DType::fp16;
      if (d == "bfloat16") c.dtype = DType::bf16;
      if (d == "float32") c.dtype = DType::fp32;
    }
  }
  int64_t v = 0;
  if (get_int(j, "bos_token_id", v, false).ok() && j.contains("bos_token_id") &&
      j["bos_token_id"].is_number_integer()) {
    c.bos_token_id = v;
  }
  SPARROW_RETURN_IF_ERROR(read_eos(j, c.eos_token_ids));

  SPARROW_RETURN_IF_ERROR(get_int(j, "hidden_size", c.hidden_size, true));
  SPARROW_RETURN_IF_ERROR(get_int(j, "num_hidden_layers", c.num_layers, true));
  SPARROW_RETURN_IF_ERROR(get_int(j, "num_attention_heads", c.num_heads, true));
  SPARROW_RETURN_IF_ERROR(get_int(j, "vocab_size", c.vocab_size, true));
  SPARROW_RETURN_IF_ERROR(get_int(j, "max_position_embeddings", c.max_position_embeddings, false));

  if (c.model_type == "opt") {
    c.family = Family::opt;
    c.hidden_act = "relu";
    c.tie_word_embeddings = true;  // OPT ties lm_head to the embeddings unless told otherwise
    c.attention_bias = c.mlp_bias = true;
    SPARROW_RETURN_IF_ERROR(get_int(j, "ffn_dim", c.intermediate_size, true));
    c.word_embed_proj_dim = c.hidden_size;
    SPARROW_RETURN_IF_ERROR(get_int(j, "word_embed_proj_dim", c.word_embed_proj_dim, false));
    SPARROW_RETURN_IF_ERROR(get_bool(j, "do_layer_norm_before", c.do_layer_norm_before));
    SPARROW_RETURN_IF_ERROR(get_bool(j, "enable_bias", c.attention_bias));
    c.mlp_bias = c.attention_bias;
    if (j.contains("activation_function") && j["activation_function"].is_string()) {
      c.hidden_act = j["activation_function"].get<std::string>();
    }
    c.num_kv_heads = c.num_heads;
    c.norm_eps = 1e-5;
  } else {
    c.family = Family::llama;
    SPARROW_RETURN_IF_ERROR(get_int(j, "intermediate_size", c.intermediate_size, true));
    c.num_kv_heads = c.num_heads;
    SPARROW_RETURN_IF_ERROR(get_int(j, "num_key_value_heads", c.num_kv_heads, false));
    SPARROW_RETURN_IF_ERROR(get_double(j, "rms_norm_eps", c.norm_eps));
    if (c.model_type == "qwen2") c.attention_bias = true;  // Qwen2 has q/k/v biases, no flag
    SPARROW_RETURN_IF_ERROR(get_bool(j, "attention_bias", c.attention_bias));
    SPARROW_RETURN_IF_ERROR(get_bool(j, "mlp_bias", c.mlp_bias));
    if (j.contains("hidden_act") && j["hidden_act"].is_string()) {
      c.hidden_act = j["hidden_act"].get<std::string>();
    }
    SPARROW_RETURN_IF_ERROR(get_double(j, "rope_theta", c.rope_theta));
    if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
      SPARROW_RETURN_IF_ERROR(read_rope(j["rope_scaling"], c));
    }
    if (j.contains("rope_parameters") && !j["rope_parameters"].is_null()) {
      SPARROW_RETURN_IF_ERROR(read_rope(j["rope_parameters"], c));
    }
    if (j.contains("sliding_window") && j["sliding_window"].is_number_integer()) {
      c.sliding_window = j["sliding_window"].get<int64_t>();
    }
  }
  SPARROW_RETURN_IF_ERROR(get_bool(j, "tie_word_embeddings", c.tie_word_embeddings));

  SPARROW_RETURN_IF_ERROR(check_positive(c.hidden_size, "hidden_size"));
  SPARROW_RETURN_IF_ERROR(check_positive(c.num_layers, "num_hidden_layers"));
  SPARROW_RETURN_IF_ERROR(check_positive(c.num_heads, "num_attention_heads"));
  SPARROW_RETURN_IF_ERROR(check_positive(c.num_kv_heads, "num_key_value_heads"));
  SPARROW_RETURN_IF_ERROR(check_positive(c.intermediate_size, "intermediate_size"));
  SPARROW_RETURN_IF_ERROR(check_positive(c.vocab_size, "vocab_size"));
  if (c.num_heads % c.num_kv_heads != 0) {
    return invalid_argument("config.json num_attention_heads (" + std::to_string(c.num_heads) +
                            ") is not a multiple of num_key_value_heads (" +
                            std::to_string(c.num_kv_heads) + ")");
  }
  if (j.contains("head_dim") && !j["head_dim"].is_null()) {
    SPARROW_RETURN_IF_ERROR(get_int(j, "head_dim", c.head_dim, true));
  } else {
    if (c.hidden_size % c.num_heads != 0) {
      return invalid_argument("config.json hidden_size (" + std::to_string(c.hidden_size) +
                              ") is not a multiple of num_attention_heads (" +
                              std::to_string(c.num_heads) + ") and head_dim is not given");
    }
    c.head_dim = c.hidden_size / c.num_heads;
  }
  SPARROW_RETURN_IF_ERROR(check_positive(c.head_dim, "head_dim"));
  if (!(c.norm_eps > 0)) return invalid_argument("config.json rms_norm_eps must be positive");
  if (!(c.rope_theta > 0)) return invalid_argument("config.json rope_theta must be positive");
  return c;
}

Result<ModelConfig> load_config(const std::string& path) {
  std::string file = path;
  struct stat st {};
  if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) file = path + "/config.json";
  std::ifstream in(file, std::ios::binary);
  if (!in) return Status(Code::io_error, "cannot read " + file);
  std::ostringstream ss;
  ss << in.rdbuf();
  auto r = parse_config(ss.str());
  if (!r.ok()) return Status(r.status().code(), file + ": " + r.status().message());
  return r;
}

Result<std::vector<int64_t>> load_generation_eos(const std::string& dir) {
  const std::string file = dir + "/generation_config.json";
  struct stat st {};
  if (stat(file.c_str(), &st) != 0) return std::vector<int64_t>{};  // optional
  SPARROW_ASSIGN_OR_RETURN(const json j, read_json_object(file));
  std::vector<int64_t> ids;
  if (!read_eos(j, ids).ok()) {
    return corrupt_data(file + ": \"eos_token_id\" is not a token id or a list of them");
  }
  return ids;
}

std::vector<ExpectedTensor> expected_matrices(const ModelConfig& c) {
  std::vector<ExpectedTensor> out;
  const int64_t h = c.hidden_size;
  if (c.family == Family::llama) {
    const int64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
    out.push_back({"model.embed_tokens.weight", c.vocab_size, h, false});
    for (int64_t i = 0; i < c.num_layers; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      out.push_back({p + "self_attn.q_proj.weight", q, h, true});
      out.push_back({p + "self_attn.k_proj.weight", kv, h, true});
      out.push_back({p + "self_attn.v_proj.weight", kv, h, true});
      out.push_back({p + "self_attn.o_proj.weight", h, q, true});
      out.push_back({p + "mlp.gate_proj.weight", c.intermediate_size, h, true});
      out.push_back({p + "mlp.up_proj.weight", c.intermediate_size, h, true});
      out.push_back({p + "mlp.down_proj.weight", h, c.intermediate_size, true});
    }
    if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", c.vocab_size, h, false});
  } else {
    out.push_back({"model.decoder.embed_tokens.weight", c.vocab_size, c.word_embed_proj_dim, false});
    out.push_back({"model.decoder.embed_positions.weight", c.max_position_embeddings + 2, h, false});
    for (int64_t i = 0; i < c.num_layers; ++i) {
      const std::string p = "model.decoder.layers." + std::to_string(i) + ".";
      for (const char* n : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
        out.push_back({p + "self_attn." + n + ".weight", h, h, true});
      }
      out.push_back({p + "fc1.weight", c.intermediate_size, h, true});
      out.push_back({p + "fc2.weight", h, c.intermediate_size, true});
    }
    if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", c.vocab_size, c.word_embed_proj_dim, false});
  }
  return out;
}

}  // namespace sparrow::io
