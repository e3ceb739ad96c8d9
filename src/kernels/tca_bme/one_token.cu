// tca_bme.strip_one_token: the one-token (N = 1) CUDA-core kernel that tca_bme.decode runs for
// weights too small to give its streaming kernel's warps several groups each (decode.cu says when).
// Block b owns rows 16b..16b+15 (strip tm = b % 4 of group row b / 4); its warps take the group row's
// 64-column groups in turn. Per group a warp loads the 64 bitmaps (one 16-byte load per lane) and
// scans their popcounts, copies its strip's values (contiguous) into its own shared buffer, and each
// lane walks one 32-bit half of one of the strip's 16 bitmaps (4 rows x 8 columns) into register
// accumulators, times its 8 X values. Lanes sharing rows are summed by shuffles, the warps through
// shared memory.
#include "kernels/tca_bme/one_token.hpp"

#include <algorithm>

#include "core/cuda_check.hpp"
#include "kernels/decode_common.cuh"

namespace sparrow::kernels::tca_bme_one_token {

using namespace decode;

namespace {

// At N = 1 the mma kernel above uses one of the 8 B columns and its time was flat in sparsity
// (~400 SM cycles per strip and group: the fragment build, 40 shuffles per strip and group, 64-bit
// popcounts). Here each lane owns one 32-bit half of one of the strip's 16 bitmaps: 4 rows x 8
// columns, its values contiguous in the strip buffer from a start the scan gives. It walks its 32
// bits in a fixed order (register-resident accumulators for its 4 rows) and multiplies the set
// ones by the 8 X values of its columns (one 16-byte load). Lanes sharing rows (same bitmap row
// half) are summed at the end, then the warps through shared memory.
template <class T>
__device__ __forceinline__ void x_eight(const T* __restrict__ x, int64_t kc, int64_t kmax,
                                        bool x_al16, float (&xf)[8]) {
  if (x_al16 && kc + 8 <= kmax) {
    const uint4 r = __ldg(reinterpret_cast<const uint4*>(x + kc));
    const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = unpack2<T>(w[i]);
      xf[2 * i] = f.x, xf[2 * i + 1] = f.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) xf[i] = kc + i < kmax ? to_float(x[kc + i]) : 0.f;
  }
}

template <class T>
__global__ void __launch_bounds__(Config::kMaxWarps * 32)
    tca_one_token_kernel(const uint64_t* __restrict__ bitmaps,
                         const uint32_t* __restrict__ group_offsets,
                         const uint16_t* __restrict__ values, int64_t m, int64_t k,
                         int64_t groups_k, const T* __restrict__ x, T* __restrict__ y,
                         const T* __restrict__ bias, bool accumulate, bool x_al16) {
  __shared__ uint4 strip_vals[Config::kMaxWarps][Config::kStripChunks];  // per warp
  __shared__ float partial[Config::kMaxWarps][16];                       // (warps, strip rows)
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int64_t gm = blockIdx.x / 4;
  const int tm = blockIdx.x % 4;
  const uint16_t* sv = reinterpret_cast<const uint16_t*>(strip_vals[warp]);
  // This lane's bitmap of the strip: q = tk * 4 + b, and which 32-bit half (rows 4hh..4hh+3).
  const int q = lane >> 1, hh = lane & 1, tk = q >> 2, b = q & 3;
  const int src = tm * 8 + (q >> 1);  // lane whose 16-byte load holds bitmap q
  const int col_in_group = tk * 16 + (b >> 1) * 8;

  float acc[4] = {0.f, 0.f, 0.f, 0.f};  // rows (b & 1) * 8 + hh * 4 + r of the strip
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
    const uint32_t pc0 = __popc(bm2.x) + __popc(bm2.y);
    const uint32_t pc = pc0 + __popc(bm2.z) + __popc(bm2.w);
    const uint32_t incl = warp_inclusive_scan(pc, lane);
    const uint32_t excl = incl - pc;
    const uint32_t strip_first = __shfl_sync(0xffffffffu, excl, tm * 8);
    const uint32_t strip_end = __shfl_sync(0xffffffffu, incl, tm * 8 + 7);
    const int64_t vstart = int64_t(gbase) + strip_first;
    const int64_t aligned = vstart & ~int64_t(7);
    const int chunks = int((vstart + (strip_end - strip_first) - aligned + 7) / 8);
    // This lane's bitmap word and where its values start, from the lane that loaded it.
    const uint32_t sx = __shfl_sync(0xffffffffu, bm2.x, src);
    const uint32_t sy = __shfl_sync(0xffffffffu, bm2.y, src);
    const uint32_t sz = __shfl_sync(0xffffffffu, bm2.z, src);
    const uint32_t sw = __shfl_sync(0xffffffffu, bm2.w, src);
    const uint32_t sexcl = __shfl_sync(0xffffffffu, excl, src);
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
    const bool second = (q & 1) != 0;  // bitmap 2src+1: after bitmap 2src's values
    const uint32_t lo = second ? sz : sx, hi = second ? sw : sy;
    const uint32_t word = hh ? hi : lo;
    int p = int(vstart - aligned) + int(sexcl - strip_first) +
            (second ? __popc(sx) + __popc(sy) : 0) + (hh ? __popc(lo) : 0);
    float xf[8];
    x_eight(x, gk * 64 + col_in_group, k, x_al16, xf);
    __syncwarp();
#pragma unroll
    for (int r = 0; r < 4; ++r) {
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        if ((word >> (r * 8 + c)) & 1u) {
          acc[r] += to_float(*reinterpret_cast<const T*>(sv + p)) * xf[c];
          ++p;
        }
      }
    }
    __syncwarp();  // the buffer is refilled for the next group
  }
  // Lanes 8tk + 2b + hh with the same (b & 1, hh) hold the same rows: sum over tk and b >> 1.
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], 4);
    acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], 8);
    acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], 16);
  }
  if (lane < 4) {
#pragma unroll
    for (int r = 0; r < 4; ++r) partial[warp][((lane >> 1) & 1) * 8 + (lane & 1) * 4 + r] = acc[r];
  }
  __syncthreads();
  if (threadIdx.x < 16) {
    float sum = 0.f;
    for (int w = 0; w < warps; ++w) sum += partial[w][threadIdx.x];
    const int64_t row = int64_t(blockIdx.x) * 16 + threadIdx.x;
    if (row < m) store_output(y + row, sum, bias, row, accumulate);
  }
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

template <class T>
Status launch(const tca_bme::Matrix& tm, const T* x, T* y, const T* bias, bool accumulate,
              int sm_count, cudaStream_t stream) {
  const LaunchPlan lp = plan(tm.shape.rows, tm.groups_k, sm_count);
  const bool x_al16 = reinterpret_cast<uintptr_t>(x) % 16 == 0;
  tca_one_token_kernel<T><<<unsigned(lp.blocks), unsigned(lp.warps * 32), 0, stream>>>(
      tm.bitmaps.data(), tm.group_offsets.data(), tm.values.data(), tm.shape.rows, tm.shape.cols,
      tm.groups_k, x, y, bias, accumulate, x_al16);
  SPARROW_CUDA_CHECK_LAUNCH("tca_bme.decode");
  return Status::success();
}

template Status launch<__half>(const tca_bme::Matrix&, const __half*, __half*, const __half*, bool,
                               int, cudaStream_t);
template Status launch<__nv_bfloat16>(const tca_bme::Matrix&, const __nv_bfloat16*,
                                      __nv_bfloat16*, const __nv_bfloat16*, bool, int,
                                      cudaStream_t);

}  // namespace sparrow::kernels::tca_bme_one_token
