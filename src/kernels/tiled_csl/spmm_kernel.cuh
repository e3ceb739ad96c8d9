// tiled_csl.mma: Flash-LLM-style SpMM, Y = X * W^T with W in tiled_csl (include/sparrow/formats/
// tiled_csl.hpp): "load as sparse, compute as dense".
//
// A block owns one 128-row tile row of W (BLK_M = 128, eight warps of 16 rows) times BLK_N columns
// of Y, and walks its share of the 128x64 tiles along K. Per step i:
//   a. the entries of tile i, already in registers, are scattered into a zeroed shared tile
//      A[i % 3] (128, kPitch); entries beyond the register budget (tiles denser than
//      kRegEntries * THREADS / 8192) are loaded and scattered in further chunks, so any tile
//      density works, up to fully dense;
//   b. A[(i + 1) % 3] is zeroed for the next step (three buffers let one barrier per step order
//      zero -> scatter -> read);
//   c. barrier;
//   d. the entries of tile i + 2 are loaded global -> registers (two register sets) and its X
//      tile is copied with cp.async (three buffers): two tiles of loads are in flight while
//   e. the warps compute tile i densely (ldmatrix A and X, mma.m16n8k16, fp32 accumulators).
// Split-K across a thread-block cluster (sm_90) and the bias / accumulate epilogue: mma.cuh.
#pragma once

#include "kernels/tensor_core/launch.cuh"
#include "kernels/tensor_core/mma.cuh"
#include "sparrow/formats/tiled_csl.hpp"

namespace sparrow::kernels::tiled_csl_mma {

using tc::kPitch;

template <int BLK_N_, int REG_ENTRIES_>
struct Config {
  static constexpr int BLK_M = 128;  // one tile row
  static constexpr int BLK_N = BLK_N_;
  static constexpr int THREADS = 256;  // 8 warps x 16 rows
  // Entries each thread holds per register set (two sets): REG_ENTRIES * 256 / 8192 is the tile
  // density up to which a tile's entries are fully prefetched.
  static constexpr int kRegEntries = REG_ENTRIES_;
  static constexpr int kABytes = BLK_M * kPitch * 2;  // (BLK_M, kPitch), three buffers
  static constexpr int kXBytes = BLK_N * kPitch * 2;  // (BLK_N, kPitch), three buffers
  static constexpr int kPipeBytes = 3 * kABytes + 3 * kXBytes;
  static constexpr int kRedBytes = BLK_N * (BLK_M + 4) * 4;
};

struct WeightArgs {
  const uint32_t* tile_offsets;
  const uint32_t* entries;
  int tiles_k;
};

constexpr uint32_t kNoEntry = 0xFFFFFFFFu;  // location 0xFFFF: outside any tile, skipped

__device__ __forceinline__ void scatter_entry(uint16_t* as, uint32_t e) {
  const uint32_t loc = e >> 16;
  if (loc < 128 * 64) as[(loc >> 6) * kPitch + (loc & 63)] = uint16_t(e & 0xFFFFu);
}

template <int THREADS>
__device__ __forceinline__ void zero_tile(uint16_t* as) {
  constexpr int kChunks = 128 * kPitch / 8;
  for (int c = threadIdx.x; c < kChunks; c += THREADS) {
    reinterpret_cast<uint4*>(as)[c] = make_uint4(0, 0, 0, 0);
  }
}

template <class T, class Cfg>
__global__ void __launch_bounds__(Cfg::THREADS)
    spmm_kernel(WeightArgs w, tc::XYArgs a, int splits) {
  constexpr int BLK_N = Cfg::BLK_N, THREADS = Cfg::THREADS, E = Cfg::kRegEntries;
  extern __shared__ __align__(16) unsigned char smem[];
  uint16_t* a_tiles = reinterpret_cast<uint16_t*>(smem);                     // 3 x (128, kPitch)
  uint16_t* x_tiles = reinterpret_cast<uint16_t*>(smem + 3 * Cfg::kABytes);  // 3 x (BLK_N, kPitch)
  uint32_t* offsets = reinterpret_cast<uint32_t*>(smem + Cfg::kPipeBytes);   // (steps + 1)

  const int split = blockIdx.x, n0 = blockIdx.y * BLK_N, tm = blockIdx.z;
  const int kb = int(int64_t(w.tiles_k) * split / splits);
  const int ke = int(int64_t(w.tiles_k) * (split + 1) / splits);
  const int steps = ke - kb;
  const int64_t t0 = int64_t(tm) * w.tiles_k + kb;

  auto x_tile = [&](int step) { return x_tiles + (step % 3) * (BLK_N * kPitch); };
  auto a_tile = [&](int step) { return a_tiles + (step % 3) * (128 * kPitch); };

  for (int i = threadIdx.x; i <= steps; i += THREADS) offsets[i] = w.tile_offsets[t0 + i];
  zero_tile<THREADS>(a_tile(0));
  // X tiles of steps 0 and 1: one cp.async group each.
  for (int s = 0; s < 2; ++s) {
    if (s < steps) tc::load_x_tile<BLK_N, THREADS>(x_tile(s), a, n0, (kb + s) * tc::kTileK);
    tc::cp_async_commit();
  }
  __syncthreads();

  // Two register sets, two tiles ahead: set (step % 2) holds tile `step`'s first E * THREADS
  // entries (thread t: entries t, t + THREADS, ...). Loading tile step + 2 while computing step
  // keeps two tiles of loads in flight per block.
  auto load_regs = [&](uint32_t(&regs)[E], int step) {
    const uint32_t start = offsets[step];
    const int count = int(offsets[step + 1] - start);
#pragma unroll
    for (int j = 0; j < E; ++j) {
      // Slots past the tile's entries are skipped block-uniformly (sparse tiles use few slots).
      if (j * THREADS < count) {
        const int idx = int(threadIdx.x) + j * THREADS;
        regs[j] = idx < count ? w.entries[start + idx] : kNoEntry;
      }
    }
  };
  uint32_t regs0[E], regs1[E];
  if (steps > 0) load_regs(regs0, 0);
  if (steps > 1) load_regs(regs1, 1);

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float acc[BLK_N / 8][4];
#pragma unroll
  for (int i = 0; i < BLK_N / 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;

  auto run_step = [&](int step, uint32_t(&regs)[E]) {
    uint16_t* as = a_tile(step);
    // a. scatter: registers first, then any entries beyond the register budget.
    {
      const uint32_t start = offsets[step];
      const int count = int(offsets[step + 1] - start);
#pragma unroll
      for (int j = 0; j < E; ++j) {
        if (j * THREADS < count) scatter_entry(as, regs[j]);
      }
      for (int idx = E * THREADS + int(threadIdx.x); idx < count; idx += THREADS) {
        scatter_entry(as, w.entries[start + idx]);
      }
    }
    // b. zero the A buffer of step + 1 (last read at step - 2, before the previous barrier).
    if (step + 1 < steps) zero_tile<THREADS>(a_tile(step + 1));
    // c. X tile `step` has landed (the group of step + 1 may still be in flight).
    tc::cp_async_wait<1>();
    __syncthreads();
    // d. prefetch step + 2 while computing step; its X buffer was last read at step - 1.
    if (step + 2 < steps) {
      load_regs(regs, step + 2);
      tc::load_x_tile<BLK_N, THREADS>(x_tile(step + 2), a, n0, (kb + step + 2) * tc::kTileK);
    }
    tc::cp_async_commit();
    // e. dense compute on the expanded tile.
    const uint16_t* xs = x_tile(step);
    const int q = lane >> 3, r = lane & 7;
#pragma unroll
    for (int kk = 0; kk < tc::kTileK; kk += 16) {
      uint32_t af[4];
      tc::ldmatrix_x4(af, as + (warp * 16 + r + (q & 1) * 8) * kPitch + kk + (q >> 1) * 8);
      tc::mma_row_strip<T, BLK_N>(acc, af, xs, kk, lane);
    }
  };
  for (int step = 0; step < steps; step += 2) {
    run_step(step, regs0);
    if (step + 1 < steps) run_step(step + 1, regs1);
  }
  tc::cp_async_wait<0>();
  __syncthreads();  // the pipeline buffers become the epilogue tile
  tc::store_output<T, Cfg::BLK_M, BLK_N, THREADS>(reinterpret_cast<float*>(smem), acc, warp * 16,
                                                  a, tm * Cfg::BLK_M, n0, splits);
}

template <class T, class Cfg>
Status launch(const WeightArgs& w, const tc::XYArgs& a, int tiles_m, cudaStream_t stream) {
  auto kernel = spmm_kernel<T, Cfg>;
  const size_t offsets_bytes = (size_t(w.tiles_k + 1) * 4 + 15) / 16 * 16;
  const size_t smem = std::max(size_t(Cfg::kPipeBytes) + offsets_bytes, size_t(Cfg::kRedBytes));
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
  const int splits = tc::choose_splits(d, per_sm, int64_t(n_tiles) * tiles_m, w.tiles_k);
  return tc::launch_split_k(kernel, splits, unsigned(n_tiles), unsigned(tiles_m), Cfg::THREADS,
                            smem, stream, /*dependent=*/false, "tiled_csl.mma", w, a, splits);
}

// The one runtime -> template dispatch: N picks the column tile.
template <class T>
Status launch_for_n(const WeightArgs& w, const tc::XYArgs& a, int tiles_m, cudaStream_t s) {
  if (a.n <= 8) return launch<T, Config<8, 20>>(w, a, tiles_m, s);
  if (a.n <= 16) return launch<T, Config<16, 20>>(w, a, tiles_m, s);
  if (a.n <= 32) return launch<T, Config<32, 20>>(w, a, tiles_m, s);
  if (a.n <= 64) return launch<T, Config<64, 20>>(w, a, tiles_m, s);
  return launch<T, Config<128, 12>>(w, a, tiles_m, s);
}

}  // namespace sparrow::kernels::tiled_csl_mma
