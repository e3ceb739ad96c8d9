// The nibble-order A-fragment decode from shared memory (fragment.hpp explains the order), shared
// by tca_bme.decode and tca_bme.mma. A lane's four elements of one row are one nibble of one
// bitmap and their values are consecutive, so one popcount locates them and two byte permutes
// with selectors from a 16-entry table (fragment.hpp's nibble_entry) build the lane's two
// registers.
#pragma once

#include <cstdint>

#include "kernels/tca_bme/fragment.hpp"

namespace sparrow::kernels::tca_bme_mma {

// A 2-byte shared-memory load, zero-extended. Not volatile: the loads may be scheduled freely, and
// cannot move above the barrier before the record load because their address comes from it.
__device__ __forceinline__ uint32_t lds_u16(uint32_t addr) {
  uint32_t v;
  asm("ld.shared.u16 %0, [%1];" : "=r"(v) : "r"(addr));
  return v;
}

// Threads 0..15 of a block write the 16 entries of the table the decode indexes (fragment.hpp's
// nibble_entry) into `lut` in shared memory; the caller's barrier publishes them.
__device__ __forceinline__ void fill_nibble_table(uint2* lut) {
  if (threadIdx.x < 16) {
    const NibbleEntry e = nibble_entry(threadIdx.x);
    lut[threadIdx.x] = make_uint2(e.x, e.y);
  }
}

// A byte permute whose selector is used as given: the table's selectors never set a nibble's sign
// bit, and their upper 16 bits (a byte distance) are ignored. __byte_perm would first mask every
// selector with 0x7777, one more instruction per register.
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t selector) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(selector));
  return r;
}

// The lane's two A-fragment registers of one row (columns 4t, 4t+1 | 4t+2, 4t+3) from its record
// {word, addr} of one bitmap half (`addr`: the shared-memory byte address of the half's first
// value), zero where a bit is clear. `lut` holds the 16 nibble entries. One popcount, four
// unconditional 2-byte loads (two may read up to two values past the group's last one: the
// caller's stage keeps a tail there that no copy writes; the selectors never pick those bytes),
// one table load and two byte permutes for four elements. In two halves, so a caller can issue
// the loads of several nibbles before the first permute (the loads' latency is the chain).
struct NibbleLoads {
  uint32_t v[4];  // values at the low pair's start p, p + 1 and the high pair's q, q + 1
  uint2 e;        // the nibble's table entry (selectors)
};
__device__ __forceinline__ NibbleLoads nibble_loads(uint32_t word, uint32_t addr,
                                                    const NibbleLane& nl, const uint2* lut) {
  NibbleLoads r;
  const uint32_t a = addr + 2u * uint32_t(__popc(word & nl.below));
  r.e = lut[(word >> nl.shift) & 0xFu];
  const uint32_t b = a + (r.e.x >> 16);
  r.v[0] = lds_u16(a);
  r.v[1] = lds_u16(a + 2);
  r.v[2] = lds_u16(b);
  r.v[3] = lds_u16(b + 2);
  return r;
}
__device__ __forceinline__ void nibble_permute(const NibbleLoads& l, uint32_t& lo, uint32_t& hi) {
  lo = prmt(l.v[0], l.v[1], l.e.x);
  hi = prmt(l.v[2], l.v[3], l.e.y);
}
__device__ __forceinline__ void nibble_regs(uint32_t word, uint32_t addr, const NibbleLane& nl,
                                            const uint2* lut, uint32_t& lo, uint32_t& hi) {
  nibble_permute(nibble_loads(word, addr, nl, lut), lo, hi);
}

// The per-warp records tca_bme.mma and tca_bme.wgmma decode from. Four warps share one group's
// 64 bitmaps (`bitmaps`, shared memory); warp `warp` (0..3) owns tc-tile row `warp`, i.e. bitmaps
// 16 warp .. + 15. Lane l counts bitmaps 2l, 2l+1 (lo, hi, lo, hi); lanes 8 warp .. 8 warp + 7 hold
// this warp's bitmaps and write its records: their first values follow every earlier warp's (one
// reduction) and the lanes before them in their group of 8 (a 3-step scan). records[j] = low
// halves of bitmaps 16 warp + 2j, + 1 (rows 0-3), records[8 + j] = high halves (rows 4-7), each
// {word, value address, word, value address}; `values` is the shared address of the group's first
// value. The caller makes sure the previous step's records were read before this is called.
//
// SWAP: odd j (a tile's second column half, the lanes with NibbleLane::pair = 1) hold the two
// bitmaps in the other order, rows 8-15 first, so one load instruction of warp_tile_loads reads
// bitmaps 4 tk and 4 tk + 3 (then 4 tk + 1 and 4 tk + 2) instead of 4 tk and 4 tk + 2, whose
// values start 256 d bytes apart at density d: fewer bank conflicts at d ~ 0.35-0.55, more at
// d ~ 0.3 (scripts/tca_bank_conflicts.py; measured in bench/NOTES-tc.md, session 20).
// tile_fragment<SWAP> puts the registers back in A-fragment order. prepare() chooses it per
// weight (WeightArgs::swap_pairs).
//
// WC > 1 (warp columns): the four warps tile the group's 4 x 4 tc-tiles as (4 / WC) rows of WC
// columns, warp w = (tm / TM) * WC + tk / TK with TM = WC tile rows and TK = 4 / WC tile columns
// each; records[2 i + h] and [8 + 2 i + h] hold its tile i = (tm % TM) * TK + tk % TK in the same
// form, so warp_tile_loads gives tile i's loads where it gave tile tk's (WC = 1). Every lane's
// first value then needs the whole warp's scan.
template <bool SWAP = false, int WC = 1>
__device__ __forceinline__ void write_warp_records(const uint4* bitmaps, uint32_t values, int warp,
                                                   int lane, uint4 (&records)[16]) {
  static_assert(WC == 1 || WC == 2 || WC == 4, "1, 2 or 4 warp columns");
  const uint4 q = bitmaps[lane];
  const uint32_t p0 = __popc(q.x), p1 = __popc(q.y), p2 = __popc(q.z), p3 = __popc(q.w);
  const uint32_t total = p0 + p1 + p2 + p3;
  uint32_t e = 0;
  if constexpr (WC > 1) {
    uint32_t incl = total;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const uint32_t u = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += u;
    }
    e = incl - total;
  } else {
    e = __reduce_add_sync(0xffffffffu, lane < 8 * warp ? total : 0u);
    uint32_t incl = total;
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) {
      const uint32_t u = __shfl_up_sync(0xffffffffu, incl, o, 8);
      if ((lane & 7) >= o) incl += u;
    }
    e += incl - total;
  }
  // Lane l counts bitmaps 2l, 2l + 1: tile (tm, tk) = (l / 8, (l / 2) % 4), its bitmap pair l % 2.
  constexpr int TM = WC, TK = 4 / WC;
  const int tm = lane >> 3, tk = (lane >> 1) & 3;
  const bool mine = WC == 1 ? tm == warp : (tm / TM) * WC + tk / TK == warp;
  const int j = WC == 1 ? (lane & 7) : 2 * ((tm % TM) * TK + tk % TK) + (lane & 1);
  if (mine) {
    const uint32_t o = values + 2 * e;
    const uint4 lo = make_uint4(q.x, o, q.z, o + 2 * (p0 + p1));
    const uint4 hi = make_uint4(q.y, o + 2 * p0, q.w, o + 2 * (p0 + p1 + p2));
    if (SWAP && (lane & 1)) {
      records[j] = make_uint4(lo.z, lo.w, lo.x, lo.y);
      records[8 + j] = make_uint4(hi.z, hi.w, hi.x, hi.y);
    } else {
      records[j] = lo;
      records[8 + j] = hi;
    }
  }
  __syncwarp();
}

// The shared-memory loads of the lane's A fragments for the warp's four 16x16 tiles (k = 0..63),
// all issued before any permute: the step is latency-bound on their chains (record -> popcount
// and table -> values). `my_rec` is the lane's half of its warp's records (rows 0-3 or 4-7: g < 4
// or not). Tile tk: bitmaps 2 pair (rows 0-7) and 2 pair + 1 (rows 8-15) of the lane's column
// half, one 16-byte record load. nibble_permute(ld[tk][0], a0a1, a4a5) and
// nibble_permute(ld[tk][1], a2a3, a6a7) then give the fragment registers.
//
// Bank conflicts: one load instruction of ld[tk][0] reads bitmap 4 tk (lanes of pair 0) and
// 4 tk + 2 (pair 1). A tile's four bitmaps have consecutive values, so at density d the two
// ranges start 256 d bytes apart, the same banks at d = 0.5: from d ~ 0.4 the value loads average
// 2 wavefronts (scripts/tca_bank_conflicts.py). ncu (H100, session 20, tca_bme.mma, N = 8, 50 %)
// measured 2.0-way conflicts on all shared loads and the L1/shared pipe busy 83-97 % of the
// active cycles: it, not the chains' latency, bounds these kernels at that density. Reading
// rows 8-15 first on the lanes of pair 1 halves the conflict at d = 0.5 but creates one at 0.3
// (measured both ways: bench/NOTES-tc.md, session 20).
__device__ __forceinline__ void warp_tile_loads(const uint4* my_rec, const NibbleLane& nl,
                                                const uint2* lut, NibbleLoads (&ld)[4][2]) {
#pragma unroll
  for (int tk = 0; tk < 4; ++tk) {
    const uint4 r = my_rec[2 * tk + nl.pair];
    ld[tk][0] = nibble_loads(r.x, r.y, nl, lut);
    ld[tk][1] = nibble_loads(r.z, r.w, nl, lut);
  }
}

// The A fragment of tile tk from its loads (warp_tile_loads): a0a1 / a4a5 (rows g) and
// a2a3 / a6a7 (rows g + 8), from the records' order (write_warp_records<SWAP>).
template <bool SWAP>
__device__ __forceinline__ void tile_fragment(const NibbleLoads (&ld)[2], const NibbleLane& nl,
                                              uint32_t (&af)[4]) {
  if constexpr (!SWAP) {
    nibble_permute(ld[0], af[0], af[2]);
    nibble_permute(ld[1], af[1], af[3]);
  } else {
    uint32_t lo0, hi0, lo1, hi1;
    nibble_permute(ld[0], lo0, hi0);
    nibble_permute(ld[1], lo1, hi1);
    const bool swap = nl.pair;
    af[0] = swap ? lo1 : lo0;
    af[1] = swap ? lo0 : lo1;
    af[2] = swap ? hi1 : hi0;
    af[3] = swap ? hi0 : hi1;
  }
}

}  // namespace sparrow::kernels::tca_bme_mma
