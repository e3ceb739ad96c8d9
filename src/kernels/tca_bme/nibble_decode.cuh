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

}  // namespace sparrow::kernels::tca_bme_mma
