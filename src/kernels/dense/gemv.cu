// dense.gemv. Each block owns 16 (or 32) rows of W; its warps split K. A lane streams 16-byte
// chunks of two rows per M tile (g and g+8) and the matching 16-byte chunk of X for token g (and g+8), and feeds them to
// mma.m16n8k16 as-is: the K order inside one step does not matter for a dot product, so the 8
// physical elements of a chunk are used as logical columns {2t,2t+1,2t+8,2t+9} of two mma steps,
// for A and B alike. That keeps every weight load 16 bytes wide without shared memory or ldmatrix,
// and the tensor cores make N = 1..16 cost the same arithmetic-free pass over W.
#include "kernels/dense/gemv.hpp"

#include <algorithm>
#include <variant>

#include "core/cuda_check.hpp"
#include "kernels/decode_common.cuh"
#include "kernels/dependent_launch.cuh"
#include "kernels/device_info.hpp"
#include "kernels/tensor_core/mma.cuh"

namespace sparrow::kernels::dense_gemv {

using namespace decode;

namespace {

// NT: 8-token mma N tiles per pass (1 for n <= 8, 2 for n <= 16). MT: 16-row M tiles per warp;
// each X chunk feeds MT*2 mmas, so MT = 2 halves the X traffic per weight byte, which at 16
// tokens equals the weight traffic (measured: 16 tokens with MT = 1 ran at 62 % of the floor).
// RMS (MatmulOptions::input_rms): the block's warps together read every X chunk of each token
// exactly once (the K steps are split, not repeated), so the block's sums of squares of those
// chunks are the tokens' sums over K, with no extra pass over X. The squares come from the
// tensor cores too: an mma whose A rows g are the same X chunks as its B (rows g + 8 zero) puts
// x_g . x_g on D's diagonal. Two more mmas per step and no ALU work: summing the squares on the
// CUDA cores (unpack, 8 FMAs per chunk) in every lane doubled the loop's instructions and made
// the 7B dense decode step 4 % slower than the separate norm kernel.
// HALVES: the U steps of an iteration run as two halves, and a half's weights for the next
// iteration are loaded as soon as its mmas are issued, so one half's loads are in flight while
// the other half computes (without it a warp has no weight load in flight from its last load's
// arrival to its next iteration's loads: ncu, H200, session 47). The same registers.
// RING: a warp's weights go through its own ring of Config::kRingIterations iterations in shared
// memory (dynamic, `ring`), filled by cp.async: the copies of the next iterations stay in flight
// while this one computes, with no register held for them. Each lane reads back only the 16-byte
// slots it copied itself, so cp.async.wait_group alone orders them (no barrier, no other warp).
// L2P: the L2 prefetch size (bytes) the weight loads ask for on a miss (0: none, 128, 256). One
// load instruction reads 64 bytes of each of 8 rows (4 lanes x 16 B), the other half of each
// 128-byte line comes with the next step's instruction, and a warp's U steps read 64 * U = 256
// contiguous bytes of each row. Without the hint each half line is its own L2 miss and DRAM
// request; with it the first miss fetches the line (128) or the warp's run (256). Measured on the
// H200 (session 49): 128 took the register kernel to 0.91-0.97x the time at N = 1 and 8 on every
// Llama shape (256: 0.94-0.98x); the ring is fastest with 256 (its iterations are whole runs).
template <int L2P>
__device__ __forceinline__ uint4 load_weight16(const void* p) {
  if constexpr (L2P == 0) {
    return load_stream16(p);
  } else {
    uint4 r;
    if constexpr (L2P == 128) {
      asm volatile("ld.global.nc.L1::no_allocate.L2::128B.v4.u32 {%0,%1,%2,%3}, [%4];"
                   : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                   : "l"(p));
    } else {
      asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                   : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                   : "l"(p));
    }
    return r;
  }
}
template <int L2P>
__device__ __forceinline__ void copy_weight16(uint32_t dst, const void* src, int src_bytes) {
  if constexpr (L2P == 0) {
    tc::cp_async16(dst, src, src_bytes);
  } else if constexpr (L2P == 128) {
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes));
  } else {
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes));
  }
}

template <class T, int MT, int NT, bool RMS, Steps MODE, int L2P>
__global__ void __launch_bounds__(Config::kMaxWarps * 32)
    gemv_kernel(const T* __restrict__ w, int64_t ldw, int64_t m, int64_t k,
                const T* __restrict__ x, int64_t ldx, int n, T* __restrict__ y, int64_t ldy,
                const T* __restrict__ bias, bool accumulate, bool x_vec, float rms_eps) {
  let_next_launch();
  constexpr int U = Config::kStepsInFlight / MT;  // the same weight bytes in flight per lane
  __shared__ float partial[Config::kMaxWarps][MT * NT * 4][32];  // (warp, acc register, lane)
  __shared__ float sum_sq[RMS ? Config::kMaxWarps : 1][16];       // (warp, token), RMS only
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int64_t row_base = int64_t(blockIdx.x) * Config::kRowsPerTile * MT;
  const int64_t chunks = ldw / 8;  // 16-byte chunks per (padded) row
  const int64_t steps = (chunks + 3) / 4;
  const uint4 zero = make_uint4(0, 0, 0, 0);

  float acc[MT][NT][4];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.f;

  // A warp's U in-flight steps are adjacent in K: each of its rows is read as one run of
  // 4 * U * 16 bytes. (Steps U apart by the block's warps, as before session 6, ran 2-10 % slower
  // on the large shapes: more rows open at once for the same bytes.)
  const int64_t first = int64_t(warp) * U;
  const int64_t stride = int64_t(warps) * U;
  float ss[NT][4];  // RMS: Gram-matrix accumulators of X (token g's sum of x^2 on the diagonal)
#pragma unroll
  for (int j = 0; j < NT; ++j) ss[j][0] = ss[j][1] = ss[j][2] = ss[j][3] = 0.f;
  uint4 a[U][MT][2];  // (step, M tile, rows g and g+8)
  // Steps u0 .. u1-1 of the iteration starting at step s0.
  auto load_w = [&](int64_t s0, int u0, int u1) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (u < u0 || u >= u1) continue;
      const int64_t chunk = (s0 + u) * 4 + t;
      const bool in_k = chunk < chunks;
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t row = row_base + 16 * i + g + 8 * h;
          a[u][i][h] = (in_k && row < m) ? load_weight16<L2P>(w + row * ldw + chunk * 8) : zero;
        }
    }
  };
  // X chunks of steps u0 .. u1-1 into b, then their mmas (and the RMS Gram mmas).
  auto compute = [&](int64_t s0, int u0, int u1) {
    // All the steps' X chunks (L1 hits) before the first mma: loading each next to its use (fewer
    // registers) ran 4-14 % slower.
    uint4 b[U][NT];  // (step, tokens g and g+8)
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (u < u0 || u >= u1) continue;
      const int64_t chunk = (s0 + u) * 4 + t;
      const bool in_k = chunk < chunks;
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const int token = g + 8 * j;
        b[u][j] = (in_k && token < n) ? load_x8(x + int64_t(token) * ldx, chunk * 8, k, x_vec) : zero;
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (u < u0 || u >= u1) continue;
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        const uint4 r0 = a[u][i][0], r1 = a[u][i][1];
        const uint32_t lo[4] = {r0.x, r1.x, r0.y, r1.y};  // physical elements 0..3
        const uint32_t hi[4] = {r0.z, r1.z, r0.w, r1.w};  // physical elements 4..7
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          mma_16816<T>(acc[i][j], lo, b[u][j].x, b[u][j].y);
          mma_16816<T>(acc[i][j], hi, b[u][j].z, b[u][j].w);
        }
      }
    }
    if constexpr (RMS) {
      // A = this step's X chunks as rows g (tokens g, or g + 8 for j = 1), rows g + 8 zero.
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (u < u0 || u >= u1) continue;
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          const uint32_t xlo[4] = {b[u][j].x, 0u, b[u][j].y, 0u};
          const uint32_t xhi[4] = {b[u][j].z, 0u, b[u][j].w, 0u};
          mma_16816<T>(ss[j], xlo, b[u][j].x, b[u][j].y);
          mma_16816<T>(ss[j], xhi, b[u][j].z, b[u][j].w);
        }
      }
    }
  };
  if constexpr (MODE == Steps::ring) {
    constexpr int D = Config::kRingIterations;
    // (warp, iteration slot, step, M tile, rows g / g + 8, lane): lane-contiguous 16-byte slots,
    // so a warp's 32 reads of one (step, tile, row half) are one conflict-free 512-byte access.
    extern __shared__ uint4 ring[];
    const uint32_t my = tc::smem_addr(ring + size_t(warp) * D * U * MT * 2 * 32 + lane);
    auto slot_addr = [&](int d, int u, int i, int h) {
      return my + uint32_t((((d * U + u) * MT + i) * 2 + h) * 32 * 16);
    };
    // Copies of the iteration starting at step s0 into slot d, as one commit group (an empty
    // group past the warp's last step keeps wait_group's count uniform). Chunks past K and rows
    // past M are zero-filled without being read.
    auto issue = [&](int64_t s0, int d) {
      if (s0 < steps) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int64_t chunk = (s0 + u) * 4 + t;
          const bool in_k = chunk < chunks;
#pragma unroll
          for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int64_t row = row_base + 16 * i + g + 8 * h;
              const bool ok = in_k && row < m;
              copy_weight16<L2P>(slot_addr(d, u, i, h), ok ? w + row * ldw + chunk * 8 : w, ok ? 16 : 0);
            }
        }
      }
      tc::cp_async_commit();
    };
    // The first D iterations' weights are requested before waiting for the kernel that writes X.
#pragma unroll
    for (int d = 0; d < D; ++d) issue(first + d * stride, d);
    wait_for_previous();
    int d = 0;
    for (int64_t s0 = first; s0 < steps; s0 += stride) {
      tc::cp_async_wait<D - 1>();  // this lane's copies of iteration s0 have landed
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            uint4 v;
            asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];"
                         : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                         : "r"(slot_addr(d, u, i, h)));
            a[u][i][h] = v;
          }
      // The mmas consume every register read from slot d before its refill is issued.
      compute(s0, 0, U);
      issue(s0 + D * stride, d);
      d = d + 1 == D ? 0 : d + 1;
    }
    tc::cp_async_wait<0>();  // no copy may outlive the block's shared memory
  } else {
  // The first steps' weights are loaded before waiting for the kernel that writes X (dependent
  // launch); nothing before wait_for_previous() touches X or Y.
  if (first < steps) load_w(first, 0, U);
  wait_for_previous();
  for (int64_t s0 = first; s0 < steps; s0 += stride) {
    if constexpr (MODE == Steps::halves) {
      constexpr int H = U / 2;
      const int64_t next = s0 + stride;
      compute(s0, 0, H);
      if (next < steps) load_w(next, 0, H);
      compute(s0, H, U);
      if (next < steps) load_w(next, H, U);
    } else {
      // Loads at the top, as measured before HALVES existed (loading the next iteration after
      // the mmas instead took the input_rms instance from 79 to 92 registers: one block per SM).
      if (s0 != first) load_w(s0, 0, U);
      compute(s0, 0, U);
    }
  }
  }

  if constexpr (RMS) {
    // D[g][g] (token g's sum over this warp's K range; g + 8 for j = 1) sits in lane (g, g / 2),
    // register g % 2.
#pragma unroll
    for (int j = 0; j < NT; ++j)
      if (t == g / 2) sum_sq[warp][g + 8 * j] = ss[j][g & 1];
    // reduce_tile_and_store's barrier orders these writes before the reads.
    reduce_tile_and_store<T, MT, NT>(partial, acc, row_base, m, n, y, ldy, bias, accumulate,
                                     sum_sq, k, rms_eps);
  } else {
    reduce_tile_and_store<T, MT, NT>(partial, acc, row_base, m, n, y, ldy, bias, accumulate);
  }
}

template <class T, int MT, int NT, Steps MODE, int L2P>
cudaError_t launch_mode(bool rms, bool dependent, dim3 grid, dim3 block, Stream stream,
                        const dense::Matrix& dm, const T* w, const T* x, int64_t ldx, int n, T* y,
                        int64_t ldy, const T* bias, bool accumulate, bool x_vec, float rms_eps) {
  auto plain = gemv_kernel<T, MT, NT, false, MODE, L2P>;
  auto with_rms = gemv_kernel<T, MT, NT, true, MODE, L2P>;
  size_t smem = 0;
  if constexpr (MODE == Steps::ring) {
    smem = ring_bytes(int(block.x / 32));
    // Past 48 KB a kernel must opt in, once per function (both norm variants at once).
    static const cudaError_t opt_in = [&] {
      cudaError_t e = cudaSuccess;
      for (auto kernel : {plain, with_rms}) {
        if (e == cudaSuccess) {
          e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   int(ring_bytes(Config::kMaxWarps)));
        }
        if (e == cudaSuccess) {
          e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                   int(cudaSharedmemCarveoutMaxShared));
        }
      }
      return e;
    }();
    if (opt_in != cudaSuccess) return opt_in;
  }
  return launch_kernel(dependent, rms ? with_rms : plain, grid, block, smem, stream, w, dm.ld,
                       dm.shape.rows, dm.shape.cols, x, ldx, n, y, ldy, bias, accumulate, x_vec,
                       rms_eps);
}

template <class T, int MT, int NT, bool PREFETCH>
cudaError_t launch_steps(bool rms, Steps mode, bool dependent, dim3 grid, dim3 block,
                         Stream stream, const dense::Matrix& dm, const T* w, const T* x,
                         int64_t ldx, int n, T* y, int64_t ldy, const T* bias, bool accumulate,
                         bool x_vec, float rms_eps) {
  constexpr int kRegisterL2P = PREFETCH ? Config::kRegisterL2Prefetch : 0;
  constexpr int kRingL2P = PREFETCH ? Config::kRingL2Prefetch : 0;
  switch (mode) {
    case Steps::halves:
      return launch_mode<T, MT, NT, Steps::halves, kRegisterL2P>(
          rms, dependent, grid, block, stream, dm, w, x, ldx, n, y, ldy, bias, accumulate, x_vec,
          rms_eps);
    case Steps::ring:
      return launch_mode<T, MT, NT, Steps::ring, kRingL2P>(rms, dependent, grid, block, stream,
                                                           dm, w, x, ldx, n, y, ldy, bias,
                                                           accumulate, x_vec, rms_eps);
    default:
      return launch_mode<T, MT, NT, Steps::one_piece, kRegisterL2P>(
          rms, dependent, grid, block, stream, dm, w, x, ldx, n, y, ldy, bias, accumulate, x_vec,
          rms_eps);
  }
}

template <class T, int MT, int NT>
cudaError_t launch_instance(bool rms, Steps mode, bool prefetch, bool dependent, dim3 grid,
                            dim3 block, Stream stream, const dense::Matrix& dm, const T* w,
                            const T* x, int64_t ldx, int n, T* y, int64_t ldy, const T* bias,
                            bool accumulate, bool x_vec, float rms_eps) {
  if (prefetch) {
    return launch_steps<T, MT, NT, true>(rms, mode, dependent, grid, block, stream, dm, w, x, ldx,
                                         n, y, ldy, bias, accumulate, x_vec, rms_eps);
  }
  return launch_steps<T, MT, NT, false>(rms, mode, dependent, grid, block, stream, dm, w, x, ldx,
                                        n, y, ldy, bias, accumulate, x_vec, rms_eps);
}

template <class T>
Status launch(const dense::Matrix& dm, const Problem& p, int sm_count, Steps steps,
              Stream stream) {
  const T* w = reinterpret_cast<const T*>(dm.values.data());
  const T* x = static_cast<const T*>(p.x.data);
  T* y = static_cast<T*>(p.y.data);
  const T* bias = static_cast<const T*>(p.opt.bias);
  const bool x_vec = reinterpret_cast<uintptr_t>(x) % 16 == 0 && p.x.ld % 8 == 0;
  const int64_t n = p.n();
  // SPARROW_GEMV_STEPS=0|1|2: always one piece / halves / ring (experiments and A/B runs; read
  // once; unset: the rule, choose_steps). SPARROW_GEMV_L2_PREFETCH=0: weight loads without the L2
  // prefetch size (Config::kRegisterL2Prefetch, kRingL2Prefetch), as before session 49.
  static const int knob = env_knob("SPARROW_GEMV_STEPS", -1);
  if (steps == Steps::automatic && knob >= 0 && knob <= 2) {
    steps = knob == 0 ? Steps::one_piece : knob == 1 ? Steps::halves : Steps::ring;
  }
  static const bool prefetch = env_knob("SPARROW_GEMV_L2_PREFETCH", 1) != 0;
  // SPARROW_GEMV_RING=0: the rule's ring becomes halves (session 48's rule), for A/B runs.
  static const bool ring = env_knob("SPARROW_GEMV_RING", 1) != 0;
  // Tokens beyond 16 run as further passes over W (each pass re-reads W; decode has N <= 16).
  for (int64_t t0 = 0; t0 < n; t0 += Config::kTokensPerPass) {
    const int nt = int(std::min<int64_t>(Config::kTokensPerPass, n - t0));
    const T* xp = x + t0 * p.x.ld;
    T* yp = y + t0 * p.y.ld;
    // The one runtime-N -> template choice: (MT, NT) = (1, 1) up to 8 tokens, (2, 2) up to 16.
    const int mt = nt <= 8 ? 1 : 2;
    Steps mode = steps == Steps::automatic ? choose_steps(dm.ld, mt, nt) : steps;
    if (steps == Steps::automatic && mode == Steps::ring && !ring) mode = Steps::halves;
    const LaunchPlan lp = plan(dm.shape.rows, dm.ld, sm_count, mt);
    const dim3 grid(unsigned(lp.blocks)), block(unsigned(lp.warps * 32));
    // Only the first pass may start before the previous kernel ends: a later pass follows this one.
    const bool dependent = p.opt.dependent_launch && t0 == 0;
    const bool rms = p.opt.input_rms;
    const cudaError_t err =
        mt == 1 ? launch_instance<T, 1, 1>(rms, mode, prefetch, dependent, grid, block, stream, dm, w, xp,
                                           p.x.ld, nt, yp, p.y.ld, bias, p.opt.accumulate, x_vec,
                                           p.opt.rms_eps)
                : launch_instance<T, 2, 2>(rms, mode, prefetch, dependent, grid, block, stream, dm, w, xp,
                                           p.x.ld, nt, yp, p.y.ld, bias, p.opt.accumulate, x_vec,
                                           p.opt.rms_eps);
    SPARROW_CUDA_RETURN_IF_ERROR(err);
  }
  return Status::success();
}

}  // namespace

LaunchPlan plan(int64_t m, int64_t ld, int sm_count, int m_tiles) {
  LaunchPlan lp;
  const int64_t rows = int64_t(Config::kRowsPerTile) * std::max(m_tiles, 1);
  lp.blocks = (m + rows - 1) / rows;
  int64_t warps = Config::kMaxWarps;
  if (m_tiles > 1) {
    warps = (int64_t(std::max(sm_count, 1)) * Config::kTargetWarpsPerSm + lp.blocks - 1) /
            std::max<int64_t>(lp.blocks, 1);
  }
  const int64_t steps = (ld / 8 + 3) / 4;  // a warp with no step would only idle
  lp.warps = int(std::clamp<int64_t>(std::min(warps, steps), 1, Config::kMaxWarps));
  return lp;
}

Steps choose_steps(int64_t ld, int m_tiles, int n) {
  if (m_tiles > 1 || ld < Config::kHalvesMinK) return Steps::one_piece;
  return n == 1 ? Steps::ring : Steps::halves;
}

size_t ring_bytes(int warps) {
  // Per warp: kRingIterations iterations of kStepsInFlight / MT steps x MT tiles x 2 rows x 32
  // lanes x 16 bytes, i.e. the same kStepsInFlight * 1 KB per iteration for one or two M tiles.
  return size_t(warps) * Config::kRingIterations * Config::kStepsInFlight * 2 * 32 * 16;
}

bool takes_input_rms(const Weight&, int64_t) { return true; }

Status run(const Problem& p, Stream stream) { return run_with(p, stream, Steps::automatic); }

Status run_with(const Problem& p, Stream stream, Steps steps) {
  SPARROW_RETURN_IF_ERROR(check_problem(p, Format::dense, true));
  const auto& dm = std::get<dense::Matrix>(p.w);
  if (dm.shape.dtype == DType::fp32) {
    return unsupported("dense.gemv runs fp16 and bf16 weights (fp32: use dense.cublas)");
  }
  SPARROW_ASSIGN_OR_RETURN(const DeviceInfo dev, current_device_info());
  if (dm.shape.dtype == DType::fp16) return launch<__half>(dm, p, dev.sm_count, steps, stream);
  return launch<__nv_bfloat16>(dm, p, dev.sm_count, steps, stream);
}

}  // namespace sparrow::kernels::dense_gemv
