// tca_bme.strip_one_token: the one-token (N = 1) CUDA-core kernel that tca_bme.decode runs for
// weights too small to give its streaming kernel's warps several groups each (decode.cu says when).
// Block b owns rows 16b..16b+15 (strip tm = b % 4 of group row b / 4); its warps take the group row's
// 64-column groups in turn. Per group a warp loads the 64 bitmaps (one 16-byte load per lane) and
// scans their popcounts, copies its strip's values (contiguous) into its own shared buffer, and each
// lane walks one 32-bit half of one of the strip's 16 bitmaps (4 rows x 8 columns) into register
// accumulators, times its 8 X values; the next group's values are already on their way into
// registers meanwhile. Lanes sharing rows are summed by shuffles, the warps through shared memory.
#include "kernels/tca_bme/one_token.hpp"

#include <algorithm>

#include "core/cuda_check.hpp"
#include "kernels/decode_common.cuh"
#include "kernels/dependent_launch.cuh"
#include "kernels/tca_bme/strip_group.cuh"

namespace sparrow::kernels::tca_bme_one_token {

using namespace decode;
using namespace tca_bme_strip;

namespace {

// At N = 1 the mma kernel above uses one of the 8 B columns and its time was flat in sparsity
// (~400 SM cycles per strip and group: the fragment build, 40 shuffles per strip and group, 64-bit
// popcounts). Here each lane owns one 32-bit half of one of the strip's 16 bitmaps: 4 rows x 8
// columns, its values contiguous in the strip buffer from a start the scan gives. It walks its 32
// bits in a fixed order (register-resident accumulators for its 4 rows) and multiplies the set
// ones by the 8 X values of its columns (one 16-byte load). Lanes sharing rows (same bitmap row
// half) are summed at the end, then the warps through shared memory.

// The 8 X values of a lane's columns kc..kc+7 as raw 16-bit elements (zero past K): one 16-byte
// load when aligned. Loaded a group ahead of their use (the L1/L2 latency of X was the kernel's
// largest stall: ncu, session 12).
template <class T>
__device__ __forceinline__ uint4 x_raw(const T* __restrict__ x, int kc, int kmax, bool x_al16) {
  if (x_al16 && kc + 8 <= kmax) return __ldg(reinterpret_cast<const uint4*>(x + kc));
  const uint16_t* xs = reinterpret_cast<const uint16_t*>(x);
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t lo = kc + 2 * i < kmax ? xs[kc + 2 * i] : 0u;
    const uint32_t hi = kc + 2 * i + 1 < kmax ? xs[kc + 2 * i + 1] : 0u;
    w[i] = lo | (hi << 16);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

template <class T>
__device__ __forceinline__ void x_floats(const uint4& r, float (&xf)[8]) {
  const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = unpack2<T>(w[i]);
    xf[2 * i] = f.x, xf[2 * i + 1] = f.y;
  }
}

// 72 registers at most: the walk's batches of loads need ~8 more than the 64 of two 512-thread
// blocks per SM, where ptxas put each load's conversion right after it (one load in flight). 72
// leave 28 warps per SM (the plan asks the occupancy calculator). Measured against 64 with the
// serial walk (session 26, H100, N = 1): 0.93-0.975x the time on 11008..22016 x 4096 at 50-90 %
// (22016 x 4096 at 50 %: 1.00), 1.00-1.03x on 4096 x 4096 and 4096 x 11008 (fewer warps share a
// block's groups); 64 registers with the batched walk measured 0.98-1.04x; the 7B engine with
// tca_bme weights at batch 1 +3.4 to +4.4 % at 50 and 90 %.
template <class T>
__global__ void __maxnreg__(72)
    tca_one_token_kernel(const uint64_t* __restrict__ bitmaps,
                         const uint32_t* __restrict__ group_offsets,
                         const uint16_t* __restrict__ strip_starts,
                         const uint16_t* __restrict__ values, int64_t m, int k,
                         int groups_k, const T* __restrict__ x, T* __restrict__ y,
                         const T* __restrict__ bias, bool accumulate, bool x_al16, bool rms,
                         float rms_eps) {
  __shared__ uint4 strip_vals[Config::kMaxWarps][Config::kStripChunks];  // per warp
  __shared__ float partial[Config::kMaxWarps][16];                       // (warps, strip rows)
  __shared__ float rms_part[Config::kMaxWarps];                          // (warps) sums of x^2
  let_next_launch();  // the next kernel's blocks may take SM slots this grid leaves free
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int64_t gm = blockIdx.x / 4;
  const int tm = blockIdx.x % 4;
  const uint32_t sv = static_cast<uint32_t>(__cvta_generic_to_shared(strip_vals[warp]));
  const StripLane l = strip_lane(lane, tm);
  float acc[4] = {0.f, 0.f, 0.f, 0.f};  // rows ((lane >> 1) & 1) * 8 + hh * 4 + r of the strip
  uint4 x_next = make_uint4(0, 0, 0, 0);  // raw X of the next group's columns
  StripPipeline pipe;
  pipe.start(bitmaps, group_offsets, strip_starts, values, gm, groups_k, warp, warps, l);
  // Everything above reads the weight only: with a dependent launch it overlaps the kernel that
  // writes X. X and Y are touched after it has finished.
  wait_for_previous();
  if (warp < groups_k) x_next = x_raw(x, warp * 64 + l.col_in_group, k, x_al16);
  for (int gk = warp; gk < groups_k; gk += warps) {
    const StripGroup cur = pipe.next;
    const uint4 x_cur = x_next;
    __syncwarp();  // the previous group's products are done with the buffer
    pipe.store(strip_vals[warp], cur, l);
    if (gk + warps < groups_k) {
      pipe.advance(gk, groups_k, l);
      x_next = x_raw(x, (gk + warps) * 64 + l.col_in_group, k, x_al16);
    }
    float xf[8];
    x_floats<T>(x_cur, xf);
    __syncwarp();
    // The lane's set bits in order, each the next value of its run: one predicated shared load,
    // address step, conversion and FMA per bit, the loads of kWalkBatch bits at a time before
    // their products (load_set_bits; ncu, session 26: "short scoreboard" 7.2 of 13.5 cycles per
    // instruction, 4096 x 11008 at 50 %, when each load's conversion followed it at once).
    uint32_t a = sv + 2u * uint32_t(cur.p);
#pragma unroll
    for (int b = 0; b < 32; b += Config::kWalkBatch) {
      uint32_t v[Config::kWalkBatch];  // read only under the bit that loaded it
      load_set_bits(cur.word, b, a, v);
#pragma unroll
      for (int i = 0; i < Config::kWalkBatch; ++i) {
        if ((cur.word >> (b + i)) & 1u) {
          acc[(b + i) / 8] += u16_float<T>(v[i]) * xf[(b + i) % 8];
        }
      }
    }
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
  // input_rms: every block sums x^2 over all of K itself (8 KB at K = 4096), after its groups,
  // when most of X has passed through this SM's L1; the warps' sums meet behind the barrier.
  if (rms) {
    const float ss = warp_sum(sum_sq_strided<T>(reinterpret_cast<const uint16_t*>(x), k,
                                                threadIdx.x, blockDim.x));
    if (lane == 0) rms_part[warp] = ss;
  }
  __syncthreads();
  if (threadIdx.x < 16) {
    float sum = 0.f;
    for (int w = 0; w < warps; ++w) sum += partial[w][threadIdx.x];
    if (rms) {
      float ss = 0.f;
      for (int w = 0; w < warps; ++w) ss += rms_part[w];
      sum *= rms_scale(ss, k, rms_eps);
    }
    const int64_t row = int64_t(blockIdx.x) * 16 + threadIdx.x;
    if (row < m) store_output(y + row, sum, bias, row, accumulate);
  }
}

}  // namespace

LaunchPlan plan(int64_t m, int64_t groups_k, int sm_count, const Residency& r) {
  LaunchPlan lp;
  lp.blocks = (m + Config::kRowsPerBlock - 1) / Config::kRowsPerBlock;
  const int max_warps = int(std::clamp<int64_t>(groups_k, 1, Config::kMaxWarps));
  // Every strip takes about as long as any other, and a block's warps are latency-bound, so a
  // second, partial wave costs nearly as much as the first: the most warps per block with which
  // all strips are resident at once (11008 x 4096: 688 strips, 5 warps, 6 blocks per SM).
  for (int w = max_warps; w >= 1; --w) {
    if (int64_t(r.blocks_per_sm[w]) * std::max(sm_count, 1) >= lp.blocks) {
      lp.warps = w;
      return lp;
    }
  }
  // More strips than one wave holds even with one-warp blocks: spread the warps over them.
  const int64_t want = (int64_t(std::max(sm_count, 1)) * Config::kTargetWarpsPerSm + lp.blocks - 1) /
                       std::max<int64_t>(lp.blocks, 1);
  lp.warps = int(std::clamp<int64_t>(want, 1, max_warps));
  return lp;
}

template <class T>
Status launch(const tca_bme::Matrix& tm, const T* x, T* y, const T* bias, bool accumulate,
              int sm_count, bool dependent, bool rms, float rms_eps, cudaStream_t stream) {
  SPARROW_ASSIGN_OR_RETURN(const Residency r, strip_residency(tca_one_token_kernel<T>, 0));
  const LaunchPlan lp = plan(tm.shape.rows, tm.groups_k, sm_count, r);
  const bool x_al16 = reinterpret_cast<uintptr_t>(x) % 16 == 0;
  return cuda_status(
      launch_kernel(dependent, tca_one_token_kernel<T>, dim3(unsigned(lp.blocks)),
                    dim3(unsigned(lp.warps * 32)), 0, stream, tm.bitmaps.data(),
                    tm.group_offsets.data(), tm.strip_starts.data(), tm.values.data(),
                    tm.shape.rows, int(tm.shape.cols), int(tm.groups_k), x, y, bias, accumulate,
                    x_al16, rms, rms_eps),
      "tca_bme.decode launch");
}

template Status launch<__half>(const tca_bme::Matrix&, const __half*, __half*, const __half*, bool,
                               int, bool, bool, float, cudaStream_t);
template Status launch<__nv_bfloat16>(const tca_bme::Matrix&, const __nv_bfloat16*,
                                      __nv_bfloat16*, const __nv_bfloat16*, bool, int, bool, bool,
                                      float, cudaStream_t);

}  // namespace sparrow::kernels::tca_bme_one_token
