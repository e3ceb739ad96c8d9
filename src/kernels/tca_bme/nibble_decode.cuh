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

// The lane's two A-fragment registers of one row (columns 4t, 4t+1 | 4t+2, 4t+3) from its record
// {word, addr} of one bitmap half (`addr`: the shared-memory byte address of the half's first
// value), zero where a bit is clear. `lut` holds the 16 nibble entries. One popcount, four
// unconditional 2-byte loads (two may read up to two values past the group's last one: the
// caller's stage keeps a tail there that no copy writes; the selectors never pick those bytes),
// one table load and two byte permutes for four elements.
__device__ __forceinline__ void nibble_regs(uint32_t word, uint32_t addr, const NibbleLane& nl,
                                            const uint2* lut, uint32_t& lo, uint32_t& hi) {
  const uint32_t a = addr + 2u * uint32_t(__popc(word & nl.below));
  const uint2 e = lut[(word >> nl.shift) & 0xFu];
  const uint32_t b = a + (e.x >> 16);
  lo = __byte_perm(lds_u16(a), lds_u16(a + 2), e.x);
  hi = __byte_perm(lds_u16(b), lds_u16(b + 2), e.y);
}

}  // namespace sparrow::kernels::tca_bme_mma
