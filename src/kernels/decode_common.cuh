// Device helpers shared by the decode kernels (dense.gemv, csr.vector, macko.warp_row,
// tca_bme.decode): 16-byte streaming loads, warp scans/reductions and the output epilogue (bias,
// accumulate, round once to the dtype); element conversion and the m16n8k16 tensor-core step
// come from element.cuh.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/element.cuh"

namespace sparrow::kernels::decode {

// Sum of the squares of eight packed 16-bit elements, in fp32 (MatmulOptions::input_rms).
template <class T> __device__ __forceinline__ float sum_sq8(uint4 v) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 p = unpack2<T>(w[i]);
    s = fmaf(p.x, p.x, s);
    s = fmaf(p.y, p.y, s);
  }
  return s;
}

// Sum of x^2 over elements 8c .. 8c + 7 of one token's X (K elements at x, 16-bit) for
// c = first, first + step, ...: the share of one thread when `step` threads cover the token
// (MatmulOptions::input_rms, in kernels that do not read X in 8-element chunks anyway). 16-byte
// loads where x is 16-byte aligned; the last partial chunk element by element.
template <class T>
__device__ __forceinline__ float sum_sq_strided(const uint16_t* x, int64_t k, int64_t first,
                                                int64_t step) {
  const bool vec = reinterpret_cast<uintptr_t>(x) % 16 == 0;
  float s = 0.f;
  for (int64_t c = first; c * 8 < k; c += step) {
    if (vec && c * 8 + 8 <= k) {
      s += sum_sq8<T>(__ldg(reinterpret_cast<const uint4*>(x + c * 8)));
    } else {
      for (int64_t i = c * 8; i < k && i < c * 8 + 8; ++i) {
        const float v = to_float(*reinterpret_cast<const T*>(x + i));
        s = fmaf(v, v, s);
      }
    }
  }
  return s;
}

// One token's X (K 16-bit elements) read once by a block's threads: copied into shared memory `xs`
// (COPY, 16-byte pieces where x is 16-byte aligned) and / or its squares summed (SUM_SQ). Returns
// this thread's share of the sum (0 without SUM_SQ); the caller adds the block's shares.
template <class T, bool COPY, bool SUM_SQ>
__device__ __forceinline__ float copy_x_sum_sq(T* xs, const T* __restrict__ x, uint32_t k) {
  float ss = 0.f;
  const bool vec = reinterpret_cast<uintptr_t>(x) % 16 == 0;
  const uint32_t vecs = vec ? k / 8 : 0;
  for (uint32_t i = threadIdx.x; i < vecs; i += blockDim.x) {
    const uint4 v8 = __ldg(reinterpret_cast<const uint4*>(x) + i);
    if constexpr (COPY) reinterpret_cast<uint4*>(xs)[i] = v8;
    if constexpr (SUM_SQ) ss += sum_sq8<T>(v8);
  }
  for (uint32_t i = vecs * 8 + threadIdx.x; i < k; i += blockDim.x) {
    const T e = x[i];
    if constexpr (COPY) xs[i] = e;
    if constexpr (SUM_SQ) ss = fmaf(to_float(e), to_float(e), ss);
  }
  return ss;
}

// A 16-bit element of shared memory (byte address `addr`) as T.
template <class T>
__device__ __forceinline__ T lds_element(uint32_t addr) {
  uint16_t v;
  asm volatile("ld.shared.u16 %0, [%1];" : "=h"(v) : "r"(addr));
  return *reinterpret_cast<const T*>(&v);
}

// The input_rms scale of one token: 1 / sqrt(mean(x^2) + eps) from its sum of squares over K.
__device__ __forceinline__ float rms_scale(float sum_sq, int64_t k, float eps) {
  return rsqrtf(sum_sq / float(k) + eps);
}

// ---- bytes of a word (the macko row steps' byte-parallel columns) ---------------------------
// 0xFF in bytes a..b-1 of a word, 0 elsewhere (0 <= a, b <= 4; none when b <= a).
__device__ __forceinline__ uint32_t byte_range(uint32_t a, uint32_t b) {
  const uint64_t ones = 0xFFFFFFFFull;
  return uint32_t((ones << (8 * a)) & (ones >> (32 - 8 * b)));
}

// Byte j of x (j a constant after unrolling: one prmt).
__device__ __forceinline__ uint32_t byte_of(uint32_t x, int j) {
  return __byte_perm(x, 0u, 0x4440u + uint32_t(j));
}

// ---- macko's byte-parallel row step (macko.warp_row, macko.swiglu_mlp) -------------------------
// A lane holds 8 entries of a macko row: values v (word q: entries 2q low, 2q + 1 high) and their
// deltas d (entry i in nibble i). Entry i advances the column by delta_i + 1 (its "step").

// The steps of the lane's entries as bytes: entry 2j's in byte j of `ev`, entry 2j + 1's in byte j
// of `od`.
__device__ __forceinline__ void entry_steps(uint32_t d, uint32_t& ev, uint32_t& od) {
  ev = (d & 0x0F0F0F0Fu) + 0x01010101u;
  od = ((d >> 4) & 0x0F0F0F0Fu) + 0x01010101u;
}

// Which of the lane's 8 entries (starting at entry `base`) belong to the row [s, e): entries
// lo..hi-1 (none when hi <= lo: past the row's end), and as byte masks of ev / od: byte j of
// ev_keep for entry 2j with lo <= 2j < hi, of od_keep for entry 2j + 1 likewise. For the lanes
// that straddle the row's start or end.
struct RowKeep {
  uint32_t lo, hi, ev_keep, od_keep;
};
__device__ __forceinline__ RowKeep row_keep(uint32_t base, uint32_t s, uint32_t e) {
  const uint32_t lo = base < s ? min(s - base, 8u) : 0u;
  const uint32_t hi = e > base ? min(e - base, 8u) : 0u;
  return {lo, hi, byte_range((lo + 1) / 2, (hi + 1) / 2), byte_range(lo / 2, hi / 2)};
}

// Zeroes the values of the entries whose byte in ev_keep (even entries) or od_keep (odd entries)
// is 0: entries of neighbouring rows in a row's first or last lane.
__device__ __forceinline__ void keep_values(uint4& v, uint32_t ev_keep, uint32_t od_keep) {
  v.x &= __byte_perm(ev_keep, od_keep, 0x4400);
  v.y &= __byte_perm(ev_keep, od_keep, 0x5511);
  v.z &= __byte_perm(ev_keep, od_keep, 0x6622);
  v.w &= __byte_perm(ev_keep, od_keep, 0x7733);
}

// Where the lane's entries sit, for a row walked by LANES lanes (sl: the lane within them): byte j
// of `ends` holds the steps of entries 0..2j+1 and byte j of `starts` those of entries 0..2j (at
// most 8 x 16 per byte: no carries, no borrows), so entry i's column is the lane's start column
// plus byte i / 2 of (i odd ? ends : starts): one prmt. `before`: the steps of this step's lower
// lanes (a scan); `step`: the step's total over its LANES lanes. The caller's running count of the
// row's steps before this step, plus `before`, minus 1 is the column before the lane's first entry.
struct LaneColumns {
  uint32_t ends, starts, before, step;
};
template <int LANES>
__device__ __forceinline__ LaneColumns lane_columns(uint32_t ev, uint32_t od, int sl) {
  const uint32_t ends = (ev + od) * 0x01010101u;
  const uint32_t starts = ends - od;
  const uint32_t total = ends >> 24;
  uint32_t incl = total;
#pragma unroll
  for (int o = 1; o < LANES; o <<= 1) {
    const uint32_t u = __shfl_up_sync(0xffffffffu, incl, o, LANES);
    if (sl >= o) incl += u;
  }
  return {ends, starts, incl - total, __shfl_sync(0xffffffffu, incl, LANES - 1, LANES)};
}

// The raw 16 bits of a 16-bit element, and back.
template <class T> __device__ __forceinline__ uint16_t bits_of(T v) {
  return *reinterpret_cast<uint16_t*>(&v);
}

// X[row][k], X[row][k + 1] (k even) as one 32-bit register of raw 16-bit elements, zero past K:
// one 4-byte load when X allows it (x_al4: the row 4-byte aligned, the pair inside K).
__device__ __forceinline__ uint32_t load_x2(const uint16_t* xrow, int64_t k, int64_t kmax,
                                            bool x_al4) {
  if (x_al4 && k + 2 <= kmax) return __ldg(reinterpret_cast<const uint32_t*>(xrow + k));
  const uint32_t lo = k < kmax ? xrow[k] : 0u;
  const uint32_t hi = k + 1 < kmax ? xrow[k + 1] : 0u;
  return lo | (hi << 16);
}

// ---- loads -------------------------------------------------------------------------------------
// Weights are read exactly once per call: stream them past L1 (no_allocate) so L1 keeps X, which
// every warp re-reads. LINE adds an L2 prefetch size of 128 B, so a miss brings the whole line
// from DRAM: for loads that read half a line per instruction and the other half one instruction
// later (dense.gemv: 4 lanes x 16 B of each row), where each half would be its own DRAM request.
template <bool LINE = false>
__device__ __forceinline__ uint4 load_stream16(const void* p) {
  uint4 r;
  if constexpr (LINE) {
    asm volatile("ld.global.nc.L1::no_allocate.L2::128B.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
  } else {
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
  }
  return r;
}
__device__ __forceinline__ uint32_t load_stream4(const void* p) {
  uint32_t r;
  asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(r) : "l"(p));
  return r;
}

// ---- warp collectives --------------------------------------------------------------------------
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ uint32_t warp_inclusive_scan(uint32_t v, int lane) {
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const uint32_t u = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += u;
  }
  return v;
}

// ---- output ------------------------------------------------------------------------------------
// y = acc (+ bias[m]) (+ y if accumulate), rounded once to T. `y` points at Y[n][m].
template <class T>
__device__ __forceinline__ void store_output(T* y, float acc, const T* bias, int64_t m,
                                             bool accumulate) {
  if (bias) acc += to_float(bias[m]);
  if (accumulate) acc += to_float(*y);
  *y = from_float<T>(acc);
}

}  // namespace sparrow::kernels::decode
