// tca_bme.wgmma: Y = X * W^T with W in tca_bme on Hopper's warpgroup MMA (sm_90a), for N from
// about 32 tokens up to prefill sizes.
//
// Why a second tensor-core kernel: tca_bme.mma (mma.sync) loads every B fragment from shared
// memory into registers itself, per warp and per 8 columns, and reads the X tile once per 64
// weight rows. From N = 64 on it ran at 0.24-0.76x cuBLAS (H100, session 14), far from its
// bounds. wgmma reads B straight from shared memory, runs asynchronously (the next step's
// decode overlaps this step's MMAs), and a block of WGS warpgroups shares one X tile among
// 64 * WGS weight rows.
//
// A block: WGS warpgroups, warpgroup w owns group row blockIdx.z * WGS + w (64 rows of W), the
// block owns BLK_N columns of Y and walks its share of the 64-wide k tiles (split-K over a
// cluster as in tca_bme.mma). Per k tile (a "step"):
//   1. cp.async pipeline (STAGES deep): X tile (BLK_N, 64) and each warpgroup's 64 bitmaps and
//      compressed values. Nothing of W is expanded in shared memory.
//   2. The A fragments come from the nibble-order decode of tca_bme.mma (fragment.hpp,
//      nibble_decode.cuh): lane t holds physical columns 4t .. 4t+3 of a 16-column slice as k
//      slots 2t, 2t+1, 2t+8, 2t+9. The MMA sums over k, so B must use the same slot order; but
//      wgmma reads B itself, in slot order, from the swizzled layout. So each X tile is
//      permuted in place once it lands: a thread copies one (row, 16-column slice) as two
//      16-byte pieces into that slice's 32-byte place in the swizzled row, then rewrites the
//      place as slots 0-7 = columns {0,1,4,5,8,9,12,13}, slots 8-15 = {2,3,6,7,10,11,14,15}
//      (two 16-byte loads, two stores, no shuffles). The 4-byte granularity of this permutation
//      is why it cannot be done by the copy itself (cp.async moves 16 bytes whole).
//   3. Four m64nBLK_Nk16 wgmmas per warpgroup, A from registers, committed as one group. With
//      Config::IN_FLIGHT = 1 the next step decodes into the other register set while they run (A
//      registers double buffered, the loop unrolled by two) and a stage is refilled two steps
//      after its MMAs were issued (only then are they known to be complete); with 0 each step
//      waits for its own MMAs, which saves the registers that let two blocks share an SM.
//   4. The epilogue of tca_bme.mma (mma.cuh's store_output: split-K cluster reduction in rank
//      order, bias, accumulate).
#pragma once

#include <algorithm>

#include "kernels/dependent_launch.cuh"
#include "kernels/tca_bme/fragment.hpp"
#include "kernels/tca_bme/nibble_decode.cuh"
#include "kernels/tca_bme/spmm.hpp"
#include "kernels/tensor_core/launch.cuh"
#include "kernels/tensor_core/mma.cuh"
#include "kernels/tensor_core/wgmma.cuh"

namespace sparrow::kernels::tca_bme_wgmma {

using tca_bme_mma::fill_nibble_table;
using tca_bme_mma::nibble_lane;
using tca_bme_mma::tile_fragment;
using tca_bme_mma::NibbleLane;
using tca_bme_mma::NibbleLoads;
using tca_bme_mma::warp_tile_loads;
using tca_bme_mma::WeightArgs;
using tca_bme_mma::write_warp_records;

// Tile configuration of one instantiation.
template <int BLK_N_, int WGS_, int STAGES_, int IN_FLIGHT_ = 1>
struct Config {
  static constexpr int BLK_N = BLK_N_;    // columns of Y per block: the wgmma N
  static constexpr int WGS = WGS_;        // warpgroups per block, one 64-row group row each
  static constexpr int STAGES = STAGES_;
  // MMA groups a warpgroup leaves in flight when it starts the next step's decode: 1 (the
  // decode overlaps them; A registers double buffered, a slot refilled two steps after its use)
  // or 0 (each step waits for its own MMAs; fewer registers, so more blocks per SM).
  static constexpr int IN_FLIGHT = IN_FLIGHT_;
  // Stages being loaded while a step runs (the prefetch distance).
  static constexpr int kAhead = STAGES - 1 - IN_FLIGHT;
  static constexpr int BLK_M = 64 * WGS;
  static constexpr int THREADS = 128 * WGS;
  static constexpr int kXBytes = BLK_N * 128;   // (BLK_N, 64) in 128-byte swizzled rows
  static constexpr int kBitmapBytes = 64 * 8;   // (64) uint64 per warpgroup
  static constexpr int kValueTailBytes = 16;    // the nibble decode may read past the last value
  static constexpr int kRedBytes = BLK_N * (BLK_M + 4) * 4;  // epilogue tile (BLK_N, BLK_M + 4)
  static_assert(IN_FLIGHT == 0 || IN_FLIGHT == 1, "at most one MMA group in flight");
  static_assert(kAhead >= 1, "at least one stage loads while a step runs");
  // Blocks per SM the registers are sized for (__launch_bounds__): two of 256 threads up to 64
  // columns.
  static constexpr int kMinBlocks = WGS == 2 && (BLK_N <= 64 || IN_FLIGHT == 0) ? 2 : 1;
  static_assert(BLK_N % 8 == 0 && ((BLK_N * 4) % THREADS == 0 || BLK_N * 4 < THREADS),
                "whole X slices per thread");
  static_assert((THREADS / 4) % 8 == 0, "a thread's X rows share their swizzle phase");
  // Bytes of one warpgroup's values in a stage for groups of at most `value_cap` values.
  static constexpr uint32_t value_bytes(int value_cap) {
    return uint32_t(value_cap * 2 + kValueTailBytes + 15) / 16 * 16;
  }
  // A stage: X tile | WGS bitmaps | WGS value regions, rounded so the next X tile starts on a
  // 1024-byte boundary (the swizzle works on address bits).
  static constexpr uint32_t stage_bytes(int value_cap) {
    return (uint32_t(kXBytes + WGS * kBitmapBytes) + WGS * value_bytes(value_cap) + 1023) / 1024 *
           1024;
  }
};

// One thread's share of the X tiles: (row, 16-column slice) pieces of 32 bytes, slice xs of rows
// xrow, xrow + THREADS / 4, ... Rows of one thread are a multiple of 8 apart, so they share the
// swizzle phase and the same place within their rows.
template <class Cfg>
struct XSlices {
  static constexpr int kPerThread = (Cfg::BLK_N * 4 + Cfg::THREADS - 1) / Cfg::THREADS;
  static constexpr int kRowStride = Cfg::THREADS / 4;
  const uint16_t* src;  // X[n0 + xrow][16 xs]
  int64_t src_step;     // elements from one of the thread's rows to the next
  uint32_t place;       // byte offset of the first piece's 32-byte place in a tile
  uint32_t ok = 0;      // bit i: row i is below N
  int col;              // 16 xs
  bool odd;             // the rows' swizzle phase is odd: the two 16-byte halves trade places
  bool mine;            // the thread owns pieces (a narrow tile needs fewer threads than a block)

  __device__ __forceinline__ XSlices(const tc::XYArgs& a, int n0) {
    const int xrow = int(threadIdx.x) / 4, xs = int(threadIdx.x) % 4;
    col = 16 * xs;
    src = a.x + int64_t(n0 + xrow) * a.ldx + col;
    src_step = int64_t(kRowStride) * a.ldx;
    // 16-byte piece c of row r sits at piece c ^ (r % 8): the slice's pieces 2 xs, 2 xs + 1 share
    // the 32-byte place xs ^ ((r % 8) / 2), in swapped order when r is odd.
    place = uint32_t(xrow * 128 + 32 * (xs ^ ((xrow & 7) >> 1)));
    odd = xrow & 1;
    mine = xrow < Cfg::BLK_N;
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) ok |= uint32_t(n0 + xrow + i * kRowStride < a.n) << i;
  }

  // Copies the thread's pieces of X[n0 .., k0 .. k0 + 64) in column order into their places in
  // the tile at shared address `tile` (zero past N and K). Asynchronous when X rows are 16-byte
  // aligned.
  __device__ __forceinline__ void copy(uint32_t tile, const tc::XYArgs& a, int k0) const {
    if (!mine) return;
    if (a.x_vec && k0 + tc::kTileK <= a.k) {
      // Interior k tile of an aligned X: no column checks (the common case).
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) {
        const uint32_t dst = tile + place + uint32_t(i * kRowStride * 128);
        const bool in = (ok >> i) & 1u;
        const uint16_t* s = in ? src + i * src_step + k0 : a.x;
        tc::cp_async16(dst, s, in ? 16 : 0);
        tc::cp_async16(dst + 16, in ? s + 8 : a.x, in ? 16 : 0);
      }
      return;
    }
    const int k = k0 + col;
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const uint32_t dst = tile + place + uint32_t(i * kRowStride * 128);
      const bool in = (ok >> i) & 1u;
      const uint16_t* s = src + i * src_step + k0;
      if (a.x_vec) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int kh = k + 8 * h;
          const int bytes = in && kh < a.k ? min(16, (a.k - kh) * 2) : 0;
          tc::cp_async16(dst + 16 * h, bytes > 0 ? s + 8 * h : a.x, bytes);
        }
      } else {
        uint32_t v[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const uint32_t lo = in && k + 2 * j < a.k ? s[2 * j] : 0u;
          const uint32_t hi = in && k + 2 * j + 1 < a.k ? s[2 * j + 1] : 0u;
          v[j] = lo | (hi << 16);
        }
        sts128(dst, make_uint4(v[0], v[1], v[2], v[3]));
        sts128(dst + 16, make_uint4(v[4], v[5], v[6], v[7]));
      }
    }
  }

  // Rewrites the thread's pieces (landed) into the decode's slot order (see the file comment):
  // pairs P0..P7 of columns (0,1) .. (14,15) become slots {P0, P2, P4, P6 | P1, P3, P5, P7}.
  __device__ __forceinline__ void permute(uint32_t tile) const {
    if (!mine) return;
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const uint32_t at = tile + place + uint32_t(i * kRowStride * 128);
      const uint4 c0 = lds128(at), c1 = lds128(at + 16);
      const uint4 s0 = make_uint4(c0.x, c0.z, c1.x, c1.z);  // slots 0-7
      const uint4 s1 = make_uint4(c0.y, c0.w, c1.y, c1.w);  // slots 8-15
      sts128(at, odd ? s1 : s0);
      sts128(at + 16, odd ? s0 : s1);
    }
  }
};

template <class T, class Cfg, bool SWAP>
__global__ void __launch_bounds__(Cfg::THREADS, Cfg::kMinBlocks)
    wgmma_kernel(WeightArgs w, tc::XYArgs a, int splits, int groups_m) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int BLK_N = Cfg::BLK_N, STAGES = Cfg::STAGES, WGS = Cfg::WGS;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  // The launch adds 1024 bytes so the stages can start on a 1024-byte boundary.
  unsigned char* smem = smem_raw + ((1024u - (tc::smem_addr(smem_raw) & 1023u)) & 1023u);
  const uint32_t base = tc::smem_addr(smem);
  const uint32_t stage_bytes = Cfg::stage_bytes(w.value_cap);
  const uint32_t value_bytes = Cfg::value_bytes(w.value_cap);
  // Per warp, the records of its 16 bitmaps (tca_bme.mma's layout).
  __shared__ uint4 records[4 * WGS][16];
  __shared__ uint2 lut[16];

  let_next_launch();
  const int split = blockIdx.x, n0 = blockIdx.y * BLK_N;
  const int kb = int(int64_t(w.groups_k) * split / splits);
  const int ke = int(int64_t(w.groups_k) * (split + 1) / splits);
  const int steps = ke - kb;
  const int wg = int(threadIdx.x) >> 7, wtid = int(threadIdx.x) & 127;
  const int gm = int(blockIdx.z) * WGS + wg;
  const bool has_rows = gm < groups_m;  // the last block's warpgroups may lie past M
  const int64_t g0 = int64_t(gm) * w.groups_k + kb;
  // This warpgroup's value offsets (steps + 1 of them), once.
  uint32_t* offsets = reinterpret_cast<uint32_t*>(smem + STAGES * stage_bytes) + wg * (steps + 1);
  for (int i = wtid; i <= steps; i += 128) offsets[i] = has_rows ? w.group_offsets[g0 + i] : 0u;
  fill_nibble_table(lut);
  __syncthreads();

  auto x_tile = [&](int slot) { return base + uint32_t(slot) * stage_bytes; };
  auto bitmaps_of = [&](int slot) {
    return x_tile(slot) + uint32_t(Cfg::kXBytes + wg * Cfg::kBitmapBytes);
  };
  auto values_of = [&](int slot) {
    return x_tile(slot) + uint32_t(Cfg::kXBytes + WGS * Cfg::kBitmapBytes) + wg * value_bytes;
  };
  const XSlices<Cfg> xcopy(a, n0);

  auto load_stage = [&](int step) {
    const int slot = step % STAGES;
    if (has_rows) {
      const int64_t g = g0 + step;
      if (wtid < 32) {
        tc::cp_async16(bitmaps_of(slot) + wtid * 16, w.bitmaps + g * 64 + wtid * 2, 16);
      }
      const uint32_t v0 = offsets[step];
      // A valid group holds at most value_cap values (validate checks max_group_values); the
      // clamp only keeps corrupt input inside the stage.
      const int chunks = min(int(offsets[step + 1] - v0), w.value_cap) / 8;
      const uint16_t* src = w.values + v0 + wtid * 8;
      uint32_t dst = values_of(slot) + wtid * 16;
      for (int c = wtid; c < chunks; c += 128, src += 128 * 8, dst += 128 * 16) {
        tc::cp_async16(dst, src);
      }
    }
    xcopy.copy(x_tile(slot), a, (kb + step) * tc::kTileK);
  };

  const int warp = wtid >> 5, lane = wtid & 31, g = lane >> 2;
  const NibbleLane nl = nibble_lane(lane);
  uint4(&my_records)[16] = records[4 * wg + warp];
  const uint4* my_rec = my_records + (g >= 4 ? 8 : 0);

  float acc[BLK_N / 8][4];
#pragma unroll
  for (int i = 0; i < BLK_N / 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;

  // One step: its stage has landed (this thread's copies), is permuted and published; the slot
  // of step - 2, whose MMAs every warpgroup has waited for, is refilled; the A fragments are
  // decoded into `af` (not read by any MMA in flight: those of step - 1 use the other set) and
  // the step's four MMAs are issued, after which the MMAs of step - 1 are waited for.
  auto run_step = [&](int step, uint32_t(&af)[4][4]) {
    tc::cp_async_wait<Cfg::kAhead - 1>();
    const int slot = step % STAGES;
    xcopy.permute(x_tile(slot));
    tc::fence_proxy_async();
    __syncthreads();
    if (step + Cfg::kAhead < steps) load_stage(step + Cfg::kAhead);
    tc::cp_async_commit();
    if (!has_rows) return;
    write_warp_records<SWAP>(reinterpret_cast<const uint4*>(smem + (bitmaps_of(slot) - base)),
                             values_of(slot), warp, lane, my_records);
    NibbleLoads ld[4][2];
    warp_tile_loads(my_rec, nl, lut, ld);
#pragma unroll
    for (int tk = 0; tk < 4; ++tk) {
      tile_fragment<SWAP>(ld[tk], nl, af[tk]);
    }
    tc::wgmma_fence();
    const uint64_t desc = tc::sw128_desc(x_tile(slot));
#pragma unroll
    for (int tk = 0; tk < 4; ++tk) {
      // k16 slice tk starts 32 tk bytes into every swizzled row: 2 tk in 16-byte units.
      tc::WgmmaRS<T, BLK_N>::mma(acc, af[tk], desc + uint64_t(2 * tk), 1);
    }
    tc::wgmma_commit();
    tc::wgmma_wait<Cfg::IN_FLIGHT>();
  };

  // A dependent launch may start while the kernel that writes X still runs: the offsets above
  // are read before the wait, every stage after it.
  wait_for_previous();
#pragma unroll
  for (int s = 0; s < Cfg::kAhead; ++s) {
    if (s < steps) load_stage(s);
    tc::cp_async_commit();
  }
  uint32_t af0[4][4], af1[4][4];
  for (int step = 0; step < steps; step += 2) {
    run_step(step, af0);
    if (step + 1 < steps) run_step(step + 1, af1);
  }
  tc::wgmma_wait<0>();
#pragma unroll
  for (int i = 0; i < BLK_N / 8; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) tc::fence_operand(acc[i][j]);
  }
  tc::cp_async_wait<0>();
  __syncthreads();  // the pipeline buffers become the epilogue tile
  tc::store_output<T, Cfg::BLK_M, BLK_N, Cfg::THREADS>(reinterpret_cast<float*>(smem), acc,
                                                        (int(threadIdx.x) >> 5) * 16, a,
                                                        int(blockIdx.z) * Cfg::BLK_M, n0, splits);
#else
  (void)w, (void)a, (void)splits, (void)groups_m;
  __trap();  // built for sm_90a only; the launcher never launches it elsewhere
#endif
}

template <class T, class Cfg>
Status launch(const WeightArgs& w, const tc::XYArgs& a, int groups_m, bool dependent,
              cudaStream_t stream) {
  auto kernel = w.swap_pairs ? wgmma_kernel<T, Cfg, true> : wgmma_kernel<T, Cfg, false>;
  const size_t offsets_bytes = size_t(Cfg::WGS) * (size_t(w.groups_k) + 1) * 4;
  const size_t smem =
      1024 + std::max(size_t(Cfg::STAGES) * Cfg::stage_bytes(w.value_cap) + offsets_bytes,
                      size_t(Cfg::kRedBytes));
  const int n_tiles = (a.n + Cfg::BLK_N - 1) / Cfg::BLK_N;
  const int blocks_m = (groups_m + Cfg::WGS - 1) / Cfg::WGS;
  int splits = 1;
  SPARROW_RETURN_IF_ERROR(tc::prepare_split_k(kernel, "tca_bme.wgmma", a.k, Cfg::THREADS, smem,
                                              int64_t(n_tiles) * blocks_m, w.groups_k, splits));
  return tc::launch_split_k(kernel, splits, unsigned(n_tiles), unsigned(blocks_m), Cfg::THREADS,
                            smem, stream, dependent, "tca_bme.wgmma", w, a, splits, groups_m);
}

// The one runtime -> template dispatch: N picks the column tile. H100, session 15 (A/B runs in
// bench/NOTES-tc.md): at 128 columns one MMA group in flight left one block per SM (181
// registers), and waiting for each step's MMAs (two blocks per SM at 128 registers) took
// 0.67-0.84x the time; at 256 and 512 columns the 128-wide synchronous tiles took 0.87-1.15x the
// time of 256-wide tiles with one group in flight (mixed; the wide tiles pass over W half as
// often); four group rows per block (512 threads) took 0.94-1.29x the time of two at 32 and 64
// columns (1.22-1.29x on three of the four shapes).
template <class T>
Status launch_for_n(const WeightArgs& w, const tc::XYArgs& a, int groups_m, bool dependent,
                    cudaStream_t s) {
  if (a.n <= 32) return launch<T, Config<32, 2, 4>>(w, a, groups_m, dependent, s);
  if (a.n <= 64) return launch<T, Config<64, 2, 4>>(w, a, groups_m, dependent, s);
  if (a.n <= 128) return launch<T, Config<128, 2, 4, 0>>(w, a, groups_m, dependent, s);
  return launch<T, Config<256, 2, 4>>(w, a, groups_m, dependent, s);
}

}  // namespace sparrow::kernels::tca_bme_wgmma
