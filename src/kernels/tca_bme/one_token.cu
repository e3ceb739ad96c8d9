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
#include "kernels/tensor_core/bulk_copy.cuh"
#include "kernels/device_info.hpp"

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


// The same kernel with the strip's values brought into shared memory by the copy engine (sm_90
// bulk copies): per warp a ring of S = Config::kBulkStages stage buffers, one bulk copy per group
// issued by lane 0 S - 1 groups ahead of the walk and counted on the stage's mbarrier. No register
// staging (the kernel above holds 5 x 16 bytes per lane for it: 72 registers against ~50 here), so
// more warps fit an SM, each stage sized by the weight's fullest strip (max_strip_values) instead
// of a dense one. A strip's value range comes from the locator alone (group offset + strip start ..
// the next strip's start, or the next group's offset for the last strip), so lane 0 issues a copy
// without the bitmaps, and it loads the locator of the copy after next a group ahead, so an issue
// never waits on memory. Under a dependent launch the first copy goes out before the wait for the
// kernel that writes X. Where it runs: use_bulk_copy (one_token.hpp).
template <class T>
__global__ void __launch_bounds__(Config::kMaxWarps * 32)
    tca_one_token_bulk_kernel(const uint64_t* __restrict__ bitmaps,
                              const uint32_t* __restrict__ group_offsets,
                              const uint16_t* __restrict__ strip_starts,
                              const uint16_t* __restrict__ values, int64_t m, int k,
                              int groups_k, const T* __restrict__ x, T* __restrict__ y,
                              const T* __restrict__ bias, bool accumulate, bool x_al16, bool rms,
                              float rms_eps, uint32_t stage_chunks) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int S = Config::kBulkStages;
  extern __shared__ __align__(16) uint4 stage_vals[];  // (warps, S, stage_chunks)
  __shared__ __align__(8) uint64_t stage_bars[Config::kMaxWarps][S];
  __shared__ float partial[Config::kMaxWarps][16];  // (warps, strip rows)
  __shared__ float rms_part[Config::kMaxWarps];     // (warps) sums of x^2
  let_next_launch();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int64_t gm = blockIdx.x / 4;
  const int tm = blockIdx.x % 4;
  const StripLane l = strip_lane(lane, tm);
  const uint32_t sv0 = static_cast<uint32_t>(
      __cvta_generic_to_shared(stage_vals + size_t(warp) * S * stage_chunks));
  const uint32_t bar0 = static_cast<uint32_t>(__cvta_generic_to_shared(&stage_bars[warp][0]));
  const int nj = warp < groups_k ? (groups_k - warp + warps - 1) / warps : 0;  // my groups
  const int64_t g0 = gm * groups_k + warp;  // group of my j-th: g0 + j * warps
  if (lane == 0) {
#pragma unroll
    for (int s = 0; s < S; ++s) tc::mbar_init(bar0 + 8u * s, 1);
    tc::mbar_init_fence();
  }
  __syncwarp();
  // Lane 0's copy locator: group j's first value of the strip and the end of its range.
  uint32_t loc_vs = 0, loc_ve = 0;
  auto load_copy_locator = [&](int j) {
    const int64_t g = g0 + int64_t(j) * warps;
    const uint32_t off = group_offsets[g];
    loc_vs = off + strip_starts[g * sparrow::tca_bme::kStripsPerGroup + tm];
    loc_ve = tm + 1 < sparrow::tca_bme::kStripsPerGroup
                 ? off + strip_starts[g * sparrow::tca_bme::kStripsPerGroup + tm + 1]
                 : group_offsets[g + 1];
  };
  auto issue_copy = [&](int j) {  // lane 0, with group j's locator in loc_vs / loc_ve
    const uint32_t a = loc_vs & ~7u;
    // Clamped to the stage: a weight whose max_strip_values is wrong gives wrong sums, not writes
    // into the next stage.
    const uint32_t bytes = min(((loc_ve - a) * 2u + 15u) & ~15u, stage_chunks * 16u);
    const uint32_t bar = bar0 + 8u * uint32_t(j % S);
    tc::mbar_arrive_expect_tx(bar, bytes);
    if (bytes > 0) {
      tc::bulk_copy(sv0 + uint32_t(j % S) * stage_chunks * 16u, values + a, bytes, bar);
    }
  };
  // Every lane's view of group j + 1: its half-bitmap and the strip's first value.
  uint32_t word_next = 0, vs_next = 0;
  auto load_lane_locator = [&](int j) {
    const int64_t g = g0 + int64_t(j) * warps;
    word_next = load_stream4(reinterpret_cast<const uint32_t*>(bitmaps + g * 64 + tm * 16) + lane);
    vs_next = group_offsets[g] + strip_starts[g * sparrow::tca_bme::kStripsPerGroup + tm];
  };
  if (lane == 0) {
    for (int j = 0; j < S - 1 && j < nj; ++j) {
      load_copy_locator(j);
      issue_copy(j);
    }
    if (S - 1 < nj) load_copy_locator(S - 1);
  }
  if (nj > 0) load_lane_locator(0);
  // Everything above reads the weight only (a dependent launch overlaps it with the kernel that
  // writes X).
  wait_for_previous();
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  uint4 x_next = make_uint4(0, 0, 0, 0);
  if (nj > 0) x_next = x_raw(x, warp * 64 + l.col_in_group, k, x_al16);
  for (int j = 0; j < nj; ++j) {
    const uint32_t word = word_next, vs = vs_next;
    const uint4 x_cur = x_next;
    if (j + 1 < nj) {
      load_lane_locator(j + 1);
      x_next = x_raw(x, (warp + (j + 1) * warps) * 64 + l.col_in_group, k, x_al16);
    }
    __syncwarp();  // group j - 1's walk is done with the stage the next copy fills
    if (lane == 0 && j + S - 1 < nj) {
      issue_copy(j + S - 1);
      if (j + S < nj) load_copy_locator(j + S);
    }
    const uint32_t pc = __popc(word);
    const uint32_t incl = warp_inclusive_scan(pc, lane);
    float xf[8];
    x_floats<T>(x_cur, xf);
    uint32_t a = sv0 + uint32_t(j % S) * stage_chunks * 16u + 2u * ((vs & 7u) + incl - pc);
    tc::mbar_wait(bar0 + 8u * uint32_t(j % S), uint32_t(j / S) & 1u);
    // The walk and the end below repeat the register kernel's. As shared helpers (session 41,
    // 3099587) they measured 0.97-1.01x on plain launches, but the 7B engine at 50 % (every
    // layer tca_bme, batch 1) ran 3.6 % slower with them, A B A B A B on one H100 (session 42:
    // 272.8 against 283.2 t/s; bench/NOTES-decode.md): this is the code the engine measured.
#pragma unroll
    for (int b = 0; b < 32; b += Config::kWalkBatch) {
      uint32_t v[Config::kWalkBatch];  // read only under the bit that loaded it
      load_set_bits(word, b, a, v);
#pragma unroll
      for (int i = 0; i < Config::kWalkBatch; ++i) {
        if ((word >> (b + i)) & 1u) acc[(b + i) / 8] += u16_float<T>(v[i]) * xf[(b + i) % 8];
      }
    }
  }
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
#endif
}

}  // namespace

LaunchPlan plan(int64_t m, int64_t groups_k, int sm_count, const Residency& r) {
  LaunchPlan lp;
  lp.blocks = (m + Config::kRowsPerBlock - 1) / Config::kRowsPerBlock;
  const int max_warps = int(std::clamp<int64_t>(groups_k, 1, Config::kMaxWarps));
  // Every strip takes about as long as any other, and a block's warps are latency-bound, so a
  // second, partial wave costs nearly as much as the first: the most warps per block with which
  // all strips are resident at once (11008 x 4096: 688 strips, 5 warps, 6 blocks per SM).
  lp.warps = one_wave_warps(r, lp.blocks, sm_count, max_warps, 1);
  if (lp.warps > 0) return lp;
  // More strips than one wave holds even with one-warp blocks: spread the warps over them.
  const int64_t want = (int64_t(std::max(sm_count, 1)) * Config::kTargetWarpsPerSm + lp.blocks - 1) /
                       std::max<int64_t>(lp.blocks, 1);
  lp.warps = int(std::clamp<int64_t>(want, 1, max_warps));
  return lp;
}

namespace {

template <class T>
Status launch_bulk(const tca_bme::Matrix& tm, const T* x, T* y, const T* bias, bool accumulate,
                   int sm_count, bool dependent, bool rms, float rms_eps, cudaStream_t stream) {
  const uint32_t stage_chunks = bulk_stage_chunks(tm.max_strip_values);
  const size_t smem_per_warp = size_t(Config::kBulkStages) * stage_chunks * 16;
  SPARROW_ASSIGN_OR_RETURN(
      const Residency r,
      measure_warp_residency<Config::kMaxWarps>(tca_one_token_bulk_kernel<T>, smem_per_warp));
  const LaunchPlan lp = plan(tm.shape.rows, tm.groups_k, sm_count, r);
  const bool x_al16 = reinterpret_cast<uintptr_t>(x) % 16 == 0;
  return cuda_status(
      launch_kernel(dependent, tca_one_token_bulk_kernel<T>, dim3(unsigned(lp.blocks)),
                    dim3(unsigned(lp.warps * 32)), smem_per_warp * size_t(lp.warps), stream,
                    tm.bitmaps.data(), tm.group_offsets.data(), tm.strip_starts.data(),
                    tm.values.data(), tm.shape.rows, int(tm.shape.cols), int(tm.groups_k), x, y,
                    bias, accumulate, x_al16, rms, rms_eps, stage_chunks),
      "tca_bme.decode launch");
}

}  // namespace

uint32_t bulk_stage_chunks(int64_t max_strip_values) {
  // The fullest strip's values with the 16-byte alignment before them and, for a group's last
  // strip, the group's padding after them (each at most 7 values).
  return uint32_t(std::clamp<int64_t>((max_strip_values + 14 + 7) / 8, 1, Config::kStripChunks));
}

bool use_bulk_copy(int64_t nnz, int64_t rows, int64_t cols, int sm_count, int cc_major,
                   bool dependent) {
  if (cc_major < 9 || rows <= 0 || cols <= 0) return false;
  if (double(nnz) < Config::kBulkMinDensity * double(rows) * double(cols)) return false;
  return dependent || rows >= int64_t(Config::kBulkMinRowsPerSm) * std::max(sm_count, 1);
}

template <class T>
Status launch(const tca_bme::Matrix& tm, const T* x, T* y, const T* bias, bool accumulate,
              int sm_count, bool dependent, bool rms, float rms_eps, StageCopy copy,
              cudaStream_t stream) {
  // SPARROW_TCA_BULK=0|1: never / always the bulk-copy kernel on sm_90 (experiments; read once).
  static const int knob = env_knob("SPARROW_TCA_BULK", -1);
  if (copy == StageCopy::automatic && knob >= 0) {
    copy = knob == 1 ? StageCopy::bulk : StageCopy::per_lane;
  }
  if (copy != StageCopy::per_lane) {
    SPARROW_ASSIGN_OR_RETURN(const DeviceInfo d, current_device_info());
    // The bulk kernel has no body below sm_90: bulk there falls back to the register kernel.
    const bool bulk = d.cc_major >= 9 &&
                      (copy == StageCopy::bulk ||
                       use_bulk_copy(tm.nnz, tm.shape.rows, tm.shape.cols, sm_count, d.cc_major,
                                     dependent));
    if (bulk) {
      return launch_bulk<T>(tm, x, y, bias, accumulate, sm_count, dependent, rms, rms_eps,
                            stream);
    }
  }
  SPARROW_ASSIGN_OR_RETURN(const Residency r,
                           measure_warp_residency<Config::kMaxWarps>(tca_one_token_kernel<T>, 0));
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
                               int, bool, bool, float, StageCopy, cudaStream_t);
template Status launch<__nv_bfloat16>(const tca_bme::Matrix&, const __nv_bfloat16*,
                                      __nv_bfloat16*, const __nv_bfloat16*, bool, int, bool, bool,
                                      float, StageCopy, cudaStream_t);

}  // namespace sparrow::kernels::tca_bme_one_token
