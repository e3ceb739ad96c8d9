// sparrow run: generate tokens from a model directory on the GPU or CPU backend.
//   --tokens: prints "tokens: <ids>" on stdout (for scripts); -p (through the model's tokenizer,
//   engine::load_tokenizer): prints the prompt and its continuation as text. A sequence stops
//   after the model's EOS id (its tokens: line ends with it) unless --ignore-eos. Timings and
//   diagnostics go to stderr.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "sparrow/commands.hpp"
#include "sparrow/engine/generate.hpp"
#include "sparrow/engine/tokenizer.hpp"
#include "sparrow/model_args.hpp"

namespace sparrow::cli {

namespace {

struct RunArgs {
  std::string model_dir, prompt, tokens, backend = "auto";
  int64_t n = 128;
  float temperature = 0.0f, top_p = 1.0f;
  int64_t top_k = 0;
  uint64_t seed = 0;
  int batch = 1;
  bool ignore_eos = false;
};

// Token ids as a list option (split_cli_list: "1,2,3", "1 2 3"; "1,,2" is an error).
Result<std::vector<int32_t>> parse_ids(const std::string& text) {
  SPARROW_ASSIGN_OR_RETURN(const std::vector<std::string> words,
                           split_cli_list(text, "--tokens", "id"));
  std::vector<int32_t> ids;
  for (const std::string& word : words) {
    char* end = nullptr;
    const long long v = std::strtoll(word.c_str(), &end, 10);
    if (*end != '\0' || v < 0 || v > INT32_MAX) {
      return invalid_argument("--tokens: '" + word + "' is not a token id");
    }
    ids.push_back(int32_t(v));
  }
  return ids;
}

int run_run(const RunArgs& a) {
  auto fail_args = [](const std::string& msg) {
    std::fprintf(stderr, "sparrow run: %s\n", msg.c_str());
    return kExitBadArgs;
  };
  if (a.prompt.empty() == a.tokens.empty()) return fail_args("give exactly one of -p or --tokens");
  if (a.batch < 1) return fail_args("--batch must be >= 1");
  engine::SamplingParams sp;
  sp.temperature = a.temperature;
  sp.top_k = a.top_k;
  sp.top_p = a.top_p;
  sp.seed = a.seed;
  if (Status s = sp.check(); !s.ok()) return fail_args(s.message());
  // Token ids are checked before the (possibly slow) model load; their range after it.
  std::vector<int32_t> prompt;
  if (!a.tokens.empty()) {
    auto ids = parse_ids(a.tokens);
    if (!ids.ok()) return fail_args(ids.status().message());
    prompt = ids.value();
  }

  auto model = load_model_or_report("run", a.model_dir);
  if (!model) return 1;
  std::unique_ptr<engine::Tokenizer> tokenizer;
  if (a.tokens.empty()) {
    int exit_code = 0;
    tokenizer = load_tokenizer_or_report("run", a.model_dir, *model, exit_code);
    if (!tokenizer) return exit_code;
    auto ids = tokenizer->encode(a.prompt);
    if (!ids.ok()) return fail_args(ids.status().message());
    prompt = ids.value();
    if (prompt.empty()) return fail_args("the prompt is empty");
  }

  engine::BackendOptions opt;
  opt.max_batch = a.batch;
  int exit_code = 0;
  auto backend = make_backend_or_report("run", a.backend, model, opt, exit_code);
  if (!backend) return exit_code;

  auto g = engine::generate(*backend, std::vector<std::vector<int32_t>>(size_t(a.batch), prompt),
                            a.n, sp, /*stop_at_eos=*/!a.ignore_eos);
  if (!g.ok()) {
    std::fprintf(stderr, "sparrow run: %s\n", g.status().to_string().c_str());
    return g.status().code() == Code::invalid_argument ? kExitBadArgs : 1;
  }
  for (const auto& seq : g->tokens) {
    if (!a.tokens.empty()) {
      std::string line = "tokens:";
      for (int32_t t : seq) line += " " + std::to_string(t);
      std::printf("%s\n", line.c_str());
    } else {  // the prompt and its continuation, decoded together
      std::vector<int32_t> all = prompt;
      all.insert(all.end(), seq.begin(), seq.end());
      std::printf("%s\n", tokenizer->decode(all).c_str());
    }
  }
  std::fflush(stdout);
  for (size_t s = 0; s < g->tokens.size(); ++s) {
    if (g->stopped_at_eos[s]) {
      std::fprintf(stderr, "sparrow run: sequence %zu stopped at EOS (id %d) after %zu tokens\n", s,
                   g->tokens[s].back(), g->tokens[s].size());
    }
  }
  const int64_t n = g->steps;
  const engine::MemoryReport mem = backend->memory();
  std::fprintf(stderr,
               "sparrow run: %s backend, batch %d: prompt %lld tokens in %.3f s (%.1f t/s), "
               "%lld new tokens in %.3f s (%.1f t/s per sequence)\n",
               backend->name(), a.batch, (long long)g->prompt_tokens, g->prefill_seconds,
               double(g->prompt_tokens * a.batch) / std::max(g->prefill_seconds, 1e-9),
               (long long)n, g->prefill_seconds + g->decode_seconds,
               n > 1 ? double(n - 1) / std::max(g->decode_seconds, 1e-9) : 0.0);
  // A backend that keeps its own copy (the CPU backend's fp32 dense panels): the stored size
  // first, so a pruned model's line does not read as a bigger model.
  const std::string held =
      mem.held_as ? std::string(" stored, held as ") + mem.held_as + ": " +
                        human_bytes(mem.model_bytes)
                  : "";
  const std::string peak =  // the GPU backend's (the CPU backend reports 0)
      mem.peak_device_bytes > 0 ? ", peak device memory " + human_bytes(mem.peak_device_bytes) : "";
  std::fprintf(stderr, "sparrow run: model %s%s, KV cache %s%s\n",
               human_bytes(mem.held_as ? model->weight_bytes() : mem.model_bytes).c_str(),
               held.c_str(), human_bytes(mem.kv_cache_bytes).c_str(), peak.c_str());
  return 0;
}

}  // namespace

void register_run(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand(
      "run",
      "Generate tokens with a Llama-family model (dense or sparse sparrow checkpoint). "
      "Text prompts work for models with a SentencePiece tokenizer.model (when built with "
      "libsentencepiece), a BPE tokenizer.json (Llama 2/3, Mistral, Qwen2 and GPT-2 pipelines) "
      "or none (byte-level, vocab 256); any model takes token ids with --tokens. A sequence "
      "stops at the model's EOS id unless --ignore-eos.");
  cmd->add_option("-m,--model", args->model_dir, "model directory (config.json + safetensors)")
      ->required();
  cmd->add_option("-p,--prompt", args->prompt,
                  "prompt text (through tokenizer.model, tokenizer.json or byte-level)");
  cmd->add_option("--tokens", args->tokens, "prompt token ids, e.g. 1,2,3; prints 'tokens: ...'");
  cmd->add_option("-n,--n-predict", args->n,
                  "tokens to generate (fewer when a sequence ends at EOS)")
      ->capture_default_str();
  cmd->add_option("--temp", args->temperature, "sampling temperature (0: greedy)")
      ->capture_default_str();
  cmd->add_option("--top-k", args->top_k, "keep the k most likely tokens (0: all)")
      ->capture_default_str();
  cmd->add_option("--top-p", args->top_p, "nucleus sampling threshold")->capture_default_str();
  cmd->add_option("--seed", args->seed, "sampling seed")
      ->check(seed_validator())
      ->capture_default_str();
  cmd->add_option("-b,--batch", args->batch, "run the prompt as this many sequences at once")
      ->capture_default_str();
  cmd->add_option("--backend", args->backend, "gpu, cpu or auto (the GPU when present)")
      ->capture_default_str();
  cmd->add_flag("--ignore-eos", args->ignore_eos,
                "generate all -n tokens; by default a sequence stops after the model's EOS id "
                "(config.json and generation_config.json eos_token_id), which its tokens: line ends "
                "with");
  cmd->callback([args, &exit_code] { exit_code = run_run(*args); });
}

}  // namespace sparrow::cli
