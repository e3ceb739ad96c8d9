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

// ---- tca_bme.decode's nibble order --------------------------------------------------------------
// The mma sums over k, so A and B may number a tile's 16 columns in any order they agree on (the
// trick of dense.gemv). tca_bme.decode gives lane (g, t) the physical columns 4t .. 4t+3: k slots
// 2t, 2t+1 (registers a0a1 / a2a3) are columns 4t, 4t+1 and slots 2t+8, 2t+9 (a4a5 / a6a7) are
// 4t+2, 4t+3, in A and B alike. The lane's four elements of row g (and g + 8) are then one nibble of
// one bitmap row: bitmap 2 * (t / 2) (rows 0-7) or the next one (rows 8-15), bits
// (g % 4) * 8 + (t % 2) * 4 .. + 3 of the half g / 4. One popcount locates the nibble's values
// (they are consecutive), where fragment_pair needs one per two elements.
struct NibbleLane {
  bool high;       // the lane's nibble is in the high half (rows 4-7 of the 8x8 bitmap)
  int shift;       // position of the nibble within its half
  uint32_t below;  // mask of the bits before it within its half
  int pair;        // the lane reads bitmaps 2 * pair (rows 0-7) and 2 * pair + 1 (rows 8-15)
};
SPARROW_HD NibbleLane nibble_lane(int lane) {
  const int g = lane >> 2, t = lane & 3;
  const int shift = (g & 3) * 8 + (t & 1) * 4;
  return {g >= 4, shift, (1u << shift) - 1u, t >> 1};
}

// The two registers {columns 4t, 4t+1 | 4t+2, 4t+3} of one row from the lane's half `word` of a
// bitmap whose first value in that half is values[base]. Reads only the values of set bits (the
// reference, and the kernel's path for values in global memory).
struct RegPair {
  uint32_t lo, hi;
};
SPARROW_HD RegPair nibble_pair(uint32_t word, uint32_t base, NibbleLane nl,
                               const uint16_t* values) {
  uint32_t pos = base + popcount32(word & nl.below);
  const uint32_t nib = (word >> nl.shift) & 0xFu;
  uint32_t e[4];
  for (int i = 0; i < 4; ++i) e[i] = (nib >> i) & 1u ? values[pos++] : 0u;
  return {e[0] | (e[1] << 16), e[2] | (e[3] << 16)};
}

// The shared-memory path builds the same registers with one byte permute each: a bit pair f (bit
// 0: the even column is set, bit 1: the odd one) whose values start at p is permuted out of
// v = values[p] and v' = values[p + 1], each zero-extended to 32 bits (loaded whatever f is); the
// low pair starts at the nibble's first value, the high pair popcount(nib & 3) later. The selector
// takes byte 2 of v (always zero) for a clear bit and reads v' only when f == 3:
// f = 0 -> 0x2222, 1 -> 0x2210, 2 -> 0x1022, 3 -> 0x5410.
SPARROW_HD uint32_t pair_selector(uint32_t f) {
  return f == 0 ? 0x2222u : f == 1 ? 0x2210u : f == 2 ? 0x1022u : 0x5410u;
}
// The table a nibble indexes: x = the low pair's selector | (2 * values in the low pair) << 16 (a
// byte distance; a byte permute reads only the selector's low 16 bits), y = the high pair's.
// Three decodes read it: the register decodes (nibble_decode.cuh) and tca_bme.wgmma_smem's A-tile
// rows (smem_wgmma_kernel.cuh); tests/cpu/tca_bme_fragment_test.cpp emulates each of them.
struct NibbleEntry {
  uint32_t x, y;
};
SPARROW_HD NibbleEntry nibble_entry(uint32_t nib) {
  return {pair_selector(nib & 3u) | ((2u * popcount32(nib & 3u)) << 16), pair_selector(nib >> 2)};
}
// __byte_perm(a, b, s) on the host: byte i of the result is byte s[4i+2 : 4i] of {a, b}.
SPARROW_HD uint32_t byte_perm(uint32_t a, uint32_t b, uint32_t s) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(a, b, s);
#else
  const uint64_t src = uint64_t(a) | (uint64_t(b) << 32);
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= uint32_t((src >> (8 * ((s >> (4 * i)) & 7u))) & 0xFFu) << (8 * i);
  return r;
#endif
}

}  // namespace sparrow::kernels::tca_bme_mma
