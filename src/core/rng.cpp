#include "core/rng.hpp"

#include <array>

namespace sparrow {

namespace {

// A 256 x 256 bit matrix over GF(2) acting on a 256-bit state (4 words): column i is the image
// of state bit i.
using State = std::array<uint64_t, 4>;
using BitMatrix = std::array<State, 256>;

State apply(const BitMatrix& m, const State& v) {
  State out{0, 0, 0, 0};
  for (int i = 0; i < 256; ++i) {
    if ((v[size_t(i / 64)] >> (i % 64)) & 1u) {
      for (int w = 0; w < 4; ++w) out[size_t(w)] ^= m[size_t(i)][size_t(w)];
    }
  }
  return out;
}

}  // namespace

void Rng::advance(uint64_t n) {
  // powers[k] = T^(2^k), T the one-step matrix; built once (64 x 256 matrix-vector products,
  // ~20 ms), then a jump is at most 64 of them on the state.
  static const std::array<BitMatrix, 64> powers = [] {
    std::array<BitMatrix, 64> p{};
    for (int i = 0; i < 256; ++i) {
      uint64_t s[4] = {0, 0, 0, 0};
      s[i / 64] = uint64_t(1) << (i % 64);
      step(s);
      p[0][size_t(i)] = {s[0], s[1], s[2], s[3]};
    }
    for (int k = 1; k < 64; ++k)
      for (int i = 0; i < 256; ++i)
        p[size_t(k)][size_t(i)] = apply(p[size_t(k - 1)], p[size_t(k - 1)][size_t(i)]);
    return p;
  }();
  State v{s_[0], s_[1], s_[2], s_[3]};
  for (int k = 0; k < 64 && n != 0; ++k, n >>= 1) {
    if (n & 1u) v = apply(powers[size_t(k)], v);
  }
  for (int w = 0; w < 4; ++w) s_[w] = v[size_t(w)];
}

}  // namespace sparrow
