// dense.gemv's sm_90 pipeline: the copy engine streams W, the tensor cores do the rest.
//
// Why: the register kernel (gemv.cu) holds a lane's weight bytes in registers, so a warp has
// loads in flight only between issuing them and its mmas; on the H200 it reached 71 % of DRAM
// peak where a plain streaming read reaches 94 % (ncu, session 47), latency-bound at 24 warps per
// SM with a partial last wave. Here a producer warp keeps up to `stages` bulk copies per row
// ahead of the mmas, so the bytes in flight per block are stages x 8 KB whatever the warps do,
// and the launch is sized so every tile has a resident block when it can (plan_bulk).
//
// A block runs 16-row tiles (blockIdx.x, + gridDim.x, ...). Per tile the producer (the last
// warp; lane r copies row r) fills stage buffers of (16 rows, kStageK columns) in K order, each
// counted on its `full` mbarrier; the kConsumerWarps consumer warps split each stage's 32
// 32-column steps (warp c takes steps c, c + 4, ...), feed them to mma.m16n8k16 exactly as the
// register kernel does (a lane's 16-byte chunk of rows g and g + 8 is used as logical columns
// {2t, 2t+1, 2t+8, 2t+9} of two mmas, for A and B alike), and arrive on the stage's `empty`
// mbarrier (every consumer thread), which lets the producer refill it. At the end of a tile the consumers add their
// partial sums in shared memory behind a named barrier of their own (the producer is by then
// copying the next tile and must not be waited for).
#include <algorithm>
#include <cstdint>

#include "core/cuda_check.hpp"
#include "kernels/decode_common.cuh"
#include "kernels/dense/gemv.hpp"
#include "kernels/dependent_launch.cuh"
#include "kernels/per_device_cache.hpp"
#include "kernels/shared_memory.cuh"
#include "kernels/tensor_core/bulk_copy.cuh"

namespace sparrow::kernels::dense_gemv {

using namespace decode;

namespace {

using C = BulkConfig;
constexpr int kThreads = (C::kConsumerWarps + 1) * 32;
constexpr int kStepsPerStage = C::kStageK / 32;  // 32-column mma steps (4 lanes x 8 columns)
static_assert(kStepsPerStage % C::kConsumerWarps == 0, "consumer warps split a stage's steps");

// NT: 8-token mma N tiles (1 for n <= 8, 2 for n <= 16). RMS: MatmulOptions::input_rms, summed by
// the tensor cores as in the register kernel (gemv.cu): the consumers together read every X chunk
// once per tile.
template <class T, int NT, bool RMS>
__global__ void __launch_bounds__(kThreads)
    gemv_bulk_kernel(const T* __restrict__ w, int64_t ldw, int64_t m, int64_t k,
                     const T* __restrict__ x, int64_t ldx, int n, T* __restrict__ y, int64_t ldy,
                     const T* __restrict__ bias, bool accumulate, bool x_vec, float rms_eps,
                     int stages) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) unsigned char stage_raw[];  // (stages, kRows, kRowPitch)
  __shared__ __align__(8) uint64_t full[C::kMaxStages], empty[C::kMaxStages];
  __shared__ float partial[C::kConsumerWarps][NT * 4][32];        // (warp, acc register, lane)
  __shared__ float sum_sq[RMS ? C::kConsumerWarps : 1][16];       // (warp, token), RMS only
  let_next_launch();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t tiles = (m + C::kRows - 1) / C::kRows;
  const int64_t k_stages = (ldw + C::kStageK - 1) / C::kStageK;  // stages per tile
  const uint32_t stage0 = static_cast<uint32_t>(__cvta_generic_to_shared(stage_raw));
  const uint32_t full0 = static_cast<uint32_t>(__cvta_generic_to_shared(&full[0]));
  const uint32_t empty0 = static_cast<uint32_t>(__cvta_generic_to_shared(&empty[0]));
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      tc::mbar_init(full0 + 8u * s, 1);
      tc::mbar_init(empty0 + 8u * s, C::kConsumerWarps * 32);
    }
    tc::mbar_init_fence();
  }
  __syncthreads();

  if (warp == C::kConsumerWarps) {
    // Producer. It reads W only, so it never waits for the kernel that writes X (dependent
    // launch): its first `stages` copies overlap that kernel. Stage buffer s and the parity of
    // its current use advance together (no 64-bit division in the loop).
    int s = 0;
    uint32_t phase = 0;  // parity of buffer s's current use
    bool refill = false;  // buffer s has been used before (its `empty` phase must complete)
    for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
      const int64_t row0 = tile * C::kRows;
      const int rows = m - row0 < C::kRows ? int(m - row0) : C::kRows;
      for (int64_t k0 = 0; k0 < ldw; k0 += C::kStageK) {
        // The consumers' release of the buffer's previous use (parity phase ^ 1).
        if (refill) tc::mbar_wait(empty0 + 8u * s, phase ^ 1u);
        const uint32_t bytes = uint32_t(ldw - k0 < C::kStageK ? ldw - k0 : C::kStageK) * 2u;
        if (lane == 0) tc::mbar_arrive_expect_tx(full0 + 8u * s, bytes * uint32_t(rows));
        __syncwarp();
        // Rows past m are not copied: their stale shared memory only reaches D's rows past m,
        // which are not stored.
        if (lane < rows) {
          tc::bulk_copy(stage0 + uint32_t(s) * C::kStageBytes + uint32_t(lane) * C::kRowPitch,
                        w + (row0 + lane) * ldw + k0, bytes, full0 + 8u * s);
        }
        if (++s == stages) s = 0, phase ^= 1u, refill = true;
      }
    }
    return;
  }

  // Consumers. A warp's steps of a stage are q = warp + 4i (i = 0..7), taken in pairs; the X
  // chunks of the next pair are loaded while the current pair's mmas run (X comes from L2 more
  // often than not: the stages leave L1 little room), the first pair's before the stage's wait.
  wait_for_previous();
  const int g = lane >> 2, t = lane & 3;
  const int64_t chunks = ldw / 8;  // 16-byte chunks per (padded) row
  const uint4 zero = make_uint4(0, 0, 0, 0);
  constexpr int kPairs = kStepsPerStage / C::kConsumerWarps / 2;  // this warp's pairs per stage
  // Chunk of step u (0, 1) of pair p in stage ks for this lane.
  auto chunk_of = [&](int64_t ks, int p, int u) {
    const int q = warp + (2 * p + u) * C::kConsumerWarps;  // step within the stage
    return ks * (C::kStageK / 8) + q * 4 + t;
  };
  auto load_x_pair = [&](int64_t ks, int p, uint4 (&b)[2][NT]) {
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const int64_t chunk = chunk_of(ks, p, u);
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const int token = g + 8 * j;
        b[u][j] = (chunk < chunks && token < n)
                      ? load_x8(x + int64_t(token) * ldx, chunk * 8, k, x_vec)
                      : zero;
      }
    }
  };
  int s = 0;
  uint32_t phase = 0;  // parity of buffer s's current use, as the producer's
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    float acc[NT][4];
    float ss[NT][4];  // RMS: Gram-matrix accumulators of X (token g's sum of x^2 on the diagonal)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[j][c] = ss[j][c] = 0.f;
    uint4 b_next[2][NT];  // (step of the pair, tokens g and g + 8)
    load_x_pair(0, 0, b_next);
    for (int64_t ks = 0; ks < k_stages; ++ks) {
      tc::mbar_wait(full0 + 8u * s, phase);
      const uint32_t sb = stage0 + uint32_t(s) * C::kStageBytes;
#pragma unroll
      for (int p = 0; p < kPairs; ++p) {
        uint4 b[2][NT];
#pragma unroll
        for (int u = 0; u < 2; ++u)
#pragma unroll
          for (int j = 0; j < NT; ++j) b[u][j] = b_next[u][j];
        if (p + 1 < kPairs) {
          load_x_pair(ks, p + 1, b_next);
        } else if (ks + 1 < k_stages) {
          load_x_pair(ks + 1, 0, b_next);
        }
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          const int q = warp + (2 * p + u) * C::kConsumerWarps;
          // Chunks past the row's (padded) end were not copied in this stage: zero, not stale.
          const bool in_k = chunk_of(ks, p, u) < chunks;
          const uint32_t a_lo = sb + uint32_t(g) * C::kRowPitch + uint32_t(q * 64 + t * 16);
          const uint4 r0 = in_k ? lds128(a_lo) : zero;                     // row g
          const uint4 r1 = in_k ? lds128(a_lo + 8u * C::kRowPitch) : zero;  // row g + 8
          const uint32_t lo[4] = {r0.x, r1.x, r0.y, r1.y};  // physical elements 0..3
          const uint32_t hi[4] = {r0.z, r1.z, r0.w, r1.w};  // physical elements 4..7
#pragma unroll
          for (int j = 0; j < NT; ++j) {
            mma_16816<T>(acc[j], lo, b[u][j].x, b[u][j].y);
            mma_16816<T>(acc[j], hi, b[u][j].z, b[u][j].w);
            if constexpr (RMS) {
              // A = this step's X chunks as rows g (rows g + 8 zero): x_g . x_g on D's diagonal.
              const uint32_t xlo[4] = {b[u][j].x, 0u, b[u][j].y, 0u};
              const uint32_t xhi[4] = {b[u][j].z, 0u, b[u][j].w, 0u};
              mma_16816<T>(ss[j], xlo, b[u][j].x, b[u][j].y);
              mma_16816<T>(ss[j], xhi, b[u][j].z, b[u][j].w);
            }
          }
        }
      }
      // Every consumer thread releases the stage after its own reads (an arrival each: the
      // count is the consumers' threads), so no read of it can be reordered past the refill.
      tc::mbar_arrive(empty0 + 8u * s);
      if (++s == stages) s = 0, phase ^= 1u;
    }

    // The consumers' sums of the tile meet in shared memory (named barrier 1: consumers only).
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) partial[warp][j * 4 + c][lane] = acc[j][c];
    if constexpr (RMS) {
      // D[g][g] sits in lane (g, g / 2), register g % 2.
#pragma unroll
      for (int j = 0; j < NT; ++j)
        if (t == g / 2) sum_sq[warp][g + 8 * j] = (g & 1) ? ss[j][1] : ss[j][0];
    }
    constexpr int kConsumerThreads = C::kConsumerWarps * 32;
    tc::named_barrier(1, kConsumerThreads);
    const int64_t row0 = tile * C::kRows;
    for (int idx = threadIdx.x; idx < NT * 4 * 32; idx += kConsumerThreads) {
      const int r = idx / 32, l = idx % 32;
      float sum = 0.f;
#pragma unroll
      for (int v = 0; v < C::kConsumerWarps; ++v) sum += partial[v][r][l];
      const int c = r % 4, j = r / 4;
      const int64_t row = row0 + (l >> 2) + (c >= 2 ? 8 : 0);
      const int token = 8 * j + 2 * (l & 3) + (c & 1);
      if (row < m && token < n) {
        if constexpr (RMS) {
          float sq = 0.f;
#pragma unroll
          for (int v = 0; v < C::kConsumerWarps; ++v) sq += sum_sq[v][token];
          sum *= rms_scale(sq, k, rms_eps);
        }
        store_output(y + int64_t(token) * ldy + row, sum, bias, row, accumulate);
      }
    }
    // The next tile's partial sums overwrite these.
    tc::named_barrier(1, kConsumerThreads);
  }
#endif
}

template <class T, int NT, bool RMS>
int blocks_per_sm(int stages) {
  int b = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, gemv_bulk_kernel<T, NT, RMS>, kThreads,
                                                    size_t(stages) * C::kStageBytes) !=
      cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return b;
}

template <class T, int NT, bool RMS>
Status launch_instance(const BulkPass& p, int sm_count, cudaStream_t stream) {
  auto kernel = gemv_bulk_kernel<T, NT, RMS>;
  struct Residency {
    int blocks_per_sm[C::kMaxStages + 1] = {};
  };
  SPARROW_ASSIGN_OR_RETURN(
      const Residency r, per_device_kernel_value<Residency>(kernel, []() -> Result<Residency> {
        // More than 48 KB of dynamic shared memory needs the opt-in (kMaxStages stages: 66 KB).
        SPARROW_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
            gemv_bulk_kernel<T, NT, RMS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
            int(size_t(C::kMaxStages) * C::kStageBytes)));
        Residency res;
        for (int s = C::kMinStages; s <= C::kMaxStages; ++s) {
          res.blocks_per_sm[s] = blocks_per_sm<T, NT, RMS>(s);
        }
        return res;
      }));
  // SPARROW_GEMV_STAGES=2..8 forces the stage count (experiments; read once).
  static const int stages_knob = env_knob("SPARROW_GEMV_STAGES", 0);
  const int64_t tiles = (p.m + C::kRows - 1) / C::kRows;
  const BulkPlan plan = plan_bulk(tiles, sm_count, r.blocks_per_sm, stages_knob);
  if (plan.blocks <= 0) return Status::success();
  return cuda_status(
      launch_kernel(p.dependent, kernel, dim3(unsigned(plan.blocks)), dim3(kThreads),
                    size_t(plan.stages) * C::kStageBytes, stream, static_cast<const T*>(p.w),
                    p.ldw, p.m, p.k, static_cast<const T*>(p.x), p.ldx, p.n,
                    static_cast<T*>(p.y), p.ldy, static_cast<const T*>(p.bias), p.accumulate,
                    p.x_vec, p.rms_eps, plan.stages),
      "dense.gemv (bulk) launch");
}

template <class T>
Status launch_typed(const BulkPass& p, int sm_count, cudaStream_t stream) {
  // The one runtime -> template choice: NT = 1 up to 8 tokens, 2 up to 16; RMS or not.
  if (p.n <= 8) {
    return p.rms ? launch_instance<T, 1, true>(p, sm_count, stream)
                 : launch_instance<T, 1, false>(p, sm_count, stream);
  }
  return p.rms ? launch_instance<T, 2, true>(p, sm_count, stream)
               : launch_instance<T, 2, false>(p, sm_count, stream);
}

}  // namespace

BulkPlan plan_bulk(int64_t tiles, int sm_count,
                   const int (&blocks_per_sm)[BulkConfig::kMaxStages + 1], int stages_override) {
  BulkPlan plan;
  if (tiles <= 0) return plan;
  const int64_t sms = std::max(sm_count, 1);
  auto resident = [&](int s) { return int64_t(std::max(blocks_per_sm[s], 0)) * sms; };
  if (stages_override >= C::kMinStages && stages_override <= C::kMaxStages) {
    plan.stages = stages_override;
  } else {
    plan.stages = C::kLoopStages;
    for (int s = C::kMaxStages; s >= C::kMinStages; --s) {
      if (resident(s) >= tiles) {
        plan.stages = s;
        break;
      }
    }
  }
  plan.blocks = std::min(tiles, std::max<int64_t>(resident(plan.stages), 1));
  return plan;
}

Status launch_bulk(DType dtype, const BulkPass& pass, int sm_count, Stream stream) {
  if (dtype == DType::fp16) return launch_typed<__half>(pass, sm_count, stream);
  if (dtype == DType::bf16) return launch_typed<__nv_bfloat16>(pass, sm_count, stream);
  return unsupported("dense.gemv (bulk) runs fp16 and bf16 weights");
}

}  // namespace sparrow::kernels::dense_gemv
