// tca_bme.mma: SpInfer-style SpMM, Y = X * W^T with W in tca_bme (include/sparrow/formats/
// tca_bme.hpp).
//
// A block owns one 64-row group row of W (BLK_M = 64, four warps, warp w = tc-tile row tm = w)
// times BLK_N columns of Y, and walks its share of the 64-wide group tiles along K:
//   1. cp.async pipeline (STAGES deep): the group's 64 bitmaps (512 B), its values (compressed,
//      at most 8 KB) and the X tile (BLK_N, 64) go to shared memory; nothing is expanded.
//   2. Each thread decodes its A fragment of mma.m16n8k16 straight from the bitmaps: the format
//      stores the four 8x8 bitmaps of a 16x16 tile in the fragment's register order, so register b
//      of the fragment is bitmap b, and its two halves are bits (g*8 + 2*tig, +1). The value index
//      is the popcount of all earlier bitmaps of the group (a warp reduction for the tiles of
//      earlier warps, then a running sum) plus the popcount of the bits below.
//   3. B fragments (X^T) through ldmatrix, mma with fp32 accumulators.
//   4. Split-K over a thread-block cluster on sm_90 (deterministic DSMEM reduction), epilogue with
//      bias / accumulate (mma.cuh).
#pragma once

#include "kernels/dependent_launch.cuh"
#include "kernels/tca_bme/fragment.hpp"
#include "kernels/tensor_core/launch.cuh"
#include "kernels/tensor_core/mma.cuh"
#include "sparrow/formats/tca_bme.hpp"

namespace sparrow::kernels::tca_bme_mma {

using tc::kPitch;

// Tile configuration of one instantiation.
template <int BLK_N_, int STAGES_>
struct Config {
  static constexpr int BLK_M = 64;   // one group row
  static constexpr int BLK_N = BLK_N_;
  static constexpr int STAGES = STAGES_;
  static constexpr int THREADS = 128;  // 4 warps, one per 16-row tc-tile row
  static constexpr int kBitmapBytes = 64 * 8;              // (64) uint64
  static constexpr int kValueBytes = 64 * 64 * 2;          // (<= 4096) values of a dense group
  static constexpr int kXBytes = BLK_N * kPitch * 2;       // (BLK_N, kPitch)
  static constexpr int kStageBytes = kBitmapBytes + kValueBytes + kXBytes;
  static constexpr int kRedBytes = BLK_N * (BLK_M + 4) * 4;  // epilogue tile (BLK_N, BLK_M + 4)
};

struct WeightArgs {
  const uint64_t* bitmaps;
  const uint32_t* group_offsets;
  const uint16_t* values;
  int groups_k;
};

template <class T, class Cfg>
__global__ void __launch_bounds__(Cfg::THREADS)
    spmm_kernel(WeightArgs w, tc::XYArgs a, int splits) {
  constexpr int BLK_N = Cfg::BLK_N, STAGES = Cfg::STAGES, THREADS = Cfg::THREADS;
  extern __shared__ __align__(16) unsigned char smem[];
  // Per stage: bitmaps (64) u64 | values (4096) u16 | X tile (BLK_N, kPitch) u16.
  uint32_t* offsets = reinterpret_cast<uint32_t*>(smem + STAGES * Cfg::kStageBytes);

  let_next_launch();  // the next kernel's blocks may take SM slots this grid leaves free
  const int split = blockIdx.x, n0 = blockIdx.y * BLK_N, gm = blockIdx.z;
  const int kb = int(int64_t(w.groups_k) * split / splits);
  const int ke = int(int64_t(w.groups_k) * (split + 1) / splits);
  const int steps = ke - kb;
  const int64_t g0 = int64_t(gm) * w.groups_k + kb;  // first group of this block

  // The value offsets of this block's groups, once: each stage's copy size depends on them.
  for (int i = threadIdx.x; i <= steps; i += THREADS) offsets[i] = w.group_offsets[g0 + i];
  __syncthreads();

  auto stage_bitmaps = [&](int slot) {
    return reinterpret_cast<uint64_t*>(smem + slot * Cfg::kStageBytes);
  };
  auto stage_values = [&](int slot) {
    return reinterpret_cast<uint16_t*>(smem + slot * Cfg::kStageBytes + Cfg::kBitmapBytes);
  };
  auto stage_x = [&](int slot) {
    return reinterpret_cast<uint16_t*>(smem + slot * Cfg::kStageBytes + Cfg::kBitmapBytes +
                                       Cfg::kValueBytes);
  };
  auto load_stage = [&](int step) {
    const int slot = step % STAGES;
    const int64_t g = g0 + step;
    if (threadIdx.x < 32) {
      tc::cp_async16(stage_bitmaps(slot) + threadIdx.x * 2, w.bitmaps + g * 64 + threadIdx.x * 2, 16);
    }
    const uint32_t v0 = offsets[step];
    // A valid group holds at most 4096 values; the clamp only keeps corrupt input in bounds.
    const int chunks = min(int(offsets[step + 1] - v0), 4096) / 8;
    uint16_t* vs = stage_values(slot);
    for (int c = threadIdx.x; c < chunks; c += THREADS) {
      tc::cp_async16(vs + c * 8, w.values + v0 + c * 8, 16);
    }
    tc::load_x_tile<BLK_N, THREADS>(stage_x(slot), a, n0, (kb + step) * tc::kTileK);
  };

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const LaneBits lb = lane_bits(lane);

  float acc[BLK_N / 8][4];
#pragma unroll
  for (int i = 0; i < BLK_N / 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;

  // A dependent launch may start while the kernel that writes X still runs: the offsets above
  // are read before the wait, the first stages after it, one commit group each. Issuing those
  // stages' weights before the wait (their X after it) measured 1.10-1.13x the time at N = 8
  // with all of them in one commit group, 1.03-1.13x at N = 8..128 with a group per X tile
  // (H100, session 12): the first step then waits for more than its own stage.
  wait_for_previous();
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < steps) load_stage(s);
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
    const uint64_t* bm = stage_bitmaps(slot);
    const uint16_t* vs = stage_values(slot);
    const uint16_t* xs = stage_x(slot);
    // Values of earlier warps' tc tiles come first (order t = tm * 4 + tk): lane l counts
    // bitmaps 2l, 2l+1, and the lanes below this warp's first bitmap (warp * 16) are summed.
    const uint32_t pair = __popcll(bm[2 * lane]) + __popcll(bm[2 * lane + 1]);
    uint32_t base = __reduce_add_sync(0xffffffffu, lane < warp * 8 ? pair : 0u);
#pragma unroll
    for (int tk = 0; tk < 4; ++tk) {
      uint32_t af[4];  // A fragment: register b <- bitmap b of tc tile (warp, tk)
      // The tile's four bitmaps in two 16-byte loads, (lo, hi) halves of bitmaps 0, 1 / 2, 3.
      const uint4 w01 = reinterpret_cast<const uint4*>(bm)[(warp * 16 + tk * 4) / 2];
      const uint4 w23 = reinterpret_cast<const uint4*>(bm)[(warp * 16 + tk * 4) / 2 + 1];
      af[0] = fragment_register(w01.x, w01.y, base, lb, vs);
      af[1] = fragment_register(w01.z, w01.w, base, lb, vs);
      af[2] = fragment_register(w23.x, w23.y, base, lb, vs);
      af[3] = fragment_register(w23.z, w23.w, base, lb, vs);
      tc::mma_row_strip<T, BLK_N>(acc, af, xs, tk * 16, lane);
    }
  }
  tc::cp_async_wait<0>();
  __syncthreads();  // the pipeline buffers become the epilogue tile
  tc::store_output<T, Cfg::BLK_M, BLK_N, THREADS>(reinterpret_cast<float*>(smem), acc, warp * 16,
                                                  a, gm * Cfg::BLK_M, n0, splits);
}

template <class T, class Cfg>
Status launch(const WeightArgs& w, const tc::XYArgs& a, int groups_m, bool dependent,
              cudaStream_t stream) {
  auto kernel = spmm_kernel<T, Cfg>;
  const size_t offsets_bytes = (size_t(w.groups_k + 1) * 4 + 15) / 16 * 16;
  const size_t smem =
      std::max(size_t(Cfg::STAGES) * Cfg::kStageBytes + offsets_bytes, size_t(Cfg::kRedBytes));
  SPARROW_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  SPARROW_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
      kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
  tc::DeviceInfo d;
  SPARROW_RETURN_IF_ERROR(tc::device_info(d));
  int per_sm = 0;
  SPARROW_CUDA_RETURN_IF_ERROR(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, Cfg::THREADS, smem));
  const int n_tiles = (a.n + Cfg::BLK_N - 1) / Cfg::BLK_N;
  const int splits = tc::choose_splits(d, per_sm, int64_t(n_tiles) * groups_m, w.groups_k);
  return tc::launch_split_k(kernel, splits, unsigned(n_tiles), unsigned(groups_m), Cfg::THREADS,
                            smem, stream, dependent, "tca_bme.mma", w, a, splits);
}

// The one runtime -> template dispatch: N picks the column tile (one tile up to 64 columns, then
// 128-wide tiles), dtype is the caller's template argument.
template <class T>
Status launch_for_n(const WeightArgs& w, const tc::XYArgs& a, int groups_m, bool dependent,
                    cudaStream_t s) {
  if (a.n <= 8) return launch<T, Config<8, 3>>(w, a, groups_m, dependent, s);
  if (a.n <= 16) return launch<T, Config<16, 3>>(w, a, groups_m, dependent, s);
  if (a.n <= 32) return launch<T, Config<32, 3>>(w, a, groups_m, dependent, s);
  if (a.n <= 64) return launch<T, Config<64, 4>>(w, a, groups_m, dependent, s);
  return launch<T, Config<128, 3>>(w, a, groups_m, dependent, s);
}

}  // namespace sparrow::kernels::tca_bme_mma
