// The CUDA-core strip kernels of tca_bme.decode (one_token.cu for N = 1, few_tokens.cu for
// N = 2..4) share how a warp finds its 16-row strip of one 64x64 group: the group's 64 bitmaps,
// one warp scan of their popcounts, and each lane's 32-bit half-bitmap (4 rows x 8 columns) with
// the index of its first value in the warp's copy of the strip's values.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <tuple>
#include <vector>

#include "core/cuda_check.hpp"
#include "kernels/decode_common.cuh"
#include "kernels/tca_bme/one_token.hpp"  // Config (the strip buffer)

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

// This lane's place in its block's strip tm (0..3) of a group row: it owns the 32-bit half hh
// (rows 4hh..4hh+3) of the strip's bitmap q = tk * 4 + b, i.e. 4 rows x columns col_in_group ..
// col_in_group + 7 of each group.
struct StripLane {
  int lane, tm, hh;
  int src;      // lane whose 16-byte bitmap load holds bitmap q
  bool second;  // bitmap q is the second of that lane's two
  int col_in_group;
};
__device__ __forceinline__ StripLane strip_lane(int lane, int tm) {
  const int q = lane >> 1, tk = q >> 2, b = q & 3;
  return {lane, tm, lane & 1, tm * 8 + (q >> 1), (q & 1) != 0, tk * 16 + (b >> 1) * 8};
}

// A strip holds at most 16 x 64 values: <= 129 chunks, 5 per lane.
constexpr int kChunksPerLane = (tca_bme_one_token::Config::kStripChunks + 31) / 32;

// A warp's software pipeline over its groups gk = warp, warp + warps, ... of one group row: while
// group gk is multiplied out of shared memory, the values of the warp's next group are in flight
// into registers (`vals`) and the bitmaps of the one after into `bm_next`, so a group costs its
// arithmetic, not a DRAM round trip (the loads' addresses depend on the previous loads: bitmaps
// -> scan -> values).
struct StripPipeline {
  const uint64_t* bm_ptr;   // this lane's two bitmaps of group `next`
  const uint32_t* off_ptr;  // group `next`'s first value index
  const uint16_t* values;
  int64_t bm_step;
  int warps;
  uint4 vals[kChunksPerLane];
  uint4 bm_next = make_uint4(0, 0, 0, 0);
  uint32_t gbase_next = 0;
  StripGroup next;  // the group whose values are in `vals`

  __device__ __forceinline__ void load_values(const StripLane& l) {
    const uint16_t* src_vals = values + next.aligned + l.lane * 8;  // chunk lane + 32 i at +256 i
#pragma unroll
    for (int i = 0; i < kChunksPerLane; ++i) {
      if (l.lane + 32 * i < next.chunks) vals[i] = load_stream16(src_vals + 256 * i);
    }
  }
  // The warp's first group: its bitmaps, scan and values, and the second group's bitmaps. Reads
  // the weight only, so a dependent launch issues it before waiting for the kernel that writes X.
  __device__ __forceinline__ void start(const uint64_t* bitmaps, const uint32_t* group_offsets,
                                        const uint16_t* weight_values, int64_t gm, int groups_k,
                                        int warp, int warp_count, const StripLane& l) {
    bm_ptr = bitmaps + (gm * groups_k + warp) * 64 + l.lane * 2;
    off_ptr = group_offsets + gm * groups_k + warp;
    values = weight_values;
    bm_step = int64_t(warp_count) * 64;
    warps = warp_count;
    if (warp < groups_k) {
      next = locate(load_stream16(bm_ptr), *off_ptr, l.lane, l.tm, l.src, l.second, l.hh);
      load_values(l);
      if (warp + warps < groups_k) {
        bm_next = load_stream16(bm_ptr + bm_step);
        gbase_next = off_ptr[warps];
      }
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
  // After group gk's values are stored: the next group's scan and values, the bitmaps of the one
  // after (gk + warps < groups_k).
  __device__ __forceinline__ void advance(int gk, int groups_k, const StripLane& l) {
    next = locate(bm_next, gbase_next, l.lane, l.tm, l.src, l.second, l.hh);
    load_values(l);
    bm_ptr += bm_step;
    off_ptr += warps;
    if (gk + 2 * warps < groups_k) {
      bm_next = load_stream16(bm_ptr + bm_step);
      gbase_next = off_ptr[warps];
    }
  }
};

// A strip kernel's residency for every block size 1..kMaxWarps (the occupancy calculator's
// blocks per SM with `smem_per_warp` bytes of dynamic shared memory per warp), once per device and
// kernel: a host call per launch would cost microseconds. Raises the kernel's dynamic shared
// memory limit to what kMaxWarps warps need on the way (when it uses any).
template <class Kernel>
Result<tca_bme_one_token::Residency> strip_residency(Kernel kernel, size_t smem_per_warp) {
  using tca_bme_one_token::Config;
  using tca_bme_one_token::Residency;
  static std::mutex mu;
  static std::vector<std::tuple<int, const void*, Residency>> known;  // (device, kernel, table)
  int dev = 0;
  SPARROW_CUDA_RETURN_IF_ERROR(cudaGetDevice(&dev));
  const void* key = reinterpret_cast<const void*>(kernel);
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& [d, k, r] : known) {
    if (d == dev && k == key) return r;
  }
  if (smem_per_warp > 0) {
    SPARROW_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(kernel,
                                                      cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                      int(smem_per_warp * Config::kMaxWarps)));
  }
  Residency r{};
  for (int w = 1; w <= Config::kMaxWarps; ++w) {
    SPARROW_CUDA_RETURN_IF_ERROR(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &r.blocks_per_sm[w], kernel, w * 32, smem_per_warp * size_t(w)));
  }
  known.emplace_back(dev, key, r);
  return r;
}

}  // namespace sparrow::kernels::tca_bme_strip
