// Choosing the next token from logits: greedy (temperature 0) or temperature / top-k / top-p
// sampling from a seeded generator, so a run with the same seed gives the same tokens.
#pragma once

#include <cstdint>

#include "sparrow/status.hpp"

namespace sparrow::engine {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy
  int64_t top_k = 0;         // 0: no limit
  float top_p = 1.0f;        // nucleus: smallest set of tokens whose probability reaches top_p
  uint64_t seed = 0;
  Status check() const;  // temperature >= 0, top_k >= 0, 0 < top_p <= 1
};

// Index of the largest logit (the lowest index among equal ones).
int32_t argmax(const float* logits, int64_t vocab);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  int32_t next(const float* logits, int64_t vocab);

 private:
  SamplingParams p_;
  uint64_t state_[4];
  double uniform();  // [0, 1)
};

}  // namespace sparrow::engine
