// tca_bme.mma: SpInfer-style SpMM, Y = X * W^T with W in tca_bme (include/sparrow/formats/
// tca_bme.hpp).
//
// A block owns one 64-row group row of W (BLK_M = 64, four warps, warp w = tc-tile row tm = w, or
// a 2 x 2 block of tiles with Config::WC = 2) times BLK_N columns of Y, and walks its share of the
// 64-wide group tiles along K:
//   1. cp.async pipeline (STAGES deep): the group's 64 bitmaps (512 B), the X tile (BLK_N, 64)
//      and its values (compressed) go to shared memory; nothing is expanded. A stage holds as
//      many values as the weight's largest group (max_group_values), not the 4096 of a dense
//      group: at 50 % a stage's values take ~4.4 KB instead of 8 KB, and the blocks per SM that
//      shared memory then allows paid on the many-row shapes (H100, session 14). More warps per
//      SM did not pay on the 4096-row ones (session 20): there the shared-memory pipe is the
//      bound (nibble_decode.cuh, warp_tile_loads).
//   2. Each warp builds the records {32-bit half, address of its first value} of its own 16
//      bitmaps with one warp scan of the group's popcounts, then decodes its A fragments of
//      mma.m16n8k16 from them in nibble order (fragment.hpp, nibble_decode.cuh): A and B number a
//      16-column tile so that lane t holds physical columns 4t..4t+3, a lane's four elements of a
//      row are one nibble of one bitmap, one popcount, four 2-byte loads, a table load and two
//      byte permutes give two registers. The pair order used before (a popcount and two
//      predicated loads per register, the running value index kept per tile) issued 0.47-0.59
//      warp-instructions per weight element at N = 8-32 (ncu, H100, 4096x11008 at 50 %), with
//      under 3 % of them mma.
//   3. B fragments in the same order: lane (g, t) needs X[token g][4t .. 4t+3], one 8-byte shared
//      load from the X tile, whose layout (Config::XLayout) makes those loads conflict-free.
//   4. Split-K over a thread-block cluster on sm_90 (deterministic DSMEM reduction: up to 16
//      columns each block pushes the other blocks' slices to them, above it pulls), epilogue with
//      bias / accumulate (mma.cuh).
#pragma once

#include <type_traits>

#include "kernels/dependent_launch.cuh"
#include "kernels/tca_bme/fragment.hpp"
#include "kernels/tca_bme/nibble_decode.cuh"
#include "kernels/tca_bme/spmm.hpp"
#include "kernels/tensor_core/launch.cuh"
#include "kernels/tensor_core/mma.cuh"
#include "sparrow/formats/tca_bme.hpp"

namespace sparrow::kernels::tca_bme_mma {

// Tile configuration of one instantiation.
template <int BLK_N_, int STAGES_, int WC_ = 1>
struct Config {
  static constexpr int BLK_M = 64;   // one group row
  static constexpr int BLK_N = BLK_N_;
  static constexpr int STAGES = STAGES_;
  static constexpr int THREADS = 128;  // 4 warps
  // Warp columns: with WC = 1 warp w takes the 16-row tile row w for all 64 columns; with WC = 2
  // or 4 the warps split the group's 4 x 4 tiles into (4 / WC) x WC blocks of WC tile rows and
  // 4 / WC tile columns. The A decode per warp is the same four tiles; a warp reads only its
  // columns' B fragments (at 32 columns the X tile's shared reads were 4 x 4 KB per group
  // against ~5 KB of weight at 50 %), with WC times the accumulators, and warps sharing rows sum
  // their partial tiles in shared memory once at the end.
  static constexpr int WC = WC_;
  static constexpr int TM = WC, TK = 4 / WC;  // tile rows / columns per warp
  static_assert(WC == 1 || WC == 2 || WC == 4, "1, 2 or 4 warp columns");
  static_assert(WC == 1 || BLK_N <= 32, "WC x BLK_N / 2 accumulators per lane");
  static constexpr int kBitmapBytes = 64 * 8;                  // (64) uint64
  // The X tile (BLK_N, 64): rows of pitch 80 up to 32 columns (160 bytes = 40 banks put the B
  // loads of rows g = 0..3 in banks 8g .. 8g+7; every B load an immediate offset from one lane
  // address), swizzled rows from 64 (no padding: at 64 and 128 columns the X tile is most of a
  // stage, and the 20 % it saves is one more block per SM). H100, session 14, against the
  // kernel before value stages were sized by max_group_values: swizzled rows took 1.04-1.09x the
  // time at N = 8 and 0.90-1.14x at 32 (a few more instructions per step, loads issued later)
  // where pitch 80 took 0.99-1.01x and 0.88-1.01x; at N = 64 pitch 80 took 1.1-1.8x swizzled's
  // time, at 128 0.98-1.24x.
  using XLayout = std::conditional_t<(BLK_N >= 64), tc::SwizzledRows, tc::PaddedRows<80>>;
  static constexpr int kXBytes = BLK_N * XLayout::kRowStep * 2;  // (BLK_N, kRowStep)
  // A stage: bitmaps | X tile | values (the launch's value_cap) and a tail of 16 bytes the
  // nibble decode may read past the group's last value (nibble_decode.cuh) and no copy writes.
  static constexpr int kFixedStageBytes = kBitmapBytes + kXBytes;
  static constexpr int kValueTailBytes = 16;
  static constexpr int kRedBytes = BLK_N * (BLK_M + 4) * 4;  // epilogue tile (BLK_N, BLK_M + 4)
  // Split-K partial tiles are pushed to their owners (mma.cuh, store_reduced_pushed) up to 16
  // columns: A B A B against the pulled reduction on four Llama shapes at 50 / 70 / 90 %, it took
  // 0.93-0.99x the time at N = 8 and 0.95-1.03x at 16, but 1.00-1.07x at 32 and 1.05-1.24x at 64,
  // where the kernel's registers and schedule changed with it (48 -> 60, 96 -> 72) (H100,
  // session 45).
  static constexpr bool kPush = BLK_N <= 16;
  // At most 40 registers up to 16 columns, as without the push (48 with it otherwise): 12 blocks
  // per SM where shared memory allows. 0: the compiler's choice.
  static constexpr int kMinBlocks = BLK_N <= 16 ? 12 : 0;
  static constexpr size_t kEpilogueBytes =
      kPush ? tc::pushed_reduction_bytes<BLK_M, BLK_N>() : size_t(kRedBytes);
  static_assert(kFixedStageBytes % 16 == 0, "values start 16-byte aligned (cp.async)");
  // Bytes of one stage for groups of at most `value_cap` values (a multiple of 8).
  static constexpr uint32_t stage_bytes(int value_cap) {
    return uint32_t(kFixedStageBytes + value_cap * 2 + kValueTailBytes);
  }
};

template <class T, class Cfg, bool SWAP>
__global__ void __launch_bounds__(Cfg::THREADS, Cfg::kMinBlocks)
    spmm_kernel(WeightArgs w, tc::XYArgs a, int splits) {
  constexpr int BLK_N = Cfg::BLK_N, STAGES = Cfg::STAGES, THREADS = Cfg::THREADS;
  extern __shared__ __align__(16) unsigned char smem[];
  // Per stage: bitmaps (64) u64 | X tile (BLK_N, XLayout) u16 | values (value_cap) u16 + tail.
  const uint32_t stage_bytes = Cfg::stage_bytes(w.value_cap);
  uint32_t* offsets = reinterpret_cast<uint32_t*>(smem + STAGES * stage_bytes);
  // Per warp, the records of its 16 bitmaps: [j] = low halves of bitmaps 2j, 2j+1 (rows 0-3),
  // [8 + j] = high halves (rows 4-7), each {word, value address, word, value address}.
  static_assert(THREADS == 128, "records: one row per warp of four");
  __shared__ uint4 records[4][16];
  __shared__ uint2 lut[16];  // fragment.hpp's nibble_entry of every nibble
  __shared__ uint64_t push_bar;  // the split-K reduction's (Cfg::kPush)

  // The next kernel's blocks may take SM slots this grid leaves free. Letting it launch only after
  // the main loop made this kernel 0.73-1.02x the time when it follows itself under a dependent
  // launch (split-K grids of 4096-row weights gain most) but the 7B engine at batch 32, where it
  // follows norms and attention, 4733 -> 4687 t/s (H100, session 22): kept here.
  let_next_launch();
  const int split = blockIdx.x, n0 = blockIdx.y * BLK_N, gm = blockIdx.z;
  const int kb = int(int64_t(w.groups_k) * split / splits);
  const int ke = int(int64_t(w.groups_k) * (split + 1) / splits);
  const int steps = ke - kb;
  const int64_t g0 = int64_t(gm) * w.groups_k + kb;  // first group of this block

  // The value offsets of this block's groups, once: each stage's copy size depends on them.
  for (int i = threadIdx.x; i <= steps; i += THREADS) offsets[i] = w.group_offsets[g0 + i];
  fill_nibble_table(lut);
  if constexpr (Cfg::kPush) tc::init_push_barrier(&push_bar, splits);
  __syncthreads();

  auto stage_bitmaps = [&](int slot) {
    return reinterpret_cast<uint64_t*>(smem + slot * stage_bytes);
  };
  auto stage_x = [&](int slot) {
    return reinterpret_cast<uint16_t*>(smem + slot * stage_bytes + Cfg::kBitmapBytes);
  };
  auto stage_values = [&](int slot) {
    return reinterpret_cast<uint16_t*>(smem + slot * stage_bytes + Cfg::kFixedStageBytes);
  };
  const tc::XTileCopy<BLK_N, THREADS, typename Cfg::XLayout> copy_x(a, n0, stage_x(0));

  // A stage is the group's weight (bitmaps, values) and its X tile; under a dependent launch the
  // weight may be copied before the previous kernel finishes, X only after.
  auto load_weight = [&](int step) {
    const int slot = step % STAGES;
    const int64_t g = g0 + step;
    if (threadIdx.x < 32) {
      tc::cp_async16(stage_bitmaps(slot) + threadIdx.x * 2, w.bitmaps + g * 64 + threadIdx.x * 2,
                     16);
    }
    const uint32_t v0 = offsets[step];
    // A valid group holds at most value_cap values (validate checks max_group_values); the clamp
    // only keeps corrupt input inside the stage.
    const int chunks = min(int(offsets[step + 1] - v0), w.value_cap) / 8;
    const uint16_t* src = w.values + v0 + threadIdx.x * 8;
    uint32_t dst = tc::smem_addr(stage_values(slot)) + threadIdx.x * 16;
    for (int c = threadIdx.x; c < chunks; c += THREADS, src += THREADS * 8, dst += THREADS * 16) {
      tc::cp_async16(dst, src);
    }
  };
  auto load_x = [&](int step) {
    const int slot = step % STAGES;
    copy_x(stage_x(slot), uint32_t(slot) * stage_bytes, a, n0, (kb + step) * tc::kTileK);
  };
  auto load_stage = [&](int step) {
    load_weight(step);
    load_x(step);
  };

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  const NibbleLane nl = nibble_lane(lane);
  // The lane's records: rows 0-3 or 4-7 of each 8x8 bitmap (g < 4 or not).
  const uint4* my_rec = records[warp] + (g >= 4 ? 8 : 0);

  float acc[Cfg::TM][BLK_N / 8][4];  // the sums of the warp's TM 16-row tiles
#pragma unroll
  for (int m = 0; m < Cfg::TM; ++m)
#pragma unroll
    for (int i = 0; i < BLK_N / 8; ++i) acc[m][i][0] = acc[m][i][1] = acc[m][i][2] = acc[m][i][3] = 0.f;

  // A dependent launch may start while the kernel that writes X still runs: the offsets above
  // and the first stage's weight are read before the wait, the first stage's X and the other
  // stages after it, one commit group per stage (the first step waits for its own stage only).
  // Issuing every prologue stage's weight before the wait measured 1.10-1.13x the time at N = 8
  // with all of them in one commit group, 1.03-1.13x at N = 8..128 with a group per X tile; the
  // first stage's weight alone (this code) 0.96-1.01x at N = 8 and 0.96-0.99x at N = 32 under
  // `sparrow bench --dependent-launch`, 0.99-1.01x without, and the 7B engine at batch 32 (50 %)
  // 4627 -> 4691 t/s (H100, session 22, same call).
  if (steps > 0) load_weight(0);
  wait_for_previous();
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < steps) {
      if (s > 0) load_weight(s);
      load_x(s);
    }
    tc::cp_async_commit();
  }
  for (int step = 0; step < steps; ++step) {
    tc::cp_async_wait<STAGES - 2>();
    __syncthreads();
    // The slot refilled here was last read in step - 1, which every thread finished before the
    // barrier above.
    if (step + STAGES - 1 < steps) load_stage(step + STAGES - 1);
    tc::cp_async_commit();

    const int slot = step % STAGES;
    const uint16_t* xs = stage_x(slot);
    // The records of the previous step were last read before the barrier above.
    write_warp_records<SWAP, Cfg::WC>(reinterpret_cast<const uint4*>(stage_bitmaps(slot)),
                                      tc::smem_addr(stage_values(slot)), warp, lane,
                                      records[warp]);
    NibbleLoads ld[4][2];  // the warp's tiles i = 0..3 (WC = 1: tk = i)
    warp_tile_loads(my_rec, nl, lut, ld);
    if constexpr (Cfg::WC == 1) {
#pragma unroll
      for (int tk = 0; tk < 4; ++tk) {
        uint32_t af[4];  // a0a1: row g, columns 4t, 4t+1; a2a3: row g+8; a4a5 / a6a7: 4t+2, 4t+3
        tile_fragment<SWAP>(ld[tk], nl, af);
#pragma unroll
        for (int nt = 0; nt < BLK_N / 8; ++nt) {
          // X row nt * 8 + g, columns 16 tk + 4 t4 .. + 3 (both layouts keep a 16-byte piece
          // whole, so the 4 t4 can be added to the piece-pair's start).
          const uint2 bx = *reinterpret_cast<const uint2*>(
              xs + Cfg::XLayout::index(nt * 8 + g, tk * 16) + 4 * t4);
          tc::mma_16816<T>(acc[0][nt], af, bx.x, bx.y);
        }
      }
    } else {
      // The B fragments of the warp's TK tile columns, once for its TM tile rows.
      constexpr int TM = Cfg::TM, TK = Cfg::TK;
      const int tk0 = (warp % Cfg::WC) * TK;
      uint2 bx[TK][BLK_N / 8];
#pragma unroll
      for (int k = 0; k < TK; ++k)
#pragma unroll
        for (int nt = 0; nt < BLK_N / 8; ++nt) {
          bx[k][nt] = *reinterpret_cast<const uint2*>(
              xs + Cfg::XLayout::index(nt * 8 + g, (tk0 + k) * 16) + 4 * t4);
        }
#pragma unroll
      for (int i = 0; i < TM * TK; ++i) {
        uint32_t af[4];
        tile_fragment<SWAP>(ld[i], nl, af);
#pragma unroll
        for (int nt = 0; nt < BLK_N / 8; ++nt) {
          tc::mma_16816<T>(acc[i / TK][nt], af, bx[i % TK][nt].x, bx[i % TK][nt].y);
        }
      }
    }
  }
  tc::cp_async_wait<0>();
  __syncthreads();  // the pipeline buffers become the epilogue tile
  float* red = reinterpret_cast<float*>(smem);  // (BLK_N, BLK_M + 4)
  if constexpr (Cfg::WC == 1) {
    tc::store_partial<Cfg::BLK_M, BLK_N>(red, acc[0], warp * 16);
  } else {
    // The WC warps of a warp row hold partial sums of the same TM tile rows: the first writes
    // them, the others add theirs in turn, then the usual reduction and store.
    const int row0 = (warp / Cfg::WC) * Cfg::TM * 16;
#pragma unroll 1
    for (int c = 0; c < Cfg::WC; ++c) {
      if (warp % Cfg::WC == c) {
#pragma unroll
        for (int tm = 0; tm < Cfg::TM; ++tm) {
          if (c == 0) {
            tc::store_partial<Cfg::BLK_M, BLK_N>(red, acc[tm], row0 + tm * 16);
          } else {
            tc::store_partial<Cfg::BLK_M, BLK_N, true>(red, acc[tm], row0 + tm * 16);
          }
        }
      }
      __syncthreads();
    }
  }
  if constexpr (Cfg::kPush) {
    tc::store_reduced_pushed<T, Cfg::BLK_M, BLK_N, THREADS>(red, &push_bar, a, gm * Cfg::BLK_M,
                                                            n0, splits);
  } else {
    tc::store_reduced<T, Cfg::BLK_M, BLK_N, THREADS>(red, a, gm * Cfg::BLK_M, n0, splits);
  }
}

template <class T, class Cfg>
Status launch(const WeightArgs& w, const tc::XYArgs& a, int groups_m, bool dependent,
              cudaStream_t stream) {
  // The record swap only orders loads (either order is correct); warp columns leave it off (they
  // run where the weight's density keeps it off anyway: warp_columns_for).
  auto kernel = spmm_kernel<T, Cfg, false>;
  if constexpr (Cfg::WC == 1) {
    if (w.swap_pairs) kernel = spmm_kernel<T, Cfg, true>;
  }
  const size_t offsets_bytes = (size_t(w.groups_k + 1) * 4 + 15) / 16 * 16;
  const size_t smem = std::max(size_t(Cfg::STAGES) * Cfg::stage_bytes(w.value_cap) + offsets_bytes,
                               Cfg::kEpilogueBytes);
  const int n_tiles = (a.n + Cfg::BLK_N - 1) / Cfg::BLK_N;
  // Splits by waves of the clusters that fit at once: against choose_splits (fill every block
  // slot once) 0.67-1.02x the time at N = 8..128 except 1.15x on 28672x8192 at 50 %, N = 64, and
  // the 7B engine at batch 32 (tca_bme weights) 3973 -> 4404 t/s at 50 %, 5044 -> 5345 at 90 %
  // (H100, session 15).
  int splits = 1;
  SPARROW_RETURN_IF_ERROR(tc::prepare_split_k(kernel, "tca_bme.mma", a.k, Cfg::THREADS, smem,
                                              int64_t(n_tiles) * groups_m, w.groups_k, splits));
  return tc::launch_split_k(kernel, splits, unsigned(n_tiles), unsigned(groups_m), Cfg::THREADS,
                            smem, stream, dependent, "tca_bme.mma", w, a, splits);
}

// The one runtime -> template dispatch: N picks the column tile (one tile up to 64 columns, then
// 128-wide tiles), dtype is the caller's template argument. Two stages up to 16 columns: the
// kernel is bound by its warps' shared-memory latency chains, not by loads in flight, and
// smaller stages fit more blocks per SM, which also gives the shapes with many group rows more
// split-K blocks (H100, session 13, with 8 KB value stages: 8 blocks per SM instead of 5,
// 0.86-0.92x the time of three stages on 11008x4096 and 28672x8192 at N = 16, within 2 %
// elsewhere). 32 columns keep three: alone two measured 0.90-0.94x there too, but the 7B engine
// at batch 32 (50 %) ran 4155 t/s with two against 4279 with three. At 17..32 columns a weight
// below density 0.34 runs 2 x 2 warp tiles (Config::WC, warp_columns_for); four warp columns
// (one 16-column tile column per warp, 128 registers) measured 0.87-0.97x on 4096x11008 but
// 1.08-1.28x on the many-row shapes at N = 32 (session 43), and are not instantiated.
template <class T>
Status launch_for_n(const WeightArgs& w, const tc::XYArgs& a, int groups_m, bool dependent,
                    cudaStream_t s) {
  // SPARROW_TCA_MMA_WC=1|2 (experiments, read once): the warp columns at N = 17..32 for every
  // weight; unset: WeightArgs::warp_columns.
  static const int wc = env_knob("SPARROW_TCA_MMA_WC", 0);
  if (a.n <= 8) return launch<T, Config<8, 2>>(w, a, groups_m, dependent, s);
  if (a.n <= 16) return launch<T, Config<16, 2>>(w, a, groups_m, dependent, s);
  if (a.n <= 32) {
    if (wc == 2 || (wc == 0 && w.warp_columns)) {
      return launch<T, Config<32, 3, 2>>(w, a, groups_m, dependent, s);
    }
    return launch<T, Config<32, 3>>(w, a, groups_m, dependent, s);
  }
  if (a.n <= 64) return launch<T, Config<64, 4>>(w, a, groups_m, dependent, s);
  return launch<T, Config<128, 3>>(w, a, groups_m, dependent, s);
}

}  // namespace sparrow::kernels::tca_bme_mma
