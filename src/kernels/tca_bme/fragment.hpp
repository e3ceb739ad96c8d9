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

SPARROW_HD uint32_t popcount32(uint32_t v) {
#if defined(__CUDA_ARCH__)
  return uint32_t(__popc(v));
#else
  return uint32_t(__builtin_popcount(v));
#endif
}

// Per-lane constants of the decode. Row g of an 8x8 bitmap is byte g of the 64-bit word, so a
// lane's two bits live in one 32-bit half: rows 0-3 in the low half, 4-7 in the high half.
struct LaneBits {
  bool high;       // the lane's bits are in the high half
  int shift;       // position of the lane's first bit within its half
  uint32_t below;  // mask of the bits before it within its half
};
SPARROW_HD LaneBits lane_bits(int lane) {
  const int g = lane >> 2, tig = lane & 3;
  const int shift = (g & 3) * 8 + tig * 2;
  return {g >= 4, shift, (1u << shift) - 1u};
}

// One fragment register (two 16-bit values, low half first) from the lane's 32-bit half `word` of
// a bitmap whose first non-zero in that half sits at values[base]: the elements at the lane's bits
// `shift` and `shift` + 1. A set bit's value follows the set bits below it in the same half.
SPARROW_HD uint32_t fragment_pair(uint32_t word, uint32_t base, LaneBits lb,
                                  const uint16_t* values) {
  const uint32_t pos = base + popcount32(word & lb.below);
  const uint32_t f = word >> lb.shift;
  const uint32_t v0 = (f & 1u) ? values[pos] : 0u;
  const uint32_t v1 = (f & 2u) ? values[pos + (f & 1u)] : 0u;
  return v0 | (v1 << 16);
}

// One fragment register from one bitmap (lo, hi halves). `base` is the index in `values` of the
// bitmap's first non-zero (the popcount of all earlier bitmaps of the group); it is advanced past
// this bitmap.
SPARROW_HD uint32_t fragment_register(uint32_t lo, uint32_t hi, uint32_t& base, LaneBits lb,
                                      const uint16_t* values) {
  const uint32_t plo = popcount32(lo), phi = popcount32(hi);
  const uint32_t r = fragment_pair(lb.high ? hi : lo, base + (lb.high ? plo : 0u), lb, values);
  base += plo + phi;
  return r;
}

// The per-group table tca_bme.decode builds once per group and reads per fragment register:
// record 2j + h is half h (0 = low 32 bits) of bitmap j with the index, within the group's values,
// of the first non-zero of that half. A lane of the kernel reads record 2j + lane_bits(lane).high.
struct HalfRecord {
  uint32_t word;
  uint32_t base;
};
SPARROW_HD void group_records(const uint64_t* bitmaps, HalfRecord* records) {
  uint32_t base = 0;
  for (int j = 0; j < 64; ++j) {
    const uint32_t lo = uint32_t(bitmaps[j]), hi = uint32_t(bitmaps[j] >> 32);
    records[2 * j] = {lo, base};
    records[2 * j + 1] = {hi, base + popcount32(lo)};
    base += popcount32(lo) + popcount32(hi);
  }
}

}  // namespace sparrow::kernels::tca_bme_mma
