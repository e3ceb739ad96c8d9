// Device pieces shared by the tensor-core SpMM kernels (tca_bme.mma, tiled_csl.mma):
// mma.m16n8k16 / ldmatrix / cp.async wrappers, the X-tile loader, and the epilogue that reduces
// split-K partial sums across a thread-block cluster (sm_90) and applies bias / accumulate.
//
// Conventions: W is M x K (the A operand, row-major), X is N x K (the B operand: X^T is K x N
// "col-major", so rows of X in shared memory feed ldmatrix without transposition), the mma
// accumulator C is (16 m, 8 n) and is stored to Y[n][m].
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cooperative_groups.h>

#include <cstdint>
#include <cstring>

#include "kernels/element.cuh"
#include "kernels/tensor_core/bulk_copy.cuh"
#include "kernels/tensor_core/split_k.hpp"

namespace sparrow::kernels::tc {

// Shared-memory pitch of every 64-wide k tile (X tiles, tiled_csl's A tile): 64 + 8 elements, so
// consecutive rows start 16 bytes apart in bank space and ldmatrix reads 8 rows conflict-free.
constexpr int kPitch = 72;
constexpr int kTileK = 64;

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte async copy global -> shared (a 32-bit shared-memory address: hot loops keep them as
// integers); bytes beyond src_bytes (0..16) are zero-filled.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
  cp_async16(smem_addr(dst), src, src_bytes);
}
// The same, whole 16 bytes.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr(p)));
}

// mma_16816 and the element conversions: element.cuh (here as tc:: names too).
using kernels::from_float;
using kernels::mma_16816;
using kernels::to_float;

// Arguments every tensor-core SpMM kernel shares.
struct XYArgs {
  const uint16_t* x;  // (N, ldx)
  void* y;            // (N, ldy)
  const void* bias;   // (M) or null
  int64_t ldx, ldy;
  int n, m, k;
  bool accumulate;
  bool x_vec;  // X rows are 16-byte aligned (base aligned, ldx % 8 == 0): cp.async path
};

// Layouts of a (rows, 64) k tile in shared memory: index(row, col) is the element index of
// (row, col) for col a multiple of 8 (the 16-byte piece col .. col + 7 is contiguous), a piece
// one row further down lies kRowStep elements further on, and a piece kPeriod rows further down
// lies kPeriod * kRowStep elements further on (the same place within its row).
//
// PaddedRows: rows PITCH elements apart (kPitch for ldmatrix readers; a multiple of 8 in any case).
template <int PITCH>
struct PaddedRows {
  static_assert(PITCH % 8 == 0 && PITCH >= kTileK, "16-byte aligned rows of 64 elements");
  static constexpr int kRowStep = PITCH;
  static constexpr int kPeriod = 1;
  __device__ __forceinline__ static int index(int row, int col) { return row * PITCH + col; }
};
// SwizzledRows: rows of 64 elements, no padding; piece p of row r is stored at piece p ^ 2 (r % 4).
// A reader whose lane (g, t) loads 8 bytes at row n + g (n a multiple of 4), columns
// 16 j + 4 t .. + 3, finds them at index(n + g, 16 j) + 4 t: rows g = 0..3 (one half-warp's phase)
// then cover the 32 banks once, as a pitch of 80 elements does for plain rows, in 20 % less
// shared memory; the cost is an address per j instead of an immediate offset.
struct SwizzledRows {
  static constexpr int kRowStep = kTileK;
  static constexpr int kPeriod = 4;
  __device__ __forceinline__ static int index(int row, int col) {
    return row * kTileK + (col ^ ((row & 3) << 4));
  }
};

// Copies X[n0 .. n0+BLK_N) x [k0 .. k0+64) into shared memory (BLK_N rows of Layout), zero-filling
// rows >= N and columns >= K: the weight's padding is zero, but 0 * garbage may be NaN, so X's
// padding must be zero too. Asynchronous (cp.async) when X rows are 16-byte aligned, else plain
// loads.
template <int BLK_N, int THREADS, class Layout = PaddedRows<kPitch>>
__device__ __forceinline__ void load_x_tile(uint16_t* xs, const XYArgs& a, int n0, int k0) {
  constexpr int kChunks = BLK_N * (kTileK / 8);
  for (int c = threadIdx.x; c < kChunks; c += THREADS) {
    const int r = c / 8, col = (c % 8) * 8;
    const int n = n0 + r, k = k0 + col;
    uint16_t* dst = xs + Layout::index(r, col);
    if (a.x_vec) {
      int bytes = (n < a.n && k < a.k) ? min(16, (a.k - k) * 2) : 0;
      const uint16_t* src = bytes > 0 ? a.x + int64_t(n) * a.ldx + k : a.x;
      cp_async16(dst, src, bytes);
    } else {
      uint16_t v[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        v[j] = (n < a.n && k + j < a.k) ? a.x[int64_t(n) * a.ldx + k + j] : uint16_t(0);
      }
      uint4 p;
      p.x = v[0] | (uint32_t(v[1]) << 16);
      p.y = v[2] | (uint32_t(v[3]) << 16);
      p.z = v[4] | (uint32_t(v[5]) << 16);
      p.w = v[6] | (uint32_t(v[7]) << 16);
      *reinterpret_cast<uint4*>(dst) = p;
    }
  }
}

// Per-step X-tile copies of a kernel that walks k tiles: thread t owns the 16-byte pieces t,
// t + THREADS, ... of the (BLK_N, 64) tile, i.e. column piece t % 8 of rows
// t / 8 + (THREADS / 8) i.
// Its row pointers and row checks are worked out once, so an interior k tile of an aligned X costs
// one pointer add and one copy per piece (rows past N zero-filled), where load_x_tile's per-piece
// bounds checks and 64-bit row arithmetic cost ~45 instructions (tca_bme.mma, ncu, H100, session
// 13). The last k tile and unaligned X go through load_x_tile.
template <int BLK_N, int THREADS, class Layout = PaddedRows<kPitch>>
struct XTileCopy {
  static constexpr int kPieces = (BLK_N * 8 + THREADS - 1) / THREADS;
  static constexpr int kRowsPerPass = THREADS / 8;
  static_assert(kRowsPerPass % Layout::kPeriod == 0, "a thread's pieces sit at one place in rows");
  const uint16_t* src;  // (row, k 0) of piece 0
  int64_t step;         // elements from one piece's row to the next
  uint32_t ok = 0;      // bit i: piece i's row is below N
  uint32_t dst;         // shared-memory address of piece 0 in the first tile
  bool mine;            // the thread owns pieces (BLK_N = 8 needs half the threads)

  // tile0: the first of the kernel's X tiles (the others follow at byte offsets from it).
  __device__ __forceinline__ XTileCopy(const XYArgs& a, int n0, const uint16_t* tile0) {
    const int row = int(threadIdx.x) / 8, col = int(threadIdx.x) % 8 * 8;
    mine = row < BLK_N;
    src = a.x + int64_t(n0 + row) * a.ldx + col;
    step = int64_t(kRowsPerPass) * a.ldx;
#pragma unroll
    for (int i = 0; i < kPieces; ++i) ok |= uint32_t(n0 + row + i * kRowsPerPass < a.n) << i;
    dst = smem_addr(tile0) + uint32_t(Layout::index(row, col)) * 2;
  }
  // X[n0 .., k0 .. k0 + 64) into `tile` (BLK_N rows of Layout), which lies `from_tile0` bytes
  // after the first tile.
  __device__ __forceinline__ void operator()(uint16_t* tile, uint32_t from_tile0, const XYArgs& a,
                                             int n0, int k0) const {
    if (a.x_vec && k0 + kTileK <= a.k) {
      if (!mine) return;
      const uint32_t d = dst + from_tile0;
#pragma unroll
      for (int i = 0; i < kPieces; ++i) {
        const bool in = (ok >> i) & 1u;
        cp_async16(d + uint32_t(i * kRowsPerPass * Layout::kRowStep * 2),
                   in ? src + i * step + k0 : a.x, in ? 16 : 0);
      }
    } else {
      load_x_tile<BLK_N, THREADS, Layout>(tile, a, n0, k0);
    }
  }
};

// B fragments of mma.m16n8k16 for two n8 tiles (n_base.., n_base+8..) at k offset kk from an X
// tile in shared memory: b[0],b[1] for the first n tile, b[2],b[3] for the second.
__device__ __forceinline__ void load_b_pair(uint32_t (&b)[4], const uint16_t* xs, int n_base,
                                            int kk, int lane) {
  const int q = lane >> 3, r = lane & 7;
  ldmatrix_x4(b, xs + (n_base + r + (q >> 1) * 8) * kPitch + kk + (q & 1) * 8);
}
__device__ __forceinline__ void load_b_single(uint32_t (&b)[2], const uint16_t* xs, int n_base,
                                              int kk, int lane) {
  const int q = (lane >> 3) & 1, r = lane & 7;
  ldmatrix_x2(b, xs + (n_base + r) * kPitch + kk + q * 8);
}

// acc[nt] (16 x 8 block of C at rows row0.., n tile nt) times the B fragments of one k16 step.
template <class T, int BLK_N>
__device__ __forceinline__ void mma_row_strip(float (&acc)[BLK_N / 8][4], const uint32_t (&a)[4],
                                              const uint16_t* xs, int kk, int lane) {
  if constexpr (BLK_N == 8) {
    uint32_t b[2];
    load_b_single(b, xs, 0, kk, lane);
    mma_16816<T>(acc[0], a, b[0], b[1]);
  } else {
#pragma unroll
    for (int nt = 0; nt < BLK_N / 8; nt += 2) {
      uint32_t b[4];
      load_b_pair(b, xs, nt * 8, kk, lane);
      mma_16816<T>(acc[nt], a, b[0], b[1]);
      mma_16816<T>(acc[nt + 1], a, b[2], b[3]);
    }
  }
}

// A barrier over the blocks that share partial tiles: the thread-block cluster when there is
// more than one block (sm_90), else the block.
__device__ __forceinline__ void cluster_or_block_sync(int blocks) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (blocks > 1) {
    cooperative_groups::this_cluster().sync();
    return;
  }
#endif
  (void)blocks;
  __syncthreads();
}

// 8-byte stores of four values: Y's rows 8-byte aligned (tiles start at multiples of 4 rows of W).
__device__ __forceinline__ bool y_quads_aligned(const XYArgs& a) {
  return reinterpret_cast<uintptr_t>(a.y) % 8 == 0 && a.ldy % 4 == 0;
}

// Y[n][m .. m + 3] = v (+ bias, + Y when accumulating), the elements below M only.
template <class T>
__device__ __forceinline__ void store_quad(const float4 v, const XYArgs& a, int n, int m,
                                           bool y_vec) {
  if (m >= a.m) return;
  const T* bias = static_cast<const T*>(a.bias);
  float r[4] = {v.x, v.y, v.z, v.w};
  T* out = static_cast<T*>(a.y) + int64_t(n) * a.ldy + m;
  if (y_vec && m + 4 <= a.m) {
    if (bias) {
#pragma unroll
      for (int j = 0; j < 4; ++j) r[j] += to_float<T>(bias[m + j]);
    }
    if (a.accumulate) {
      const uint2 o = *reinterpret_cast<const uint2*>(out);
      const uint16_t h[4] = {uint16_t(o.x), uint16_t(o.x >> 16), uint16_t(o.y),
                             uint16_t(o.y >> 16)};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        T t;
        memcpy(&t, &h[j], 2);
        r[j] += to_float<T>(t);
      }
    }
    uint16_t h[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const T t = from_float<T>(r[j]);
      memcpy(&h[j], &t, 2);
    }
    *reinterpret_cast<uint2*>(out) =
        make_uint2(h[0] | (uint32_t(h[1]) << 16), h[2] | (uint32_t(h[3]) << 16));
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (m + j >= a.m) break;
      float w = r[j];
      if (bias) w += to_float<T>(bias[m + j]);
      if (a.accumulate) w += to_float<T>(out[j]);
      out[j] = from_float<T>(w);
    }
  }
}

template <class T, int BLK_M, int BLK_N, int THREADS>
__device__ __forceinline__ void store_reduced(float* red, const XYArgs& a, int m0, int n0,
                                              int splits);

// A warp's accumulators (rows warp_row0 .. +16 of the tile, the mma.m16n8k16 C layout per n8 tile)
// into the epilogue tile `red` (BLK_N, BLK_M + 4) fp32; ADD: added to what `red` holds there.
template <int BLK_M, int BLK_N, bool ADD = false>
__device__ __forceinline__ void store_partial(float* red, const float (&acc)[BLK_N / 8][4],
                                              int warp_row0) {
  constexpr int kRedPitch = BLK_M + 4;
  const int lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
#pragma unroll
  for (int nt = 0; nt < BLK_N / 8; ++nt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        float& r = red[(nt * 8 + tig * 2 + j) * kRedPitch + warp_row0 + g + 8 * h];
        r = ADD ? r + acc[nt][h * 2 + j] : acc[nt][h * 2 + j];
      }
    }
  }
}

// The epilogue. Each warp holds acc for rows (warp_row0 .. +16) of the block's BLK_M x BLK_N
// output tile. The tile goes through shared memory (BLK_N, BLK_M + 4) fp32, which also gives
// coalesced stores along M. With split-K (splits > 1, sm_90), the blocks of one cluster each hold
// a partial sum of the same tile; block r reduces the slice of elements r, r + splits, ... over
// all blocks in rank order (deterministic, no atomics, no workspace) through distributed shared
// memory. `red` must not alias anything still in flight (cp.async drained by the caller).
template <class T, int BLK_M, int BLK_N, int THREADS>
__device__ __forceinline__ void store_output(float* red, const float (&acc)[BLK_N / 8][4],
                                             int warp_row0, const XYArgs& a, int m0, int n0,
                                             int splits) {
  store_partial<BLK_M, BLK_N>(red, acc, warp_row0);
  store_reduced<T, BLK_M, BLK_N, THREADS>(red, a, m0, n0, splits);
}

// The second half of store_output, for kernels that fill `red` themselves: `red` (BLK_N,
// BLK_M + 4) fp32 holds this block's partial tile (every thread of the block wrote its part before
// the call); the blocks of a split-K cluster are summed in rank order, then bias / accumulate and
// the store to Y.
//
// A thread handles four consecutive m at a time (one 16-byte shared load per partial tile, one
// 8-byte store to Y when Y allows it): element by element this loop cost tca_bme.wgmma ~20 % of its
// instructions at BLK_N = 128 (ncu, H100, session 15). Rows past N are never reduced.
template <class T, int BLK_M, int BLK_N, int THREADS>
__device__ __forceinline__ void store_reduced(float* red, const XYArgs& a, int m0, int n0,
                                              int splits) {
  constexpr int kRedPitch = BLK_M + 4;
  constexpr int kQuads = BLK_M / 4;  // four-element units per tile row
  static_assert(BLK_M % 4 == 0 && kRedPitch % 4 == 0, "16-byte aligned quads");
  int rank = 0;
  cluster_or_block_sync(splits);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  if (splits > 1) rank = int(cg::this_cluster().block_rank());
#endif
  const bool y_vec = y_quads_aligned(a);
  const int rows = min(BLK_N, a.n - n0);
  for (int e = threadIdx.x + rank * THREADS; e < rows * kQuads; e += THREADS * splits) {
    const int nl = e / kQuads, ml = (e % kQuads) * 4;
    const int n = n0 + nl, m = m0 + ml;
    const int at = nl * kRedPitch + ml;
    float4 v = *reinterpret_cast<const float4*>(red + at);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (splits > 1) {
      // Rank order 0, 1, 2, ... for every element: the same sum on every run.
      v = make_float4(0.f, 0.f, 0.f, 0.f);
      for (int q = 0; q < splits; ++q) {
        const float4 p =
            *reinterpret_cast<const float4*>(cg::this_cluster().map_shared_rank(red, q) + at);
        v.x += p.x, v.y += p.y, v.z += p.z, v.w += p.w;
      }
    }
#endif
    store_quad<T>(v, a, n, m, y_vec);
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // Keep this block's shared memory alive until every block of the cluster has read it.
  if (splits > 1) cg::this_cluster().sync();
#endif
}

// The split-K reduction by push (sm_90), for kernels whose pipeline buffers can hold a second
// tile: store_reduced pulls every block's partial tile through distributed shared memory and
// then needs a last cluster barrier so that no block exits while others still read its tile; on
// tca_bme.mma at 4096 rows and N = 32 its two barriers held ~18 % of the warp-stall samples
// (ncu, H100, session 44), the last one 8 %, behind each block's outstanding Y stores.
//
// Here each block sends the quads other blocks own with st.async, remote stores that count
// their bytes on the owner's mbarrier `bar`, into the owner's receive area behind its `red`
// (the pipeline's stages, drained by then: the first cluster barrier stays); the owner waits for
// its bytes, adds the partial tiles in rank order (the same sums as store_reduced, on every run)
// and exits: no block reads another's memory, so no last barrier.
//
// Which block owns which quads: PushedSlices (split_k.hpp).
//
// Shared memory the pushed reduction needs: the block's tile (BLK_N, BLK_M + 4) fp32 and the
// receive area, (splits, slot) quads <= the tile's quads + a chunk per split.
template <int BLK_M, int BLK_N>
constexpr size_t pushed_reduction_bytes() {
  return size_t(BLK_N) * (BLK_M + 4) * 4 + size_t(push_receive_quads(BLK_N * BLK_M / 4)) * 16;
}

// Sets up a pushed reduction's barrier (thread 0, when blocks push to each other); every thread
// calls it before the cluster barrier that starts the epilogue, which publishes it to the other
// blocks and this block's threads.
__device__ __forceinline__ void init_push_barrier(uint64_t* bar, int splits) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (splits > 1 && threadIdx.x == 0) {
    mbar_init(smem_addr(bar), 1);
    mbar_init_fence();
  }
#else
  (void)bar, (void)splits;
#endif
}

// store_reduced with the push described above: `red` (BLK_N, BLK_M + 4) fp32 holds the block's
// partial tile and is followed by the receive area (pushed_reduction_bytes() in all); `bar` was
// set up by init_push_barrier. Without split-K it is store_reduced.
template <class T, int BLK_M, int BLK_N, int THREADS>
__device__ __forceinline__ void store_reduced_pushed(float* red, uint64_t* bar, const XYArgs& a,
                                                     int m0, int n0, int splits) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (splits > 1) {
    namespace cg = cooperative_groups;
    constexpr int kRedPitch = BLK_M + 4;
    constexpr int kQuads = BLK_M / 4;
    static_assert(kQuads % kPushChunk == 0, "chunks stay in one tile row");
    const PushedSlices slices{min(BLK_N, a.n - n0) * kQuads, splits};  // rows below N only
    const int slot = slices.slot();
    const int rank = int(cg::this_cluster().block_rank());
    const uint32_t bar_at = smem_addr(bar);
    const uint32_t recv_at = smem_addr(red + BLK_N * kRedPitch);  // (splits, slot) quads
    auto red_quad = [&](int e) {
      return *reinterpret_cast<const float4*>(red + (e / kQuads) * kRedPitch + (e % kQuads) * 4);
    };
    // Every block's partial tile is complete and its pipeline drained: its stages may receive.
    cg::this_cluster().sync();
#pragma unroll 1
    for (int e = threadIdx.x; e < slices.quads; e += THREADS) {
      const int owner = slices.owner(e);
      if (owner == rank) continue;
      const int at = rank * slot + slices.index(e);  // in the owner's receive area
      st_async16(cluster_addr(recv_at + uint32_t(at) * 16, owner), red_quad(e),
                 cluster_addr(bar_at, owner));
    }
    const int owned = slices.owned(rank);
    if (threadIdx.x == 0) mbar_arrive_expect_tx(bar_at, uint32_t((splits - 1) * owned * 16));
    if (owned == 0) return;
    mbar_wait<true>(bar_at, 0);
    const float4* recv = reinterpret_cast<const float4*>(red + BLK_N * kRedPitch);
    const bool y_vec = y_quads_aligned(a);
    for (int i = threadIdx.x; i < owned; i += THREADS) {
      const int e = slices.quad(rank, i);
      // Rank order 0, 1, 2, ...: the sums of store_reduced.
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 1
      for (int q = 0; q < splits; ++q) {
        const float4 p = q == rank ? red_quad(e) : recv[q * slot + i];
        v.x += p.x, v.y += p.y, v.z += p.z, v.w += p.w;
      }
      store_quad<T>(v, a, n0 + e / kQuads, m0 + (e % kQuads) * 4, y_vec);
    }
    return;
  }
#endif
  (void)bar;
  store_reduced<T, BLK_M, BLK_N, THREADS>(red, a, m0, n0, splits);
}

}  // namespace sparrow::kernels::tc
