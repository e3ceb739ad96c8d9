// The CUDA-core strip kernels of tca_bme.decode (one_token.cu for N = 1, few_tokens.cu for
// N = 2..4) share how a warp finds its 16-row strip of one 64x64 group: the group's 64 bitmaps,
// one warp scan of their popcounts, and each lane's 32-bit half-bitmap (4 rows x 8 columns) with
// the index of its first value in the warp's copy of the strip's values.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/decode_common.cuh"

namespace sparrow::kernels::tca_bme_strip {

using namespace decode;

// A 16-bit element from shared memory (byte address), as fp32. Volatile with a memory clobber:
// its address does not depend on the buffer's fill, so nothing else keeps it after the
// __syncwarp that publishes the buffer.
template <class T>
__device__ __forceinline__ float lds_float(uint32_t addr) {
  uint16_t v;
  asm volatile("ld.shared.u16 %0, [%1];" : "=h"(v) : "r"(addr) : "memory");
  return to_float(*reinterpret_cast<const T*>(&v));
}

// Where a warp finds one strip-group: its strip's values (`chunks` 16-byte chunks from the
// 16-byte aligned `aligned`) and this lane's 32-bit half-bitmap with the position of its first
// value in the warp's strip buffer.
struct StripGroup {
  uint32_t aligned = 0;  // value index (32 bits: the format's offsets are)
  int chunks = 0;
  uint32_t word = 0;  // this lane's 32 bits: 4 rows x 8 columns
  int p = 0;          // index of the lane's first value in the strip buffer
};

// From the group's 64 bitmaps (this lane loaded bitmaps 2*lane, 2*lane+1 as `bm2`) and the
// group's first value index: one warp scan of popcounts.
__device__ __forceinline__ StripGroup locate(const uint4& bm2, uint32_t gbase, int lane, int tm,
                                             int src, bool second, int hh) {
  const uint32_t pc0 = __popc(bm2.x) + __popc(bm2.y);
  const uint32_t pc = pc0 + __popc(bm2.z) + __popc(bm2.w);
  const uint32_t incl = warp_inclusive_scan(pc, lane);
  const uint32_t excl = incl - pc;
  const uint32_t strip_first = __shfl_sync(0xffffffffu, excl, tm * 8);
  const uint32_t strip_end = __shfl_sync(0xffffffffu, incl, tm * 8 + 7);
  const uint32_t vstart = gbase + strip_first;
  StripGroup g;
  g.aligned = vstart & ~7u;
  g.chunks = int((vstart + (strip_end - strip_first) - g.aligned + 7) / 8);
  // This lane's bitmap word and where its values start, from the lane that loaded it.
  const uint32_t sx = __shfl_sync(0xffffffffu, bm2.x, src);
  const uint32_t sy = __shfl_sync(0xffffffffu, bm2.y, src);
  const uint32_t sz = __shfl_sync(0xffffffffu, bm2.z, src);
  const uint32_t sw = __shfl_sync(0xffffffffu, bm2.w, src);
  const uint32_t sexcl = __shfl_sync(0xffffffffu, excl, src);
  const uint32_t lo = second ? sz : sx, hi = second ? sw : sy;  // bitmap 2src+1 follows 2src
  g.word = hh ? hi : lo;
  g.p = int(vstart - g.aligned) + int(sexcl - strip_first) +
        (second ? __popc(sx) + __popc(sy) : 0) + (hh ? __popc(lo) : 0);
  return g;
}

}  // namespace sparrow::kernels::tca_bme_strip
