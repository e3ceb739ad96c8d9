// The CUDA-core strip kernels of tca_bme.decode (one_token.cu for N = 1, few_tokens.cu for
// N = 2..4) share how a warp finds its 16-row strip of one 64x64 group: the strip's 16 bitmaps are
// 32 half-bitmaps, one per lane (a coalesced 128-byte load), the strip's first value is the
// group's offset plus the derived strip_starts entry (tca_bme.hpp), and one warp scan of the
// lanes' popcounts gives each lane the index of its first value in the warp's copy of the strip's
// values. (Until session 24 every warp loaded all 64 of the group's bitmaps and scanned them to
// count the values of the strips before its own: 4x the bitmap traffic and a longer scan.)
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda_check.hpp"
#include "kernels/decode_common.cuh"
#include "kernels/per_device_cache.hpp"
#include "kernels/tca_bme/one_token.hpp"  // Config (the strip buffer)

namespace sparrow::kernels::tca_bme_strip {

using namespace decode;

// A 16-bit element from shared memory (byte address), zero-extended into 32 bits (a 16-bit
// destination made ptxas add a merge per load). Volatile with a memory clobber: its address does
// not depend on the buffer's fill, so nothing else keeps it after the __syncwarp that publishes
// the buffer.
__device__ __forceinline__ uint32_t lds_u16(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.u16 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
  return v;
}
// That element (T = __half or __nv_bfloat16) as fp32.
template <class T>
__device__ __forceinline__ float u16_float(uint32_t v) {
  const uint16_t h = uint16_t(v);
  return to_float(*reinterpret_cast<const T*>(&h));
}

// The strip walks' load step: the values of the set bits among `word`'s bits [bit0, bit0 + N), in
// order from byte address `a` of the strip buffer (advanced past them), into v[i] for bit
// bit0 + i (left unset where the bit is clear). All N loads go out before the caller multiplies
// any of them: one load in flight per warp left the walk waiting on shared memory for more than
// half of its cycles (ncu, session 26).
template <int N>
__device__ __forceinline__ void load_set_bits(uint32_t word, int bit0, uint32_t& a,
                                              uint32_t (&v)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    if ((word >> (bit0 + i)) & 1u) {
      v[i] = lds_u16(a);
      a += 2;
    }
  }
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

// From this lane's half-bitmap `word` and the strip's first value index `vstart`: one warp scan.
__device__ __forceinline__ StripGroup locate(uint32_t word, uint32_t vstart, int lane) {
  const uint32_t pc = __popc(word);
  const uint32_t incl = warp_inclusive_scan(pc, lane);
  const uint32_t count = __shfl_sync(0xffffffffu, incl, 31);  // the strip's values
  StripGroup g;
  g.aligned = vstart & ~7u;
  g.chunks = int((vstart + count - g.aligned + 7) / 8);
  g.word = word;
  g.p = int(vstart - g.aligned) + int(incl - pc);
  return g;
}

// This lane's place in its block's strip tm (0..3) of a group row: it owns the 32-bit half hh
// (rows 4hh..4hh+3) of the strip's bitmap q = tk * 4 + b, i.e. 4 rows x columns col_in_group ..
// col_in_group + 7 of each group. That half is 32-bit word `lane` of the strip's 16 bitmaps
// (q = lane >> 1, hh = lane & 1), so lane order is the values' order.
struct StripLane {
  int lane, tm, hh;
  int col_in_group;
};
__device__ __forceinline__ StripLane strip_lane(int lane, int tm) {
  const int q = lane >> 1, tk = q >> 2, b = q & 3;
  return {lane, tm, lane & 1, tk * 16 + (b >> 1) * 8};
}

// A strip holds at most 16 x 64 values: <= 129 chunks, 5 per lane.
constexpr int kChunksPerLane = (tca_bme_one_token::Config::kStripChunks + 31) / 32;

// A warp's software pipeline over its groups gk = warp, warp + warps, ... of one group row: while
// group gk is multiplied out of shared memory, the values of the warp's next group are in flight
// into registers (`vals`) and the half-bitmap, offset and strip start of the one after into
// `word_next`, `off_next`, `start_next`, so a group costs its arithmetic, not a DRAM round trip
// (the loads' addresses depend on the previous loads: locator -> scan -> values).
struct StripPipeline {
  const uint32_t* word_ptr;  // this lane's half-bitmap of group `next`
  const uint32_t* off_ptr;   // group `next`'s first value index
  const uint16_t* start_ptr;  // its strip's start (strip_starts)
  const uint16_t* values;
  int64_t word_step;  // half-bitmaps from one of the warp's groups to its next
  int warps;
  uint4 vals[kChunksPerLane];
  // Group `next + 1`'s locator, loaded a group ahead and not summed until it is located: an add
  // here would wait for the loads in the middle of the current group (measured: 1.03-1.05x the
  // time at 50 % on 4096 x 4096 and 22016 x 4096).
  uint32_t word_next = 0, off_next = 0, start_next = 0;
  StripGroup next;  // the group whose values are in `vals`

  __device__ __forceinline__ void load_values(const StripLane& l) {
    const uint16_t* src_vals = values + next.aligned + l.lane * 8;  // chunk lane + 32 i at +256 i
#pragma unroll
    for (int i = 0; i < kChunksPerLane; ++i) {
      if (l.lane + 32 * i < next.chunks) vals[i] = load_stream16(src_vals + 256 * i);
    }
  }
  // Group `next + k` (k warps' groups on)'s half-bitmap and strip start.
  __device__ __forceinline__ void load_locator(int k) {
    word_next = load_stream4(word_ptr + k * word_step);
    off_next = off_ptr[k * warps];
    start_next = start_ptr[int64_t(k) * warps * sparrow::tca_bme::kStripsPerGroup];
  }
  // The warp's first group: its half-bitmaps, scan and values, and the second group's locator.
  // Reads the weight only, so a dependent launch issues it before waiting for the kernel that
  // writes X.
  __device__ __forceinline__ void start(const uint64_t* bitmaps, const uint32_t* group_offsets,
                                        const uint16_t* strip_starts,
                                        const uint16_t* weight_values, int64_t gm, int groups_k,
                                        int warp, int warp_count, const StripLane& l) {
    const int64_t g = gm * groups_k + warp;
    word_ptr = reinterpret_cast<const uint32_t*>(bitmaps + g * 64 + l.tm * 16) + l.lane;
    off_ptr = group_offsets + g;
    start_ptr = strip_starts + g * sparrow::tca_bme::kStripsPerGroup + l.tm;
    values = weight_values;
    word_step = int64_t(warp_count) * 128;
    warps = warp_count;
    if (warp < groups_k) {
      load_locator(0);
      next = locate(word_next, off_next + start_next, l.lane);
      load_values(l);
      if (warp + warps < groups_k) load_locator(1);
    }
  }
  // This lane's chunks of group `cur` (the values in `vals`) into the warp's strip buffer.
  __device__ __forceinline__ void store(uint4* strip_vals, const StripGroup& cur,
                                        const StripLane& l) const {
#pragma unroll
    for (int i = 0; i < kChunksPerLane; ++i) {
      const int c = l.lane + 32 * i;
      if (c < cur.chunks) strip_vals[c] = vals[i];
    }
  }
  // After group gk's values are stored: the next group's scan and values, the locator of the one
  // after (gk + warps < groups_k).
  __device__ __forceinline__ void advance(int gk, int groups_k, const StripLane& l) {
    next = locate(word_next, off_next + start_next, l.lane);
    load_values(l);
    word_ptr += word_step;
    off_ptr += warps;
    start_ptr += int64_t(warps) * sparrow::tca_bme::kStripsPerGroup;
    if (gk + 2 * warps < groups_k) load_locator(1);
  }
};

}  // namespace sparrow::kernels::tca_bme_strip
