// tca_bme.strip_few_tokens: the CUDA-core kernel that tca_bme.decode runs for N = 2..4 on weights
// too small to give its streaming tensor-core kernel's warps several groups each (decode.cu says
// when). The one-token kernel's split (one_token.cu): block b owns rows 16b..16b+15, its warps take
// the group row's 64-column groups in turn, each lane owns one 32-bit half of one of the strip's 16
// bitmaps (4 rows x 8 columns) and multiplies its set bits by X.
//
// Why CUDA cores where tensor cores are free: on 4096 x 4096 the streaming kernel gives each warp
// ~2 groups, and a warp's group takes ~6 us of wall time (decode.hpp), so the call is
// latency-bound at any N (22.4 us at N = 2, 23.0 at N = 8 against cuBLAS's 14-16, H100). Strips
// cut the work 4x finer, so more, shorter dependency chains are in flight; the price is NT FMAs
// per set bit instead of one mma per tile. Measured on the H100 (session 23, 50-90 %): 1.4-1.7x
// faster than the streaming kernel on 4096 x 4096 at N = 2 and 4, 1.1-1.25x on 4096 x 11008 at
// N = 2, slower on larger weights and at N = 8 (an NT = 8 instance took 127 registers, 16 warps
// per SM, and 22-27 us on 4096 x 4096: not kept).
//
// What changes from one token to NT:
//   - X. A lane's bits need X for its 8 columns x NT tokens. Per group the warp stages the
//     group's X once in shared memory as fp32, column-major (64 columns x NT tokens, each lane
//     converting its two columns, loaded a group ahead into NT registers), and each lane walks
//     its half-bitmap in passes of CW columns (CW x NT = 16 floats in registers). Columns of one
//     8-column octet are contiguous; octets are 16 bytes apart beyond that, so the 8 octets the
//     warp reads at once fall in different banks.
//   - The walk. Values of a half-bitmap are in row-major bit order; a pass over columns
//     [h*CW, h*CW + CW) of row r starts at popc(bits below r*8 + h*CW), then advances per set bit.
//   - The end. Accumulators (16 rows x NT tokens per warp) meet through shared memory as before;
//     input_rms scales token t by its own sum of x^2 over K.
#include "kernels/tca_bme/few_tokens.hpp"

#include <string>

#include "core/cuda_check.hpp"
#include "kernels/decode_common.cuh"
#include "kernels/dependent_launch.cuh"
#include "kernels/tca_bme/strip_group.cuh"

namespace sparrow::kernels::tca_bme_few_tokens {

using namespace decode;
using namespace tca_bme_strip;

namespace {

constexpr int kStripBytes = Config::kStripChunks * 16;

// Floats of a warp's X tile: 64 columns x NT tokens, plus 4 floats of padding per 8-column octet.
template <int NT>
constexpr int x_floats() {
  return 64 * NT + 8 * 4;
}
// Where column c (0..63) of the X tile starts, in floats.
template <int NT>
__device__ __forceinline__ int x_col(int c) {
  return c * NT + (c >> 3) * 4;
}
template <int NT>
constexpr int warp_bytes() {
  return kStripBytes + x_floats<NT>() * 4;
}

template <class T, int NT>
__global__ void __launch_bounds__(Config::kMaxWarps * 32)
    tca_few_tokens_kernel(const uint64_t* __restrict__ bitmaps,
                          const uint32_t* __restrict__ group_offsets,
                          const uint16_t* __restrict__ strip_starts,
                          const uint16_t* __restrict__ values, int64_t m, int k, int groups_k,
                          const uint16_t* __restrict__ x, int64_t ldx, T* __restrict__ y,
                          int64_t ldy, int n, const T* __restrict__ bias, bool accumulate,
                          bool x_al4, bool rms, float rms_eps) {
  extern __shared__ __align__(16) unsigned char smem[];  // per warp: strip values, X tile
  let_next_launch();  // the next kernel's blocks may take SM slots this grid leaves free
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int64_t gm = blockIdx.x / 4;
  const int tm = blockIdx.x % 4;
  unsigned char* mine = smem + warp * warp_bytes<NT>();
  uint4* strip_vals = reinterpret_cast<uint4*>(mine);                // (kStripChunks) 16 B
  float* xs = reinterpret_cast<float*>(mine + kStripBytes);          // (64 columns, NT tokens)
  const uint32_t sv = static_cast<uint32_t>(__cvta_generic_to_shared(strip_vals));
  const StripLane l = strip_lane(lane, tm);
  // The one-token kernel's pipeline (StripPipeline), and X of the next group (this lane's two
  // columns, every token) in registers too.
  float acc[4][NT];  // rows ((lane >> 1) & 1) * 8 + hh * 4 + r of the strip, tokens
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[r][t] = 0.f;
  uint32_t x_next[NT];
  auto load_x = [&](int gk) {
    const int c = gk * 64 + 2 * lane;
#pragma unroll
    for (int t = 0; t < NT; ++t) x_next[t] = t < n ? load_x2(x + t * ldx, c, k, x_al4) : 0u;
  };
  StripPipeline pipe;
  pipe.start(bitmaps, group_offsets, strip_starts, values, gm, groups_k, warp, warps, l);
  // Everything above reads the weight only: with a dependent launch it overlaps the kernel that
  // writes X. X and Y are touched after it has finished.
  wait_for_previous();
  if (warp < groups_k) load_x(warp);
  // Columns per pass over a lane's half-bitmap: CW x NT X values in registers.
  constexpr int CW = NT >= 4 ? 4 : 8;
  for (int gk = warp; gk < groups_k; gk += warps) {
    const StripGroup cur = pipe.next;
    uint32_t x_cur[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) x_cur[t] = x_next[t];
    __syncwarp();  // the previous group's products are done with the buffers
    pipe.store(strip_vals, cur, l);
    {
      // Columns 2 lane and 2 lane + 1 are adjacent in the tile: 2 NT floats from a 16-byte
      // aligned start (NT >= 2).
      float col2[2 * NT];
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        const float2 f = unpack2<T>(x_cur[t]);
        col2[t] = f.x, col2[NT + t] = f.y;
      }
      float4* dst = reinterpret_cast<float4*>(xs + x_col<NT>(2 * lane));
#pragma unroll
      for (int i = 0; i < NT / 2; ++i)
        dst[i] = make_float4(col2[4 * i], col2[4 * i + 1], col2[4 * i + 2], col2[4 * i + 3]);
    }
    if (gk + warps < groups_k) {
      pipe.advance(gk, groups_k, l);
      load_x(gk + warps);
    }
    __syncwarp();
    const uint32_t base = sv + 2u * uint32_t(cur.p);
#pragma unroll
    for (int h = 0; h < 8 / CW; ++h) {
      float xf[CW][NT];  // (columns of this pass, tokens)
#pragma unroll
      for (int c = 0; c < CW; ++c) {
        const float* col = xs + x_col<NT>(l.col_in_group + h * CW + c);
        if constexpr (NT == 2) {
          const float2 v = *reinterpret_cast<const float2*>(col);
          xf[c][0] = v.x, xf[c][1] = v.y;
        } else {
          const float4 v = *reinterpret_cast<const float4*>(col);
          xf[c][0] = v.x, xf[c][1] = v.y, xf[c][2] = v.z, xf[c][3] = v.w;
        }
      }
      // A branch per set bit, as in the one-token kernel. Measured against a branch-free walk
      // (every bit position loads a value and multiplies it in, as zero where clear) on the
      // H100, session 23: the branches were faster at N = 2 and 4 (4096 x 4096: 13.0 vs 15.1 us
      // at N = 2, 14.6 vs 16.9 at N = 4, 50 %).
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int bit0 = r * 8 + h * CW;
        uint32_t a = base + 2u * uint32_t(__popc(cur.word & ((1u << bit0) - 1u)));
        // The pass's loads first, then their products (load_set_bits). Measured on the H100
        // against the load-then-multiply walk: N = 2 on 4096 x 4096 and 4096 x 11008 0.957-0.980x
        // the time, N = 4 and the other shapes 0.99-1.01x.
        uint32_t v[CW];  // read only under the bit that loaded it
        load_set_bits(cur.word, bit0, a, v);
#pragma unroll
        for (int c = 0; c < CW; ++c) {
          if ((cur.word >> (bit0 + c)) & 1u) {
            const float w = u16_float<T>(v[c]);
#pragma unroll
            for (int t = 0; t < NT; ++t) acc[r][t] = fmaf(w, xf[c][t], acc[r][t]);
          }
        }
      }
    }
  }
  // Lanes 8tk + 2b + hh with the same (b & 1, hh) hold the same rows: sum over tk and b >> 1.
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      acc[r][t] += __shfl_xor_sync(0xffffffffu, acc[r][t], 4);
      acc[r][t] += __shfl_xor_sync(0xffffffffu, acc[r][t], 8);
      acc[r][t] += __shfl_xor_sync(0xffffffffu, acc[r][t], 16);
    }
  // The warp's sums go where its strip values were: (16 rows, NT tokens), then NT sums of x^2.
  // The shuffles above already need every lane's products, but only a barrier orders the other
  // lanes' reads of the values before these writes for the memory model (and racecheck, which
  // reported them as hazards without it).
  __syncwarp();
  float* part = reinterpret_cast<float*>(mine);
  if (lane < 4) {
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int t = 0; t < NT; ++t)
        part[(((lane >> 1) & 1) * 8 + (lane & 1) * 4 + r) * NT + t] = acc[r][t];
  }
  // input_rms: every block sums x^2 of each token over all of K itself, after its groups, when
  // most of X has passed through this SM's L1.
  if (rms) {
    for (int t = 0; t < n; ++t) {
      const float ss = warp_sum(sum_sq_strided<T>(x + t * ldx, k, threadIdx.x, blockDim.x));
      if (lane == 0) part[16 * NT + t] = ss;
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < 16 * n; i += blockDim.x) {
    const int r = i & 15, t = i >> 4;
    float sum = 0.f, ss = 0.f;
    for (int w = 0; w < warps; ++w) {
      const float* pw = reinterpret_cast<const float*>(smem + w * warp_bytes<NT>());
      sum += pw[r * NT + t];
      if (rms) ss += pw[16 * NT + t];
    }
    if (rms) sum *= rms_scale(ss, k, rms_eps);
    const int64_t row = int64_t(blockIdx.x) * 16 + r;
    if (row < m) store_output(y + t * ldy + row, sum, bias, row, accumulate);
  }
}

static_assert(16 * kMaxTokens + kMaxTokens <= kStripBytes / 4,
              "the warp's sums fit its strip buffer");

template <class T, int NT>
Status launch_instance(const tca_bme::Matrix& tm, const T* x, int64_t ldx, T* y, int64_t ldy,
                       int n, const T* bias, bool accumulate, int sm_count, bool dependent,
                       bool rms, float rms_eps, cudaStream_t stream) {
  SPARROW_ASSIGN_OR_RETURN(
      const tca_bme_one_token::Residency r,
      measure_warp_residency<tca_bme_one_token::Config::kMaxWarps>(
          tca_few_tokens_kernel<T, NT>, size_t(warp_bytes<NT>())));
  const tca_bme_one_token::LaunchPlan lp =
      tca_bme_one_token::plan(tm.shape.rows, tm.groups_k, sm_count, r);
  const bool x_al4 = reinterpret_cast<uintptr_t>(x) % 4 == 0 && ldx % 2 == 0;
  return cuda_status(
      launch_kernel(dependent, tca_few_tokens_kernel<T, NT>, dim3(unsigned(lp.blocks)),
                    dim3(unsigned(lp.warps * 32)), shared_bytes(lp.warps, NT), stream,
                    tm.bitmaps.data(), tm.group_offsets.data(), tm.strip_starts.data(),
                    tm.values.data(), tm.shape.rows, int(tm.shape.cols), int(tm.groups_k),
                    reinterpret_cast<const uint16_t*>(x), ldx, y, ldy, n, bias, accumulate, x_al4,
                    rms, rms_eps),
      "tca_bme.decode launch");
}

}  // namespace

size_t shared_bytes(int warps, int tokens) {
  const int nt = instance_tokens(tokens);
  const size_t per_warp = nt == 2 ? warp_bytes<2>() : warp_bytes<4>();
  return size_t(warps) * per_warp;
}

template <class T>
Status launch(const tca_bme::Matrix& w, const T* x, int64_t ldx, T* y, int64_t ldy, int n,
              const T* bias, bool accumulate, int sm_count, bool dependent, bool rms,
              float rms_eps, cudaStream_t stream) {
  if (n < 2 || n > kMaxTokens) {
    return invalid_argument("tca_bme.decode: the few-token kernel runs 2.." +
                            std::to_string(kMaxTokens) + " tokens, not " + std::to_string(n));
  }
  if (instance_tokens(n) == 2) {
    return launch_instance<T, 2>(w, x, ldx, y, ldy, n, bias, accumulate, sm_count, dependent, rms,
                                 rms_eps, stream);
  }
  return launch_instance<T, 4>(w, x, ldx, y, ldy, n, bias, accumulate, sm_count, dependent, rms,
                               rms_eps, stream);
}

template Status launch<__half>(const tca_bme::Matrix&, const __half*, int64_t, __half*, int64_t,
                               int, const __half*, bool, int, bool, bool, float, cudaStream_t);
template Status launch<__nv_bfloat16>(const tca_bme::Matrix&, const __nv_bfloat16*, int64_t,
                                      __nv_bfloat16*, int64_t, int, const __nv_bfloat16*, bool,
                                      int, bool, bool, float, cudaStream_t);

}  // namespace sparrow::kernels::tca_bme_few_tokens
