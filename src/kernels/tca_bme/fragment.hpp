// The tca_bme bitmap -> mma.m16n8k16 A-fragment decode, shared by the kernel and a CPU test
// (tests/cpu/tca_bme_fragment_test.cpp) that checks it against the format's own decode.
//
// The format stores the four 8x8 bitmaps of a 16x16 tc tile in the order of the A-fragment
// registers (a0a1: rows 0-7 / cols 0-7, a2a3: rows 8-15 / cols 0-7, a4a5: rows 0-7 / cols 8-15,
// a6a7: rows 8-15 / cols 8-15), so register b of lane (g = lane / 4, tig = lane % 4) is bitmap b,
// bits g * 8 + 2 * tig and the next one.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define SPARROW_HD __host__ __device__ __forceinline__
#else
#define SPARROW_HD inline
#endif

namespace sparrow::kernels::tca_bme_mma {

SPARROW_HD uint32_t popcount64(uint64_t v) {
#if defined(__CUDA_ARCH__)
  return uint32_t(__popcll(v));
#else
  return uint32_t(__builtin_popcountll(v));
#endif
}

// One fragment register (two 16-bit values, low half first) from one bitmap. `base` is the index
// in `values` of the bitmap's first non-zero (the popcount of all earlier bitmaps of the group);
// `bit` = g * 8 + 2 * tig.
SPARROW_HD uint32_t fragment_register(uint64_t word, uint32_t base, int bit,
                                      const uint16_t* values) {
  const uint32_t pos = base + popcount64(word & ((uint64_t(1) << bit) - 1));
  const uint32_t has0 = uint32_t(word >> bit) & 1u, has1 = uint32_t(word >> (bit + 1)) & 1u;
  const uint32_t v0 = has0 ? values[pos] : 0u;
  const uint32_t v1 = has1 ? values[pos + has0] : 0u;
  return v0 | (v1 << 16);
}

}  // namespace sparrow::kernels::tca_bme_mma
