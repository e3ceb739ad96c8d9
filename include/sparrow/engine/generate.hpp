// What the CLI does with a backend: generate tokens, and measure perplexity on a text.
#pragma once

#include <cstdint>
#include <vector>

#include "sparrow/engine/backend.hpp"
#include "sparrow/engine/sampling.hpp"

namespace sparrow::engine {

struct Generation {
  // Per sequence, the new tokens only; with stop_at_eos, a sequence that produced an EOS id
  // ends with it.
  std::vector<std::vector<int32_t>> tokens;
  std::vector<bool> stopped_at_eos;  // per sequence
  double prefill_seconds = 0, decode_seconds = 0;
  int64_t prompt_tokens = 0;  // per sequence
  int64_t steps = 0;          // tokens generated per sequence still running (at most n)
};

// Resets the backend, runs the prompts (one per sequence, all the same length) and generates
// up to `n` tokens per sequence. With `stop_at_eos`, a sequence stops after producing one of
// the model's EOS ids (LlamaConfig::eos_ids; none: never): in a batch, the finished sequences
// keep running in lockstep with the others (the backend steps the whole batch) but their
// tokens are no longer recorded, and the loop ends when all have stopped. Without it, exactly
// `n` tokens per sequence. Errors (before anything runs) when prompt + n exceeds the context.
Result<Generation> generate(Backend& b, const std::vector<std::vector<int32_t>>& prompts, int64_t n,
                            const SamplingParams& sampling, bool stop_at_eos = true);

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
