// A small deterministic generator (splitmix64-seeded xoshiro256**) with our own uniform and
// normal draws, so patterns and synthetic weights are identical on every platform and standard
// library (std:: distributions are not).
#pragma once

#include <cmath>
#include <cstdint>

namespace sparrow {

class Rng {
 public:
  explicit Rng(uint64_t seed) {
    uint64_t x = seed;
    for (auto& s : s_) s = splitmix(x);
  }
  uint64_t next() { return next_of(s_); }
  // One xoshiro256** output of a bare state, which it steps (a copyable 4-word state elsewhere,
  // such as the engine's Sampler, draws the same sequence as an Rng holding it).
  static uint64_t next_of(uint64_t (&s)[4]) {
    const uint64_t result = rotl(s[1] * 5, 7) * 9;
    step(s);
    return result;
  }
  // The state n calls of next() from now, in O(log n): xoshiro's state update is linear over
  // GF(2), so n steps are a product of precomputed powers of its 256 x 256 bit matrix. Lets a
  // long sequence be generated in parallel blocks with exactly the serial values (rng.cpp).
  void advance(uint64_t n);
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  uint64_t below(uint64_t n) { return uint64_t(uniform() * double(n)); }  // [0, n)
  double normal() {  // Box-Muller, one value per call
    double u1 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * uniform());
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  // The state update of next() (its output scrambler aside).
  static void step(uint64_t (&s)[4]) {
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
  }
  static uint64_t splitmix(uint64_t& x) {
    uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint64_t s_[4];
};

// Selection sampling (Knuth's algorithm S): visits `total` items in order and picks exactly
// `want` of them, each subset equally likely, in O(total) time and O(1) memory.
// FNV-1a hash of a string: stable per-name seeds on every platform (std::hash is unspecified).
inline uint64_t fnv1a(const char* s, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ uint8_t(s[i])) * 1099511628211ull;
  return h;
}

class ExactSelector {
 public:
  ExactSelector(uint64_t total, uint64_t want) : left_(total), need_(want) {}
  bool pick(Rng& rng) {
    const bool take = need_ > 0 && rng.uniform() * double(left_) < double(need_);
    --left_;
    if (take) --need_;
    return take;
  }

 private:
  uint64_t left_, need_;
};

}  // namespace sparrow
