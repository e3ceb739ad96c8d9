// `sparrow synth`: synthetic llama-family checkpoints with trained-like weight statistics.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/rng.hpp"
#include "patterns/trained_like.hpp"
#include "sparrow/io/safetensors.hpp"
#include "sparrow/io/synth.hpp"

namespace fs = std::filesystem;

namespace sparrow::io {

std::vector<std::string> synth_presets() { return {"tiny", "llama2-7b", "llama3-8b"}; }

Result<SynthOptions> synth_preset(const std::string& name) {
  SynthOptions o;
  ModelConfig& c = o.config;
  c.family = Family::llama;
  c.model_type = "llama";
  c.architecture = "LlamaForCausalLM";
  c.hidden_act = "silu";
  if (name == "tiny") {
    c.hidden_size = 256;
    c.num_layers = 2;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.intermediate_size = 688;
    c.vocab_size = 512;
    c.max_position_embeddings = 512;
    c.rope_theta = 10000.0;
  } else if (name == "llama2-7b") {
    c.hidden_size = 4096;
    c.num_layers = 32;
    c.num_heads = 32;
    c.num_kv_heads = 32;
    c.intermediate_size = 11008;
    c.vocab_size = 32000;
    c.max_position_embeddings = 4096;
    c.rope_theta = 10000.0;
    o.max_shard_bytes = 2ull << 30;
  } else if (name == "llama3-8b") {
    c.hidden_size = 4096;
    c.num_layers = 32;
    c.num_heads = 32;
    c.num_kv_heads = 8;
    c.intermediate_size = 14336;
    c.vocab_size = 128256;
    c.max_position_embeddings = 8192;
    c.rope_theta = 500000.0;
    o.dtype = DType::bf16;
    o.max_shard_bytes = 2ull << 30;
  } else {
    std::string list;
    for (const auto& p : synth_presets()) list += (list.empty() ? "" : ", ") + p;
    return invalid_argument("unknown preset '" + name + "' (presets: " + list + ", or CUSTOM)");
  }
  c.head_dim = c.hidden_size / c.num_heads;
  c.norm_eps = 1e-5;
  return o;
}

std::string config_to_json(const ModelConfig& c, DType dtype) {
  nlohmann::ordered_json j = {
      {"architectures", {c.architecture.empty() ? "LlamaForCausalLM" : c.architecture}},
      {"model_type", c.model_type},
      {"hidden_size", c.hidden_size},
      {"intermediate_size", c.intermediate_size},
      {"num_hidden_layers", c.num_layers},
      {"num_attention_heads", c.num_heads},
      {"num_key_value_heads", c.num_kv_heads},
      {"head_dim", c.head_dim},
      {"hidden_act", c.hidden_act},
      {"max_position_embeddings", c.max_position_embeddings},
      {"rms_norm_eps", c.norm_eps},
      {"rope_theta", c.rope_theta},
      {"rope_scaling", nullptr},
      {"attention_bias", c.attention_bias},
      {"mlp_bias", c.mlp_bias},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"vocab_size", c.vocab_size},
      {"torch_dtype", dtype == DType::fp16 ? "float16" : dtype == DType::bf16 ? "bfloat16" : "float32"},
      {"sparrow_synthetic", true}};
  if (c.rope_scaling.type != "default") {
    j["rope_scaling"] = {{"rope_type", c.rope_scaling.type},
                         {"factor", c.rope_scaling.factor},
                         {"low_freq_factor", c.rope_scaling.low_freq_factor},
                         {"high_freq_factor", c.rope_scaling.high_freq_factor},
                         {"original_max_position_embeddings",
                          c.rope_scaling.original_max_position_embeddings}};
  }
  return j.dump(2) + "\n";
}

namespace {

struct SynthTensor {
  std::string name;
  std::vector<int64_t> shape;
  enum Kind { matrix, norm, bias } kind = matrix;
  uint64_t bytes(DType t) const {
    uint64_t n = dtype_size(t);
    for (int64_t d : shape) n *= uint64_t(d);
    return n;
  }
};

std::vector<SynthTensor> tensor_list(const ModelConfig& c) {
  std::vector<SynthTensor> out;
  const int64_t h = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  out.push_back({"model.embed_tokens.weight", {c.vocab_size, h}});
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    out.push_back({p + "input_layernorm.weight", {h}, SynthTensor::norm});
    out.push_back({p + "self_attn.q_proj.weight", {q, h}});
    out.push_back({p + "self_attn.k_proj.weight", {kv, h}});
    out.push_back({p + "self_attn.v_proj.weight", {kv, h}});
    if (c.attention_bias) {
      out.push_back({p + "self_attn.q_proj.bias", {q}, SynthTensor::bias});
      out.push_back({p + "self_attn.k_proj.bias", {kv}, SynthTensor::bias});
      out.push_back({p + "self_attn.v_proj.bias", {kv}, SynthTensor::bias});
    }
    out.push_back({p + "self_attn.o_proj.weight", {h, q}});
    out.push_back({p + "post_attention_layernorm.weight", {h}, SynthTensor::norm});
    out.push_back({p + "mlp.gate_proj.weight", {c.intermediate_size, h}});
    out.push_back({p + "mlp.up_proj.weight", {c.intermediate_size, h}});
    out.push_back({p + "mlp.down_proj.weight", {h, c.intermediate_size}});
  }
  out.push_back({"model.norm.weight", {h}, SynthTensor::norm});
  if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", {c.vocab_size, h}});
  return out;
}

// Fills one tensor. Matrices: trained-like values, generated in parallel chunks of rows (each
// chunk with its own seeded generator, so the result does not depend on the thread count).
std::vector<uint8_t> generate(const SynthTensor& t, DType dt, uint64_t seed, int threads) {
  std::vector<uint8_t> bytes(t.bytes(dt));
  Rng rng(seed);
  if (t.kind != SynthTensor::matrix) {
    // RMSNorm gains spread around 1 (a few large ones); biases small.
    for (int64_t i = 0; i < t.shape[0]; ++i) {
      const double v = t.kind == SynthTensor::norm ? std::exp(0.2 * rng.normal()) : 0.02 * rng.normal();
      store_from_float(bytes.data(), dt, size_t(i), float(v));
    }
    return bytes;
  }
  const int64_t rows = t.shape[0], cols = t.shape[1];
  std::vector<float> row_scale, col_scale;
  patterns::detail::draw_channel_scales(rng, rows, cols, row_scale, col_scale);
  constexpr int64_t kChunkRows = 64;
  const int64_t chunks = (rows + kChunkRows - 1) / kChunkRows;
  auto work = [&](int64_t first, int64_t step) {
    for (int64_t ch = first; ch < chunks; ch += step) {
      Rng crng(seed ^ (0x9E3779B97F4A7C15ull * uint64_t(ch + 1)));
      for (int64_t r = ch * kChunkRows; r < std::min(rows, (ch + 1) * kChunkRows); ++r)
        for (int64_t c = 0; c < cols; ++c)
          store_from_float(bytes.data(), dt, size_t(r * cols + c),
                           patterns::detail::trained_like_value(crng, dt, 0.02, row_scale[size_t(r)],
                                                                col_scale[size_t(c)]));
    }
  };
  const int n = int(std::max<int64_t>(1, std::min<int64_t>(threads, chunks)));
  std::vector<std::thread> pool;
  for (int i = 1; i < n; ++i) pool.emplace_back(work, i, n);
  work(0, n);
  for (auto& th : pool) th.join();
  return bytes;
}

}  // namespace

Status write_synthetic_model(const SynthOptions& o, const std::string& out_dir, bool force,
                             const std::function<void(uint64_t, uint64_t, const std::string&)>& progress) {
  const ModelConfig& c = o.config;
  if (c.family != Family::llama) return unsupported("synth writes llama-family models only");
  // Round-trip the config through the parser: the same checks as for a real model.
  SPARROW_ASSIGN_OR_RETURN(ModelConfig checked, parse_config(config_to_json(c, o.dtype)));
  (void)checked;
  fs::path out = fs::absolute(out_dir).lexically_normal();
  if (out.filename().empty()) out = out.parent_path();  // "dir/"
  if (fs::exists(out) && !force) {
    return invalid_argument("output directory " + out.string() + " already exists (use --force)");
  }
  std::error_code ec;
  fs::create_directories(out.parent_path(), ec);
  const fs::path tmp = out.parent_path() / ("." + out.filename().string() + ".tmp-" + std::to_string(::getpid()));
  fs::remove_all(tmp, ec);
  if (!fs::create_directory(tmp, ec)) return Status(Code::io_error, "cannot create " + tmp.string());
  struct Cleanup {
    fs::path p;
    bool keep = false;
    ~Cleanup() {
      std::error_code e;
      if (!keep) fs::remove_all(p, e);
    }
  } cleanup{tmp};

  const std::vector<SynthTensor> tensors = tensor_list(c);
  // Shard assignment up front (sizes are known): consecutive tensors up to max_shard_bytes.
  std::vector<int> shard_of(tensors.size(), 0);
  uint64_t total = 0, in_shard = 0;
  int shards = 1;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const uint64_t b = tensors[i].bytes(o.dtype);
    if (o.max_shard_bytes > 0 && in_shard > 0 && in_shard + b > o.max_shard_bytes) {
      ++shards;
      in_shard = 0;
    }
    shard_of[i] = shards - 1;
    in_shard += b;
    total += b;
  }
  const bool sharded = o.max_shard_bytes > 0 && shards > 1;
  auto shard_name = [&](int s) {
    if (!sharded) return std::string("model.safetensors");
    char buf[64];
    std::snprintf(buf, sizeof buf, "model-%05d-of-%05d.safetensors", s + 1, shards);
    return std::string(buf);
  };
  const int threads = o.threads > 0 ? o.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  uint64_t done = 0;
  size_t i = 0;
  for (int s = 0; s < shards; ++s) {
    SPARROW_ASSIGN_OR_RETURN(SafetensorsWriter w, SafetensorsWriter::create((tmp / shard_name(s)).string()));
    for (; i < tensors.size() && shard_of[i] == s; ++i) {
      if (o.interrupted && *o.interrupted) return Status(Code::io_error, "interrupted; nothing written");
      const SynthTensor& t = tensors[i];
      const uint64_t seed = o.seed * 0x100000001B3ull ^ fnv1a(t.name.data(), t.name.size());
      const std::vector<uint8_t> data = generate(t, o.dtype, seed, threads);
      SPARROW_RETURN_IF_ERROR(w.add(t.name, to_tensor_dtype(o.dtype), t.shape, data.data(), data.size()));
      weight_map[t.name] = shard_name(s);
      done += data.size();
      if (progress) progress(done, total, t.name);
    }
    SPARROW_RETURN_IF_ERROR(w.finish({{"format", "pt"}}));
  }
  auto write_text = [&](const std::string& name, const std::string& text) -> Status {
    std::ofstream f(tmp / name, std::ios::binary);
    f << text;
    f.close();
    return f ? Status::success() : Status(Code::io_error, "cannot write " + name);
  };
  SPARROW_RETURN_IF_ERROR(write_text("config.json", config_to_json(c, o.dtype)));
  if (sharded) {
    nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    SPARROW_RETURN_IF_ERROR(write_text("model.safetensors.index.json", index.dump(2)));
  }
  SPARROW_RETURN_IF_ERROR(write_text(
      "README.md", "Synthetic model written by `sparrow synth` (random weights with trained-like "
                   "statistics; not a trained model).\n"));
  if (fs::exists(out)) fs::remove_all(out, ec);
  fs::rename(tmp, out, ec);
  if (ec) return Status(Code::io_error, "cannot rename into " + out.string() + ": " + ec.message());
  cleanup.keep = true;
  return Status::success();
}

}  // namespace sparrow::io
