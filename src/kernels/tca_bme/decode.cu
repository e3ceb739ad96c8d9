// tca_bme.decode: Y = X * W^T for a tca_bme weight, N = 1..16 tokens per pass, on tensor cores.
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
// has the fewest groups (11008 rows = 172 group rows on 132 SMs: 16 clusters of 8, 11 rows each).
// A group's cost follows its bytes, not how its rows are filled, so magnitude-pruned weights
// (uneven rows) split as evenly as random ones.
//
// Per warp, a two-stage cp.async pipeline (no block barrier in the main loop): while group i is
// decoded, group i+1's 512 B of bitmaps and its values (contiguous, 16-byte aligned) land in the
// warp's other stage. A group holding more values than a stage (`cap`, sized from the weight's
// mean density) is decoded from global memory instead.
//
// Per group the warp builds 128 half-bitmap records {32-bit half, index of its first value} with
// one warp scan of popcounts (fragment.hpp's group_records is the same table on the host); then
// each of the 16 A fragments (16x16 tiles) costs, per register, one broadcast shared load of the
// lane's record, a popcount of the bits below the lane's two, and two predicated 2-byte loads:
// the format stores a tile's four 8x8 bitmaps in the A-register order, and a lane's two elements
// are adjacent bits of one 32-bit half. B (X^T) fragments come from global memory (X is a few KB
// and stays in L1/L2), loaded one group ahead; N = 1..8 is one n8 tile, so a decoded weight feeds
// every token for free; 9..16 two tiles.
#include "kernels/tca_bme/decode.hpp"

#include <cooperative_groups.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <string>
#include <variant>

#include "core/cuda_check.hpp"
#include "kernels/decode_common.cuh"
#include "kernels/tca_bme/fragment.hpp"
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

// Per-lane constants of the fragment decode: which half of a bitmap the lane reads (rows 0-3 or
// 4-7 of the 8x8 tile), the bits before its two, and its two bits.
struct Lane {
  tca_bme_mma::LaneBits bits;
  uint32_t below, bit0, bit1;
};
__device__ __forceinline__ Lane lane_constants(int lane) {
  const tca_bme_mma::LaneBits lb = tca_bme_mma::lane_bits(lane);
  return {lb, lb.below, 1u << lb.shift, 2u << lb.shift};
}

// Shared-memory accesses on 32-bit addresses (the hot loop would otherwise carry 64-bit generic
// pointers).
__device__ __forceinline__ uint4 lds128(uint32_t addr) {
  uint4 r;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "r"(addr));
  return r;
}
__device__ __forceinline__ void sts128(uint32_t addr, uint4 v) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w));
}
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src));
}

// One A-fragment register from the lane's record {word, first value index} of one bitmap: the
// elements at the lane's two bits, zero where a bit is clear (fragment.hpp's fragment_pair; when
// both bits are set the second value follows the first). `vals` is the 32-bit shared address of
// the group's first value.
__device__ __forceinline__ uint32_t fragment_reg(uint32_t word, uint32_t base, const Lane& ln,
                                                 uint32_t vals) {
  uint32_t r;
  asm volatile(
      "{\n"
      "  .reg .pred p0, p1;\n"
      "  .reg .b32 t, a, v0, v1;\n"
      "  and.b32 t, %1, %3;\n"
      "  popc.b32 t, t;\n"
      "  add.u32 t, t, %2;\n"
      "  shl.b32 t, t, 1;\n"
      "  add.u32 a, t, %6;\n"
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
      : "r"(word), "r"(base), "r"(ln.below), "r"(ln.bit0), "r"(ln.bit1), "r"(vals));
  return r;
}

// X[row][k], X[row][k+1] as one B-fragment register, zero past K.
__device__ __forceinline__ uint32_t load_x2(const uint16_t* xrow, int64_t k, int64_t kmax,
                                            bool x_al4) {
  if (x_al4 && k + 2 <= kmax) return __ldg(reinterpret_cast<const uint32_t*>(xrow + k));
  const uint32_t lo = k < kmax ? xrow[k] : 0u;
  const uint32_t hi = k + 1 < kmax ? xrow[k + 1] : 0u;
  return lo | (hi << 16);
}

// The B fragments of column group gk (4 k16 slices x NT n8 tiles x 2 registers): lane (g, t4)
// holds X[token g (+8)][k, k+1] and [k+8, k+9], k = gk*64 + tk*16 + 2*t4. Interior groups of an
// aligned X take 8*NT plain 4-byte loads off the lane's row pointer; edge groups check K.
template <int NT>
__device__ __forceinline__ void load_b(uint32_t (&b)[4][NT][2], const tc::XYArgs& a, int64_t gk,
                                       bool x_al4) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  const int64_t k0 = gk * 64 + 2 * t4;
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
        b[tk][nt][1] = token < a.n ? __ldg(p + tk * 8 + 4) : 0u;
      }
    } else {
#pragma unroll
      for (int tk = 0; tk < 4; ++tk) {
        b[tk][nt][0] = token < a.n ? load_x2(xrow, k0 + tk * 16, a.k, x_al4) : 0u;
        b[tk][nt][1] = token < a.n ? load_x2(xrow, k0 + tk * 16 + 8, a.k, x_al4) : 0u;
      }
    }
  }
}

// The 16 tensor-core tiles of one group into acc (4 row tiles x NT n8 tiles). The group's
// records: the lane's half of bitmap j at shared address rec + 8 j ({word, first value index});
// its values at shared address `vals` (SHARED) or in global memory at gvals (an oversized group).
template <class T, int NT, bool SHARED>
__device__ __forceinline__ void decode_group(uint32_t vals, const uint16_t* gvals, uint32_t rec,
                                             const Lane& ln, const uint32_t (&b)[4][NT][2],
                                             float (&acc)[4][NT][4]) {
#pragma unroll
  for (int tk = 0; tk < 4; ++tk) {
#pragma unroll
    for (int tm = 0; tm < 4; ++tm) {
      const int t = tm * 4 + tk;  // tc tile, row-major in the group
      // Records of bitmaps 4t .. 4t+3: two 16-byte loads, the same address for all lanes of a half.
      const uint4 r01 = lds128(rec + 32 * t), r23 = lds128(rec + 32 * t + 16);
      uint32_t af[4];  // register q <- bitmap q of tile t
      if constexpr (SHARED) {
        af[0] = fragment_reg(r01.x, r01.y, ln, vals);
        af[1] = fragment_reg(r01.z, r01.w, ln, vals);
        af[2] = fragment_reg(r23.x, r23.y, ln, vals);
        af[3] = fragment_reg(r23.z, r23.w, ln, vals);
      } else {
        af[0] = tca_bme_mma::fragment_pair(r01.x, r01.y, ln.bits, gvals);
        af[1] = tca_bme_mma::fragment_pair(r01.z, r01.w, ln.bits, gvals);
        af[2] = tca_bme_mma::fragment_pair(r23.x, r23.y, ln.bits, gvals);
        af[3] = tca_bme_mma::fragment_pair(r23.z, r23.w, ln.bits, gvals);
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

// acc (one group row's sums) straight to Y: a row this warp covered alone.
template <class T, int NT>
__device__ __forceinline__ void store_direct(const float (&acc)[4][NT][4], int64_t group_row,
                                             const tc::XYArgs& a) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  const T* bias = static_cast<const T*>(a.bias);
  T* y = static_cast<T*>(a.y);
#pragma unroll
  for (int tm = 0; tm < 4; ++tm)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int64_t m = group_row * 64 + tm * 16 + g + 8 * (c >> 1);
        const int n = nt * 8 + 2 * t4 + (c & 1);
        if (m < a.m && n < a.n) {
          float v = acc[tm][nt][c];
          if (bias) v += tc::to_float<T>(bias[m]);
          T* out = y + int64_t(n) * a.ldy + m;
          if (a.accumulate) v += tc::to_float<T>(*out);
          *out = tc::from_float<T>(v);
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

template <class T, int NT>
__global__ void __launch_bounds__(Config::warps(NT) * 32, 1)
    tca_decode_kernel(WeightArgs w, tc::XYArgs a, int clusters, int cap, bool x_al4) {
  constexpr int W = Config::warps(NT), BLK_N = 8 * NT, kTile = BLK_N * P;
  extern __shared__ __align__(16) unsigned char smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int blocks = 1, rank = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  blocks = int(cg::this_cluster().num_blocks());
  rank = int(cg::this_cluster().block_rank());
#endif
  const int cluster = blockIdx.y;  // grid (blocks, clusters): x is the rank in the cluster
  const int64_t gk_count = w.groups_k;
  const int64_t row0 = row_begin(w.groups_m, clusters, cluster);
  const int64_t rows = row_begin(w.groups_m, clusters, cluster + 1) - row0;
  const int64_t G = rows * gk_count;  // the cluster's groups
  const int PW = blocks * W, v = rank * W + warp;
  const int64_t begin = warp_begin(G, PW, v);
  const int count = int(warp_begin(G, PW, v + 1) - begin);
  const int64_t g_first = row0 * gk_count + begin;  // global index of this warp's first group

  // This warp's shared memory: kStages x [bitmaps (64) u64 | values (cap) u16], then its records:
  // (2, 64) {word, first value index}, half h of bitmap j at 512 h + 8 j.
  const uint32_t stage_bytes = Config::kBitmapBytes + uint32_t(cap) * 2;
  const uint32_t mine = tc::smem_addr(smem) +
                        uint32_t(warp) * (Config::kStages * stage_bytes + Config::kRecordBytes);
  const uint32_t rec = mine + Config::kStages * stage_bytes;

  // Value ranges of items first .. first+31: lane i holds item first + i.
  uint32_t off_lo = 0, off_hi = 0;
  uint32_t first0 = 0, n0 = 0, first1 = 0, n1 = 0;  // per stage: first value, value count
  auto issue = [&](int i) {
    if ((i & 31) == 0 && i + lane < count) {
      off_lo = w.group_offsets[g_first + i + lane];
      off_hi = w.group_offsets[g_first + i + lane + 1];
    }
    const uint32_t o0 = __shfl_sync(0xffffffffu, off_lo, i & 31);
    const uint32_t nv = __shfl_sync(0xffffffffu, off_hi, i & 31) - o0;
    const uint32_t st = mine + uint32_t(i & 1) * stage_bytes;
    cp_async16(st + lane * 16, w.bitmaps + (g_first + i) * 64 + lane * 2);
    if (nv <= uint32_t(cap)) {
      // A valid group's values are a multiple of 8 (16 bytes), the next group's start aligned.
      const int chunks = int((nv + 7) / 8);
      const uint16_t* src = w.values + o0 + lane * 8;
      uint32_t dst = st + Config::kBitmapBytes + lane * 16;
      for (int c = lane; c < chunks; c += 32, src += 256, dst += 512) cp_async16(dst, src);
    }
    if (i & 1) {
      first1 = o0, n1 = nv;
    } else {
      first0 = o0, n0 = nv;
    }
  };

  const Lane ln = lane_constants(lane);
  const uint32_t my_rec = rec + (ln.bits.high ? 512u : 0u);
  float acc[4][NT][4], acc_first[4][NT][4];  // the row being summed; the warp's first row
  zero(acc);
  zero(acc_first);
  int64_t row = g_first / gk_count, gk = g_first % gk_count;
  bool left_first = false;
  uint32_t b[4][NT][2];
  if (count > 0) {
    issue(0);
    load_b(b, a, gk, x_al4);
  }
  tc::cp_async_commit();
  for (int i = 0; i < count; ++i) {
    // The stage refilled here held item i - 1, finished before the last iteration's __syncwarp.
    if (i + 1 < count) issue(i + 1);
    tc::cp_async_commit();
    tc::cp_async_wait<1>();  // item i has landed (this lane's copies) ...
    __syncwarp();            // ... and every lane's
    const uint32_t st = mine + uint32_t(i & 1) * stage_bytes;
    {
      // Records of the group's 64 bitmaps; lane l has bitmaps 2l, 2l+1 as (lo, hi, lo, hi).
      const uint4 q = lds128(st + 16 * lane);
      const uint32_t p0 = __popc(q.x), p1 = __popc(q.y), p2 = __popc(q.z), p3 = __popc(q.w);
      const uint32_t total = p0 + p1 + p2 + p3;
      const uint32_t e = decode::warp_inclusive_scan(total, lane) - total;
      sts128(rec + 16 * lane, make_uint4(q.x, e, q.z, e + p0 + p1));
      sts128(rec + 512 + 16 * lane, make_uint4(q.y, e + p0, q.w, e + p0 + p1 + p2));
    }
    // B fragments of the next group, loaded while this one decodes.
    int64_t gk_next = gk + 1, row_next = row;
    if (gk_next == gk_count) gk_next = 0, ++row_next;
    uint32_t b_next[4][NT][2];
    if (i + 1 < count) load_b(b_next, a, gk_next, x_al4);
    __syncwarp();
    const uint32_t first = (i & 1) ? first1 : first0, nv = (i & 1) ? n1 : n0;
    if (nv <= uint32_t(cap)) {
      decode_group<T, NT, true>(st + Config::kBitmapBytes, nullptr, my_rec, ln, b, acc);
    } else {
      decode_group<T, NT, false>(0, w.values + first, my_rec, ln, b, acc);
    }
    __syncwarp();  // records and this stage are rewritten next
    if (i + 1 < count) {
#pragma unroll
      for (int tk = 0; tk < 4; ++tk)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) b[tk][nt][0] = b_next[tk][nt][0], b[tk][nt][1] = b_next[tk][nt][1];
      if (row_next != row) {  // leaving `row`: keep it if it is the first, else it is complete
        if (!left_first) {
#pragma unroll
          for (int tm = 0; tm < 4; ++tm)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
              for (int c = 0; c < 4; ++c) acc_first[tm][nt][c] = acc[tm][nt][c];
          left_first = true;
        } else {
          store_direct<T, NT>(acc, row, a);
        }
        zero(acc);
      }
      gk = gk_next, row = row_next;
    }
  }
  tc::cp_async_wait<0>();
  __syncthreads();  // every warp is done with its stages: they become the epilogue tiles

  // Warp w's tiles: slot 0 its first row, slot 1 its last row (when different).
  float* part = reinterpret_cast<float*>(smem);
  if (count > 0) {
    if (left_first) {
      store_tile<NT>(part + (warp * 2 + 0) * kTile, acc_first);
      store_tile<NT>(part + (warp * 2 + 1) * kTile, acc);
    } else {
      store_tile<NT>(part + (warp * 2 + 0) * kTile, acc);
    }
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (blocks > 1) {
    cg::this_cluster().sync();
  } else {
    __syncthreads();
  }
#else
  __syncthreads();
#endif
  // Rows whose last piece is in this block: sum their pieces in warp order.
  const T* bias = static_cast<const T*>(a.bias);
  T* y = static_cast<T*>(a.y);
  for (int64_t r = 0; r < rows; ++r) {
    const int vf = warp_of(G, PW, r * gk_count), vl = warp_of(G, PW, (r + 1) * gk_count - 1);
    if (vl / W != rank) continue;
    auto first_row_of = [&](int u) { return warp_begin(G, PW, u) / gk_count; };
    auto last_row_of = [&](int u) { return (warp_begin(G, PW, u + 1) - 1) / gk_count; };
    if (vf == vl && r != first_row_of(vl) && r != last_row_of(vl)) continue;  // stored directly
    for (int e = threadIdx.x; e < BLK_N * 64; e += W * 32) {
      const int nl = e / 64, ml = e % 64;
      float s = 0.f;
      for (int u = vf; u <= vl; ++u) {
        if (warp_begin(G, PW, u) == warp_begin(G, PW, u + 1)) continue;  // a warp without groups
        const int slot = r == first_row_of(u) ? 0 : 1;
        const float* src = part;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        if (u / W != rank) src = cg::this_cluster().map_shared_rank(part, u / W);
#endif
        s += src[((u % W) * 2 + slot) * kTile + nl * P + ml];
      }
      const int64_t m = (row0 + r) * 64 + ml;
      if (m < a.m && nl < a.n) {
        if (bias) s += tc::to_float<T>(bias[m]);
        T* out = y + int64_t(nl) * a.ldy + m;
        if (a.accumulate) s += tc::to_float<T>(*out);
        *out = tc::from_float<T>(s);
      }
    }
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // Keep this block's tiles alive until every block of the cluster has read them.
  if (blocks > 1) cg::this_cluster().sync();
#endif
}

// Clusters of each size that fit at once for this kernel (cached per kernel and shared-memory
// size: the occupancy calls cost host time on every launch otherwise).
template <class Kernel>
Status cluster_capacity(Kernel kernel, int threads, size_t smem, const tc::DeviceInfo& d,
                        int (&fit)[4]) {
  struct Entry {
    const void* kernel;
    size_t smem;
    int device;
    int fit[4];
  };
  static std::mutex mu;
  static std::vector<Entry> cache;
  int dev = 0;
  SPARROW_CUDA_RETURN_IF_ERROR(cudaGetDevice(&dev));
  const std::lock_guard<std::mutex> lock(mu);
  for (const Entry& e : cache) {
    if (e.kernel == reinterpret_cast<const void*>(kernel) && e.smem == smem && e.device == dev) {
      std::copy(e.fit, e.fit + 4, fit);
      return Status::success();
    }
  }
  int per_sm = 0;
  SPARROW_CUDA_RETURN_IF_ERROR(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  fit[0] = per_sm * d.sms;
  for (int i = 1; i < 4; ++i) {
    fit[i] = 0;
    if (d.major < 9 || per_sm == 0) continue;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(unsigned(1 << i));
    cfg.blockDim = dim3(unsigned(threads));
    cfg.dynamicSmemBytes = smem;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = unsigned(1 << i);
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    int n = 0;
    if (cudaOccupancyMaxActiveClusters(&n, kernel, &cfg) != cudaSuccess) {
      (void)cudaGetLastError();  // this size does not fit: not an error
      n = 0;
    }
    fit[i] = n;
  }
  Entry e{reinterpret_cast<const void*>(kernel), smem, dev, {}};
  std::copy(fit, fit + 4, e.fit);
  cache.push_back(e);
  return Status::success();
}

template <class T, int NT>
Status launch_pass(const WeightArgs& w, const tc::XYArgs& a, int64_t nnz, bool x_al4,
                   const tc::DeviceInfo& d, int smem_optin, cudaStream_t stream) {
  auto kernel = tca_decode_kernel<T, NT>;
  constexpr int W = Config::warps(NT);
  const int cap = stage_values(nnz, int64_t(w.groups_m) * w.groups_k, W, smem_optin);
  const size_t smem = shared_bytes(cap, W, 8 * NT);
  SPARROW_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  int fit[4];
  SPARROW_RETURN_IF_ERROR(cluster_capacity(kernel, W * 32, smem, d, fit));
  if (fit[0] < 1) {
    return unsupported("tca_bme.decode: " + std::to_string(smem) +
                       " bytes of shared memory per block do not fit this GPU");
  }
  // SPARROW_TC_MAX_SPLITS (experiments, launch.cuh) caps the cluster size.
  for (int i = 3; i >= 0; --i) {
    if ((1 << i) > tc::max_splits_override()) fit[i] = 0;
  }
  const int blocks = choose_cluster_blocks(w.groups_m, w.groups_k, fit);
  int log2b = 0;
  while ((1 << log2b) < blocks) ++log2b;
  const int clusters = std::max(fit[log2b], 1);
  return tc::launch_split_k(kernel, blocks, unsigned(clusters), 1u, W * 32, smem, stream,
                            "tca_bme.decode", w, a, clusters, cap, x_al4);
}

template <class T>
Status launch(const tca_bme::Matrix& m, const Problem& p, cudaStream_t stream) {
  tc::DeviceInfo d;
  SPARROW_RETURN_IF_ERROR(tc::device_info(d));
  int dev = 0, smem_optin = 0;
  SPARROW_CUDA_RETURN_IF_ERROR(cudaGetDevice(&dev));
  SPARROW_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  const WeightArgs w{m.bitmaps.data(), m.group_offsets.data(), m.values.data(),
                     int(m.groups_m), int(m.groups_k)};
  const bool x_al4 = reinterpret_cast<uintptr_t>(p.x.data) % 4 == 0 && p.x.ld % 2 == 0;
  for (int64_t t0 = 0; t0 < p.n(); t0 += Config::kTokensPerPass) {
    tc::XYArgs a{};
    a.x = static_cast<const uint16_t*>(p.x.data) + t0 * p.x.ld;
    a.y = static_cast<T*>(p.y.data) + t0 * p.y.ld;
    a.bias = p.opt.bias;
    a.ldx = p.x.ld;
    a.ldy = p.y.ld;
    a.n = int(std::min<int64_t>(Config::kTokensPerPass, p.n() - t0));
    a.m = int(m.shape.rows);
    a.k = int(m.shape.cols);
    a.accumulate = p.opt.accumulate;
    const Status s = a.n <= 8 ? launch_pass<T, 1>(w, a, m.nnz, x_al4, d, smem_optin, stream)
                              : launch_pass<T, 2>(w, a, m.nnz, x_al4, d, smem_optin, stream);
    SPARROW_RETURN_IF_ERROR(s);
  }
  return Status::success();
}

}  // namespace

int stage_values(int64_t nnz, int64_t groups, int warps, int smem_per_block) {
  const double d =
      groups > 0 ? double(nnz) / (double(groups) * Config::kMaxGroupValues) : 1.0;
  // 10 % above the mean group plus two 64-value rows: at 50 % density that is 4+ standard
  // deviations of a random group; denser groups (magnitude pruning) take the slow path.
  const double want = 1.1 * d * Config::kMaxGroupValues + 128.0;
  int v = int(std::ceil(want / 64.0)) * 64;
  // What the block's shared memory allows: warps x (stages x (bitmaps + 2 B a value) + records).
  const int64_t per_warp = int64_t(std::max(smem_per_block, 0)) / std::max(warps, 1);
  const int64_t fits =
      ((per_warp - Config::kRecordBytes) / Config::kStages - Config::kBitmapBytes) / 2 / 64 * 64;
  v = int(std::min<int64_t>(v, fits));
  return std::clamp(v, 64, Config::kMaxGroupValues);
}

size_t shared_bytes(int stage_values, int warps, int tokens) {
  const size_t stages =
      size_t(warps) * (Config::kStages * (Config::kBitmapBytes + size_t(stage_values) * 2) +
                       Config::kRecordBytes);
  const size_t epilogue = size_t(warps) * 2 * size_t(tokens) * Config::kTilePitch * sizeof(float);
  return std::max(stages, epilogue);
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

Status run(const Problem& p, Stream stream) {
  SPARROW_RETURN_IF_ERROR(check_problem(p, Format::tca_bme));
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
  auto* st = reinterpret_cast<cudaStream_t>(stream);
  if (s.dtype == DType::fp16) return launch<__half>(m, p, st);
  return launch<__nv_bfloat16>(m, p, st);
}

}  // namespace sparrow::kernels::tca_bme_decode
