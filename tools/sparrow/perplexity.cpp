// sparrow perplexity: mean negative log-likelihood of a text over non-overlapping windows, as
// perplexity per token and, for byte-level models, bits per byte.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "sparrow/commands.hpp"
#include "sparrow/engine/generate.hpp"
#include "sparrow/model_args.hpp"

namespace sparrow::cli {

namespace {

struct PerplexityArgs {
  std::string model_dir, text_file, backend = "auto";
  int64_t ctx = 512;
};

int run_perplexity(const PerplexityArgs& a) {
  auto fail_args = [](const std::string& msg) {
    std::fprintf(stderr, "sparrow perplexity: %s\n", msg.c_str());
    return kExitBadArgs;
  };
  std::ifstream in(a.text_file, std::ios::binary);
  if (!in) return fail_args("cannot read --text '" + a.text_file + "'");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());

  auto model = load_model_or_report("perplexity", a.model_dir);
  if (!model) return 1;
  int exit_code = 0;
  const auto tokens = tokenize_or_report("perplexity", a.model_dir, *model, text, exit_code);
  if (!tokens) return exit_code;
  const std::vector<int32_t>& ids = *tokens;
  if (ids.size() < 2) return fail_args("--text needs at least 2 tokens");

  auto backend = make_backend_or_report("perplexity", a.backend, model, {}, exit_code);
  if (!backend) return exit_code;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = engine::perplexity(*backend, ids, a.ctx);
  if (!r.ok()) {
    std::fprintf(stderr, "sparrow perplexity: %s\n", r.status().to_string().c_str());
    return r.status().code() == Code::invalid_argument ? kExitBadArgs : 1;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("model %s  sparsity %.3f  backend %s  ctx %lld\n", model->name.c_str(),
              model->sparsity(), backend->name(), (long long)a.ctx);
  // Byte-level: a token is a byte. Otherwise bits per token (a token's bytes vary).
  std::printf(
      "windows %lld  scored tokens %lld  mean NLL %.4f nats  perplexity %.4f  "
      "bits per %s %.4f\n",
      (long long)r->windows, (long long)r->scored_tokens, r->mean_nll, r->perplexity,
      model->byte_level ? "byte" : "token", r->bits_per_token);
  std::fprintf(stderr, "sparrow perplexity: %.2f s (%.0f tokens/s)\n", secs,
               double(r->scored_tokens + r->windows) / std::max(secs, 1e-9));
  return 0;
}

}  // namespace

void register_perplexity(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<PerplexityArgs>();
  CLI::App* cmd = app.add_subcommand(
      "perplexity",
      "Perplexity of a model on a text file (non-overlapping windows); the text is tokenized "
      "as `run -p` does (tokenizer.model, tokenizer.json or byte-level)");
  cmd->add_option("-m,--model", args->model_dir, "model directory")->required();
  cmd->add_option("--text", args->text_file, "text file (tokenized by the model's tokenizer)")->required();
  cmd->add_option("--ctx", args->ctx, "window length in tokens")->capture_default_str();
  cmd->add_option("--backend", args->backend, "gpu, cpu or auto")->capture_default_str();
  cmd->callback([args, &exit_code] { exit_code = run_perplexity(*args); });
}

}  // namespace sparrow::cli
