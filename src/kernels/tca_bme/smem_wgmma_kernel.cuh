// tca_bme.wgmma_smem: Y = X * W^T with W in tca_bme on Hopper, warp-specialized: one producer
// warpgroup expands the bitmap format into dense tiles in shared memory, two consumer
// warpgroups run wgmma with both operands from shared memory.
//
// Why: decoding straight into A registers (tca_bme.wgmma, tca_bme.mma) puts the decode, the
// copies and a block-wide barrier on the path of every step of the warps that also issue the
// MMAs; ncu on tca_bme.wgmma (H100, N = 128) showed ~450 instructions per thread per k step at
// ~7 cycles each, latency-bound with 8-16 warps per SM. Here the copy engine moves every byte
// (bulk copies of each group's bitmaps and values, a TMA box of X in the 128-byte swizzle), the
// producers only expand, and mbarriers replace the block barrier, so expansion of step s + 1
// overlaps the MMAs of step s.
//
// A block: BLK_M = 128 rows of W (two 64-row group rows, consumer warpgroup c owns group row
// blockIdx.z * 2 + c) times BLK_N columns of Y, over its share of the 64-wide k tiles (split-K
// over a cluster, as in tca_bme.mma). Two rings of shared-memory stages:
//   compressed (SC deep, filled DC = SC - 1 steps ahead by producer thread 0 with bulk copies,
//     completion on cload[]): each group row's 64 bitmaps and its values;
//   A/X (SA deep): the X tile (BLK_N, 64) by TMA (xload[], issued one step ahead once the
//     consumers released the stage: empty[]) and the two expanded A tiles (64, 64), written by
//     the producers (full[]). Both tiles are K-major rows of 128 bytes with the 128-byte
//     swizzle, the layout wgmma reads (kernels/tensor_core/wgmma.cuh).
// Producer thread t expands, per group, bitmap t / 2's rows 4 (t % 2) .. + 3: one 16-byte store
// per row of 8 elements, two nibble lookups and four byte permutes (nibble_decode.cuh's table),
// its values located by one warp scan of popcounts.
// Epilogue: mma.cuh's store_partial / store_reduced (split-K reduction in rank order).
#pragma once

#include <cuda.h>

#include <algorithm>
#include <string>

#include "kernels/dependent_launch.cuh"
#include "kernels/tca_bme/fragment.hpp"
#include "kernels/tca_bme/nibble_decode.cuh"
#include "kernels/tca_bme/spmm.hpp"
#include "kernels/tensor_core/bulk_copy.cuh"
#include "kernels/tensor_core/launch.cuh"
#include "kernels/tensor_core/mma.cuh"
#include "kernels/tensor_core/wgmma.cuh"

namespace sparrow::kernels::tca_bme_wgmma_smem {

using tca_bme_mma::fill_nibble_table;
using tca_bme_mma::lds_u16;
using tca_bme_mma::prmt;
using tca_bme_mma::WeightArgs;

template <int BLK_N_, int SA_, int SC_, int MIN_BLOCKS_ = 1>
struct Config {
  static constexpr int kMinBlocks = MIN_BLOCKS_;  // blocks per SM the registers are sized for
  static constexpr int BLK_N = BLK_N_;  // columns of Y per block (the wgmma N)
  static constexpr int SA = SA_;        // A/X stages
  static constexpr int SC = SC_;        // compressed stages
  static constexpr int DC = SC - 1;     // compressed data is loaded this many steps ahead
  static constexpr int BLK_M = 128;     // two group rows
  static constexpr int THREADS = 384;   // warpgroup 0 produces, 1 and 2 consume
  static constexpr int kATile = 64 * 128;       // (64, 64) fp16/bf16, one group row
  static constexpr int kXTile = BLK_N * 128;    // (BLK_N, 64)
  static constexpr int kAXStage = 2 * kATile + kXTile;  // a multiple of 1024
  static constexpr int kBitmapBytes = 64 * 8;
  static constexpr int kRedBytes = BLK_N * (BLK_M + 4) * 4;
  // Producer thread 0 waits, before expanding step s, for the consumers to release the stage of
  // step s + 1 - SA; with SA = 2 that is step s - 1, whose release needs the MMAs of step s, which
  // need thread 0's expansion of step s: a deadlock. Three stages and more are safe.
  static_assert(SC >= 2 && SA >= 3, "stages");
  // One group row's compressed data in a stage: bitmaps | values (+16 bytes the expansion may
  // read past the last value).
  static constexpr uint32_t group_bytes(int value_cap) {
    return uint32_t(kBitmapBytes + (value_cap * 2 + 16 + 15) / 16 * 16);
  }
  static constexpr uint32_t comp_stage_bytes(int value_cap) { return 2 * group_bytes(value_cap); }
  // Shared memory: compressed ring first (an expansion that reads past a stage stays inside the
  // allocation), then the A/X ring on a 1024-byte boundary, then the value offsets.
  static constexpr uint32_t ax_offset(int value_cap) {
    return (SC * comp_stage_bytes(value_cap) + 1023) / 1024 * 1024;
  }
  static constexpr uint32_t pipeline_bytes(int value_cap) {
    return ax_offset(value_cap) + SA * kAXStage;
  }
};

template <class T, class Cfg>
__global__ void __launch_bounds__(Cfg::THREADS, Cfg::kMinBlocks)
    smem_wgmma_kernel(WeightArgs w, tc::XYArgs a, const __grid_constant__ CUtensorMap x_map,
                      int splits, int groups_m) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int BLK_N = Cfg::BLK_N, SA = Cfg::SA, SC = Cfg::SC, DC = Cfg::DC;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  // The launch adds 1024 bytes so the rings can start on a 1024-byte boundary (the swizzle
  // works on address bits).
  unsigned char* smem = smem_raw + ((1024u - (tc::smem_addr(smem_raw) & 1023u)) & 1023u);
  const uint32_t base = tc::smem_addr(smem);
  const uint32_t group_bytes = Cfg::group_bytes(w.value_cap);
  const uint32_t comp_stage = Cfg::comp_stage_bytes(w.value_cap);
  const uint32_t ax_base = base + Cfg::ax_offset(w.value_cap);
  __shared__ __align__(8) uint64_t bars[3 * SA + SC];
  __shared__ uint2 lut[16];
  const uint32_t bar0 = tc::smem_addr(bars);
  auto full = [&](int i) { return bar0 + 8u * uint32_t(i); };            // A tiles expanded
  auto empty = [&](int i) { return bar0 + 8u * uint32_t(SA + i); };      // consumers done
  auto xload = [&](int i) { return bar0 + 8u * uint32_t(2 * SA + i); };  // X tile landed
  auto cload = [&](int i) { return bar0 + 8u * uint32_t(3 * SA + i); };  // compressed landed
  auto comp_at = [&](int slot) { return base + uint32_t(slot) * comp_stage; };
  auto ax_at = [&](int slot) { return ax_base + uint32_t(slot) * Cfg::kAXStage; };

  let_next_launch();
  const int tid = int(threadIdx.x), wg = tid >> 7, lane = tid & 31;
  const int split = blockIdx.x, n0 = blockIdx.y * BLK_N, gm0 = int(blockIdx.z) * 2;
  const int kb = int(int64_t(w.groups_k) * split / splits);
  const int ke = int(int64_t(w.groups_k) * (split + 1) / splits);
  const int steps = ke - kb;
  const bool rows0 = gm0 < groups_m, rows1 = gm0 + 1 < groups_m;
  // Value offsets of both group rows (steps + 1 each), read once.
  uint32_t* offsets = reinterpret_cast<uint32_t*>(smem + Cfg::pipeline_bytes(w.value_cap));
  for (int i = tid; i < 2 * (steps + 1); i += Cfg::THREADS) {
    const int r = i / (steps + 1), j = i % (steps + 1);
    offsets[i] = gm0 + r < groups_m ? w.group_offsets[int64_t(gm0 + r) * w.groups_k + kb + j] : 0u;
  }
  if (tid == 0) {
    for (int i = 0; i < SA; ++i) {
      tc::mbar_init(full(i), 128);
      tc::mbar_init(empty(i), 8);
      tc::mbar_init(xload(i), 1);
    }
    for (int i = 0; i < SC; ++i) tc::mbar_init(cload(i), 1);
    tc::mbar_init_fence();
  }
  fill_nibble_table(lut);
  __syncthreads();
  // Weights may be read before the previous kernel finished; X and Y only after.
  wait_for_previous();

  float acc[BLK_N / 8][4];
#pragma unroll
  for (int i = 0; i < BLK_N / 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;

  if (wg == 0) {
    // ---- producer warpgroup -------------------------------------------------------------------
    // Thread 0 issues every copy. Compressed data of `step` into its stage, counted on cload.
    auto issue_comp = [&](int step) {
      const int slot = step % SC;
      uint32_t bytes = 0, vb[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const uint32_t* off = offsets + r * (steps + 1);
        vb[r] = uint32_t(min(int(off[step + 1] - off[step]), w.value_cap)) * 2u;
        if (gm0 + r < groups_m) bytes += Cfg::kBitmapBytes + vb[r];
      }
      tc::mbar_arrive_expect_tx(cload(slot), bytes);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        if (gm0 + r >= groups_m) continue;
        const int64_t g = int64_t(gm0 + r) * w.groups_k + kb + step;
        const uint32_t dst = comp_at(slot) + uint32_t(r) * group_bytes;
        tc::bulk_copy(dst, w.bitmaps + g * 64, Cfg::kBitmapBytes, cload(slot));
        if (vb[r] > 0) {
          tc::bulk_copy(dst + Cfg::kBitmapBytes, w.values + offsets[r * (steps + 1) + step], vb[r],
                        cload(slot));
        }
      }
    };
    // The X tile of `step` into its A/X stage once the consumers released it, counted on xload.
    auto issue_x = [&](int step) {
      const int slot = step % SA;
      if (step >= SA) tc::mbar_wait(empty(slot), uint32_t((step / SA) - 1) & 1u);
      tc::mbar_arrive_expect_tx(xload(slot), Cfg::kXTile);
      tc::tensor_copy_2d(ax_at(slot) + 2 * Cfg::kATile, &x_map, (kb + step) * 64, n0, xload(slot));
    };
    if (tid == 0) {
      for (int s = 0; s < DC && s < steps; ++s) issue_comp(s);
      if (steps > 0) issue_x(0);
    }
    const int b = tid >> 1, h = tid & 1, pwarp = tid >> 5;
    // Bitmap b covers rows row0 .. row0 + 7, columns col0 .. col0 + 7 of its group
    // (tile_geometry.hpp's bitmap_origin); this thread expands rows row0 + 4h .. + 3.
    const int tc_tile = b >> 2, sub = b & 3;
    const int row0 = (tc_tile >> 2) * 16 + (sub & 1) * 8 + 4 * h;
    const int chunk = ((tc_tile & 3) * 16 + (sub >> 1) * 8) >> 3;
    for (int s = 0; s < steps; ++s) {
      // Every producer has finished expanding step s - 1, so its compressed stage may be
      // refilled; thread 0's wait for this step's A/X stage (in issue_x, one step ago) is
      // ordered before everyone's stores below.
      tc::named_barrier(1, 128);
      if (tid == 0) {
        if (s + DC < steps) issue_comp(s + DC);
        if (s + 1 < steps) issue_x(s + 1);
      }
      const int cslot = s % SC, aslot = s % SA;
      tc::mbar_wait(cload(cslot), uint32_t(s / SC) & 1u);
      // Both group rows at once (eight independent rows per thread: the chains of shared loads
      // overlap). A missing second group row (no copy fills its part of the stage) is expanded
      // as empty bitmaps and not stored: its stale bytes, taken as bitmaps, put the value loads
      // anywhere up to 8 KB on, into other stages that copies are filling (racecheck reported
      // it, session 43; the loaded values were never used).
      uint32_t word[2], first[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const bool present = gm0 + r < groups_m;
        const unsigned char* bm = smem + (comp_at(cslot) + uint32_t(r) * group_bytes - base);
        // The first value of this thread's half: popcounts of every earlier half (threads < tid)
        // -- earlier warps by one reduction over the halves each lane counts, this warp by a scan.
        const uint4 q = present ? reinterpret_cast<const uint4*>(bm)[lane] : make_uint4(0, 0, 0, 0);
        const uint32_t four = __popc(q.x) + __popc(q.y) + __popc(q.z) + __popc(q.w);
        first[r] = __reduce_add_sync(0xffffffffu, lane < 8 * pwarp ? four : 0u);
        word[r] = present ? reinterpret_cast<const uint32_t*>(bm)[2 * b + h] : 0u;
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const uint32_t mine = __popc(word[r]);
        uint32_t incl = mine;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
          const uint32_t u = __shfl_up_sync(0xffffffffu, incl, o);
          if (lane >= o) incl += u;
        }
        first[r] += incl - mine;
      }
      uint32_t v[2][4][8];  // values at each nibble pair's start p, p + 1 (zero-extended)
      uint2 e[2][4][2];     // the two nibbles' table entries
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const uint32_t vals = comp_at(cslot) + uint32_t(r) * group_bytes + Cfg::kBitmapBytes;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          // Row row0 + i: byte i of the half word; its values follow the earlier rows' ones.
          const uint32_t byte = (word[r] >> (8 * i)) & 0xFFu;
          const uint32_t at = vals + 2u * (first[r] + __popc(word[r] & ((1u << (8 * i)) - 1u)));
          e[r][i][0] = lut[byte & 0xFu];
          e[r][i][1] = lut[byte >> 4];
          const uint32_t at1 = at + 2u * __popc(byte & 0xFu);
          const uint32_t b0 = at + (e[r][i][0].x >> 16), b1 = at1 + (e[r][i][1].x >> 16);
          v[r][i][0] = lds_u16(at), v[r][i][1] = lds_u16(at + 2);
          v[r][i][2] = lds_u16(b0), v[r][i][3] = lds_u16(b0 + 2);
          v[r][i][4] = lds_u16(at1), v[r][i][5] = lds_u16(at1 + 2);
          v[r][i][6] = lds_u16(b1), v[r][i][7] = lds_u16(b1 + 2);
        }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        if (gm0 + r >= groups_m) continue;
        const uint32_t a_tile = ax_at(aslot) + uint32_t(r) * Cfg::kATile;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int row = row0 + i;
          sts128(a_tile + uint32_t(row * 128 + ((chunk ^ (row & 7)) << 4)),
                     make_uint4(prmt(v[r][i][0], v[r][i][1], e[r][i][0].x),
                                prmt(v[r][i][2], v[r][i][3], e[r][i][0].y),
                                prmt(v[r][i][4], v[r][i][5], e[r][i][1].x),
                                prmt(v[r][i][6], v[r][i][7], e[r][i][1].y)));
        }
      }
      tc::fence_proxy_async();
      tc::mbar_arrive(full(aslot));
    }
  } else {
    // ---- consumer warpgroups ------------------------------------------------------------------
    const int c = wg - 1;
    const bool has_rows = c == 0 ? rows0 : rows1;
    for (int s = 0; s < steps; ++s) {
      const int slot = s % SA;
      const uint32_t parity = uint32_t(s / SA) & 1u;
      tc::mbar_wait(full(slot), parity);
      tc::mbar_wait(xload(slot), parity);
      if (has_rows) {
        const uint64_t da = tc::sw128_desc(ax_at(slot) + uint32_t(c) * Cfg::kATile);
        const uint64_t db = tc::sw128_desc(ax_at(slot) + 2 * Cfg::kATile);
        tc::wgmma_fence();
#pragma unroll
        for (int tk = 0; tk < 4; ++tk) {
          tc::WgmmaSS<T, BLK_N>::mma(acc, da + uint64_t(2 * tk), db + uint64_t(2 * tk), 1);
        }
        tc::wgmma_commit();
        tc::wgmma_wait<1>();
      }
      // The MMAs of step s - 1 are complete: release its stage.
      __syncwarp();
      if (s >= 1 && lane == 0) tc::mbar_arrive(empty((s - 1) % SA));
    }
    tc::wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < BLK_N / 8; ++i) {
#pragma unroll
      for (int j = 0; j < 4; ++j) tc::fence_operand(acc[i][j]);
    }
  }
  __syncthreads();  // every copy consumed, every MMA complete: the rings become the epilogue tile
  float* red = reinterpret_cast<float*>(smem);
  if (wg > 0) tc::store_partial<Cfg::BLK_M, BLK_N>(red, acc, ((tid >> 5) - 4) * 16);
  __syncthreads();
  tc::store_reduced<T, Cfg::BLK_M, BLK_N, Cfg::THREADS>(red, a, gm0 * 64, n0, splits);
#else
  (void)w, (void)a, (void)x_map, (void)splits, (void)groups_m;
  __trap();  // built for sm_90a only; the launcher never launches it elsewhere
#endif
}

// X (N, K) as a 2D tensor map: boxes of (BLK_N rows, 64 columns) in the 128-byte swizzle, zeros
// outside. Needs X 16-byte aligned with a row pitch that is a multiple of 16 bytes.
Status make_x_map(CUtensorMap& map, const tc::XYArgs& a, int box_rows);

template <class T, class Cfg>
Status launch(const WeightArgs& w, const tc::XYArgs& a, int groups_m, bool dependent,
              cudaStream_t stream) {
  auto kernel = smem_wgmma_kernel<T, Cfg>;
  const size_t offsets_bytes = 2 * (size_t(w.groups_k) + 1) * 4;
  const size_t smem = 1024 + std::max(size_t(Cfg::pipeline_bytes(w.value_cap)) + offsets_bytes,
                                      size_t(Cfg::kRedBytes));
  const int n_tiles = (a.n + Cfg::BLK_N - 1) / Cfg::BLK_N;
  const int blocks_m = (groups_m + 1) / 2;
  int splits = 1;
  SPARROW_RETURN_IF_ERROR(tc::prepare_split_k(kernel, "tca_bme.wgmma_smem", a.k, Cfg::THREADS,
                                              smem, int64_t(n_tiles) * blocks_m, w.groups_k,
                                              splits));
  CUtensorMap x_map;
  SPARROW_RETURN_IF_ERROR(make_x_map(x_map, a, Cfg::BLK_N));
  return tc::launch_split_k(kernel, splits, unsigned(n_tiles), unsigned(blocks_m), Cfg::THREADS,
                            smem, stream, dependent, "tca_bme.wgmma_smem", w, a, x_map, splits,
                            groups_m);
}

template <class T>
Status launch_for_n(const WeightArgs& w, const tc::XYArgs& a, int groups_m, bool dependent,
                    cudaStream_t s) {
  if (a.n <= 64) return launch<T, Config<64, 3, 3, 2>>(w, a, groups_m, dependent, s);
  if (a.n <= 128) return launch<T, Config<128, 4, 4>>(w, a, groups_m, dependent, s);
  return launch<T, Config<256, 3, 4>>(w, a, groups_m, dependent, s);
}

}  // namespace sparrow::kernels::tca_bme_wgmma_smem
