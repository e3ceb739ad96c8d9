// dense.gemv. Each block owns 16 (or 32) rows of W; its warps split K. A lane streams 16-byte
// chunks of two rows per M tile (g and g+8) and the matching 16-byte chunk of X for token g (and g+8), and feeds them to
// mma.m16n8k16 as-is: the K order inside one step does not matter for a dot product, so the 8
// physical elements of a chunk are used as logical columns {2t,2t+1,2t+8,2t+9} of two mma steps,
// for A and B alike. That keeps every weight load 16 bytes wide without shared memory or ldmatrix,
// and the tensor cores make N = 1..16 cost the same arithmetic-free pass over W.
// SwiGLU (MatmulOptions::output_swiglu, a stacked [gate; up] weight of 2F rows): an M tile's rows
// g and g + 8 are gate row o and up row F + o of the same output o instead of 16 neighbours. The
// mma puts rows g and g + 8 into the same lane (accumulators c and c + 2), so the epilogue has
// both halves of each output without any exchange, and the separate SwiGLU kernel (a launch and
// a dependency link per layer in a decode step) goes away.
#include "kernels/dense/gemv.hpp"

#include <algorithm>
#include <variant>

#include "core/cuda_check.hpp"
#include "kernels/decode_common.cuh"
#include "kernels/dependent_launch.cuh"
#include "kernels/device_info.hpp"

namespace sparrow::kernels::dense_gemv {

using namespace decode;

namespace {

// Eight elements of one X row starting at k0 (a multiple of 8), zero past K. One 16-byte load when
// the row is 16-byte aligned (x_vec), element loads otherwise.
template <class T>
__device__ __forceinline__ uint4 load_x8(const T* xrow, int64_t k0, int64_t k, bool x_vec) {
  if (x_vec && k0 + 8 <= k) return __ldg(reinterpret_cast<const uint4*>(xrow + k0));
  uint16_t e[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) e[i] = (k0 + i < k) ? bits_of(xrow[k0 + i]) : uint16_t(0);
  uint4 r;
  r.x = e[0] | (uint32_t(e[1]) << 16);
  r.y = e[2] | (uint32_t(e[3]) << 16);
  r.z = e[4] | (uint32_t(e[5]) << 16);
  r.w = e[6] | (uint32_t(e[7]) << 16);
  return r;
}

// The W rows of a block's tile rows g and g + 8 of M tile i. Plain: the 16 * MT rows from
// first = block * 16 * MT. SwiGLU (half = F): first = block * 8 * MT is the block's first output;
// tile i's row g is gate row first + 8 i + g and row g + 8 its up row F + first + 8 i + g. plan()
// sees the weight's M = 2F rows either way: ceil(2F / 16) = ceil(F / 8) blocks cover both. A
// template flag, not a runtime one: with `half` read at run time the plain kernel's loop and
// epilogue changed, and the dense 7B engine ran 2.2 % slower at batch 1 with the SwiGLU kernel
// still separate (session 52, c2).
template <bool SWIGLU>
struct TileRows {
  int64_t first, half, m;  // half: F (SWIGLU only); m: W's rows
  __device__ __forceinline__ int64_t row(int i, int g, int h) const {
    return SWIGLU ? first + 8 * i + g + half * h : first + 16 * i + g + 8 * h;
  }
  __device__ __forceinline__ bool has(int i, int g, int h) const {
    return SWIGLU ? first + 8 * i + g < half : row(i, g, h) < m;
  }
};

// The block's end: its warps each hold fp32 mma accumulators for the same 16 * MT tile rows x
// 8 * NT tokens over different K ranges; sum them through shared memory `partial` (warps,
// MT * NT * 4, 32) and write Y. input_rms: `sum_sq` (warps, 16) holds each warp's sum of x^2 per
// token over its K range (null: no norm); the token's total over the warps, over K, scales its
// outputs. SwiGLU: accumulators c and c + 2 of a lane are the gate and up of one output (rows g
// and g + 8); each is rounded to T as a stored gate_up output would be, then
// Y[token][out] = silu(gate) * up.
template <class T, int MT, int NT, bool SWIGLU>
__device__ __forceinline__ void reduce_tile_and_store(float (*partial)[MT * NT * 4][32],
                                                      const float (&acc)[MT][NT][4],
                                                      const TileRows<SWIGLU>& rows, int n, T* y,
                                                      int64_t ldy, const T* bias, bool accumulate,
                                                      const float (*sum_sq)[16] = nullptr,
                                                      int64_t k = 0, float rms_eps = 0.f) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) partial[warp][(i * NT + j) * 4 + c][lane] = acc[i][j][c];
  __syncthreads();
  auto norm = [&](int token) {
    float ss = 0.f;
    for (int v = 0; v < warps; ++v) ss += sum_sq[v][token];
    return rms_scale(ss, k, rms_eps);
  };
  if constexpr (SWIGLU) {  // one thread per (gate accumulator c = 0, 1; lane) pair
    for (int idx = threadIdx.x; idx < MT * NT * 2 * 32; idx += blockDim.x) {
      const int l = idx % 32, c = (idx / 32) % 2, j = (idx / 64) % NT, i = idx / (64 * NT);
      const int r = (i * NT + j) * 4 + c;
      const int token = 8 * j + 2 * (l & 3) + c;
      const int g = l >> 2;
      if (token >= n || !rows.has(i, g, 0)) continue;
      float gate = 0.f, up = 0.f;
      for (int v = 0; v < warps; ++v) gate += partial[v][r][l], up += partial[v][r + 2][l];
      const float scale = sum_sq ? norm(token) : 1.f;
      gate = to_float(from_float<T>(gate * scale));
      up = to_float(from_float<T>(up * scale));
      y[int64_t(token) * ldy + rows.row(i, g, 0)] = from_float<T>(silu_times(gate, up));
    }
  } else {
    for (int idx = threadIdx.x; idx < MT * NT * 4 * 32; idx += blockDim.x) {
      const int r = idx / 32, l = idx % 32;
      float sum = 0.f;
      for (int v = 0; v < warps; ++v) sum += partial[v][r][l];
      const int c = r % 4, j = (r / 4) % NT, i = r / (4 * NT);
      const int64_t row = rows.row(i, l >> 2, c >= 2 ? 1 : 0);
      const int token = 8 * j + 2 * (l & 3) + (c & 1);
      if (sum_sq && token < n) sum *= norm(token);
      if (row < rows.m && token < n) {
        store_output(y + int64_t(token) * ldy + row, sum, bias, row, accumulate);
      }
    }
  }
}

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
// PREFETCH: the weight loads ask L2 for the whole 128-byte line on a miss (load_stream16<true>):
// a load instruction reads 64 bytes of each of 8 rows (4 lanes x 16 B) and the other half of
// each line comes with the next step's, so without it each half line was its own DRAM request.
// H200 (session 49): 0.90-0.98x the time at N = 1..16 on every Llama shape, the 7B dense engine
// +6 % at batch 1 (a 256-byte prefetch, a warp's whole run of 4 steps, gained less).
template <class T, int MT, int NT, bool RMS, bool PREFETCH, bool SWIGLU>
__global__ void __launch_bounds__(Config::max_warps(MT) * 32)
    gemv_kernel(const T* __restrict__ w, int64_t ldw, int64_t m, int64_t k,
                const T* __restrict__ x, int64_t ldx, int n, T* __restrict__ y, int64_t ldy,
                const T* __restrict__ bias, bool accumulate, bool x_vec, float rms_eps,
                int64_t swiglu_half) {
  let_next_launch();
  constexpr int U = Config::kStepsInFlight / MT;  // the same weight bytes in flight per lane
  constexpr int kWarps = Config::max_warps(MT);
  // The warps' partial sums, (warp, acc register, lane). One M tile: a static array for 12 warps
  // (6 KB, as measured). Two M tiles: dynamic shared memory for the launch's warps (2 KB each;
  // partial_bytes): a static array for 20 warps (40 KB a block) took blocks of few warps from the
  // L1 that X comes through.
  using Partial = float[MT * NT * 4][32];
  __shared__ float partial_static[MT == 1 ? Config::kMaxWarps : 1][MT * NT * 4][32];
  extern __shared__ float partial_dynamic[];
  Partial* partial = MT == 1 ? partial_static : reinterpret_cast<Partial*>(partial_dynamic);
  __shared__ float sum_sq[RMS ? kWarps : 1][16];  // (warp, token), RMS only
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const TileRows<SWIGLU> rows{int64_t(blockIdx.x) * (SWIGLU ? 8 : 16) * MT, swiglu_half, m};
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
  auto load_w = [&](int64_t s0) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t chunk = (s0 + u) * 4 + t;
      const bool in_k = chunk < chunks;
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          a[u][i][h] = (in_k && rows.has(i, g, h))
                           ? load_stream16<PREFETCH>(w + rows.row(i, g, h) * ldw + chunk * 8)
                           : zero;
        }
    }
  };
  // The first steps' weights are loaded before waiting for the kernel that writes X (dependent
  // launch); nothing before wait_for_previous() touches X or Y.
  if (first < steps) load_w(first);
  wait_for_previous();
  for (int64_t s0 = first; s0 < steps; s0 += stride) {
    if (s0 != first) load_w(s0);
    // All U steps' X chunks (L1 hits) before the first mma: loading each next to its use (fewer
    // registers) ran 4-14 % slower.
    uint4 b[U][NT];  // (step, tokens g and g+8)
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t chunk = (s0 + u) * 4 + t;
      const bool in_k = chunk < chunks;
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const int token = g + 8 * j;
        b[u][j] = (in_k && token < n) ? load_x8(x + int64_t(token) * ldx, chunk * 8, k, x_vec) : zero;
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
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
    if constexpr (RMS) {
      // A = this step's X chunks as rows g (tokens g, or g + 8 for j = 1), rows g + 8 zero.
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          const uint32_t xlo[4] = {b[u][j].x, 0u, b[u][j].y, 0u};
          const uint32_t xhi[4] = {b[u][j].z, 0u, b[u][j].w, 0u};
          mma_16816<T>(ss[j], xlo, b[u][j].x, b[u][j].y);
          mma_16816<T>(ss[j], xhi, b[u][j].z, b[u][j].w);
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
    reduce_tile_and_store<T, MT, NT>(partial, acc, rows, n, y, ldy, bias, accumulate, sum_sq, k,
                                     rms_eps);
  } else {
    reduce_tile_and_store<T, MT, NT>(partial, acc, rows, n, y, ldy, bias, accumulate);
  }
}

// Dynamic shared memory of a launch with `warps` warps (the two-tile instance's partial sums).
constexpr size_t partial_bytes(int m_tiles, int warps) {
  return m_tiles == 1 ? 0 : size_t(warps) * m_tiles * m_tiles * 4 * 32 * sizeof(float);
}

template <class T, int MT, int NT>
using GemvKernel = decltype(&gemv_kernel<T, MT, NT, false, false, false>);

// Which compiled kernel a launch runs, besides T and the tiles: the norm (input_rms), the L2
// prefetch size (Variant::l2_prefetch) and the SwiGLU epilogue (output_swiglu).
struct Instance {
  bool rms, prefetch, swiglu;
};

template <class T, int MT, int NT, bool RMS, bool PREFETCH>
GemvKernel<T, MT, NT> with_swiglu(bool swiglu) {
  return swiglu ? gemv_kernel<T, MT, NT, RMS, PREFETCH, true>
                : gemv_kernel<T, MT, NT, RMS, PREFETCH, false>;
}

template <class T, int MT, int NT>
GemvKernel<T, MT, NT> instance(const Instance& k) {
  return k.prefetch ? (k.rms ? with_swiglu<T, MT, NT, true, true>(k.swiglu)
                             : with_swiglu<T, MT, NT, false, true>(k.swiglu))
                    : (k.rms ? with_swiglu<T, MT, NT, true, false>(k.swiglu)
                             : with_swiglu<T, MT, NT, false, false>(k.swiglu));
}

// Blocks of w = 1..max_warps(MT) warps resident per SM (the occupancy calculator's), once per
// device and instance: plan() fits a grid into one wave with them.
template <class T, int MT, int NT>
Result<Residency> residency(const Instance& k) {
  return measure_warp_residency<Config::kMaxWarpsTwoTiles>(
      instance<T, MT, NT>(k), partial_bytes(MT, 1), Config::max_warps(MT));
}

template <class T, int MT, int NT>
cudaError_t launch_instance(const Instance& k, bool dependent, dim3 grid, dim3 block,
                            Stream stream, const dense::Matrix& dm, const T* w, const T* x,
                            int64_t ldx, int n, T* y, int64_t ldy, const T* bias, bool accumulate,
                            bool x_vec, float rms_eps) {
  const int64_t half = k.swiglu ? dm.shape.rows / 2 : 0;
  return launch_kernel(dependent, instance<T, MT, NT>(k), grid, block,
                       partial_bytes(MT, int(block.x / 32)), stream, w, dm.ld, dm.shape.rows,
                       dm.shape.cols, x, ldx, n, y, ldy, bias, accumulate, x_vec, rms_eps, half);
}

template <class T>
Status launch(const dense::Matrix& dm, const Problem& p, int sm_count, const Variant& v,
              Stream stream) {
  const T* w = reinterpret_cast<const T*>(dm.values.data());
  const T* x = static_cast<const T*>(p.x.data);
  T* y = static_cast<T*>(p.y.data);
  const T* bias = static_cast<const T*>(p.opt.bias);
  const bool x_vec = reinterpret_cast<uintptr_t>(x) % 16 == 0 && p.x.ld % 8 == 0;
  const int64_t n = p.n();
  // Tokens beyond 16 run as further passes over W (each pass re-reads W; decode has N <= 16).
  for (int64_t t0 = 0; t0 < n; t0 += Config::kTokensPerPass) {
    const int nt = int(std::min<int64_t>(Config::kTokensPerPass, n - t0));
    const T* xp = x + t0 * p.x.ld;
    T* yp = y + t0 * p.y.ld;
    // The one runtime-N -> template choice: (MT, NT) = (1, 1) up to 8 tokens, (2, 2) up to 16.
    const int mt = nt <= 8 ? 1 : 2;
    const Instance k{p.opt.input_rms, v.l2_prefetch, p.opt.output_swiglu};
    // The grid in one wave where a block of >= kMinWarpsOneWave warps allows it (plan). One tile:
    // the 7B's qkv (12288 rows, 4 warps) and gate_up (22016 rows, 2 warps) change; the dense 7B
    // engine +3.9 % at batch 1, +2.8 / +3.5 % at batch 4 / 8 (session 51, c4).
    Residency res{};
    const bool one_wave = mt > 1 || v.one_tile_one_wave;
    if (mt > 1) {
      SPARROW_ASSIGN_OR_RETURN(res, (residency<T, 2, 2>(k)));
    } else if (one_wave) {
      SPARROW_ASSIGN_OR_RETURN(res, (residency<T, 1, 1>(k)));
    }
    const LaunchPlan lp = plan(dm.shape.rows, dm.ld, sm_count, mt,
                               mt > 1 ? v.two_tile_warps : v.one_tile_warps,
                               one_wave ? &res : nullptr);
    const dim3 grid(unsigned(lp.blocks)), block(unsigned(lp.warps * 32));
    // Only the first pass may start before the previous kernel ends: a later pass follows this one.
    const bool dependent = p.opt.dependent_launch && t0 == 0;
    const cudaError_t err =
        mt == 1 ? launch_instance<T, 1, 1>(k, dependent, grid, block, stream, dm, w, xp, p.x.ld,
                                           nt, yp, p.y.ld, bias, p.opt.accumulate, x_vec,
                                           p.opt.rms_eps)
                : launch_instance<T, 2, 2>(k, dependent, grid, block, stream, dm, w, xp, p.x.ld,
                                           nt, yp, p.y.ld, bias, p.opt.accumulate, x_vec,
                                           p.opt.rms_eps);
    SPARROW_CUDA_RETURN_IF_ERROR(err);
  }
  return Status::success();
}

}  // namespace

LaunchPlan plan(int64_t m, int64_t ld, int sm_count, int m_tiles, int requested_warps,
                const Residency* one_wave) {
  LaunchPlan lp;
  const int64_t rows = int64_t(Config::kRowsPerTile) * std::max(m_tiles, 1);
  lp.blocks = (m + rows - 1) / rows;
  const int64_t steps = (ld / 8 + 3) / 4;  // a warp with no step would only idle
  const int most = int(std::clamp<int64_t>(steps, 1, Config::max_warps(m_tiles)));
  // Every block resident at once, each with as many warps as still lets them all fit: the most
  // warps w with blocks_per_sm[w] >= ceil(blocks / SMs) (two tiles: 4096 rows = 128 blocks, one
  // per SM of 20 warps; 11008 rows = 344 blocks, three per SM of 6 warps). Several waves of wide
  // blocks, or blocks of 7 warps of which only two fit an SM, measured 1.2-1.3x the time
  // (bench/NOTES-decode.md, session 51).
  const int64_t sms = std::max(sm_count, 1);
  int64_t warps = one_wave != nullptr ? one_wave_warps(*one_wave, lp.blocks, sm_count, most,
                                                       Config::kMinWarpsOneWave)
                                      : 0;
  if (warps == 0) {
    // No one-wave plan (none asked for, or no w >= kMinWarpsOneWave fits): one tile takes
    // kMaxWarps; two tiles ~kTargetWarpsPerSm warps per SM in blocks of at most kMaxWarps.
    warps = m_tiles == 1 ? Config::kMaxWarps
                         : std::min<int64_t>((sms * Config::kTargetWarpsPerSm + lp.blocks - 1) /
                                                 std::max<int64_t>(lp.blocks, 1),
                                             Config::kMaxWarps);
  }
  if (requested_warps > 0) warps = requested_warps;
  lp.warps = int(std::clamp<int64_t>(warps, 1, most));
  return lp;
}

bool takes_input_rms(const Weight&, int64_t) { return true; }

bool takes_output_swiglu(const Weight&, int64_t) { return true; }

Status run(const Problem& p, Stream stream) {
  // Experiment knobs (A/B runs; read once): SPARROW_GEMV_L2_PREFETCH=0, the weight loads without
  // the L2 prefetch size, as before session 49; SPARROW_GEMV_TWO_TILE_WARPS=W and
  // SPARROW_GEMV_ONE_TILE_WARPS=W, the warps per block of the two-tile (9..16 tokens) and one-tile
  // instances; SPARROW_GEMV_ONE_WAVE=0, one tile without the one-wave plan (kMaxWarps warps per
  // block, as before session 51).
  static const Variant v{env_knob("SPARROW_GEMV_L2_PREFETCH", 1) != 0,
                         env_knob("SPARROW_GEMV_TWO_TILE_WARPS", 0),
                         env_knob("SPARROW_GEMV_ONE_TILE_WARPS", 0),
                         env_knob("SPARROW_GEMV_ONE_WAVE", 1) != 0};
  return run_with(p, stream, v);
}

Status run_with(const Problem& p, Stream stream, const Variant& v) {
  SPARROW_RETURN_IF_ERROR(check_problem(p, Format::dense, true, true));
  const auto& dm = std::get<dense::Matrix>(p.w);
  if (dm.shape.dtype == DType::fp32) {
    return unsupported("dense.gemv runs fp16 and bf16 weights (fp32: use dense.cublas)");
  }
  SPARROW_ASSIGN_OR_RETURN(const DeviceInfo dev, current_device_info());
  if (dm.shape.dtype == DType::fp16) return launch<__half>(dm, p, dev.sm_count, v, stream);
  return launch<__nv_bfloat16>(dm, p, dev.sm_count, v, stream);
}

}  // namespace sparrow::kernels::dense_gemv
