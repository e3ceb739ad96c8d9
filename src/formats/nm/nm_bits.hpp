// The packed index stream of the nm format, shared by the format code and the CPU reference:
// b-bit indices, LSB-first in uint32 words; an index may straddle two words (b = 3, 5, 6, 7).
#pragma once

#include <cstdint>

namespace sparrow::nm {

// b = max(1, ceil(log2 M)).
inline int index_bits_for(int m) {
  int b = 1;
  while ((1 << b) < m) ++b;
  return b;
}

// Reads the `b`-bit index that starts at bit `pos` of `words`. Touches words[pos / 32 + 1] only
// when the index straddles into it, so it never reads past the last word that holds index bits.
inline uint32_t get_index(const uint32_t* words, int64_t pos, int b) {
  const int64_t w = pos / 32;
  const int off = int(pos % 32);
  uint32_t v = words[w] >> off;
  if (off + b > 32) v |= words[w + 1] << (32 - off);
  return v & ((1u << b) - 1u);
}

// ORs `idx` (< 2^b) into zero-initialised `words` at bit `pos`.
inline void put_index(uint32_t* words, int64_t pos, int b, uint32_t idx) {
  const int64_t w = pos / 32;
  const int off = int(pos % 32);
  words[w] |= idx << off;
  if (off + b > 32) words[w + 1] |= idx >> (32 - off);
}

}  // namespace sparrow::nm
