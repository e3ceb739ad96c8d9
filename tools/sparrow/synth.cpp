// sparrow synth: write a synthetic Hugging Face model directory (config.json + safetensors) with
// trained-like weight statistics, for tests, demos and GPU benchmarks.
#include <cstdio>
#include <string>

#include "sparrow/commands.hpp"
#include "sparrow/io/synth.hpp"
#include "sparrow/progress.hpp"

namespace sparrow::cli {

namespace {

struct SynthArgs {
  std::string arch = "llama", preset = "tiny", out, dtype;
  uint64_t seed = 1;
  int64_t hidden = 0, layers = 0, heads = 0, kv_heads = 0, intermediate = 0, vocab = 0,
          head_dim = 0, max_pos = 0;
  double shard_mb = -1;
  bool tie = false, force = false;
};

int run_synth(const SynthArgs& a) {
  auto bad = [](const std::string& m) {
    std::fprintf(stderr, "sparrow synth: %s\n", m.c_str());
    return kExitBadArgs;
  };
  if (a.arch != "llama" && a.arch != "mistral" && a.arch != "qwen2") {
    return bad("--arch must be llama, mistral or qwen2 (got '" + a.arch + "')");
  }
  if (a.out.empty()) return bad("--out DIR is required");
  const bool custom = a.preset == "custom" || a.preset == "CUSTOM";
  auto base = io::synth_preset(custom ? "tiny" : a.preset);
  if (!base.ok()) return bad(base.status().message());
  io::SynthOptions o = base.value();
  io::ModelConfig& c = o.config;
  c.model_type = a.arch;
  c.architecture = a.arch == "llama" ? "LlamaForCausalLM"
                   : a.arch == "mistral" ? "MistralForCausalLM" : "Qwen2ForCausalLM";
  if (a.arch == "qwen2") c.attention_bias = true;
  const bool any_custom = a.hidden || a.layers || a.heads || a.kv_heads || a.intermediate ||
                          a.vocab || a.head_dim || a.max_pos;
  if (any_custom && !custom) return bad("size options (--hidden, ...) need --preset custom");
  if (custom) {
    if (a.hidden) c.hidden_size = a.hidden;
    if (a.layers) c.num_layers = a.layers;
    if (a.heads) c.num_heads = a.heads;
    c.num_kv_heads = a.kv_heads ? a.kv_heads : a.heads ? a.heads : c.num_kv_heads;
    if (a.intermediate) c.intermediate_size = a.intermediate;
    if (a.vocab) c.vocab_size = a.vocab;
    if (a.max_pos) c.max_position_embeddings = a.max_pos;
    if (c.num_heads <= 0 || c.hidden_size <= 0) return bad("--hidden and --heads must be positive");
    if (!a.head_dim && c.hidden_size % c.num_heads != 0) {
      return bad("--hidden " + std::to_string(c.hidden_size) + " is not a multiple of --heads " +
                 std::to_string(c.num_heads) + " (give --head-dim)");
    }
    c.head_dim = a.head_dim ? a.head_dim : c.hidden_size / c.num_heads;
  }
  c.tie_word_embeddings = a.tie;
  if (!a.dtype.empty()) {
    auto dt = parse_dtype(a.dtype);
    if (!dt) return bad("--dtype must be fp16, bf16 or fp32");
    o.dtype = *dt;
  }
  o.seed = a.seed;
  if (a.shard_mb >= 0) o.max_shard_bytes = uint64_t(a.shard_mb * 1024 * 1024);
  install_interrupt_handler();
  o.interrupted = &g_interrupted;
  ProgressBar bar("synth");
  Status s = io::write_synthetic_model(o, a.out, a.force, [&](uint64_t done, uint64_t total,
                                                             const std::string& name) {
    bar.update(double(done) / double(total), name);
  });
  bar.finish();
  if (!s.ok()) {
    std::fprintf(stderr, "sparrow synth: %s\n", s.message().c_str());
    return s.code() == Code::invalid_argument ? kExitBadArgs : 1;
  }
  std::printf("wrote %s: %s, %lld layers, hidden %lld, intermediate %lld, heads %lld/%lld, vocab %lld, %s\n",
              a.out.c_str(), c.model_type.c_str(), (long long)c.num_layers, (long long)c.hidden_size,
              (long long)c.intermediate_size, (long long)c.num_heads, (long long)c.num_kv_heads,
              (long long)c.vocab_size, dtype_name(o.dtype));
  return 0;
}

}  // namespace

void register_synth(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<SynthArgs>();
  CLI::App* cmd = app.add_subcommand(
      "synth", "Write a synthetic HF-style model (config.json + safetensors) with trained-like "
               "weight statistics");
  cmd->add_option("--arch", args->arch, "llama | mistral | qwen2 (llama family)")->capture_default_str();
  cmd->add_option("--preset", args->preset,
                  "tiny (2 layers, ~3.4 MB) | llama2-7b | llama3-8b | custom")
      ->capture_default_str();
  cmd->add_option("--out", args->out, "output directory")->required();
  cmd->add_option("--seed", args->seed, "random seed")
      ->check(seed_validator())
      ->capture_default_str();
  cmd->add_option("--dtype", args->dtype, "fp16 | bf16 | fp32 (default: the preset's)");
  cmd->add_option("--hidden", args->hidden, "custom: hidden size");
  cmd->add_option("--layers", args->layers, "custom: decoder layers");
  cmd->add_option("--heads", args->heads, "custom: attention heads");
  cmd->add_option("--kv-heads", args->kv_heads, "custom: key/value heads (default: --heads)");
  cmd->add_option("--head-dim", args->head_dim, "custom: head dimension (default hidden/heads)");
  cmd->add_option("--intermediate", args->intermediate, "custom: MLP intermediate size");
  cmd->add_option("--vocab", args->vocab, "custom: vocabulary size");
  cmd->add_option("--max-positions", args->max_pos, "custom: max position embeddings");
  cmd->add_option("--shard-mb", args->shard_mb,
                  "max shard size in MiB (default: one file for tiny, 2048 for 7B/8B; 0 = one file)");
  cmd->add_flag("--tie-embeddings", args->tie, "tie lm_head to the embeddings");
  cmd->add_flag("--force", args->force, "replace an existing output directory");
  cmd->callback([args, &exit_code] { exit_code = run_synth(*args); });
}

}  // namespace sparrow::cli
