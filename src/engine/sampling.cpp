// Greedy and temperature / top-k / top-p sampling on the host.
#include "sparrow/engine/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "core/rng.hpp"

namespace sparrow::engine {

Status SamplingParams::check() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) {
    return invalid_argument("temperature must be >= 0 (got " + std::to_string(temperature) + ")");
  }
  if (top_k < 0) return invalid_argument("top-k must be >= 0 (got " + std::to_string(top_k) + ")");
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    return invalid_argument("top-p must be in (0, 1] (got " + std::to_string(top_p) + ")");
  }
  return {};
}

int32_t argmax(const float* logits, int64_t vocab) {
  int64_t best = 0;
  for (int64_t i = 1; i < vocab; ++i)
    if (logits[i] > logits[best]) best = i;
  return int32_t(best);
}

Sampler::Sampler(const SamplingParams& p) : p_(p) {
  Rng rng(p.seed);
  for (auto& s : state_) s = rng.next();
}

double Sampler::uniform() {
  // The same xoshiro256** as sparrow::Rng on the sampler's own copyable state.
  return double(Rng::next_of(state_) >> 11) * 0x1.0p-53;
}

int32_t Sampler::next(const float* logits, int64_t vocab) {
  if (p_.temperature == 0.0f) return argmax(logits, vocab);
  // Candidates by decreasing logit (ties: lower id first), cut by top-k, then softmax at the
  // temperature, then cut by top-p, then one draw.
  std::vector<int32_t> ids(static_cast<size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  const int64_t k = (p_.top_k > 0 && p_.top_k < vocab) ? p_.top_k : vocab;
  auto by_logit = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), by_logit);
  ids.resize(size_t(k));
  std::vector<double> prob(static_cast<size_t>(k));
  const double top = logits[ids[0]];
  double sum = 0;
  for (int64_t i = 0; i < k; ++i) {
    prob[size_t(i)] = std::exp((double(logits[ids[size_t(i)]]) - top) / p_.temperature);
    sum += prob[size_t(i)];
  }
  int64_t keep = k;
  if (p_.top_p < 1.0f) {
    double cum = 0;
    for (int64_t i = 0; i < k; ++i) {
      cum += prob[size_t(i)] / sum;
      if (cum >= p_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double kept_sum = 0;
  for (int64_t i = 0; i < keep; ++i) kept_sum += prob[size_t(i)];
  double r = uniform() * kept_sum;
  for (int64_t i = 0; i < keep; ++i) {
    r -= prob[size_t(i)];
    if (r < 0) return ids[size_t(i)];
  }
  return ids[size_t(keep - 1)];
}

}  // namespace sparrow::engine
