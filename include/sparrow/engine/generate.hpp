// What the CLI does with a backend: generate tokens, and measure perplexity on a text.
#pragma once

#include <cstdint>
#include <vector>

#include "sparrow/engine/backend.hpp"
#include "sparrow/engine/sampling.hpp"

namespace sparrow::engine {

struct Generation {
  std::vector<std::vector<int32_t>> tokens;  // per sequence, the new tokens only
  double prefill_seconds = 0, decode_seconds = 0;
  int64_t prompt_tokens = 0;  // per sequence
};

// Resets the backend, runs the prompts (one per sequence, all the same length) and generates
// `n` tokens per sequence. Errors (before anything runs) when prompt + n exceeds the context.
Result<Generation> generate(Backend& b, const std::vector<std::vector<int32_t>>& prompts, int64_t n,
                            const SamplingParams& sampling);

struct Perplexity {
  int64_t windows = 0;
  int64_t scored_tokens = 0;  // each window's first token is context only
  double mean_nll = 0;        // nats per scored token
  double perplexity = 0;      // exp(mean_nll)
  double bits_per_token = 0;  // mean_nll / ln 2 (= bits per byte for byte-level models)
};

// Splits `ids` into non-overlapping windows of `ctx` tokens, runs each from an empty cache and
// scores every next-token prediction inside the window.
Result<Perplexity> perplexity(Backend& b, const std::vector<int32_t>& ids, int64_t ctx);

}  // namespace sparrow::engine
