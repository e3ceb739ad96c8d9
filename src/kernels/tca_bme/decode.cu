// tca_bme.decode: Y = X * W^T for a tca_bme weight, N = 1..16 tokens per pass, on tensor cores.
// (Passes of 1..4 tokens on small weights run the CUDA-core strip kernels instead, one_token.cu
// and few_tokens.cu: use_strip_kernel at the end of this file.)
//
// Decode streams the weight's bytes once, so everything here serves two aims: every SM gets the
// same number of bytes, and each byte costs as few instructions as possible.
//
// Work split (decode.hpp): one wave of persistent thread-block clusters, one block per SM. A
// cluster owns whole 64-row group rows, so no output element is summed across clusters; its
// warps (blocks x warps of them) cut the cluster's run of groups — contiguous in the format's
// row-major group order — into equal contiguous pieces. A piece crosses at most a few group rows:
// the warp keeps the fp32 accumulators of its first row and of the row it is on; rows it covers
// alone in between it writes to Y directly. At the end every warp leaves its (first, last) row
// tiles in shared memory, and the block that holds a row's last piece sums that row's pieces in
// warp order through distributed shared memory (deterministic, no atomics, no workspace) and
// writes Y with bias / accumulate. choose_cluster_blocks picks the cluster size whose busiest SM
// has the fewest groups (measured on the H100 for 11008 rows = 172 group rows: 66 clusters of 2,
// i.e. at most 3 rows = 96 groups per block against 83 on average).
// A group's cost follows its bytes, not how its rows are filled, so magnitude-pruned weights
// (uneven rows) split as evenly as random ones.
//
// Per warp, a two-stage pipeline (no block barrier in the main loop): while group i is decoded,
// group i+1's 512 B of bitmaps and its values (contiguous, 16-byte aligned) land in the warp's
// other stage, by two bulk copies that lane 0 issues and the stage's mbarrier counts (sm_90), or by
// every lane's 16-byte cp.async (older GPUs, or StageCopy::per_lane). A group holding more values
// than a stage (`cap`: what shared memory allows, ~2500 values with one token tile, a whole group
// with two) is decoded from global memory instead.
//
// Per group the warp builds 128 half-bitmap records {32-bit half, index of its first value} with
// one warp scan of popcounts (fragment.hpp's group_records is the same table on the host), then
// builds the 16 tiles' A fragments from them in one of two orders (Config::nibble_order):
//   - pair order (one n8 tile, N <= 8): register q of a lane is bitmap q's two bits of the lane:
//     a record load per two registers, a popcount and two predicated 2-byte shared loads each;
//   - nibble order (two n8 tiles, N = 9..16): A and B number a tile's columns so that lane t holds
//     physical columns 4t..4t+3 (fragment.hpp), a lane's four elements of a row are one nibble of
//     one bitmap: per tile one record load, and per nibble one popcount, four 2-byte loads, a
//     table load and two byte permutes. Fewer live registers: the two-tile instance no longer
//     spills (316 bytes before).
// B (X^T) fragments come from global memory (X is a few KB and stays in L1/L2) in the same order,
// loaded one group ahead; N = 1..8 is one n8 tile, so a decoded weight feeds every token for
// free; 9..16 two tiles.
#include "kernels/tca_bme/decode.hpp"

#include <cooperative_groups.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <variant>

#include "core/cuda_check.hpp"
#include "kernels/decode_common.cuh"
#include "kernels/dependent_launch.cuh"
#include "kernels/device_info.hpp"
#include "kernels/per_device_cache.hpp"
#include "kernels/tca_bme/few_tokens.hpp"
#include "kernels/tca_bme/fragment.hpp"
#include "kernels/tca_bme/nibble_decode.cuh"
#include "kernels/tca_bme/one_token.hpp"
#include "kernels/tensor_core/bulk_copy.cuh"
#include "kernels/tensor_core/launch.cuh"
#include "kernels/tensor_core/mma.cuh"
#include "sparrow/formats/tca_bme.hpp"

namespace sparrow::kernels::tca_bme_decode {

namespace {

namespace cg = cooperative_groups;
constexpr int P = Config::kTilePitch;

struct WeightArgs {
  const uint64_t* bitmaps;
  const uint32_t* group_offsets;
  const uint16_t* values;
  int groups_m, groups_k;
};

// ---- the two A-fragment decodes (Config::nibble_order picks one per n8 tile count) -------------

// Pair order (the format's own): register q of lane (g, t) is bitmap q's bits g*8 + 2t, + 1.
// Per-lane constants: which half of a bitmap the lane reads (rows 0-3 or 4-7 of the 8x8 tile),
// the bits before its two, and its two bits.
struct Lane {
  tca_bme_mma::LaneBits bits;  // high half?, shift, bits below
  uint32_t bit0, bit1;         // the lane's two bits
};
__device__ __forceinline__ Lane lane_constants(int lane) {
  const tca_bme_mma::LaneBits lb = tca_bme_mma::lane_bits(lane);
  return {lb, 1u << lb.shift, 2u << lb.shift};
}

// One A-fragment register from the lane's record {word, address} of one bitmap: the elements at
// the lane's two bits, zero where a bit is clear (fragment.hpp's fragment_pair; when both bits
// are set the second value follows the first). `addr` is the shared-memory byte address of the
// half's first value. Not volatile: the loads may be scheduled freely, and cannot move above the
// barrier before the record load because their address comes from it.
__device__ __forceinline__ uint32_t fragment_reg(uint32_t word, uint32_t addr, const Lane& ln) {
  uint32_t r;
  asm("{\n"
      "  .reg .pred p0, p1;\n"
      "  .reg .b32 t, a, v0, v1;\n"
      "  and.b32 t, %1, %3;\n"
      "  popc.b32 t, t;\n"
      "  shl.b32 t, t, 1;\n"
      "  add.u32 a, %2, t;\n"
      "  and.b32 t, %1, %4;\n"
      "  setp.ne.u32 p0, t, 0;\n"
      "  and.b32 t, %1, %5;\n"
      "  setp.ne.u32 p1, t, 0;\n"
      "  mov.u32 v0, 0;\n"
      "  mov.u32 v1, 0;\n"
      "  @p0 ld.shared.u16 v0, [a];\n"
      "  @p0 add.u32 a, a, 2;\n"
      "  @p1 ld.shared.u16 v1, [a];\n"
      "  prmt.b32 %0, v0, v1, 0x5410;\n"
      "}\n"
      : "=r"(r)
      : "r"(word), "r"(addr), "r"(ln.bits.below), "r"(ln.bit0), "r"(ln.bit1));
  return r;
}

// The B fragments of column group gk (4 k16 slices x NT n8 tiles x 2 registers): lane (g, t4)
// holds X[token g (+8)][k, k+1] and [k + D, k + D + 1], k = gk*64 + tk*16 + S*t4, with (S, D) =
// (2, 8) in pair order and (4, 2) in nibble order. Interior groups of an aligned X take 8*NT
// plain 4-byte loads off the lane's row pointer; edge groups check K.
template <int NT, bool NIBBLE>
__device__ __forceinline__ void load_b(uint32_t (&b)[4][NT][2], const tc::XYArgs& a, int64_t gk,
                                       bool x_al4) {
  constexpr int S = NIBBLE ? 4 : 2, D = NIBBLE ? 2 : 8;
  const int lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  const int64_t k0 = gk * 64 + S * t4;
  const bool interior = x_al4 && gk * 64 + 64 <= a.k;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int token = nt * 8 + g;
    const uint16_t* xrow = a.x + int64_t(token < a.n ? token : 0) * a.ldx;
    if (interior) {
      const uint32_t* p = reinterpret_cast<const uint32_t*>(xrow + k0);
#pragma unroll
      for (int tk = 0; tk < 4; ++tk) {
        b[tk][nt][0] = token < a.n ? __ldg(p + tk * 8) : 0u;
        b[tk][nt][1] = token < a.n ? __ldg(p + tk * 8 + D / 2) : 0u;
      }
    } else {
#pragma unroll
      for (int tk = 0; tk < 4; ++tk) {
        b[tk][nt][0] = token < a.n ? decode::load_x2(xrow, k0 + tk * 16, a.k, x_al4) : 0u;
        b[tk][nt][1] = token < a.n ? decode::load_x2(xrow, k0 + tk * 16 + D, a.k, x_al4) : 0u;
      }
    }
  }
}

// The 16 tensor-core tiles of one group into acc (4 row tiles x NT n8 tiles). `rec` is this
// lane's half of the group's records: rec[j] = {word, byte offset of the half's first value} of
// bitmaps 2j and 2j + 1. The values are in shared memory (SHARED: the offsets are shared-memory
// addresses) or in global memory at gvals (an oversized group: byte offsets). Pair order reads
// all four bitmaps of tile t (rec[2t], rec[2t + 1]); nibble order the two of its columns
// (rec[2t + pair]: rows 0-7, then 8-15).
template <class T, int NT, bool SHARED>
__device__ __forceinline__ void decode_group(const uint16_t* gvals, const uint4* rec,
                                             const Lane& ln, const tca_bme_mma::NibbleLane& nl,
                                             const uint2* lut, const uint32_t (&b)[4][NT][2],
                                             float (&acc)[4][NT][4]) {
  constexpr bool kNibble = Config::nibble_order(NT);
#pragma unroll
  for (int tk = 0; tk < 4; ++tk) {
#pragma unroll
    for (int tm = 0; tm < 4; ++tm) {
      const int t = tm * 4 + tk;  // tc tile, row-major in the group
      uint32_t af[4];  // a0a1: row g, k 2t..; a2a3: row g+8; a4a5: row g, k 2t+8..; a6a7: row g+8
      if constexpr (kNibble) {
        const uint4 r = rec[2 * t + nl.pair];  // one 16-byte load, 4 addresses per warp
        if constexpr (SHARED) {
          tca_bme_mma::nibble_regs(r.x, r.y, nl, lut, af[0], af[2]);
          tca_bme_mma::nibble_regs(r.z, r.w, nl, lut, af[1], af[3]);
        } else {
          const tca_bme_mma::RegPair p0 = tca_bme_mma::nibble_pair(r.x, r.y / 2, nl, gvals);
          const tca_bme_mma::RegPair p1 = tca_bme_mma::nibble_pair(r.z, r.w / 2, nl, gvals);
          af[0] = p0.lo, af[2] = p0.hi, af[1] = p1.lo, af[3] = p1.hi;
        }
      } else {
        // Records of bitmaps 4t .. 4t+3: two 16-byte loads, one address per half-warp.
        const uint4 r01 = rec[2 * t], r23 = rec[2 * t + 1];
        if constexpr (SHARED) {
          af[0] = fragment_reg(r01.x, r01.y, ln);
          af[1] = fragment_reg(r01.z, r01.w, ln);
          af[2] = fragment_reg(r23.x, r23.y, ln);
          af[3] = fragment_reg(r23.z, r23.w, ln);
        } else {
          af[0] = tca_bme_mma::fragment_pair(r01.x, r01.y / 2, ln.bits, gvals);
          af[1] = tca_bme_mma::fragment_pair(r01.z, r01.w / 2, ln.bits, gvals);
          af[2] = tca_bme_mma::fragment_pair(r23.x, r23.y / 2, ln.bits, gvals);
          af[3] = tca_bme_mma::fragment_pair(r23.z, r23.w / 2, ln.bits, gvals);
        }
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) tc::mma_16816<T>(acc[tm][nt], af, b[tk][nt][0], b[tk][nt][1]);
    }
  }
}

template <int NT>
__device__ __forceinline__ void zero(float (&acc)[4][NT][4]) {
#pragma unroll
  for (int tm = 0; tm < 4; ++tm)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[tm][nt][c] = 0.f;
}

// The input_rms scale of one token (K elements at x) from one warp alone. Not inlined: it serves
// store_direct's rare path, which sits inside the main loop's code.
template <class T>
__device__ __noinline__ float warp_rms_scale(const uint16_t* x, int k, float rms_eps) {
  const float ss = decode::warp_sum(decode::sum_sq_strided<T>(x, k, threadIdx.x & 31, 32));
  return decode::rms_scale(ss, k, rms_eps);
}

// acc (one group row's sums) straight to Y: a row this warp covered alone. With input_rms the
// warp sums x^2 over K itself (the block's sums meet only at the end; this path is rare: a warp's
// run of groups covers a whole row only when the rows are few groups long).
template <class T, int NT>
__device__ __forceinline__ void store_direct(const float (&acc)[4][NT][4], int64_t group_row,
                                             const tc::XYArgs& a, bool rms, float rms_eps) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  const T* bias = static_cast<const T*>(a.bias);
  T* y = static_cast<T*>(a.y);
  float scale[NT][2];  // of this lane's tokens nt * 8 + 2 * t4 + e
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) scale[nt][0] = scale[nt][1] = 1.f;
  if (rms) {
#pragma unroll
    for (int j = 0; j < 8 * NT; ++j) {
      if (j >= a.n) break;
      const float sc = warp_rms_scale<T>(a.x + int64_t(j) * a.ldx, a.k, rms_eps);
      if (j % 8 / 2 == t4) scale[j / 8][j % 2] = sc;
    }
  }
#pragma unroll
  for (int tm = 0; tm < 4; ++tm)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int64_t m = group_row * 64 + tm * 16 + g + 8 * (c >> 1);
        const int n = nt * 8 + 2 * t4 + (c & 1);
        if (m < a.m && n < a.n) {
          decode::store_output(y + int64_t(n) * a.ldy + m, acc[tm][nt][c] * scale[nt][c & 1],
                               bias, m, a.accumulate);
        }
      }
}

// acc into an epilogue tile (BLK_N, P) at tile.
template <int NT>
__device__ __forceinline__ void store_tile(float* tile, const float (&acc)[4][NT][4]) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
#pragma unroll
  for (int tm = 0; tm < 4; ++tm)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        tile[(nt * 8 + 2 * t4 + (c & 1)) * P + tm * 16 + g + 8 * (c >> 1)] = acc[tm][nt][c];
      }
}

template <class T, int NT, bool BULK>
__global__ void __launch_bounds__(Config::warps(NT) * 32, 1)
    tca_decode_kernel(WeightArgs w, tc::XYArgs a, int clusters, int cap, bool x_al4, bool rms,
                      float rms_eps) {
  constexpr int W = Config::warps(NT), BLK_N = 8 * NT, kTile = BLK_N * P;
  constexpr int kMaxPieces = Config::kMaxClusterBlocks * W;
  extern __shared__ __align__(16) unsigned char smem[];
  // The cluster's pieces: first group of warp u (u = 0 .. pieces) and that group's row.
  __shared__ int64_t piece_start[kMaxPieces + 1];
  __shared__ int piece_row[kMaxPieces + 1];
  __shared__ uint2 lut[16];  // fragment.hpp's nibble_entry of every nibble (nibble order only)
  __shared__ float rms_part[W][16];  // input_rms: (warps, tokens) sums of x^2 over K
  __shared__ float rms_token[16];    // input_rms: the tokens' scales
  // BULK: a stage's bitmaps and values arrive by two bulk copies of lane 0, counted here (sm_90;
  // compiled for an older GPU the instance copies with cp.async).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr bool kBulk = BULK;
#else
  constexpr bool kBulk = false;
#endif
  __shared__ __align__(8) uint64_t stage_bars[kBulk ? W : 1][2];
  // Counts the bytes of the partial tiles earlier blocks of the cluster push to this one (the
  // epilogue; sm_90 clusters only).
  __shared__ __align__(8) uint64_t recv_bar;
  let_next_launch();  // the next kernel's blocks may take SM slots this grid leaves free
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if constexpr (Config::nibble_order(NT)) {
    tca_bme_mma::fill_nibble_table(lut);
    __syncthreads();
  }
  int blocks = 1, rank = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  blocks = int(cg::this_cluster().num_blocks());
  rank = int(cg::this_cluster().block_rank());
  // Published to the other blocks by the epilogue's first cluster barrier.
  tc::init_push_barrier(&recv_bar, blocks);
#else
  (void)recv_bar;  // no clusters before sm_90
#endif
  const int cluster = blockIdx.y;  // grid (blocks, clusters): x is the rank in the cluster
  const int64_t gk_count = w.groups_k;
  const int64_t row0 = row_begin(w.groups_m, clusters, cluster);
  const int64_t rows = row_begin(w.groups_m, clusters, cluster + 1) - row0;
  const int64_t G = rows * gk_count;  // the cluster's groups
  const int pieces = blocks * W, v = rank * W + warp;
  const int64_t begin = warp_begin(G, pieces, v);
  const int count = int(warp_begin(G, pieces, v + 1) - begin);
  const int64_t g_first = row0 * gk_count + begin;  // global index of this warp's first group

  // Shared memory: (W, kTile) first-row tiles | per warp kStages x [bitmaps (64) u64 |
  // values (cap) u16 | tail (kValueTailBytes)] and its records (2, 64) {word, first value
  // index}, half h of bitmap j at 512 h + 8 j. After the main loop the stage region holds the
  // (W, kTile) last-row tiles.
  float* firsts = reinterpret_cast<float*>(smem);
  unsigned char* stages = smem + W * kTile * sizeof(float);
  const uint32_t stage_bytes = Config::kBitmapBytes + uint32_t(cap) * 2 + Config::kValueTailBytes;
  const uint32_t mine = tc::smem_addr(stages) +
                        uint32_t(warp) * (Config::kStages * stage_bytes + Config::kRecordBytes);
  const uint32_t stages_addr = tc::smem_addr(stages);
  uint4* rec_lo = reinterpret_cast<uint4*>(stages + (mine - stages_addr) +
                                           Config::kStages * stage_bytes);  // (2, 32) uint4

  // Value ranges of items first .. first+31: lane i holds item first + i.
  uint32_t off_lo = 0, off_hi = 0;
  uint32_t first_val[2] = {0, 0}, n_val[2] = {0, 0};  // per stage (compile-time index)
  auto issue = [&](int i, auto parity) {
    constexpr int S = decltype(parity)::value;
    if ((i & 31) == 0 && i + lane < count) {
      off_lo = w.group_offsets[g_first + i + lane];
      off_hi = w.group_offsets[g_first + i + lane + 1];
    }
    const uint32_t o0 = __shfl_sync(0xffffffffu, off_lo, i & 31);
    const uint32_t nv = __shfl_sync(0xffffffffu, off_hi, i & 31) - o0;
    const uint32_t st = mine + S * stage_bytes;
    if constexpr (kBulk) {
      if (lane == 0) {
        const uint32_t vbytes = nv <= uint32_t(cap) ? nv * 2u : 0u;  // a multiple of 16
        const uint32_t bar = tc::smem_addr(&stage_bars[warp][S]);
        tc::mbar_arrive_expect_tx(bar, Config::kBitmapBytes + vbytes);
        tc::bulk_copy(st, w.bitmaps + (g_first + i) * 64, Config::kBitmapBytes, bar);
        if (vbytes > 0) tc::bulk_copy(st + Config::kBitmapBytes, w.values + o0, vbytes, bar);
      }
      first_val[S] = o0;
      n_val[S] = nv;
      return;
    }
    tc::cp_async16(st + lane * 16, w.bitmaps + (g_first + i) * 64 + lane * 2);
    if (nv <= uint32_t(cap)) {
      // A valid group's values are a multiple of 8 (16 bytes), the next group's start aligned.
      const int chunks = int((nv + 7) / 8);
      const uint16_t* src = w.values + o0 + lane * 8;
      uint32_t dst = st + Config::kBitmapBytes + lane * 16;
      for (int c = lane; c < chunks; c += 32, src += 256, dst += 512) tc::cp_async16(dst, src);
    }
    first_val[S] = o0;
    n_val[S] = nv;
  };

  const Lane ln = lane_constants(lane);                                 // pair order
  const tca_bme_mma::NibbleLane nl = tca_bme_mma::nibble_lane(lane);  // nibble order
  // The lane's half of the records (rows 0-3 or 4-7 of each 8x8 bitmap: g < 4 or not, in both
  // orders): bitmaps 2j, 2j+1's {word, first value address} at element j.
  const uint4* my_rec = rec_lo + ((lane >> 2) >= 4 ? 32 : 0);
  float acc[4][NT][4];  // the row being summed
  zero(acc);
  int64_t row = g_first / gk_count, gk = g_first % gk_count;
  bool left_first = false;  // the first row's tile is in `firsts`
  uint32_t b[2][4][NT][2];  // B fragments of the group in stage 0 / 1
  // One group in stage S: item i. Unrolled twice so the stage, its metadata and its B fragments
  // are compile-time choices.
  auto step = [&](int i, auto parity) {
    constexpr int S = decltype(parity)::value;
    // The other stage held item i - 1, finished before the last step's final __syncwarp.
    if (i + 1 < count) issue(i + 1, std::integral_constant<int, 1 - S>{});
    if constexpr (kBulk) {
      tc::mbar_wait(tc::smem_addr(&stage_bars[warp][S]), uint32_t(i >> 1) & 1u);
    } else {
      tc::cp_async_commit();
      tc::cp_async_wait<1>();  // item i has landed (this lane's copies) ...
      __syncwarp();            // ... and every lane's
    }
    const uint32_t st = mine + S * stage_bytes;
    {
      // Records of the group's 64 bitmaps; lane l has bitmaps 2l, 2l+1 as (lo, hi, lo, hi).
      const uint4 q = reinterpret_cast<const uint4*>(stages + (st - stages_addr))[lane];
      const uint32_t p0 = __popc(q.x), p1 = __popc(q.y), p2 = __popc(q.z), p3 = __popc(q.w);
      const uint32_t total = p0 + p1 + p2 + p3;
      // Byte offsets of each half's first value: shared-memory addresses when the group's values
      // are in this stage, offsets from its first value in global memory otherwise.
      const uint32_t e = decode::warp_inclusive_scan(total, lane) - total;
      const uint32_t vb = n_val[S] <= uint32_t(cap) ? st + Config::kBitmapBytes : 0u;
      const uint32_t o = vb + 2 * e;
      rec_lo[lane] = make_uint4(q.x, o, q.z, o + 2 * (p0 + p1));
      rec_lo[32 + lane] = make_uint4(q.y, o + 2 * p0, q.w, o + 2 * (p0 + p1 + p2));
    }
    // B fragments of the next group, loaded while this one decodes.
    int64_t gk_next = gk + 1, row_next = row;
    if (gk_next == gk_count) gk_next = 0, ++row_next;
    if (i + 1 < count) load_b<NT, Config::nibble_order(NT)>(b[1 - S], a, gk_next, x_al4);
    __syncwarp();
    if (n_val[S] <= uint32_t(cap)) {
      decode_group<T, NT, true>(nullptr, my_rec, ln, nl, lut, b[S], acc);
    } else {
      decode_group<T, NT, false>(w.values + first_val[S], my_rec, ln, nl, lut, b[S],
                                  acc);
    }
    __syncwarp();  // records and this stage are rewritten next
    if (i + 1 < count && row_next != row) {
      // Leaving `row`: the first row waits for the epilogue, a later one is complete.
      if (!left_first) {
        store_tile<NT>(firsts + warp * kTile, acc);
        left_first = true;
      } else {
        store_direct<T, NT>(acc, row, a, rms, rms_eps);
      }
      zero(acc);
    }
    gk = gk_next, row = row_next;
  };

  if constexpr (kBulk) {
    if (lane == 0) {
      tc::mbar_init(tc::smem_addr(&stage_bars[warp][0]), 1);
      tc::mbar_init(tc::smem_addr(&stage_bars[warp][1]), 1);
      tc::mbar_init_fence();
    }
    __syncwarp();
  }
  if (count > 0) issue(0, std::integral_constant<int, 0>{});
  // Everything above reads the weight only: with a dependent launch it overlaps the kernel that
  // writes X. X and Y are touched after it has finished.
  wait_for_previous();
  if (count > 0) load_b<NT, Config::nibble_order(NT)>(b[0], a, gk, x_al4);
  tc::cp_async_commit();
  for (int i = 0; i < count; i += 2) {
    step(i, std::integral_constant<int, 0>{});
    if (i + 1 < count) step(i + 1, std::integral_constant<int, 1>{});
  }
  // input_rms: every block sums x^2 over all of K itself (8 KB per token at K = 4096), after its
  // groups, when much of X has passed through this SM's L1.
  if (rms) {
    for (int j = 0; j < a.n; ++j) {
      const float ss = decode::warp_sum(
          decode::sum_sq_strided<T>(a.x + int64_t(j) * a.ldx, a.k, threadIdx.x, W * 32));
      if (lane == 0) rms_part[warp][j] = ss;
    }
  }
  tc::cp_async_wait<0>();
  __syncthreads();  // every warp is done with its stages: they take the last-row tiles
  if (rms && threadIdx.x < a.n) {
    float ss = 0.f;
    for (int v = 0; v < W; ++v) ss += rms_part[v][threadIdx.x];
    rms_token[threadIdx.x] = decode::rms_scale(ss, a.k, rms_eps);
  }

  // A warp with one row left it in `firsts`; one with more, its last row in `lasts`.
  float* lasts = reinterpret_cast<float*>(stages);
  if (count > 0) store_tile<NT>((left_first ? lasts : firsts) + warp * kTile, acc);
  for (int u = threadIdx.x; u <= pieces; u += W * 32) {
    piece_start[u] = warp_begin(G, pieces, u);
    piece_row[u] = int(piece_start[u] / gk_count);
  }
  tc::cluster_or_block_sync(blocks);
  // This block finishes the rows whose last group is in its warps' pieces, summing each row's
  // pieces in warp order (rows a single warp covered from end to end were stored directly). In a
  // cluster only the row holding the block's first group can have pieces in earlier blocks, and
  // only the row holding its last group pieces in later ones: each block sums its own pieces of
  // that last row (in warp order) and pushes the partial tile to the block that finishes the row,
  // with st.async into that block's stages (drained: the barrier above) counted on its recv_bar;
  // the finisher adds the partials of the earlier blocks in block order, then its own pieces.
  // Nobody reads another block's shared memory, so no block waits for the others to finish
  // reading before it exits. The pull this replaced (every finisher reading the other blocks'
  // tiles one piece after another, then a last cluster barrier) held ~22 % of the warp samples
  // with the first barrier on 11008x4096 at N = 8 (ncu, H100, session 12).
  const int64_t bs = piece_start[rank * W], be = piece_start[rank * W + W];
  const int n_rows = min(BLK_N, a.n);
  const T* bias = static_cast<const T*>(a.bias);
  T* y = static_cast<T*>(a.y);
  // The tile of piece u for row r: its first row's, or the last row's when the piece has more.
  auto tile_of = [&](int u, int64_t r) {
    return (piece_row[u] == r ? firsts : lasts) + (u % W) * kTile;
  };
  // Partial tiles received from earlier blocks, (blocks, BLK_N, 64) fp32 behind the last-row tiles.
  float* recv = lasts + W * kTile;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (blocks > 1 && pushes_last_row(bs, be, gk_count)) {
    const int64_t r = be / gk_count;  // the row continues in a later block
    const int f = row_finisher(G, pieces, W, r, gk_count);
    const uint32_t dst = tc::cluster_addr(tc::smem_addr(recv + rank * BLK_N * 64), f);
    const uint32_t bar = tc::cluster_addr(tc::smem_addr(&recv_bar), f);
    for (int q = threadIdx.x; q < n_rows * 16; q += W * 32) {
      const int at = (q / 16) * P + (q % 16) * 4;
      float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
      for (int u = rank * W; u < rank * W + W; ++u) {
        if (piece_start[u] == piece_start[u + 1] || piece_start[u + 1] <= r * gk_count) continue;
        const float4 t = *reinterpret_cast<const float4*>(tile_of(u, r) + at);
        sum.x += t.x, sum.y += t.y, sum.z += t.z, sum.w += t.w;
      }
      tc::st_async16(dst + uint32_t(q) * 16, sum, bar);
    }
  }
#endif
  for (int64_t r = (bs + gk_count) / gk_count - 1; be > bs && r < be / gk_count; ++r) {
    const int64_t g0 = r * gk_count, g1 = g0 + gk_count;  // the row's groups [g0, g1)
    int vl = rank * W;  // the piece holding g1 - 1: in this block
    while (piece_start[vl + 1] <= g1 - 1) ++vl;
    int vf = vl;  // the piece holding g0
    while (piece_start[vf] > g0) --vf;
    if (vf == vl && piece_start[vf] < g0 && piece_start[vf + 1] > g1) continue;  // stored
    // Earlier blocks with pieces of this row: vf / W .. rank - 1, each of them that holds any
    // groups (with fewer groups than warps some hold none) pushed one partial tile.
    const int b0 = vf / W < rank ? vf / W : rank;
    auto holds_groups = [&](int b) { return block_holds_groups(piece_start, W, b); };
    if (b0 < rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      if (threadIdx.x == 0) {
        int senders = 0;
        for (int b = b0; b < rank; ++b) senders += holds_groups(b);
        tc::mbar_arrive_expect_tx(tc::smem_addr(&recv_bar), uint32_t(senders * n_rows * 64 * 4));
      }
      tc::mbar_wait<true>(tc::smem_addr(&recv_bar), 0);
#endif
      vf = rank * W;  // the block's own pieces from here
    }
    for (int e = threadIdx.x; e < n_rows * 64; e += W * 32) {
      const int nl = e / 64, ml = e % 64;
      float s = 0.f;
      for (int b = b0; b < rank; ++b) {
        if (holds_groups(b)) s += recv[b * BLK_N * 64 + e];
      }
      for (int u = vf; u <= vl; ++u) {
        if (piece_start[u] == piece_start[u + 1]) continue;  // a warp without groups
        s += tile_of(u, r)[nl * P + ml];
      }
      const int64_t m = (row0 + r) * 64 + ml;
      if (m < a.m) {
        decode::store_output(y + int64_t(nl) * a.ldy + m, rms ? s * rms_token[nl] : s, bias, m,
                             a.accumulate);
      }
    }
  }
}

// What a launch of one kernel instance needs to know, the same for every weight on a device:
// the stage size, the shared memory, and how many clusters of each size 1, 2, 4, 8 fit at once.
// Worked out (and the kernel's shared-memory limit raised) once per instance and device: the
// attribute and occupancy calls would otherwise cost host time on every launch.
struct PassPlan {
  int cap = 0;
  size_t smem = 0;
  int fit[4] = {0, 0, 0, 0};
};

template <class Kernel>
Status pass_plan(Kernel kernel, int warps, int tokens, const DeviceInfo& d, PassPlan& plan) {
  SPARROW_ASSIGN_OR_RETURN(
      plan, per_device_kernel_value<PassPlan>(kernel, [&]() -> Result<PassPlan> {
        PassPlan out;
        cudaFuncAttributes attr;
        SPARROW_CUDA_RETURN_IF_ERROR(cudaFuncGetAttributes(&attr, kernel));  // static shared memory
        out.cap = stage_values(warps, tokens, d.max_smem_per_block - int(attr.sharedSizeBytes));
        out.smem = shared_bytes(out.cap, warps, tokens);
        SPARROW_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
            kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(out.smem)));
        int per_sm = 0;
        SPARROW_CUDA_RETURN_IF_ERROR(
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, warps * 32, out.smem));
        out.fit[0] = per_sm * d.sm_count;
        for (int i = 1; i < 4; ++i) {
          if (d.cc_major < 9 || per_sm == 0) continue;
          cudaLaunchConfig_t cfg = {};
          cfg.gridDim = dim3(unsigned(1 << i));
          cfg.blockDim = dim3(unsigned(warps * 32));
          cfg.dynamicSmemBytes = out.smem;
          cudaLaunchAttribute cluster[1];
          cluster[0].id = cudaLaunchAttributeClusterDimension;
          cluster[0].val.clusterDim.x = unsigned(1 << i);
          cluster[0].val.clusterDim.y = 1;
          cluster[0].val.clusterDim.z = 1;
          cfg.attrs = cluster;
          cfg.numAttrs = 1;
          int n = 0;
          if (cudaOccupancyMaxActiveClusters(&n, kernel, &cfg) != cudaSuccess) {
            (void)cudaGetLastError();  // this size does not fit: not an error
            n = 0;
          }
          out.fit[i] = n;
        }
        return out;
      }));
  return Status::success();
}

template <class T, int NT>
Status launch_pass(const WeightArgs& w, const tc::XYArgs& a, bool x_al4, const DeviceInfo& d,
                   bool dependent, const MatmulOptions& opt, StageCopy copy,
                   cudaStream_t stream) {
  // SPARROW_TCA_STREAM_BULK=0|1: cp.async / bulk copies for automatic launches (experiments, read
  // once). Bulk copies by default on sm_90: measured on the H100 (session 41, c9) 0.90-0.99x the
  // cp.async time at N = 8 and 16 on the four Llama shapes at 50-90 % (0.92-0.95 at 50 %), N = 1
  // (28672 x 8192) 0.95-1.01x; the 7B engine with tca_bme weights at batch 8 +6.5 % at 50 %, +4.3 %
  // at 70 %. A lane no longer issues a 16-byte cp.async per chunk: the L1 / shared-memory pipe,
  // this kernel's busiest unit (ncu, session 20), keeps those instruction slots for the decode.
  static const int knob = env_knob("SPARROW_TCA_STREAM_BULK", -1);
  if (copy == StageCopy::automatic) {
    copy = knob == 0 ? StageCopy::per_lane : StageCopy::bulk;
  }
  auto kernel = copy == StageCopy::bulk && d.cc_major >= 9 ? tca_decode_kernel<T, NT, true>
                                                             : tca_decode_kernel<T, NT, false>;
  constexpr int W = Config::warps(NT);
  PassPlan plan;
  SPARROW_RETURN_IF_ERROR(pass_plan(kernel, W, 8 * NT, d, plan));
  if (plan.fit[0] < 1) {
    return unsupported("tca_bme.decode: " + std::to_string(plan.smem) +
                       " bytes of shared memory per block do not fit this GPU");
  }
  // SPARROW_TC_MAX_SPLITS (experiments, launch.cuh) caps the cluster size.
  int fit[4];
  for (int i = 0; i < 4; ++i) fit[i] = (1 << i) > tc::max_splits_override() ? 0 : plan.fit[i];
  // Without room for the partial tiles a cluster's epilogue receives, the blocks run alone.
  if (!cluster_epilogue_fits(plan.cap, W, 8 * NT)) fit[1] = fit[2] = fit[3] = 0;
  const int blocks = choose_cluster_blocks(w.groups_m, w.groups_k, fit);
  int log2b = 0;
  while ((1 << log2b) < blocks) ++log2b;
  const int clusters = std::max(fit[log2b], 1);
  return tc::launch_split_k(kernel, blocks, unsigned(clusters), 1u, W * 32, plan.smem, stream,
                            dependent, "tca_bme.decode", w, a, clusters, plan.cap, x_al4,
                            opt.input_rms, opt.rms_eps);
}

// SPARROW_TCA_ONE_TOKEN=0|1: never / always run the one-token kernel at N = 1;
// SPARROW_TCA_FEW_TOKENS=0|1: the few-token kernel at N = 2..4 (experiments; read once; unset:
// use_one_token_kernel, use_few_tokens_kernel). A caller's StripKernel other than automatic wins.
bool use_strip_kernel(StripKernel choice, int n, int64_t m, int64_t groups, int sm_count) {
  if (choice != StripKernel::automatic) return choice == StripKernel::always;
  static const int one = env_knob("SPARROW_TCA_ONE_TOKEN", -1);
  static const int few = env_knob("SPARROW_TCA_FEW_TOKENS", -1);
  if (n == 1) return one < 0 ? use_one_token_kernel(groups, sm_count) : one == 1;
  return few < 0 ? use_few_tokens_kernel(m, groups, n, sm_count) : few == 1;
}

template <class T>
Status launch(const tca_bme::Matrix& m, const Problem& p, StripKernel strip, StageCopy copy,
              cudaStream_t stream) {
  SPARROW_ASSIGN_OR_RETURN(const DeviceInfo d, current_device_info());
  const WeightArgs w{m.bitmaps.data(), m.group_offsets.data(), m.values.data(),
                     int(m.groups_m), int(m.groups_k)};
  const bool x_al4 = reinterpret_cast<uintptr_t>(p.x.data) % 4 == 0 && p.x.ld % 2 == 0;
  for (int64_t t0 = 0; t0 < p.n(); t0 += Config::kTokensPerPass) {
    const tc::XYArgs a = tc::xy_args(p, m.shape.rows, m.shape.cols, t0,
                                     std::min<int64_t>(Config::kTokensPerPass, p.n() - t0));
    // Only the first pass can start before the kernel that writes X has finished.
    const bool dependent = p.opt.dependent_launch && t0 == 0;
    if (a.n <= tca_bme_few_tokens::kMaxTokens &&
        use_strip_kernel(strip, a.n, m.shape.rows, m.groups(), d.sm_count)) {
      const T* x = reinterpret_cast<const T*>(a.x);
      T* y = static_cast<T*>(a.y);
      const T* bias = static_cast<const T*>(a.bias);
      SPARROW_RETURN_IF_ERROR(
          a.n == 1 ? tca_bme_one_token::launch<T>(m, x, y, bias, a.accumulate, d.sm_count,
                                                  dependent, p.opt.input_rms, p.opt.rms_eps,
                                                  copy, stream)
                   : tca_bme_few_tokens::launch<T>(m, x, a.ldx, y, a.ldy, a.n, bias,
                                                   a.accumulate, d.sm_count, dependent,
                                                   p.opt.input_rms, p.opt.rms_eps, stream));
      continue;
    }
    const Status s = a.n <= 8
                         ? launch_pass<T, 1>(w, a, x_al4, d, dependent, p.opt, copy, stream)
                         : launch_pass<T, 2>(w, a, x_al4, d, dependent, p.opt, copy, stream);
    SPARROW_RETURN_IF_ERROR(s);
  }
  return Status::success();
}

}  // namespace

int stage_values(int warps, int tokens, int smem_per_block) {
  // One block per SM whatever its stages take, so a stage gets all the block can give it:
  // warps x (a first-row tile, stages x (bitmaps + 2 B a value), records). The smallest is 64.
  const int64_t per_warp = int64_t(std::max(smem_per_block, 0)) / std::max(warps, 1) -
                           int64_t(tokens) * Config::kTilePitch * 4;
  const int64_t fits =
      ((per_warp - Config::kRecordBytes) / Config::kStages - Config::kBitmapBytes -
       Config::kValueTailBytes) / 2 / 64 * 64;
  return int(std::clamp<int64_t>(fits, 64, Config::kMaxGroupValues));
}

namespace {
// The warps' first-row tiles, and the region behind them: their stages and records, which the
// last-row tiles and the received partial tiles reuse after the main loop.
size_t first_row_tile_bytes(int warps, int tokens) {
  return size_t(warps) * size_t(tokens) * Config::kTilePitch * sizeof(float);
}
size_t stage_region_bytes(int stage_values, int warps, int tokens) {
  const size_t stages =
      size_t(warps) * (Config::kStages * (Config::kBitmapBytes + size_t(stage_values) * 2 +
                                          Config::kValueTailBytes) +
                       Config::kRecordBytes);
  return std::max(stages, first_row_tile_bytes(warps, tokens));
}
}  // namespace

size_t shared_bytes(int stage_values, int warps, int tokens) {
  return first_row_tile_bytes(warps, tokens) + stage_region_bytes(stage_values, warps, tokens);
}

bool cluster_epilogue_fits(int stage_values, int warps, int tokens) {
  const size_t received = size_t(Config::kMaxClusterBlocks) * size_t(tokens) * 64 * sizeof(float);
  return first_row_tile_bytes(warps, tokens) + received <=
         stage_region_bytes(stage_values, warps, tokens);
}

bool use_one_token_kernel(int64_t groups, int sm_count) {
  return groups < int64_t(Config::kStreamMinGroupsPerWarp) * Config::warps(1) * sm_count;
}

bool use_few_tokens_kernel(int64_t m, int64_t groups, int n, int sm_count) {
  if (n < 2 || n > tca_bme_few_tokens::kMaxTokens) return false;
  const int64_t strips = (m + 15) / 16;
  if (strips > int64_t(Config::kFewTokensMaxStripsPerSm) * sm_count) return false;
  return groups < int64_t(Config::few_tokens_max_groups_per_warp(n)) * Config::warps(1) * sm_count;
}

int choose_cluster_blocks(int64_t groups_m, int64_t groups_k, const int (&max_clusters)[4]) {
  int best = 1;
  double best_load = -1.0;
  for (int i = 0; i < 4; ++i) {
    const int clusters = max_clusters[i];
    if (clusters < 1) continue;
    const int blocks = 1 << i;
    // Groups of the busiest block: the most rows a cluster gets, split over its blocks.
    const int64_t rows = (groups_m + clusters - 1) / clusters;
    const double load = double(rows) * double(groups_k) / blocks;
    if (best_load < 0.0 || load < best_load * 0.999) best = blocks, best_load = load;
  }
  return best;
}

bool takes_input_rms(const Weight& w, int64_t) {
  return std::holds_alternative<tca_bme::Matrix>(w);
}

Status run(const Problem& p, Stream stream) { return run_with(p, stream, StripKernel::automatic); }

Status run_with(const Problem& p, Stream stream, StripKernel strip, StageCopy copy) {
  SPARROW_RETURN_IF_ERROR(check_problem(p, Format::tca_bme, takes_input_rms(p.w, p.n())));
  const auto& m = std::get<tca_bme::Matrix>(p.w);
  const Shape& s = m.shape;
  if (s.dtype != DType::fp16 && s.dtype != DType::bf16) {
    return invalid_argument("tca_bme.decode: fp16 or bf16 only");
  }
  if (s.rows > INT32_MAX || s.cols > INT32_MAX) {
    return invalid_argument("tca_bme.decode: M and K must be below 2^31");
  }
  if (m.groups_m != (s.rows + 63) / 64 || m.groups_k != (s.cols + 63) / 64 ||
      m.group_offsets.size() != size_t(m.groups() + 1) ||
      m.bitmaps.size() != size_t(m.groups() * 64)) {
    return invalid_argument("tca_bme.decode: the weight's arrays do not match its shape");
  }
  // The strip kernels read the derived strip_starts. Checked here, before any pass, not where a
  // strip kernel launches: N = 18 runs a streaming pass first, and failing in the second pass
  // would leave Y half written.
  if (m.strip_starts.size() != size_t(m.groups()) * size_t(tca_bme::kStripsPerGroup)) {
    return invalid_argument("tca_bme.decode: the weight's strip_starts has " +
                            std::to_string(m.strip_starts.size()) + " entries, expected " +
                            std::to_string(m.groups() * tca_bme::kStripsPerGroup) +
                            " (derived from its bitmaps by tca_bme::derive)");
  }
  // The one-token kernel's bulk-copy stages hold max_strip_values values; 0 with non-zeros means
  // derive() never ran.
  if (m.max_strip_values < 0 || m.max_strip_values > tca_bme::kTcTile * tca_bme::kGroupCols ||
      (m.max_strip_values == 0 && m.nnz > 0)) {
    return invalid_argument("tca_bme.decode: the weight's max_strip_values (" +
                            std::to_string(m.max_strip_values) +
                            ") is not derived from its bitmaps (tca_bme::derive)");
  }
  auto* st = reinterpret_cast<cudaStream_t>(stream);
  if (s.dtype == DType::fp16) return launch<__half>(m, p, strip, copy, st);
  return launch<__nv_bfloat16>(m, p, strip, copy, st);
}

}  // namespace sparrow::kernels::tca_bme_decode
