// Generation and perplexity loops over any backend.
#include "sparrow/engine/generate.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace sparrow::engine {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

Status Backend::forward_greedy(const int32_t* tokens, int batch, int64_t count,
                               std::vector<int32_t>& next) {
  std::vector<float> logits;
  SPARROW_RETURN_IF_ERROR(forward(tokens, batch, count, false, logits));
  const int64_t V = model().config.vocab;
  next.resize(size_t(batch));
  for (int b = 0; b < batch; ++b) next[size_t(b)] = argmax(&logits[size_t(b * V)], V);
  return {};
}

Status Backend::decode_greedy(const int32_t* first, int batch, int64_t steps,
                              const StepFn& on_step) {
  SPARROW_RETURN_IF_ERROR(check_decode_args(*this, first, batch, steps));
  std::vector<int32_t> fed(first, first + batch), next;
  for (int64_t i = 0; i < steps; ++i) {
    SPARROW_RETURN_IF_ERROR(forward_greedy(fed.data(), batch, 1, next));
    if (!on_step(next.data())) break;
    fed = next;
  }
  return {};
}

Result<size_t> Backend::decode_weight_bytes() const {
  return unsupported(std::string("the ") + name() +
                     " backend does not report a decode step's weight bytes (the GPU one does)");
}

Result<Generation> generate(Backend& b, const std::vector<std::vector<int32_t>>& prompts, int64_t n,
                            const SamplingParams& sampling, bool stop_at_eos) {
  SPARROW_RETURN_IF_ERROR(sampling.check());
  if (prompts.empty()) return invalid_argument("generate: no prompt");
  const int batch = int(prompts.size());
  const int64_t len = int64_t(prompts[0].size());
  if (len == 0) return invalid_argument("the prompt is empty: give at least one token");
  for (const auto& p : prompts)
    if (int64_t(p.size()) != len) return invalid_argument("prompts must have the same length");
  if (n < 0) return invalid_argument("number of tokens to generate must be >= 0");
  if (batch > b.max_batch()) {
    return invalid_argument("batch " + std::to_string(batch) + " exceeds the backend's max batch " +
                            std::to_string(b.max_batch()));
  }
  // The last generated token is never fed back, so prompt + n - 1 positions are needed; ask for
  // prompt + n to keep the rule simple to state.
  if (len + n > b.context()) {
    return invalid_argument("prompt (" + std::to_string(len) + " tokens) + " + std::to_string(n) +
                            " new tokens exceed the model's context of " +
                            std::to_string(b.context()) + " tokens");
  }

  b.reset();
  Generation g;
  g.prompt_tokens = len;
  g.tokens.assign(size_t(batch), {});
  std::vector<Sampler> samplers;
  for (int s = 0; s < batch; ++s) {
    SamplingParams p = sampling;
    p.seed = sampling.seed + uint64_t(s);  // independent streams per sequence
    samplers.emplace_back(p);
  }
  const int64_t V = b.model().config.vocab;

  std::vector<int32_t> in(size_t(batch * len));
  for (int s = 0; s < batch; ++s)
    std::copy(prompts[size_t(s)].begin(), prompts[size_t(s)].end(), in.begin() + s * len);
  std::vector<float> logits;
  std::vector<int32_t> next(static_cast<size_t>(batch), 0);
  const bool greedy = sampling.temperature == 0.0f;
  // Runs tokens through the model and picks each sequence's next token.
  auto step = [&](const int32_t* tokens, int64_t count) -> Status {
    if (greedy) return b.forward_greedy(tokens, batch, count, next);  // the prompt
    SPARROW_RETURN_IF_ERROR(b.forward(tokens, batch, count, false, logits));
    for (int s = 0; s < batch; ++s)
      next[size_t(s)] = samplers[size_t(s)].next(&logits[size_t(s * V)], V);
    return {};
  };
  auto t0 = std::chrono::steady_clock::now();
  if (n > 0) SPARROW_RETURN_IF_ERROR(step(in.data(), len));
  g.prefill_seconds = seconds_since(t0);

  const std::vector<int32_t>& eos = b.model().config.eos_ids;
  auto is_eos = [&](int32_t t) {
    return stop_at_eos && std::find(eos.begin(), eos.end(), t) != eos.end();
  };
  g.stopped_at_eos.assign(size_t(batch), false);
  int running = batch;
  // Records one step's picks; false once no sequence runs or n tokens are out.
  auto take = [&](const int32_t* picks) {
    for (int s = 0; s < batch; ++s) {
      if (g.stopped_at_eos[size_t(s)]) continue;
      g.tokens[size_t(s)].push_back(picks[s]);
      if (is_eos(picks[s])) {
        g.stopped_at_eos[size_t(s)] = true;
        --running;
      }
    }
    ++g.steps;
    return g.steps < n && running > 0;
  };
  t0 = std::chrono::steady_clock::now();
  // Stopped sequences are fed their last pick too: rows are independent, so this does not
  // change the others, and the batch keeps one shape (and one captured graph on the GPU).
  if (n > 0 && take(next.data())) {
    if (greedy) {  // the backend feeds each step's picks to the next itself
      SPARROW_RETURN_IF_ERROR(b.decode_greedy(next.data(), batch, n - 1, take));
    } else {
      do {
        std::vector<int32_t> fed = next;
        SPARROW_RETURN_IF_ERROR(step(fed.data(), 1));
      } while (take(next.data()));
    }
  }
  g.decode_seconds = seconds_since(t0);
  return g;
}

Result<Perplexity> perplexity(Backend& b, const std::vector<int32_t>& ids, int64_t ctx) {
  if (ctx < 2)
    return invalid_argument("--ctx must be at least 2 (got " + std::to_string(ctx) + ")");
  if (ctx > b.context()) {
    return invalid_argument("--ctx " + std::to_string(ctx) + " exceeds the model's context of " +
                            std::to_string(b.context()) + " tokens");
  }
  if (ids.size() < 2) return invalid_argument("the text needs at least 2 tokens");
  const int64_t V = b.model().config.vocab;
  Perplexity r;
  double nll_sum = 0;
  std::vector<float> logits;
  for (size_t start = 0; start + 1 < ids.size(); start += size_t(ctx)) {
    const int64_t len = std::min<int64_t>(ctx, int64_t(ids.size() - start));
    if (len < 2) break;
    b.reset();
    SPARROW_RETURN_IF_ERROR(b.forward(&ids[start], 1, len, true, logits));
    for (int64_t t = 0; t + 1 < len; ++t) {
      // -log softmax(logits_t)[next], in double with the max subtracted.
      const float* l = &logits[size_t(t * V)];
      double mx = l[0];
      for (int64_t i = 1; i < V; ++i) mx = std::max(mx, double(l[i]));
      double sum = 0;
      for (int64_t i = 0; i < V; ++i) sum += std::exp(double(l[i]) - mx);
      nll_sum += std::log(sum) + mx - double(l[ids[start + size_t(t) + 1]]);
      ++r.scored_tokens;
    }
    ++r.windows;
  }
  r.mean_nll = nll_sum / double(r.scored_tokens);
  r.perplexity = std::exp(r.mean_nll);
  r.bits_per_token = r.mean_nll / std::log(2.0);
  return r;
}

}  // namespace sparrow::engine
