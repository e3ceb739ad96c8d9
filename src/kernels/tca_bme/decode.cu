// tca_bme.decode. Block b owns rows 16b..16b+15 (strip tm = b % 4 of group row gm = b / 4); its
// warps take the 64-column groups gk = warp, warp + warps, ... Per group a warp
//   1. loads the group's 64 bitmaps (512 B: one 16-byte load per lane) and scans their popcounts,
//      which gives every bitmap's first value within the group;
//   2. copies its strip's values (contiguous: tiles tm*4..tm*4+3 of the group) into its own shared
//      buffer with 16-byte loads;
//   3. for each of the 4 tensor-core tiles, builds the A fragment from the bitmaps: lane (g, t)
//      needs bits g*8+2t and +1 of bitmaps 0..3 (the header's bitmap order is the A register
//      order); a set bit's value sits at popcount(bitmap below the bit) past the bitmap's start;
//   4. B = X[token][k] straight from global memory (L1-resident), mma into fp32.
// The warps' partial sums are added through shared memory at the end.
#include "kernels/tca_bme/decode.hpp"

#include <algorithm>
#include <variant>

#include "core/cuda_check.hpp"
#include "kernels/decode_common.cuh"
#include "kernels/device_info.hpp"

namespace sparrow::kernels::tca_bme_decode {

using namespace decode;

namespace {

// X[row][k], X[row][k+1] packed, zero past K.
template <class T>
__device__ __forceinline__ uint32_t load_x2(const T* xrow, int64_t k, int64_t kmax, bool x_al4) {
  if (x_al4 && k + 2 <= kmax) return __ldg(reinterpret_cast<const uint32_t*>(xrow + k));
  const uint32_t lo = k < kmax ? bits_of(xrow[k]) : 0u;
  const uint32_t hi = k + 1 < kmax ? bits_of(xrow[k + 1]) : 0u;
  return lo | (hi << 16);
}

__device__ __forceinline__ uint64_t shfl64(uint64_t v, int src) {
  const uint32_t lo = __shfl_sync(0xffffffffu, uint32_t(v), src);
  const uint32_t hi = __shfl_sync(0xffffffffu, uint32_t(v >> 32), src);
  return (uint64_t(hi) << 32) | lo;
}

// The two elements at bits `bit`, `bit`+1 of one bitmap whose first value is vals[first].
__device__ __forceinline__ uint32_t fragment_pair(const uint16_t* vals, uint64_t bm, int first,
                                                  int bit) {
  const int below = __popcll(bm & ((uint64_t(1) << bit) - 1));
  const bool has0 = (bm >> bit) & 1, has1 = (bm >> (bit + 1)) & 1;
  const uint32_t lo = has0 ? vals[first + below] : 0u;
  const uint32_t hi = has1 ? vals[first + below + int(has0)] : 0u;
  return lo | (hi << 16);
}

template <class T, int NT>
__global__ void __launch_bounds__(Config::kMaxWarps * 32)
    tca_kernel(const uint64_t* __restrict__ bitmaps, const uint32_t* __restrict__ group_offsets,
               const uint16_t* __restrict__ values, int64_t m, int64_t k, int64_t groups_k,
               const T* __restrict__ x, int64_t ldx, int n, T* __restrict__ y, int64_t ldy,
               const T* __restrict__ bias, bool accumulate, bool x_al4) {
  __shared__ uint4 strip_vals[Config::kMaxWarps][Config::kStripChunks];  // per warp
  // The final reduction reuses the value buffers (after a barrier): 16 KB fit in 33 KB.
  static_assert(sizeof(float) * Config::kMaxWarps * NT * 4 * 32 <= sizeof(strip_vals), "");
  auto partial = reinterpret_cast<float (*)[NT * 4][32]>(&strip_vals[0][0]);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int64_t gm = blockIdx.x / 4;
  const int tm = blockIdx.x % 4;
  const uint16_t* sv = reinterpret_cast<const uint16_t*>(strip_vals[warp]);

  float acc[1][NT][4];  // one 16-row M tile
#pragma unroll
  for (int j = 0; j < NT; ++j) acc[0][j][0] = acc[0][j][1] = acc[0][j][2] = acc[0][j][3] = 0.f;

  // The next group's bitmaps and offset are loaded while this group's values are fetched.
  uint4 bm_next = make_uint4(0, 0, 0, 0);
  uint32_t gbase_next = 0;
  if (warp < groups_k) {
    bm_next = load_stream16(bitmaps + (gm * groups_k + warp) * 64 + lane * 2);
    gbase_next = group_offsets[gm * groups_k + warp];
  }
  for (int64_t gk = warp; gk < groups_k; gk += warps) {
    const uint4 bm2 = bm_next;  // bitmaps 2l, 2l+1 of group gk
    const uint32_t gbase = gbase_next;
    if (gk + warps < groups_k) {
      const int64_t nxt = gm * groups_k + gk + warps;
      bm_next = load_stream16(bitmaps + nxt * 64 + lane * 2);
      gbase_next = group_offsets[nxt];
    }
    const uint64_t bm_lo = (uint64_t(bm2.y) << 32) | bm2.x, bm_hi = (uint64_t(bm2.w) << 32) | bm2.z;
    const uint32_t pc = __popcll(bm_lo) + __popcll(bm_hi);
    const uint32_t incl = warp_inclusive_scan(pc, lane);
    const uint32_t excl = incl - pc;
    // Tiles tm*4..tm*4+3 are bitmaps 16tm..16tm+15: lanes 8tm..8tm+7.
    const uint32_t strip_first = __shfl_sync(0xffffffffu, excl, tm * 8);
    const uint32_t strip_end = __shfl_sync(0xffffffffu, incl, tm * 8 + 7);
    const int64_t vstart = int64_t(gbase) + strip_first;
    const int64_t aligned = vstart & ~int64_t(7);
    const int chunks = int((vstart + (strip_end - strip_first) - aligned + 7) / 8);
    {
      // All of the strip's chunks (<= 129: 5 per lane) in flight before the first store.
      constexpr int kPerLane = (Config::kStripChunks + 31) / 32;
      uint4 buf[kPerLane];
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int c = lane + 32 * i;
        if (c < chunks) buf[i] = load_stream16(values + aligned + int64_t(c) * 8);
      }
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int c = lane + 32 * i;
        if (c < chunks) strip_vals[warp][c] = buf[i];
      }
    }
    __syncwarp();
    const int skew = int(vstart - aligned);
#pragma unroll
    for (int tk = 0; tk < 4; ++tk) {
      const int src = (tm * 4 + tk) * 2;  // lane holding bitmaps 0,1 of this tile; src+1: 2,3
      const uint64_t b0 = shfl64(bm_lo, src), b1 = shfl64(bm_hi, src);
      const uint64_t b2 = shfl64(bm_lo, src + 1), b3 = shfl64(bm_hi, src + 1);
      const int o0 = skew + int(__shfl_sync(0xffffffffu, excl, src) - strip_first);
      const int o2 = skew + int(__shfl_sync(0xffffffffu, excl, src + 1) - strip_first);
      const int bit = g * 8 + 2 * t;
      uint32_t a[4];
      a[0] = fragment_pair(sv, b0, o0, bit);
      a[1] = fragment_pair(sv, b1, o0 + __popcll(b0), bit);
      a[2] = fragment_pair(sv, b2, o2, bit);
      a[3] = fragment_pair(sv, b3, o2 + __popcll(b2), bit);
      const int64_t kc = gk * 64 + tk * 16 + 2 * t;
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const int token = g + 8 * j;
        uint32_t xb0 = 0, xb1 = 0;
        if (token < n) {
          const T* xrow = x + int64_t(token) * ldx;
          xb0 = load_x2(xrow, kc, k, x_al4);
          xb1 = load_x2(xrow, kc + 8, k, x_al4);
        }
        mma_16816<T>(acc[0][j], a, xb0, xb1);
      }
    }
    __syncwarp();  // the buffer is refilled for the next group
  }
  __syncthreads();  // every warp is done with its value buffer before `partial` overwrites it
  reduce_tile_and_store<T, 1, NT>(partial, acc, int64_t(blockIdx.x) * 16, m, n, y,
                                                  ldy, bias, accumulate);
}

template <class T>
Status launch(const tca_bme::Matrix& tm, const Problem& p, const LaunchPlan& lp, Stream stream) {
  const T* x = static_cast<const T*>(p.x.data);
  T* y = static_cast<T*>(p.y.data);
  const T* bias = static_cast<const T*>(p.opt.bias);
  const bool x_al4 = reinterpret_cast<uintptr_t>(x) % 4 == 0 && p.x.ld % 2 == 0;
  const dim3 grid(unsigned(lp.blocks)), block(unsigned(lp.warps * 32));
  for (int64_t t0 = 0; t0 < p.n(); t0 += Config::kTokensPerPass) {
    const int nt = int(std::min<int64_t>(Config::kTokensPerPass, p.n() - t0));
    const T* xp = x + t0 * p.x.ld;
    T* yp = y + t0 * p.y.ld;
    if (nt <= 8) {
      tca_kernel<T, 1><<<grid, block, 0, stream>>>(
          tm.bitmaps.data(), tm.group_offsets.data(), tm.values.data(), tm.shape.rows,
          tm.shape.cols, tm.groups_k, xp, p.x.ld, nt, yp, p.y.ld, bias, p.opt.accumulate, x_al4);
    } else {
      tca_kernel<T, 2><<<grid, block, 0, stream>>>(
          tm.bitmaps.data(), tm.group_offsets.data(), tm.values.data(), tm.shape.rows,
          tm.shape.cols, tm.groups_k, xp, p.x.ld, nt, yp, p.y.ld, bias, p.opt.accumulate, x_al4);
    }
    SPARROW_CUDA_CHECK_LAUNCH("tca_bme.decode");
  }
  return Status::success();
}

}  // namespace

LaunchPlan plan(int64_t m, int64_t groups_k, int sm_count) {
  LaunchPlan lp;
  lp.blocks = (m + Config::kRowsPerBlock - 1) / Config::kRowsPerBlock;
  const int64_t want = (int64_t(std::max(sm_count, 1)) * Config::kTargetWarpsPerSm + lp.blocks - 1) /
                       std::max<int64_t>(lp.blocks, 1);
  lp.warps = int(std::clamp<int64_t>(std::min(want, std::max<int64_t>(groups_k, 1)), 1,
                                     Config::kMaxWarps));
  return lp;
}

Status run(const Problem& p, Stream stream) {
  SPARROW_RETURN_IF_ERROR(check_problem(p, Format::tca_bme));
  const auto& tm = std::get<tca_bme::Matrix>(p.w);
  if (tm.shape.dtype == DType::fp32) return invalid_argument("tca_bme holds fp16/bf16 values only");
  SPARROW_ASSIGN_OR_RETURN(const DeviceInfo dev, current_device_info());
  const LaunchPlan lp = plan(tm.shape.rows, tm.groups_k, dev.sm_count);
  if (tm.shape.dtype == DType::fp16) return launch<__half>(tm, p, lp, stream);
  return launch<__nv_bfloat16>(tm, p, lp, stream);
}

}  // namespace sparrow::kernels::tca_bme_decode
