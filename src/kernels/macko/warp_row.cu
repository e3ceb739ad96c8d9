// macko.warp_row. Each warp owns one row at a time (rows strided over a persistent grid). Per step
// lane l loads the 8 entries starting at an 8-aligned index: 16 bytes of values and the matching
// 4 bytes of deltas. Rows are not aligned in the entry array, so entries before the row's start
// or past its end (the neighbouring rows') are masked: they add nothing to the column count and
// are not multiplied. Columns: each entry advances the column by delta + 1; a lane sums its own 8,
// a warp inclusive scan gives the lane's start, and the last lane's total carries to the next
// step. Each lane loads kStepsInFlight steps ahead; interior steps skip the range masks. X is
// staged transposed in shared memory (X^T[k][token]) so one column's tokens come in one
// 2/8/16/32-byte shared load; the token count per launch is what fits (token_passes).
#include "kernels/macko/warp_row.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <variant>

#include "core/cuda_check.hpp"
#include "kernels/decode_common.cuh"
#include "kernels/dependent_launch.cuh"
#include "kernels/device_info.hpp"
#include "kernels/macko/entry_split.hpp"
#include "kernels/token_bucket.hpp"

namespace sparrow::kernels::macko_warp_row {

using namespace decode;

namespace {

// The first 8-aligned entry (a lane chunk's start) at or before entry i.
__device__ __forceinline__ uint32_t chunk_floor(uint32_t i) {
  return i & ~uint32_t(Config::kChunk - 1);
}

// X^T slot of column c. A lane's entries sit ~1/density columns after the previous lane's, so
// with a plain layout the 32 lanes' shared loads fall into the same few banks (at 50 % density and
// 8 tokens, 16 columns x 16 B = 256 B apart: all in one 16-byte bank group). XOR-ing the bits that
// select the 128-byte row into the bits that select the bank group spreads them; the map only
// permutes columns inside aligned groups of 64 / NB, so X^T is sized to K rounded up to 64.
// One token: no swizzle. Its 2-byte loads conflict less (8 columns share a 16-byte bank group),
// and the 3 extra integer instructions per entry cost more than they saved: measured 23 % slower
// at N = 1 (the one-token loop is instruction-bound, see bench/NOTES-decode.md).
// STAGED16 (16 tokens with lane pairs): c ^ bits 3-4 of c instead. The staging threads write
// columns 8 apart at each step (stage_x_transposed), so with bits 2-3 only bit 3 varies between
// them and their 32-byte stores fall on 2 of the 4 positions a row can take in 128 bytes (ncu,
// session 37: 16-way conflicts, 10 % of the kernel's shared-memory wavefronts); bits 3-4 spread
// them over all 4. Reads of random columns do not care which bits. A flag rather than the rule
// for every 16-token X^T: the lane-per-entry kernel (SPARROW_MACKO_PAIR_TOKENS=0, the A/B
// baseline) keeps the layout it was measured with; folding the two layouts into one rule, or the
// step's column scan into a shared helper, changed ptxas's register allocation of the measured
// pair kernel (its spills 268 -> 336 bytes), which no run has timed.
template <int NB, bool STAGED16 = false>
__device__ __forceinline__ uint32_t x_slot(uint32_t c) {
  if constexpr (NB == 1) return c;
  if constexpr (NB == 16 && STAGED16) return c ^ ((c >> 3) & 3u);
  constexpr int kBits = NB == 4 ? 4 : NB == 8 ? 3 : 2;  // log2(64 / NB)
  return c ^ ((c >> kBits) & ((1u << kBits) - 1));
}

// The NB token values of column `col` as floats.
template <class T, int NB, bool XS>
__device__ __forceinline__ void x_column(const T* xs, const T* __restrict__ x, int64_t ldx, int n,
                                         uint32_t col, float (&xf)[NB]) {
  if constexpr (XS) {
    const T* p = xs + x_slot<NB>(col) * uint32_t(NB);
    if constexpr (NB == 1) {
      xf[0] = to_float(p[0]);
    } else {
      // NB/2 words, loaded as the widest vectors NB allows (8 or 16 bytes).
      uint32_t wds[NB / 2];
      if constexpr (NB == 4) {
        const uint2 v = *reinterpret_cast<const uint2*>(p);
        wds[0] = v.x, wds[1] = v.y;
      } else {
#pragma unroll
        for (int q = 0; q < NB / 8; ++q) {
          const uint4 v = reinterpret_cast<const uint4*>(p)[q];
          wds[4 * q] = v.x, wds[4 * q + 1] = v.y, wds[4 * q + 2] = v.z, wds[4 * q + 3] = v.w;
        }
      }
#pragma unroll
      for (int i = 0; i < NB / 2; ++i) {
        const float2 f = unpack2<T>(wds[i]);
        xf[2 * i] = f.x, xf[2 * i + 1] = f.y;
      }
    }
  } else {
#pragma unroll
    for (int j = 0; j < NB; ++j) xf[j] = j < n ? to_float(__ldg(x + int64_t(j) * ldx + col)) : 0.f;
  }
}

// Column c's NB tokens as one 2/8/16/32-byte store into X^T (no bank conflicts).
template <int NB>
__device__ __forceinline__ void store_column(void* xs, int64_t c, const uint16_t (&e)[NB]) {
  if constexpr (NB == 1) {
    reinterpret_cast<uint16_t*>(xs)[c] = e[0];
  } else {
    uint32_t w[NB / 2];
#pragma unroll
    for (int i = 0; i < NB / 2; ++i) w[i] = e[2 * i] | (uint32_t(e[2 * i + 1]) << 16);
    if constexpr (NB == 4) {
      reinterpret_cast<uint2*>(xs)[c] = make_uint2(w[0], w[1]);
    } else {
#pragma unroll
      for (int q = 0; q < NB / 8; ++q) {
        reinterpret_cast<uint4*>(xs)[c * (NB / 8) + q] =
            make_uint4(w[4 * q], w[4 * q + 1], w[4 * q + 2], w[4 * q + 3]);
      }
    }
  }
}

// X (n x k, tokens >= n as zeros) -> shared X^T (k, NB). Every block does this before its rows,
// all at the same time, so it must cost one memory round trip, not one per column batch: with
// 16-byte X rows each thread loads 8 columns of all NB tokens at once (K = 4096 is one pass of
// 512 threads), then writes them column by column.
template <class T, int NB, bool STAGED16 = false>
__device__ __forceinline__ void stage_x_transposed(T* xs, const T* __restrict__ x, int64_t ldx,
                                                   int n, int64_t k, bool x_vec) {
  if (x_vec) {
    for (int64_t c0 = int64_t(threadIdx.x) * 8; c0 < k; c0 += int64_t(blockDim.x) * 8) {
      uint4 r[NB];
#pragma unroll
      for (int j = 0; j < NB; ++j) {
        r[j] = make_uint4(0, 0, 0, 0);
        if (j < n) {
          const T* row = x + int64_t(j) * ldx + c0;
          if (c0 + 8 <= k) {
            r[j] = __ldg(reinterpret_cast<const uint4*>(row));
          } else {
            uint16_t e8[8];
#pragma unroll
            for (int q = 0; q < 8; ++q) e8[q] = c0 + q < k ? bits_of(row[q]) : uint16_t(0);
            r[j] = make_uint4(e8[0] | (uint32_t(e8[1]) << 16), e8[2] | (uint32_t(e8[3]) << 16),
                              e8[4] | (uint32_t(e8[5]) << 16), e8[6] | (uint32_t(e8[7]) << 16));
          }
        }
      }
#pragma unroll
      for (int q = 0; q < 8; ++q) {
        if (c0 + q >= k) break;
        uint16_t e[NB];
#pragma unroll
        for (int j = 0; j < NB; ++j) {
          const uint32_t word = q < 2 ? r[j].x : q < 4 ? r[j].y : q < 6 ? r[j].z : r[j].w;
          e[j] = uint16_t(q & 1 ? word >> 16 : word & 0xFFFFu);
        }
        store_column<NB>(xs, x_slot<NB, STAGED16>(uint32_t(c0 + q)), e);
      }
    }
  } else {
    for (int64_t c = threadIdx.x; c < k; c += blockDim.x) {
      uint16_t e[NB];
#pragma unroll
      for (int j = 0; j < NB; ++j) e[j] = j < n ? bits_of(x[int64_t(j) * ldx + c]) : uint16_t(0);
      store_column<NB>(xs, x_slot<NB, STAGED16>(uint32_t(c)), e);
    }
  }
}

// One step: this lane's 8 entries starting at `base` (values `v`, deltas `d`). MASKED: the step
// may hold entries of neighbouring rows (the row's first and last steps); interior steps skip the
// per-entry range test. 32-bit index arithmetic throughout (entries and columns fit: row_ptr is
// 32-bit), which halves the integer work of the 64-bit version.
template <class T, int NB, bool XS, bool MASKED>
__device__ __forceinline__ void decode_step(const uint4 v, const uint32_t d, uint32_t base,
                                            uint32_t s, uint32_t e, uint32_t k, int lane,
                                            uint32_t& carry, const T* xs, const T* x, int64_t ldx,
                                            int n, float (&acc)[NB]) {
  uint32_t pre[8];  // inclusive sums of (delta + 1) over this lane's entries
  uint32_t run = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    uint32_t inc = ((d >> (4 * i)) & 0xFu) + 1u;
    if (MASKED) inc = (base + i >= s && base + i < e) ? inc : 0u;
    run += inc;
    pre[i] = run;
  }
  const uint32_t incl = warp_inclusive_scan(run, lane);
  const uint32_t col0 = carry + (incl - run) - 1u;  // wraps to 0xFFFFFFFF + pre: still exact
  carry += __shfl_sync(0xffffffffu, incl, 31);
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint32_t col = col0 + pre[i];
    bool use = col < k;  // always true for a valid weight; guards the shared-memory read
    if (MASKED) use = use && base + i >= s && base + i < e;
    if (use) {
      const float2 pair = unpack2<T>(words[i / 2]);
      const float wv = (i & 1) ? pair.y : pair.x;
      float xf[NB];
      x_column<T, NB, XS>(xs, x, ldx, n, col, xf);
#pragma unroll
      for (int j = 0; j < NB; ++j) acc[j] += wv * xf[j];
    }
  }
}

// 16 tokens, lane pairs split the tokens (PAIR): lanes 2g and 2g+1 swap their steps' entries, and
// each runs all 16 entries for its 8 tokens (8 * sub .. 8 * sub + 7) with one 16-byte X^T load per
// entry. With a lane per entry, each of a step's 32 lanes loads both 16-byte halves of a random
// column's 32-byte X^T row, 32 random rows per load instruction; with pairs, a load instruction
// reads 16 whole rows (two lanes, 32 contiguous bytes each), and a row's end sums 8 tokens over 16
// lanes (32 shuffles) instead of 16 over 32 (80). The swap is 6 shuffles per lane per step; the
// partner's columns are recomputed from its deltas and first column. What pays is the registers:
// 8 accumulators per lane instead of 16 let a block hold twice the warps (PersistentShape; the
// pairs alone, in 16-warp blocks, measured slower).
template <class T, bool MASKED>
__device__ __forceinline__ void pair_entries(const uint4 v, const uint32_t d, uint32_t base,
                                             uint32_t s, uint32_t e, uint32_t k, uint32_t col0,
                                             int sub, const T* xs, float (&acc)[8]) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
  uint32_t col = col0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    bool use = true;
    if (MASKED) use = base + i >= s && base + i < e;
    col += use ? ((d >> (4 * i)) & 0xFu) + 1u : 0u;
    if (use && col < k) {  // col < k: always true for a valid weight; guards the shared read
      const float2 pair = unpack2<T>(words[i / 2]);
      const float wv = (i & 1) ? pair.y : pair.x;
      // (8,) this lane's tokens of column col: half of the column's 32-byte X^T row.
      const uint4 xv = reinterpret_cast<const uint4*>(xs + x_slot<16, true>(col) * 16u)[sub];
      const uint32_t xw[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float2 f = unpack2<T>(xw[q]);
        acc[2 * q] += wv * f.x;
        acc[2 * q + 1] += wv * f.y;
      }
    }
  }
}

template <class T, bool MASKED>
__device__ __forceinline__ void decode_step_pair(const uint4 v, const uint32_t d, uint32_t base,
                                                 uint32_t s, uint32_t e, uint32_t k, int lane,
                                                 uint32_t& carry, const T* xs, float (&acc)[8]) {
  uint32_t run = 0;  // sum of (delta + 1) over this lane's entries of the row
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    uint32_t inc = ((d >> (4 * i)) & 0xFu) + 1u;
    if (MASKED) inc = (base + i >= s && base + i < e) ? inc : 0u;
    run += inc;
  }
  const uint32_t incl = warp_inclusive_scan(run, lane);
  const uint32_t col0 = carry + (incl - run) - 1u;  // the column before this lane's first entry
  carry += __shfl_sync(0xffffffffu, incl, 31);
  const int sub = lane & 1;
  const uint4 pv = make_uint4(__shfl_xor_sync(0xffffffffu, v.x, 1),
                              __shfl_xor_sync(0xffffffffu, v.y, 1),
                              __shfl_xor_sync(0xffffffffu, v.z, 1),
                              __shfl_xor_sync(0xffffffffu, v.w, 1));
  const uint32_t pd = __shfl_xor_sync(0xffffffffu, d, 1);
  const uint32_t pcol0 = __shfl_xor_sync(0xffffffffu, col0, 1);
  const uint32_t pbase = sub ? base - Config::kChunk : base + Config::kChunk;
  // Each lane its own entries first, then its partner's: a fixed order per token (no selects
  // between the two sets, which would hold a second copy of them in registers).
  pair_entries<T, MASKED>(v, d, base, s, e, k, col0, sub, xs, acc);
  pair_entries<T, MASKED>(pv, pd, pbase, s, e, k, pcol0, sub, xs, acc);
}

// Block shape of the persistent kernel. With lane pairs (16 tokens): X^T of K x 16 tokens (128 KB
// at K = 4096) leaves one block per SM, and 16 warps were too few to hide the latencies (ncu,
// session 37: 22.6 % occupancy, 0.65 eligible warps per scheduler); pairs hold 8 accumulators
// instead of 16, so more warps fit, with 2 steps in flight instead of 4. Measured on the H100
// (session 37, N = 16, two rounds in one call, time against a lane per entry in 16-warp blocks):
// pairs in 16-warp blocks 1.07-1.56x (slower); in 24-warp blocks (80 registers) 0.82-1.16x; in
// 32-warp blocks (the 64-register cap: ptxas spills ~270 bytes) 0.80-1.02x: 11008x4096 at 50 %
// 108.6 -> 87.1 µs, at 70 % 68.8 -> 56.4, at 90 % 37.8 -> 36.6; 22016x4096 at 50 % 206.9 ->
// 169.0; 4096x4096 at 50 % 42.3 -> 36.1, at 90 % 17.0 -> 17.3. (tca_bme.mma, which matmul picks
// at N = 9..16, took 19.0 / 38.9 / 66.5 µs at 50 % there.)
constexpr int kPairBlockWarps = 32;
template <int PAIR_WARPS>  // 0: a lane per entry; else lane pairs in blocks of PAIR_WARPS warps
struct PersistentShape {
  static constexpr bool kPair = PAIR_WARPS > 0;
  static constexpr int kWarps = kPair ? PAIR_WARPS : Config::kWarpsPerBlock;
  static constexpr int kStepsInFlight = kPair ? 2 : Config::kStepsInFlight;
  static constexpr int min_blocks_per_sm(int nb) {
    return kPair ? 1 : Config::min_blocks_per_sm(nb);
  }
};

template <class T, int NB, bool XS, int PAIR_WARPS>
__global__ void __launch_bounds__(PersistentShape<PAIR_WARPS>::kWarps * 32,
                                  PersistentShape<PAIR_WARPS>::min_blocks_per_sm(NB))
    macko_kernel(const uint32_t* __restrict__ row_ptr, const uint4* __restrict__ order,
                 const uint16_t* __restrict__ vals, const uint8_t* __restrict__ deltas, int64_t m,
                 int64_t k,
                 const T* __restrict__ x, int64_t ldx, int n, T* __restrict__ y, int64_t ldy,
                 const T* __restrict__ bias, bool accumulate, bool x_vec) {
  using Shape = PersistentShape<PAIR_WARPS>;
  constexpr bool PAIR = Shape::kPair;
  static_assert(!PAIR || (NB == 16 && XS), "lane pairs split 16 staged tokens");
  extern __shared__ uint4 smem[];
  T* xs = reinterpret_cast<T*>(smem);  // (K, NB) X^T, tokens >= n zero
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if constexpr (XS) {
    stage_x_transposed<T, NB, PAIR>(xs, x, ldx, n, k, x_vec);
    __syncthreads();
  }

  // The next row's extent is loaded while this row streams, so a row costs one round trip for
  // its entries, not two (row_ptr, then entries): that matters most at high sparsity, where a row
  // is one or two steps.
  // Warps take slots round-robin; a slot is a row in index order or (order != null) the
  // matrix's row_order, longest first, so every warp gets one row of each length band.
  // Warp w of block b is warp w * gridDim.x + b of the grid: the warps that take a row more than
  // the others (the lowest-numbered) are spread over every block (plan).
  const int64_t row_stride = int64_t(gridDim.x) * Shape::kWarps;
  int64_t slot = int64_t(warp) * gridDim.x + blockIdx.x;
  auto extent = [&](int64_t sl, uint32_t& r, uint32_t& s, uint32_t& e) {
    if (order) {
      const uint4 rec = __ldg(order + sl);
      r = rec.x, s = rec.y, e = rec.z;
    } else {
      r = uint32_t(sl), s = __ldg(row_ptr + sl), e = __ldg(row_ptr + sl + 1);
    }
  };
  uint32_t row_next = 0;  // rows fit 32 bits (row_ptr is 32-bit)
  uint32_t s_next = 0, e_next = 0;
  if (slot < m) extent(slot, row_next, s_next, e_next);
  for (; slot < m; slot += row_stride) {
    const uint32_t row = row_next;
    const uint32_t s = s_next, e = e_next;
    if (slot + row_stride < m) extent(slot + row_stride, row_next, s_next, e_next);
    // (NA,) this lane's partial sums: NB tokens, or 8 (tokens 8 * (lane & 1) + j) when PAIR
    constexpr int NA = PAIR ? 8 : NB;
    float acc[NA];
#pragma unroll
    for (int j = 0; j < NA; ++j) acc[j] = 0.f;
    uint32_t carry = 0;  // sum of (delta + 1) over the row's entries before this step

    // kStepsInFlight steps (256 entries each) are loaded before the first is decoded, so a row
    // of up to 1024 entries costs one memory round trip.
    constexpr int U = Shape::kStepsInFlight;
    constexpr uint32_t kStep = 32 * Config::kChunk;
    for (uint32_t wb = chunk_floor(s); wb < e; wb += U * kStep) {
      uint4 vs[U];
      uint32_t ds[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const uint32_t base = wb + u * kStep + lane * Config::kChunk;
        vs[u] = make_uint4(0, 0, 0, 0);
        ds[u] = 0;
        if (base < e) {
          vs[u] = load_stream16(vals + base);
          ds[u] = load_stream4(deltas + base / 2);
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const uint32_t step0 = wb + u * kStep;
        if (step0 >= e) break;  // warp-uniform
        const uint32_t base = step0 + lane * Config::kChunk;
        const bool interior = step0 >= s && step0 + kStep <= e;
        if constexpr (PAIR) {
          if (interior) {
            decode_step_pair<T, false>(vs[u], ds[u], base, s, e, uint32_t(k), lane, carry, xs, acc);
          } else {
            decode_step_pair<T, true>(vs[u], ds[u], base, s, e, uint32_t(k), lane, carry, xs, acc);
          }
        } else if (interior) {
          decode_step<T, NB, XS, false>(vs[u], ds[u], base, s, e, uint32_t(k), lane, carry, xs, x,
                                        ldx, n, acc);
        } else {
          decode_step<T, NB, XS, true>(vs[u], ds[u], base, s, e, uint32_t(k), lane, carry, xs, x,
                                       ldx, n, acc);
        }
      }
    }
    int token = lane;  // lane `token` (< NB) writes that token
    float mine = 0.f;
    if constexpr (PAIR) {
      // Sum over the 16 lanes of each parity; lane l then writes token 8 * (l & 1) + l / 2.
#pragma unroll
      for (int j = 0; j < NA; ++j) {
#pragma unroll
        for (int o = 16; o > 1; o >>= 1) acc[j] += __shfl_xor_sync(0xffffffffu, acc[j], o);
      }
      token = 8 * (lane & 1) + ((lane >> 1) & 7);
#pragma unroll
      for (int j = 0; j < NA; ++j) mine = (lane >> 1) == j ? acc[j] : mine;
    } else {
#pragma unroll
      for (int j = 0; j < NB; ++j) acc[j] = warp_sum(acc[j]);
#pragma unroll
      for (int j = 0; j < NB; ++j) mine = lane == j ? acc[j] : mine;
    }
    if (lane < NB && token < n) {
      store_output(y + int64_t(token) * ldy + row, mine, bias, row, accumulate);
    }
  }
}

// ---- the row kernel: one token (X through L1 or shared memory) or 2..4 (X^T in shared memory),
// a row per LANES lanes -------------------------------------------------------------------------
// The persistent kernel above stages X^T in shared memory per block and walks rows with a
// 4-step batch; at N = 1 it measured 36-60 % of the floor while csr.vector (non-persistent, a
// warp per row, X through L1) reached 82-94 % of its own. This kernel is csr.vector's structure
// with macko's decode, and fewer instructions per entry than decode_step:
//   - no range masks per entry: in the (rare) lane that straddles the row's start or end, the
//     neighbouring rows' entries get value 0 and column step 0 (a few arithmetic masks per lane,
//     not a test per entry), so they sit on a column of this row and add 0 * x, as macko's own
//     zero padding entries do; no column needs clamping.
//   - columns byte-parallel: the 8 steps (delta + 1) of a lane are spread into bytes and summed
//     by one multiply (prefix sums of entry pairs), so an entry's column is the lane's start plus
//     one byte (a prmt) and its X address one more instruction. 15 % fewer instructions per
//     interior step than a running column (SASS: 105 vs 124), measured 1-2.5 % faster on most
//     shapes (bench/NOTES-decode.md, session 16): the kernel is latency-bound, not issue-bound.
//   - the step's 8 X gathers are issued before any of them is used (one L1 round trip per step,
//     not one per entry): 9-11 % faster than gathering behind a `col < k` test per entry at
//     50-90 % on 11008x4096 (bench/NOTES-decode.md, session 4).
//   - the next step's 20 bytes per lane are loaded while this step decodes (one step ahead; a
//     ring of 4 steps in registers measured 12-30 % slower, 2 steps no better — bench/NOTES-decode.md
//     runs P2, P3; a ring of 4 steps in shared memory filled by cp.async, session 16, 1.0-1.7x
//     slower).
// LANES = 16 puts two rows in a warp: at 90 % sparsity a 4096-column row is ~2 warp steps, and
// the per-row fixed cost (row extent load, scan, reduction) is then shared by twice the rows.
// PIECES = 2 or 4 (with LANES = 32) gives each row that many warps of one block, each a contiguous
// run of the row's steps, for weights with too few rows to fill the GPU's warp slots (4096 rows
// are under half of an H100's 8448): a piece's first column is the row's delta sum before it,
// which the piece's warp adds up from the deltas alone (a fifth of those steps' bytes, read by
// the previous piece's warp at about the same time, so mostly from L2). The pieces' sums meet in
// shared memory and are added in piece order (deterministic).
// Block shape of the row kernel: one token runs 8-warp blocks (OneTokenConfig); NB = 2..8 tokens
// run 16-warp blocks, so one X^T copy (K * NB * 2 bytes, at most 64 KB) serves twice the rows;
// BLOCK_MULT doubles either where the copy is worth halving again.
// BLOCK_MULT: blocks BLOCK_MULT times the base size. One token (base OneTokenConfig::kThreads):
// 1 / BLOCK_MULT as many per SM, the same warps and register cap per SM (so the same code), but
// 1 / BLOCK_MULT as many copies of X into shared memory (or RMS passes over X) per SM
// (one_token_block_warps). 2..8 tokens (base 512 threads, one block per SM by their shared
// memory and registers): BLOCK_MULT 2 gives 1024-thread blocks, one per SM, the same 32 warps per
// SM with one copy of X^T instead of two; the register cap becomes 64, which the instances fit
// without spilling (ptxas, sm_90: 45-64) (few_tokens_block_warps).
template <int NB, int BLOCK_MULT = 1>
struct RowKernelShape {
  static constexpr int kThreads = (NB == 1 ? OneTokenConfig::kThreads : 512) * BLOCK_MULT;
  static constexpr int min_blocks_per_sm(int lanes, int pieces) {
    return NB == 1 ? OneTokenConfig::min_blocks_per_sm(lanes, pieces) / BLOCK_MULT : 1;
  }
  // Whether a segment of the instance runs several rows (rows_per_segment): whole warps of 2..8
  // tokens only. Half warps (32 registers) would spill the next row's state inside the step loop,
  // pieces meet in shared memory once per block, and the one-token instance measured no faster
  // alone and slower in the engine.
  static constexpr bool several_rows(int lanes, int pieces) {
    return NB > 1 && lanes == 32 && pieces == 1;
  }
};

// NB tokens of one X^T column (NB / 2 words) to / from shared memory: one 4- or 8-byte access.
template <int NB>
__device__ __forceinline__ void store_tokens(unsigned char* p, const uint32_t (&w)[NB / 2]) {
  static_assert(NB == 2 || NB == 4 || NB == 8, "2, 4 or 8 tokens per X^T column");
  if constexpr (NB == 8) {
    *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
  } else if constexpr (NB == 4) {
    *reinterpret_cast<uint2*>(p) = make_uint2(w[0], w[1]);
  } else {
    *reinterpret_cast<uint32_t*>(p) = w[0];
  }
}
template <int NB>
__device__ __forceinline__ void load_tokens(const unsigned char* p, uint32_t (&w)[NB / 2]) {
  if constexpr (NB == 8) {
    const uint4 r = *reinterpret_cast<const uint4*>(p);
    w[0] = r.x, w[1] = r.y, w[2] = r.z, w[3] = r.w;
  } else if constexpr (NB == 4) {
    const uint2 r = *reinterpret_cast<const uint2*>(p);
    w[0] = r.x, w[1] = r.y;
  } else {
    w[0] = *reinterpret_cast<const uint32_t*>(p);
  }
}

template <class T, int LANES, int PIECES, bool XSMEM, int NB, bool RMS, int BLOCK_MULT>
__global__ void __launch_bounds__(RowKernelShape<NB, BLOCK_MULT>::kThreads,
                                  RowKernelShape<NB, BLOCK_MULT>::min_blocks_per_sm(LANES, PIECES))
    macko_row_kernel(const uint32_t* __restrict__ row_ptr, const uint4* __restrict__ order,
                     const uint16_t* __restrict__ vals, const uint8_t* __restrict__ deltas,
                     int64_t m, int rows_per_seg, uint32_t k, const T* __restrict__ x,
                     int64_t ldx, int n, T* __restrict__ y, int64_t ldy,
                     const T* __restrict__ bias, bool accumulate, float rms_eps) {
  static_assert(PIECES == 1 || LANES == 32, "row pieces take whole warps");
  static_assert(NB == 1 || XSMEM, "several tokens read X^T from shared memory");
  let_next_launch();
  using Shape = RowKernelShape<NB, BLOCK_MULT>;
  constexpr int kWarps = Shape::kThreads / 32;
  constexpr int kRowsPerWarp = 32 / LANES;
  constexpr uint32_t kStep = LANES * Config::kChunk;  // entries per segment step
  const int lane = threadIdx.x & 31, sl = lane % LANES, warp = threadIdx.x >> 5;
  const int piece = warp % PIECES;
  // A segment (a warp, half a warp, or PIECES warps for one row) runs rows_per_seg rows one after
  // another (only where RowKernelShape::several_rows; else one). Segment g of G takes slots g,
  // 2G-1-g, 2G+g, ...: every other pass runs backwards, so with row_order (longest rows first) a
  // segment pairs a long row with a short one. The next row's extent is read when a row starts
  // and its first chunk during the row's last step, so a segment starts its next row without a
  // DRAM round trip (rows_per_segment).
  constexpr bool kMultiRow = Shape::several_rows(LANES, PIECES);
  const int rows = kMultiRow ? rows_per_seg : 1;
  // 32-bit slot arithmetic (the host runs row kernels for m < 2^31 only): the i-th slot is the
  // previous one plus 2G-1-2g (i odd) or 2g+1 (i even), which keeps two registers per row live
  // across the steps instead of the segment's index and count.
  // Segments that run several rows are numbered across the blocks first (segment j of block b is
  // j * gridDim.x + b): the host then launches every block the GPU holds at once (launch_grid),
  // and the last pass's slots past the last row fall evenly on all blocks, not on the last
  // blocks' warps. (ncu, session 36: 11008 rows at 8 tokens ran 3 rows per warp in 115 blocks, 17
  // SMs idle, the busy ones' L1 / shared-memory pipe 83 % used; X^T's loads averaged 9.9-way bank
  // conflicts, which random columns make inevitable, so the work per SM is what sets the time.)
  const uint32_t segs = gridDim.x * uint32_t(kWarps / PIECES * kRowsPerWarp);
  const uint32_t seg_in_block = uint32_t(warp) / PIECES;
  uint32_t slot = (kMultiRow ? seg_in_block * gridDim.x + blockIdx.x
                             : blockIdx.x * uint32_t(kWarps / PIECES) + seg_in_block) *
                      kRowsPerWarp +
                  uint32_t(lane / LANES);
  uint32_t slot_step = 2 * (segs - slot) - 1;
  // Row and entry extent of a slot: in index order, or (order != null) the matrix's row_order,
  // whose 16-byte record also holds the row's extent. Past the last row: m.
  auto extent = [&](uint32_t slot, uint32_t& row, uint32_t& s, uint32_t& e) {
    row = uint32_t(m), s = 0, e = 0;
    if (slot < m) {
      if (order) {
        const uint4 rec = __ldg(order + slot);
        row = rec.x, s = rec.y, e = rec.z;
      } else {
        row = slot, s = __ldg(row_ptr + slot), e = __ldg(row_ptr + slot + 1);
      }
    }
  };
  // Steps of the row starting at entry s and ending at e. Shuffles below use the whole warp, so
  // every segment runs the warp's largest step count.
  auto row_steps = [&](uint32_t s, uint32_t e) {
    const uint32_t wb0 = chunk_floor(s);
    uint32_t steps = e > wb0 ? (e - wb0 + kStep - 1) / kStep : 0u;
    if constexpr (LANES < 32) steps = max(steps, __shfl_xor_sync(0xffffffffu, steps, 16));
    return steps;
  };
  uint32_t row, s, e;
  extent(slot, row, s, e);
  uint32_t steps = row_steps(s, e);
  uint32_t st_begin = 0, st_end = steps;
  if constexpr (PIECES > 1) {
    st_begin = steps * piece / PIECES;
    st_end = steps * (piece + 1) / PIECES;
  }
  // Columns the row's entries before this piece's first step add up to (the steps' loop below
  // gives the entries before the row's start none). Read before the wait: with a dependent launch
  // these delta loads overlap the previous kernel (a build that read them after it cost the 7B
  // engine's batch-1 decode ~1 µs per launch of its 4096-row weights, which run pieces; sparrow
  // bench does not launch dependently and did not show it).
  uint32_t carry_before = 0;
  if constexpr (PIECES > 1) {
    const uint32_t wb0 = chunk_floor(s);
    // Column count before step st_begin: one per entry of the row (the steps hold s - wb0
    // entries before the start) plus their deltas. Lane l's word of step t holds the deltas of
    // entries wb0 + 256 t + 8 l ..+7, all before e (t < st_begin < steps).
    uint32_t nibbles = 0;
#pragma unroll 4
    for (uint32_t t = 0; t < st_begin; ++t) {
      const uint32_t base = wb0 + t * kStep + lane * Config::kChunk;
      uint32_t dd = __ldg(reinterpret_cast<const uint32_t*>(deltas + base / 2));
      if (base < s) {
#pragma unroll
        for (int q = 0; q < 8; ++q) dd = base + q < s ? dd & ~(0xFu << (4 * q)) : dd;
      }
      const uint32_t pairs = (dd & 0x0F0F0F0Fu) + ((dd >> 4) & 0x0F0F0F0Fu);
      nibbles += (pairs * 0x01010101u) >> 24;
    }
    const uint32_t deltas_before = __reduce_add_sync(0xffffffffu, nibbles);
    if (st_begin > 0) carry_before = st_begin * kStep - (s - wb0) + deltas_before;
  }

  // This lane's chunk of a step: 8 values and their 8 deltas, when the chunk starts before `end`.
  // Past the row's end the registers keep what they held: every entry there is masked (value 0,
  // column step 0) by the step.
  auto load = [&](uint32_t base, uint32_t end, uint4& v, uint32_t& d) {
    if (base < end) {
      v = load_stream16(vals + base);
      d = load_stream4(deltas + base / 2);
    }
  };
  uint4 v = make_uint4(0, 0, 0, 0);
  uint32_t d = 0;
  load(chunk_floor(s) + st_begin * kStep + sl * Config::kChunk, e, v, d);
  // Everything above reads the weight only: with a dependent launch it overlaps the previous
  // kernel. X and Y are touched after it has finished.
  wait_for_previous();
  // XSMEM: the block copies X into shared memory (16-byte pieces) and gathers from there: the
  // gathers of a step scatter over ~1-4 KB of X, which costs L1 several wavefronts per warp
  // instruction; shared memory serves them with fewer (one_token_shared_x says when it pays).
  extern __shared__ __align__(16) unsigned char x_smem_raw[];
  T* xs = reinterpret_cast<T*>(x_smem_raw);  // XSMEM, one token: (K) X
  // RMS (MatmulOptions::input_rms, a template flag: as a runtime flag its unused branches cost
  // the kernel 1-2.5 % without it): the block's threads together read every element of X once
  // (the copy into shared memory, or a pass of its own when X is gathered through L1) and sum
  // its squares per token; the warps' sums meet in rms_part behind the copy's barrier.
  __shared__ float rms_part[RMS ? kWarps : 1][NB];  // (warp, token)
  float ss[NB];
#pragma unroll
  for (int j = 0; j < NB; ++j) ss[j] = 0.f;
  if constexpr (NB == 1 && (XSMEM || RMS)) {
    ss[0] = copy_x_sum_sq<T, XSMEM, RMS>(xs, x, k);
  } else if constexpr (NB > 1) {
    // X^T: column c's NB tokens side by side (NB * 2 bytes, one vector load per entry), zeros
    // for tokens past n. Reads are coalesced per token row.
    for (uint32_t c = threadIdx.x; c < k; c += blockDim.x) {
      uint32_t w[NB / 2];
#pragma unroll
      for (int q = 0; q < NB / 2; ++q) {
        const uint32_t lo = 2 * q < n ? bits_of(x[int64_t(2 * q) * ldx + c]) : 0u;
        const uint32_t hi = 2 * q + 1 < n ? bits_of(x[int64_t(2 * q + 1) * ldx + c]) : 0u;
        w[q] = lo | (hi << 16);
        if constexpr (RMS) {
          const float2 f = unpack2<T>(w[q]);
          ss[2 * q] = fmaf(f.x, f.x, ss[2 * q]);
          ss[2 * q + 1] = fmaf(f.y, f.y, ss[2 * q + 1]);
        }
      }
      store_tokens<NB>(x_smem_raw + size_t(c) * NB * sizeof(T), w);
    }
  }
  if constexpr (RMS) {
#pragma unroll
    for (int j = 0; j < NB; ++j) {
      ss[j] = warp_sum(ss[j]);
      if (lane == 0) rms_part[warp][j] = ss[j];
    }
  }
  if constexpr (XSMEM || RMS) __syncthreads();
  // The scale of token j's outputs (RMS only).
  auto out_scale = [&](int j) {
    float total = 0.f;
#pragma unroll
    for (int v = 0; v < kWarps; ++v) total += rms_part[v][j];
    return rms_scale(total, k, rms_eps);
  };
  uint32_t xs_addr = static_cast<uint32_t>(__cvta_generic_to_shared(x_smem_raw));
  asm("" : "+r"(xs_addr));  // kept in a register, not worked out again in every step
  for (int nth = 0;;) {
    // The next row's extent, in flight while this row decodes (none after the last).
    uint32_t next_row = uint32_t(m), ns = 0, ne = 0;
    if (kMultiRow && nth + 1 < rows) {
      slot += slot_step;
      slot_step = 2 * segs - slot_step;
      extent(slot, next_row, ns, ne);
    }
    const uint32_t wb0 = chunk_floor(s);
    // Columns the row's entries before this piece's first step add up to (pieces: worked out
    // before the wait, above; a piece runs one row).
    uint32_t carry = carry_before;
    float acc[NB];
#pragma unroll
    for (int j = 0; j < NB; ++j) acc[j] = 0.f;
    // One step ahead: the next chunk is in flight while a step decodes; during the last step,
    // the next row's first chunk.
    const uint32_t next_base = chunk_floor(ns) + sl * Config::kChunk;
    uint32_t base = wb0 + st_begin * kStep + sl * Config::kChunk;
    for (uint32_t st = st_begin; st < st_end; ++st, base += kStep) {
      uint4 vn = v;
      uint32_t dn = d;
      if constexpr (kMultiRow) {
        const bool more = st + 1 < st_end;
        load(more ? base + kStep : next_base, more ? e : ne, vn, dn);
      } else {
        load(base + kStep, e, vn, dn);
      }
      // Column steps (delta + 1) of the lane's 8 entries as bytes (decode_common.cuh).
      uint32_t ev, od;
      entry_steps(d, ev, od);
      // The row's first or last lane, or past its end: entries of the neighbouring rows get value
      // 0 and column step 0, so they sit on a column of this row and add 0 * x. Entries before the
      // row's start would sit on column -1: the first of them takes a step of 1 (column 0) and the
      // row's first entry gives it back (its step delta + 1 becomes delta).
      if (base < s || base + Config::kChunk > e) {
        // Entries lo..hi-1 of the lane are the row's (none when hi <= lo: past the row's end).
        // (decode_common.cuh's row_keep is this arithmetic; written out here because calling it
        // changed this kernel's sm_90 SASS, and the kernel's measured speed is for this code.)
        const uint32_t lo = base < s ? min(s - base, 8u) : 0u;
        const uint32_t hi = e > base ? min(e - base, 8u) : 0u;
        // Bytes j of ev (entry 2j) with lo <= 2j < hi, of od (entry 2j + 1) with lo <= 2j + 1 < hi.
        const uint32_t ev_keep = byte_range((lo + 1) / 2, (hi + 1) / 2);
        const uint32_t od_keep = byte_range(lo / 2, hi / 2);
        // The row's first entry gives back the step its lane's entry 0 takes (below).
        const uint32_t give = lo > 0 && lo < hi ? 1u << (8 * (lo / 2)) : 0u;
        ev = (ev & ev_keep) - (lo & 1 ? 0u : give);
        od = (od & od_keep) - (lo & 1 ? give : 0u);
        // Entry 0 takes a step of 1 when it is masked in the row's first lane: before an unaligned
        // start, or in an empty row (its segment runs the other half warp's steps).
        if (base <= s && (lo > 0 || hi == 0)) ev |= 1u;
        keep_values(v, ev_keep, od_keep);
      }
      // Byte j of `ends`: the steps of entries 0..2j+1 (<= 4 x 32, no carries between bytes); of
      // `starts`: entries 0..2j (ends minus entry 2j + 1's step: no borrows). So entry i's column is
      // the lane's start column plus one byte, one prmt away. (decode_common.cuh's lane_columns is
      // this arithmetic; written out here because calling it changed this kernel's instruction
      // schedule, and the kernel's measured speed is for this one.)
      const uint32_t ends = (ev + od) * 0x01010101u;
      const uint32_t starts = ends - od;
      const uint32_t total = ends >> 24;
      uint32_t incl = total;
#pragma unroll
      for (int o = 1; o < LANES; o <<= 1) {
        const uint32_t u = __shfl_up_sync(0xffffffffu, incl, o, LANES);
        if (sl >= o) incl += u;
      }
      // Column before this lane's first entry: -1 for the row's first lane (so the X addresses
      // below start one element before X; every entry's own column is >= 0).
      const int32_t col0 = int32_t(carry + (incl - total)) - 1;
      carry += __shfl_sync(0xffffffffu, incl, LANES - 1, LANES);
      const uint32_t words[4] = {v.x, v.y, v.z, v.w};
      uint32_t off[8];  // entry i's column minus col0
#pragma unroll
      for (int i = 0; i < 8; ++i) off[i] = byte_of(i & 1 ? ends : starts, i / 2);
      if constexpr (NB == 1) {
        // Gathers from the lane's column before its first entry: one address instruction each.
        float xv[8];
        if constexpr (XSMEM) {
          uint32_t xl = xs_addr + 2u * uint32_t(col0);
          asm("" : "+r"(xl));  // opaque: each address is then one lea, not an add and a multiply
#pragma unroll
          for (int i = 0; i < 8; ++i) xv[i] = to_float(lds_element<T>(xl + 2u * off[i]));
        } else {
          const T* xl = x + col0;
          asm("" : "+l"(xl));  // opaque: each address is then one wide multiply-add
#pragma unroll
          for (int i = 0; i < 8; ++i) xv[i] = to_float(__ldg(xl + off[i]));
        }
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const float2 pair = unpack2<T>(words[i / 2]);
          acc[0] += ((i & 1) ? pair.y : pair.x) * xv[i];
        }
      } else {
        // The 8 entries' token vectors are loaded before the first is used (one shared-memory
        // round trip per step).
        const unsigned char* xl = x_smem_raw + int64_t(col0) * NB * int64_t(sizeof(T));
        uint32_t xw[8][NB / 2];
#pragma unroll
        for (int i = 0; i < 8; ++i) load_tokens<NB>(xl + off[i] * (NB * sizeof(T)), xw[i]);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const float2 pair = unpack2<T>(words[i / 2]);
          const float wv = (i & 1) ? pair.y : pair.x;
#pragma unroll
          for (int q = 0; q < NB / 2; ++q) {
            const float2 xt = unpack2<T>(xw[i][q]);
            acc[2 * q] += wv * xt.x;
            acc[2 * q + 1] += wv * xt.y;
          }
        }
      }
      v = vn;
      d = dn;
    }
    // A row whose segment ran no step (empty rows, or no row) loaded nothing for the next one.
    if constexpr (kMultiRow) {
      if (st_begin == st_end) load(next_base, ne, v, d);
    }
#pragma unroll
    for (int j = 0; j < NB; ++j) {
#pragma unroll
      for (int o = LANES / 2; o > 0; o >>= 1) acc[j] += __shfl_xor_sync(0xffffffffu, acc[j], o);
    }
    if constexpr (PIECES > 1) {
      // One row per block pass (rows == 1): the pieces' sums meet in shared memory.
      __shared__ float piece_sum[kWarps][NB];
      if (lane == 0) {
#pragma unroll
        for (int j = 0; j < NB; ++j) piece_sum[warp][j] = acc[j];
      }
      __syncthreads();
      if (piece != 0 || lane >= min(NB, n) || row >= m) return;
      // Lane j of the row's first piece writes token j.
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < NB; ++j) sum = lane == j ? acc[j] : sum;
#pragma unroll
      for (int q = 1; q < PIECES; ++q) sum += piece_sum[warp + q][lane];
      if constexpr (RMS) sum *= out_scale(lane);
      store_output(y + int64_t(lane) * ldy + row, sum, bias, row, accumulate);
    } else {
      // Lane j of the row's segment writes token j (every lane holds every sum after the xor).
      float mine = 0.f;
#pragma unroll
      for (int j = 0; j < NB; ++j) mine = sl == j ? acc[j] : mine;
      if (sl < min(NB, n) && row < m) {
        if constexpr (RMS) mine *= out_scale(sl);
        store_output(y + int64_t(sl) * ldy + row, mine, bias, row, accumulate);
      }
    }
    if (++nth == rows) return;
    row = next_row, s = ns, e = ne;
    st_end = row_steps(s, e);
  }
}

// Which one-token kernel: SPARROW_MACKO_ONE_TOKEN=persistent|warp|half_warp overrides the rule
// (experiments; read once).
OneTokenKernel one_token_override() {
  static const OneTokenKernel v = [] {
    const char* e = std::getenv("SPARROW_MACKO_ONE_TOKEN");
    if (!e) return OneTokenKernel::automatic;
    const std::string s(e);
    return s == "persistent" ? OneTokenKernel::persistent
           : s == "warp"     ? OneTokenKernel::warp
           : s == "half_warp" ? OneTokenKernel::half_warp
                              : OneTokenKernel::automatic;
  }();
  return v;
}

// SPARROW_MACKO_PIECES=1|2|4 overrides row_pieces (experiments; read once; 0 = the rule).
int pieces_override() {
  static const int v = env_knob("SPARROW_MACKO_PIECES", 0);
  return v;
}

// SPARROW_MACKO_ORDER=0|1: never / always hand rows out longest first (experiments; read once;
// unset: the rule in use_row_order).
int order_override() {
  static const int v = env_knob("SPARROW_MACKO_ORDER", -1);
  return v;
}

// SPARROW_MACKO_ROWS_PER_SEGMENT=N: every row kernel segment runs N rows (1: one row per warp as
// before session 17; experiments and A/B runs; read once; unset or 0: rows_per_segment's rule).
int rows_per_segment_override() {
  static const int v = env_knob("SPARROW_MACKO_ROWS_PER_SEGMENT", 0);
  return v;
}

// SPARROW_MACKO_SPREAD=0: several-row launches of the row kernel take only the blocks their
// segments fill, and the persistent kernel only the blocks whose warps all take the same rows, as
// before session 36 (experiments and A/B runs; read once; unset: launch_grid's and plan's rule).
int spread_override() {
  static const int v = env_knob("SPARROW_MACKO_SPREAD", -1);
  return v;
}

// SPARROW_MACKO_PAIR_TOKENS=0: the 16-token persistent kernel runs a lane per entry for all 16
// tokens in 16-warp blocks, as before session 37 (experiments and A/B runs; read once; unset: lane
// pairs in kPairBlockWarps-warp blocks).
int pair_tokens_override() {
  static const int v = env_knob("SPARROW_MACKO_PAIR_TOKENS", -1);
  return v;
}

// The matrix's row_order as records when the kernels should hand rows out in it, else null.
const uint4* row_order_or_null(const macko::Matrix& mm) {
  const int64_t m = mm.shape.rows;
  const bool ordered = mm.row_order.size() == size_t(4 * m) &&
                       use_row_order(m, mm.entries(), mm.max_row_entries, order_override());
  return ordered ? reinterpret_cast<const uint4*>(mm.row_order.data()) : nullptr;
}

// SPARROW_MACKO_FEW_TOKENS=0: N = 2..4 run the persistent kernel, as before session 6
// (experiments; read once; unset: row_kernel_tokens' rule).
int few_tokens_override() {
  static const int v = env_knob("SPARROW_MACKO_FEW_TOKENS", -1);
  return v;
}

// SPARROW_MACKO_BLOCK_WARPS=8|16 overrides one_token_block_warps (experiments; read once).
int one_token_block_warps_override() {
  static const int v = env_knob("SPARROW_MACKO_BLOCK_WARPS", 0);
  return v;
}

// SPARROW_MACKO_FEW_BLOCK_WARPS=16|32 overrides few_tokens_block_warps (experiments; read once).
int few_block_warps_override() {
  static const int v = env_knob("SPARROW_MACKO_FEW_BLOCK_WARPS", 0);
  return v;
}

// SPARROW_MACKO_ENTRY_SPLIT=0|1: never / always run one token as an entry split (experiments and
// A/B runs; read once; unset: macko_entry_split::use_entry_split's rule).
int entry_split_override() {
  static const int v = env_knob("SPARROW_MACKO_ENTRY_SPLIT", -1);
  return v;
}

// SPARROW_MACKO_SHARED_X=0|1: never / always gather X from shared memory in the one-token kernels
// (experiments; read once; unset: the rule in one_token_shared_x).
int shared_x_override() {
  static const int v = env_knob("SPARROW_MACKO_SHARED_X", -1);
  return v;
}

// One call of the row kernels: the activations, the epilogue and the launch mode.
template <class T>
struct RowCall {
  const T* x;
  int64_t ldx;
  int n;
  T* y;
  int64_t ldy;
  const T* bias;
  bool accumulate;
  bool dependent;
  bool input_rms;
  float rms_eps;
  int sm_count;
};

template <class T, int LANES, int PIECES, bool XSMEM, int NB, bool RMS, int BLOCK_MULT>
cudaError_t launch_row_kernel(const macko::Matrix& mm, const RowCall<T>& c, Stream stream) {
  const int64_t m = mm.shape.rows;
  using Shape = RowKernelShape<NB, BLOCK_MULT>;
  constexpr int kThreads = Shape::kThreads;
  const int64_t segs_per_block = (kThreads / 32) * (32 / LANES) / PIECES;
  auto kernel = macko_row_kernel<T, LANES, PIECES, XSMEM, NB, RMS, BLOCK_MULT>;
  const size_t smem = XSMEM ? size_t(mm.shape.cols) * NB * sizeof(T) : 0;
  if (smem > 48 * 1024) {
    const cudaError_t e =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e != cudaSuccess) return e;
  }
  // Blocks of this instance an SM holds at once (registers, shared memory), so the segments
  // that run at once: rows beyond them go to segments that run several rows. Asked once per
  // instance and X size (the engine's weights of one K share it).
  int rows_per_seg = 1;
  int64_t resident_blocks = 0;  // several-row instances: blocks the GPU holds at once
  if constexpr (Shape::several_rows(LANES, PIECES)) {
    static thread_local size_t asked_smem = ~size_t(0);
    static thread_local int resident = 0;
    if (asked_smem != smem) {
      const cudaError_t oe =
          cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, kThreads, smem);
      if (oe != cudaSuccess) return oe;
      asked_smem = smem;
    }
    const int64_t resident_segs = int64_t(std::max(resident, 1)) * c.sm_count * segs_per_block;
    rows_per_seg = rows_per_segment(m, resident_segs, rows_per_segment_override());
    resident_blocks = int64_t(std::max(resident, 1)) * c.sm_count;
  }
  const unsigned blocks = unsigned(
      launch_grid(m, rows_per_seg, segs_per_block, resident_blocks, spread_override()));
  return launch_kernel(c.dependent, kernel, dim3(blocks), dim3(kThreads), smem, stream,
                       mm.row_ptr.data(), row_order_or_null(mm), mm.values.data(),
                       mm.deltas.data(), m, rows_per_seg, uint32_t(mm.shape.cols), c.x, c.ldx,
                       NB == 1 ? 1 : c.n, c.y, c.ldy, c.bias, c.accumulate, c.rms_eps);
}

template <class T, int LANES, int PIECES, bool XSMEM, int NB, int BLOCK_MULT = 1>
cudaError_t launch_row_kernel(const macko::Matrix& mm, const RowCall<T>& c, Stream stream) {
  // The instance with the norm only when the call asks for it.
  return c.input_rms
             ? launch_row_kernel<T, LANES, PIECES, XSMEM, NB, true, BLOCK_MULT>(mm, c, stream)
             : launch_row_kernel<T, LANES, PIECES, XSMEM, NB, false, BLOCK_MULT>(mm, c, stream);
}

// One token: X gathered through L1 or from shared memory (one_token_shared_x); 2, 3..4 and 5..8
// tokens (nb = 2, 4, 8): X^T in shared memory.
template <class T, int LANES, int PIECES>
cudaError_t launch_row_instance(const macko::Matrix& mm, int nb, const RowCall<T>& c,
                                Stream stream) {
  if constexpr (LANES == 32 && PIECES == 1) {
    // Whole warps that run several rows: 32-warp blocks (few_tokens_block_warps).
    if (nb > 1 && few_tokens_block_warps(LANES, PIECES, few_block_warps_override()) == 32) {
      if (nb == 8) return launch_row_kernel<T, LANES, PIECES, true, 8, 2>(mm, c, stream);
      if (nb == 4) return launch_row_kernel<T, LANES, PIECES, true, 4, 2>(mm, c, stream);
      return launch_row_kernel<T, LANES, PIECES, true, 2, 2>(mm, c, stream);
    }
  }
  if (nb == 8) return launch_row_kernel<T, LANES, PIECES, true, 8>(mm, c, stream);
  if (nb == 4) return launch_row_kernel<T, LANES, PIECES, true, 4>(mm, c, stream);
  if (nb == 2) return launch_row_kernel<T, LANES, PIECES, true, 2>(mm, c, stream);
  const bool xs = one_token_shared_x(mm.shape.rows, mm.shape.cols, mm.entries(), int(sizeof(T)),
                                     shared_x_override());
  if (one_token_block_warps(mm.shape.rows, mm.shape.cols, mm.entries(), xs,
                            one_token_block_warps_override()) == 16) {
    return xs ? launch_row_kernel<T, LANES, PIECES, true, 1, 2>(mm, c, stream)
              : launch_row_kernel<T, LANES, PIECES, false, 1, 2>(mm, c, stream);
  }
  return xs ? launch_row_kernel<T, LANES, PIECES, true, 1>(mm, c, stream)
            : launch_row_kernel<T, LANES, PIECES, false, 1>(mm, c, stream);
}

// The one runtime -> template choice of the row kernels: instance, tokens per pass (nb = 1, 2, 4
// or 8).
template <class T>
Status launch_rows(const macko::Matrix& mm, OneTokenKernel which, int pieces, int nb,
                   const RowCall<T>& c, Stream stream) {
  cudaError_t e;
  if (which == OneTokenKernel::half_warp) {
    e = launch_row_instance<T, 16, 1>(mm, nb, c, stream);
  } else if (pieces >= 4) {
    e = launch_row_instance<T, 32, 4>(mm, nb, c, stream);
  } else if (pieces == 2) {
    e = launch_row_instance<T, 32, 2>(mm, nb, c, stream);
  } else {
    e = launch_row_instance<T, 32, 1>(mm, nb, c, stream);
  }
  return cuda_status(e, "macko.warp_row launch");
}

template <class T, int NB, bool XS, int PAIR_WARPS = 0>
Status launch_one(const macko::Matrix& mm, const DeviceInfo& dev, int smem_bytes, const T* x,
                  int64_t ldx, int nt, T* y, int64_t ldy, const T* bias, bool accumulate,
                  Stream stream) {
  auto kernel = macko_kernel<T, NB, XS, PAIR_WARPS>;
  using Shape = PersistentShape<PAIR_WARPS>;
  if (smem_bytes > 48 * 1024) {
    SPARROW_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  }
  // Blocks an SM holds at once (registers and shared memory), so the persistent grid is one wave.
  int resident = 0;
  SPARROW_CUDA_RETURN_IF_ERROR(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &resident, kernel, Shape::kWarps * 32, smem_bytes));
  const LaunchPlan lp =
      plan(mm.shape.rows, dev.sm_count, std::max(resident, 1), smem_bytes, spread_override(),
           Shape::kWarps);
  kernel<<<unsigned(lp.blocks), Shape::kWarps * 32, smem_bytes, stream>>>(
      mm.row_ptr.data(), row_order_or_null(mm), mm.values.data(), mm.deltas.data(),
      mm.shape.rows, mm.shape.cols, x, ldx, nt, y, ldy, bias, accumulate,
      reinterpret_cast<uintptr_t>(x) % 16 == 0 && ldx % 8 == 0);
  SPARROW_CUDA_CHECK_LAUNCH("macko.warp_row");
  return Status::success();
}

template <class T, int NB>
Status launch_bucket(const macko::Matrix& mm, const DeviceInfo& dev, bool staged, const T* x,
                     int64_t ldx, int nt, T* y, int64_t ldy, const T* bias, bool accumulate,
                     Stream stream) {
  if (staged) {
    const int smem = int(x_staged_columns(mm.shape.cols) * NB * int64_t(sizeof(T)));
    if constexpr (NB == 16) {
      if (pair_tokens_override() != 0) {
        return launch_one<T, NB, true, kPairBlockWarps>(mm, dev, smem, x, ldx, nt, y, ldy, bias,
                                                        accumulate, stream);
      }
    }
    return launch_one<T, NB, true>(mm, dev, smem, x, ldx, nt, y, ldy, bias, accumulate, stream);
  }
  return launch_one<T, NB, false>(mm, dev, 0, x, ldx, nt, y, ldy, bias, accumulate, stream);
}

// The one runtime-N -> template choice: token bucket of this pass, X staged or gathered.
template <class T>
Status launch_pass(const macko::Matrix& mm, const DeviceInfo& dev, bool staged, const T* x,
                   int64_t ldx, int nt, T* y, int64_t ldy, const T* bias, bool accumulate,
                   Stream stream) {
  switch (token_bucket(nt)) {
    case 1: return launch_bucket<T, 1>(mm, dev, staged, x, ldx, nt, y, ldy, bias, accumulate, stream);
    case 4: return launch_bucket<T, 4>(mm, dev, staged, x, ldx, nt, y, ldy, bias, accumulate, stream);
    case 8: return launch_bucket<T, 8>(mm, dev, staged, x, ldx, nt, y, ldy, bias, accumulate, stream);
    default: return launch_bucket<T, 16>(mm, dev, staged, x, ldx, nt, y, ldy, bias, accumulate, stream);
  }
}

// Tokens per pass of the row kernels for N = n: 1, 2, 4 or 8 (row_kernel_tokens); 0 when the
// persistent kernel runs instead (also when an experiment knob asks for it). Only the row kernels
// take input_rms.
int row_kernel_pass(const macko::Matrix& mm, int64_t n, int sm_count) {
  if (mm.shape.cols > kOneTokenMaxCols || mm.shape.rows > kRowKernelMaxRows ||
      one_token_override() == OneTokenKernel::persistent)
    return 0;
  return row_kernel_tokens(n, mm.shape.rows, mm.shape.cols, mm.entries(), sm_count,
                           few_tokens_override());
}

template <class T>
Status launch(const macko::Matrix& mm, const Problem& p, const DeviceInfo& dev, int split,
              Stream stream) {
  const T* x = static_cast<const T*>(p.x.data);
  T* y = static_cast<T*>(p.y.data);
  const T* bias = static_cast<const T*>(p.opt.bias);
  if (const int nb = row_kernel_pass(mm, p.n(), dev.sm_count); nb > 0) {
    if (nb == 1 && mm.step_rows.on_device() &&
        macko_entry_split::use_entry_split(mm.shape.rows, mm.entries(), mm.max_row_entries,
                                           dev.sm_count, p.opt.dependent_launch, split)) {
      const macko_entry_split::Call c{x, y, bias, p.opt.accumulate, p.opt.dependent_launch,
                                      p.opt.input_rms, p.opt.rms_eps, dev.sm_count};
      return macko_entry_split::launch(mm, c, stream);
    }
    const OneTokenKernel which = choose_one_token(mm.shape.rows, mm.entries(), mm.max_row_entries,
                                                  dev.sm_count, one_token_override());
    const int pieces = which == OneTokenKernel::warp
                           ? row_pieces(mm.shape.rows, mm.entries(), mm.max_row_entries,
                                        dev.sm_count, pieces_override(),
                                        nb == 1 ? kOneTokenWarpsPerSm : kFewTokensWarpsPerSm)
                           : 1;
    const RowCall<T> c{x, p.x.ld, int(p.n()), y, p.y.ld, bias, p.opt.accumulate,
                       p.opt.dependent_launch, p.opt.input_rms, p.opt.rms_eps, dev.sm_count};
    return launch_rows<T>(mm, which, pieces, nb, c, stream);
  }
  const TokenPasses tp = token_passes(mm.shape.cols, int(sizeof(T)), dev.max_smem_per_block);
  for (int64_t t0 = 0; t0 < p.n(); t0 += tp.tokens) {
    const int nt = int(std::min<int64_t>(tp.tokens, p.n() - t0));
    SPARROW_RETURN_IF_ERROR(launch_pass<T>(mm, dev, tp.staged, x + t0 * p.x.ld, p.x.ld, nt,
                                           y + t0 * p.y.ld, p.y.ld, bias, p.opt.accumulate,
                                           stream));
  }
  return Status::success();
}

}  // namespace

bool rows_are_even(int64_t rows, int64_t entries, int64_t max_row_entries) {
  return double(max_row_entries) * double(rows) <= kEvenRowsRatio * double(entries);
}

OneTokenKernel choose_one_token(int64_t rows, int64_t entries, int64_t max_row_entries,
                                int sm_count, OneTokenKernel requested) {
  if (requested != OneTokenKernel::automatic) return requested;
  // Half-warp rows when a warp step (256 entries) would be mostly one row's whole length.
  if (entries < rows * kHalfWarpBelowEntriesPerRow) return OneTokenKernel::half_warp;
  // Longer rows: half warps only when the rows are even and plentiful. A warp runs its longer
  // row's steps, so on magnitude-pruned weights (uneven rows) half warps measured 6-100 % slower
  // (session 4: 11008x4096 at 80-95 %, 4096x11008); on random ones with more rows than warp
  // slots they were 19-36 % faster on 11008x4096 at 80-95 % (half the warps: one wave instead of
  // 1.3) and 0-20 % on 28672x8192, but 18 % slower on 4096x11008 at 80 % (4096 rows: too few warps).
  const int64_t slots = int64_t(std::max(sm_count, 1)) * kOneTokenWarpsPerSm;
  return rows_are_even(rows, entries, max_row_entries) && rows >= slots &&
                 entries < rows * kHalfWarpEvenBelowEntriesPerRow
             ? OneTokenKernel::half_warp
             : OneTokenKernel::warp;
}

bool use_row_order(int64_t rows, int64_t entries, int64_t max_row_entries, int requested) {
  if (requested == 0 || requested == 1) return requested == 1;
  return !rows_are_even(rows, entries, max_row_entries);
}

int row_kernel_tokens(int64_t n, int64_t rows, int64_t cols, int64_t entries, int sm_count,
                      int requested) {
  if (n == 1) return 1;
  if (n < 1 || n > kRowKernelMaxTokens || requested == 0) return 0;
  if (n == 2 && cols <= kRowKernelTwoTokensMaxCols) return 2;
  if (cols > kRowKernelMaxCols) return 0;
  if (n <= 4) return 4;
  const double density = rows > 0 && cols > 0 ? double(entries) / (double(rows) * double(cols)) : 0;
  return rows >= kEightTokensMinRowsPerSm * std::max(sm_count, 1) &&
                 density >= kEightTokensMinDensity
             ? 8
             : 0;
}

namespace {
// Stored entries (gap padding included) per element of the weight; 1 for an empty shape.
double entries_per_element(int64_t rows, int64_t cols, int64_t entries) {
  return rows > 0 && cols > 0 ? double(entries) / (double(rows) * double(cols)) : 1.0;
}
}  // namespace

bool one_token_shared_x(int64_t rows, int64_t cols, int64_t entries, int element_bytes,
                        int requested) {
  if (cols * element_bytes > kOneTokenSharedXMaxBytes) return false;
  if (requested == 0 || requested == 1) return requested == 1;
  const double density = entries_per_element(rows, cols, entries);
  return cols <= kSharedXMaxCols || density <= kSharedXMaxDensity ||
         (cols <= kSharedXMidMaxCols && density <= kSharedXMidMaxDensity);
}

int few_tokens_block_warps(int lanes, int pieces, int requested) {
  if (lanes != 32 || pieces != 1) return 16;
  return requested == 16 ? 16 : 32;
}

int one_token_block_warps(int64_t rows, int64_t cols, int64_t entries, bool x_shared,
                          int requested) {
  if (requested == 8 || requested == 16) return requested;
  if (!x_shared) return 8;
  return cols > kSharedXMaxCols || (cols >= kSixteenWarpsSparseMinCols &&
                                    entries_per_element(rows, cols, entries) <=
                                        kSixteenWarpsMaxDensity)
             ? 16
             : 8;
}

int row_pieces(int64_t rows, int64_t entries, int64_t max_row_entries, int sm_count,
               int requested, int64_t warps_per_sm) {
  if (requested == 1 || requested == 2 || requested == 4) return requested;
  const int64_t slots = int64_t(std::max(sm_count, 1)) * warps_per_sm;
  const int64_t per_row = rows > 0 ? entries / rows : 0;
  // Uneven rows (as magnitude pruning leaves them): the longest rows end last and set the
  // kernel's time, so their length decides.
  const int64_t row_len = rows_are_even(rows, entries, max_row_entries) ? per_row : max_row_entries;
  int pieces = 1;
  // More pieces while the rows still fit one wave and a piece keeps >= kMinEntriesPerPiece.
  while (pieces < 4 && rows * pieces * 2 <= slots &&
         row_len / (pieces * 2) >= kMinEntriesPerPiece) {
    pieces *= 2;
  }
  return pieces;
}

int64_t launch_grid(int64_t rows, int rows_per_seg, int64_t segs_per_block,
                    int64_t resident_blocks, int requested) {
  const int64_t segs = (rows + std::max(rows_per_seg, 1) - 1) / std::max(rows_per_seg, 1);
  const int64_t filled = std::max<int64_t>(1, (segs + segs_per_block - 1) / segs_per_block);
  // Several rows per segment: every resident block (their slots hold all rows, as rows_per_seg
  // was sized from them).
  if (rows_per_seg > 1 && resident_blocks > filled && requested != 0) return resident_blocks;
  return filled;
}

int rows_per_segment(int64_t rows, int64_t resident_warps, int requested) {
  if (requested > 0) return requested;
  if (rows <= 0 || resident_warps <= 0) return 1;
  return int(std::min<int64_t>((rows + resident_warps - 1) / resident_warps, int64_t(1) << 20));
}

int64_t x_staged_columns(int64_t k) { return (k + 63) / 64 * 64; }

TokenPasses token_passes(int64_t k, int es, int smem_per_block) {
  for (int nb : {16, 8, 4, 1}) {
    if (x_staged_columns(k) * nb * es <= int64_t(smem_per_block)) return {nb, true};
  }
  return {kMaxTokensPerPass, false};
}

LaunchPlan plan(int64_t m, int sm_count, int resident_blocks_per_sm, int smem_bytes,
                int requested_spread, int warps_per_block) {
  LaunchPlan lp;
  lp.x_shared = smem_bytes > 0;
  lp.smem_bytes = smem_bytes;
  const int per_sm = std::clamp(resident_blocks_per_sm, 1, Config::kMaxBlocksPerSm);
  // A warp is the persistent kernel's segment: no warp gets more rows than the fewest that fit
  // one wave (a warp with one row more than the others would set the kernel's time), and the
  // blocks follow the row kernel's rule.
  const int64_t resident_blocks = int64_t(std::max(sm_count, 1)) * per_sm;
  const int rows_per_warp =
      rows_per_segment(m, resident_blocks * warps_per_block, /*requested=*/0);
  lp.blocks = launch_grid(m, rows_per_warp, warps_per_block, resident_blocks, requested_spread);
  return lp;
}

bool takes_input_rms(const Weight& w, int64_t n) {
  const auto* mm = std::get_if<macko::Matrix>(&w);
  if (mm == nullptr) return false;
  // The rule asks the SM count; without a GPU (nothing runs then) one SM.
  const auto dev = current_device_info();
  return row_kernel_pass(*mm, n, dev.ok() ? dev.value().sm_count : 1) > 0;
}

Status run_with(const Problem& p, Stream stream, EntrySplit split) {
  SPARROW_RETURN_IF_ERROR(
      check_problem(p, Format::macko, p.opt.input_rms && takes_input_rms(p.w, p.n())));
  const auto& mm = std::get<macko::Matrix>(p.w);
  if (mm.shape.dtype == DType::fp32) return invalid_argument("macko holds fp16/bf16 values only");
  SPARROW_ASSIGN_OR_RETURN(const DeviceInfo dev, current_device_info());
  const int requested = split == EntrySplit::always  ? 1
                        : split == EntrySplit::never ? 0
                                                     : entry_split_override();
  if (mm.shape.dtype == DType::fp16) return launch<__half>(mm, p, dev, requested, stream);
  return launch<__nv_bfloat16>(mm, p, dev, requested, stream);
}

Status run(const Problem& p, Stream stream) { return run_with(p, stream, EntrySplit::automatic); }

bool may_read_step_rows(const macko::Matrix& m, int sm_count) {
  return macko_entry_split::use_entry_split(m.shape.rows, m.entries(), m.max_row_entries,
                                            sm_count, /*dependent=*/true, entry_split_override());
}

}  // namespace sparrow::kernels::macko_warp_row
