// macko.swiglu_mlp (see swiglu_mlp.hpp for what and why). The kernel, in order:
//   1. before the wait for the previous kernel (weights only): one thread starts a bulk copy of
//      this block's down rows (a contiguous entry range of values and deltas) into shared memory,
//      as much as fits; each warp loads the first chunks of its first gate / up row pair;
//   2. after the wait: the input (hidden) into shared memory as floats, its sum of squares;
//   3. phase A: warp w of the grid computes rows p = w, w + W, ... of gate and of up together
//      (two rows in lockstep: two loads in flight per lane instead of one) and writes
//      h[p] = silu(g) * u, rounded as the engine's separate gate_up matmul and swiglu round;
//   4. a grid barrier (every block resident: one block per SM, grid = SM count), after which the
//      next kernel may launch;
//   5. phase B: h into shared memory; each warp decodes its block's down rows, from the stage
//      where the entries were copied, from global memory past it, and adds them to x.
// The row walk is macko.warp_row's (a lane decodes 8 entries per step, columns by a warp prefix
// sum of delta + 1), written for clarity, with a per-entry range test.
#include "kernels/macko/swiglu_mlp.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <string>

#include "core/cuda_check.hpp"
#include "kernels/decode_common.cuh"
#include "kernels/dependent_launch.cuh"
#include "kernels/device_info.hpp"
#include "kernels/tensor_core/bulk_copy.cuh"

namespace sparrow::kernels::macko_swiglu_mlp {

namespace {

using decode::load_stream16;
using decode::load_stream4;
using decode::rms_scale;
using decode::warp_inclusive_scan;
using decode::warp_sum;

constexpr uint32_t kStep = 32 * Config::kChunk;  // entries a warp decodes per step

// Where a lane's chunk (16 bytes of values, 4 of deltas) comes from: the block's stage in shared
// memory for entries [stage_begin, stage_end) (multiples of 32, so a chunk is wholly inside or
// outside), global memory otherwise.
struct EntrySource {
  const uint16_t* vals;
  const uint8_t* deltas;
  uint32_t stage_begin, stage_end;
  const unsigned char* stage_vals;    // shared: (stage_end - stage_begin) values
  const unsigned char* stage_deltas;  // shared: their deltas
  __device__ __forceinline__ void load(uint32_t base, uint4& v, uint32_t& d) const {
    if (base >= stage_begin && base < stage_end) {
      v = *reinterpret_cast<const uint4*>(stage_vals + size_t(base - stage_begin) * 2);
      d = *reinterpret_cast<const uint32_t*>(stage_deltas + (base - stage_begin) / 2);
    } else {
      v = load_stream16(vals + base);
      d = load_stream4(deltas + base / 2);
    }
  }
};

// One row being walked: its entries [s, e), this lane's next chunk (at `base`) in registers.
struct RowWalk {
  uint32_t s, e, base;
  uint4 v;
  uint32_t d;
};

__device__ __forceinline__ void begin_row(RowWalk& w, uint32_t s, uint32_t e, int lane,
                                          const EntrySource& src) {
  w.s = s;
  w.e = e;
  w.base = (s & ~7u) + uint32_t(lane) * Config::kChunk;
  w.v = make_uint4(0, 0, 0, 0);
  w.d = 0;
  if (w.base < e) src.load(w.base, w.v, w.d);
}

// out[r] = sum over row r's entries of value * xs[column] (xs: floats in shared memory), the R
// rows walked in lockstep (the longest sets the steps), each lane's next chunk loaded while the
// current one decodes. Entry i's column: the previous entry's plus delta_i + 1, from -1.
template <class T, int R>
__device__ __forceinline__ void dot_rows(RowWalk (&w)[R], const float* xs, int lane,
                                         const EntrySource& src, float (&out)[R]) {
  uint32_t steps = 0;
  int32_t carry[R];
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const uint32_t first = w[r].s & ~7u;
    steps = max(steps, w[r].e > first ? (w[r].e - first + kStep - 1) / kStep : 0u);
    carry[r] = -1;
    acc[r] = 0.f;
  }
  for (uint32_t st = 0; st < steps; ++st) {
    uint4 vn[R];
    uint32_t dn[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      vn[r] = w[r].v;
      dn[r] = w[r].d;
      if (w[r].base + kStep < w[r].e) src.load(w[r].base + kStep, vn[r], dn[r]);
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      // Column steps within the lane (inclusive), 0 for entries outside the row.
      uint32_t cum[Config::kChunk];
      bool in[Config::kChunk];
      uint32_t c = 0;
#pragma unroll
      for (int i = 0; i < Config::kChunk; ++i) {
        const uint32_t idx = w[r].base + uint32_t(i);
        in[i] = idx >= w[r].s && idx < w[r].e;
        c += in[i] ? ((w[r].d >> (4 * i)) & 15u) + 1u : 0u;
        cum[i] = c;
      }
      const uint32_t incl = warp_inclusive_scan(c, lane);
      const int32_t col0 = carry[r] + int32_t(incl - c);
      carry[r] += int32_t(__shfl_sync(0xffffffffu, incl, 31));
      const uint32_t words[4] = {w[r].v.x, w[r].v.y, w[r].v.z, w[r].v.w};
#pragma unroll
      for (int i = 0; i < Config::kChunk; ++i) {
        if (in[i]) {
          const float2 p = unpack2<T>(words[i / 2]);
          acc[r] = fmaf((i & 1) ? p.y : p.x, xs[col0 + int32_t(cum[i])], acc[r]);
        }
      }
      w[r].base += kStep;
      w[r].v = vn[r];
      w[r].d = dn[r];
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) out[r] = warp_sum(acc[r]);
}

__device__ __forceinline__ uint32_t load_acquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Every block of the grid arrives before any leaves; writes before it are visible after it.
// bar[0] counts arrivals, bar[1] is the generation the last arrival advances (both persist
// between launches: the count is back at 0 after each barrier).
__device__ __forceinline__ void grid_barrier(uint32_t* bar, uint32_t blocks) {
  __syncthreads();
  if (threadIdx.x == 0) {
    const uint32_t gen = load_acquire(bar + 1);
    __threadfence();
    if (atomicAdd(bar, 1u) == blocks - 1) {
      atomicExch(bar, 0u);
      __threadfence();
      atomicAdd(bar + 1, 1u);
    } else {
      while (load_acquire(bar + 1) == gen) __nanosleep(32);
    }
    __threadfence();
  }
  __syncthreads();
}

// Floats of the activation region (the input in phase A, h in phase B), rounded up so the stage
// after it starts 128-byte aligned.
__host__ __device__ constexpr uint32_t act_floats(uint32_t hidden, uint32_t inter) {
  return ((hidden > inter ? hidden : inter) + 31u) / 32u * 32u;
}

template <class T>
__global__ void __launch_bounds__(Config::kThreads, 1)
    swiglu_mlp_kernel(const uint32_t* __restrict__ gu_ptr, const uint16_t* __restrict__ gu_vals,
                      const uint8_t* __restrict__ gu_deltas, const uint32_t* __restrict__ dn_ptr,
                      const uint16_t* __restrict__ dn_vals, const uint8_t* __restrict__ dn_deltas,
                      uint32_t dn_entries, uint32_t hidden, uint32_t inter, const T* input, T* x,
                      T* h, uint32_t* barrier, bool input_rms, float eps, uint32_t stage_cap) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ __align__(8) uint64_t stage_bar;
  __shared__ float warp_part[Config::kThreads / 32];
  float* act = reinterpret_cast<float*>(smem);                   // (max(hidden, inter))
  unsigned char* stage = smem + act_floats(hidden, inter) * 4;  // values, then deltas
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  constexpr uint32_t kWarps = Config::kThreads / 32;

  // 1. This block's down rows [r0, r1) and their entries staged (32-aligned, at most stage_cap).
  const uint32_t r0 = uint32_t(uint64_t(hidden) * blockIdx.x / gridDim.x);
  const uint32_t r1 = uint32_t(uint64_t(hidden) * (blockIdx.x + 1) / gridDim.x);
  const uint32_t e0 = __ldg(dn_ptr + r0) & ~31u;
  const uint32_t e1 = min((__ldg(dn_ptr + r1) + 31u) & ~31u, dn_entries);
  const uint32_t staged_end = e1 > e0 ? min(e1, e0 + stage_cap) : e0;
  const EntrySource down_src{dn_vals, dn_deltas, e0, staged_end, stage, stage + stage_cap * 2};
  const uint32_t bar = static_cast<uint32_t>(__cvta_generic_to_shared(&stage_bar));
  if (threadIdx.x == 0) {
    tc::mbar_init(bar, 1);
    tc::mbar_init_fence();
    const uint32_t n = staged_end - e0;
    tc::mbar_arrive_expect_tx(bar, n * 2 + n / 2);
    if (n > 0) {
      const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(stage));
      tc::bulk_copy(dst, dn_vals + e0, n * 2, bar);
      tc::bulk_copy(dst + stage_cap * 2, dn_deltas + e0 / 2, n / 2, bar);
    }
  }
  // The first gate / up row pair's first chunks.
  const EntrySource gu_src{gu_vals, gu_deltas, 0, 0, nullptr, nullptr};
  const uint32_t grid_warps = gridDim.x * kWarps;
  uint32_t pair = blockIdx.x * kWarps + uint32_t(warp);
  RowWalk wk[2];
  auto begin_pair = [&](uint32_t p) {
    begin_row(wk[0], __ldg(gu_ptr + p), __ldg(gu_ptr + p + 1), lane, gu_src);
    begin_row(wk[1], __ldg(gu_ptr + inter + p), __ldg(gu_ptr + inter + p + 1), lane, gu_src);
  };
  if (pair < inter) begin_pair(pair);
  wait_for_previous();

  // 2. The input as floats, and its sum of squares (every block reads all of it: 8 KB at 4096).
  float ss = 0.f;
  for (uint32_t i = threadIdx.x; i < hidden; i += blockDim.x) {
    const float v = to_float(input[i]);
    act[i] = v;
    ss = fmaf(v, v, ss);
  }
  ss = warp_sum(ss);
  if (lane == 0) warp_part[warp] = ss;
  __syncthreads();  // also publishes stage_bar's initialisation
  float scale = 1.f;
  if (input_rms) {
    float total = 0.f;
#pragma unroll
    for (uint32_t v = 0; v < kWarps; ++v) total += warp_part[v];
    scale = rms_scale(total, hidden, eps);
  }

  // 3. Phase A: h = silu(g) * u, g and u rounded to T first (as the separate gate_up matmul
  // writes them), h rounded once (as the swiglu kernel does).
  while (pair < inter) {
    float out[2];
    dot_rows<T, 2>(wk, act, lane, gu_src, out);
    if (lane == 0) {
      const float g = to_float(from_float<T>(out[0] * scale));
      const float u = to_float(from_float<T>(out[1] * scale));
      h[pair] = from_float<T>(g / (1.0f + __expf(-g)) * u);
    }
    pair += grid_warps;
    if (pair < inter) begin_pair(pair);
  }

  // 4. Every block's h is written; every block has read the input (x may be overwritten now).
  grid_barrier(barrier, gridDim.x);
  let_next_launch();

  // 5. Phase B: h (written by other blocks in this kernel: read through L2, not L1).
  for (uint32_t i = threadIdx.x; i < inter; i += blockDim.x) act[i] = to_float(__ldcg(h + i));
  __syncthreads();
  tc::mbar_wait(bar, 0);
  for (uint32_t r = r0 + uint32_t(warp); r < r1; r += kWarps) {
    RowWalk w1[1];
    begin_row(w1[0], __ldg(dn_ptr + r), __ldg(dn_ptr + r + 1), lane, down_src);
    float out[1];
    dot_rows<T, 1>(w1, act, lane, down_src, out);
    if (lane == 0) x[r] = from_float<T>(out[0] + to_float(__ldcg(x + r)));
  }
#else
  __trap();  // sm_90 and later only (run() refuses other devices)
#endif
}

uint32_t stage_entries(int64_t hidden, int64_t inter, int dynamic_smem) {
  const int64_t left = int64_t(dynamic_smem) - int64_t(act_floats(uint32_t(hidden), uint32_t(inter))) * 4;
  // 2.5 bytes per entry (a value and half a byte of delta), in whole 32-entry groups.
  return left > 0 ? uint32_t(left * 2 / 5 / 32 * 32) : 0u;
}

// Dynamic shared memory per block: all a block may opt in to, less the kernel's static part.
int dynamic_smem_bytes(int max_smem_per_block) { return max_smem_per_block - 1024; }

template <class T>
Status launch(const Call& c, const DeviceInfo& dev, Stream stream) {
  const macko::Matrix& gu = *c.gate_up;
  const macko::Matrix& dn = *c.down;
  const int64_t hidden = dn.shape.rows, inter = dn.shape.cols;
  const int smem = dynamic_smem_bytes(dev.max_smem_per_block);
  const uint32_t cap = stage_entries(hidden, inter, smem);
  if (int64_t(act_floats(uint32_t(hidden), uint32_t(inter))) * 4 > smem)
    return unsupported("macko.swiglu_mlp: hidden " + std::to_string(hidden) + " / intermediate " +
                       std::to_string(inter) + " do not fit shared memory as floats");
  auto kernel = swiglu_mlp_kernel<T>;
  SPARROW_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  int per_sm = 0;
  SPARROW_CUDA_RETURN_IF_ERROR(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, Config::kThreads, smem));
  if (per_sm < 1) return unsupported("macko.swiglu_mlp: a block does not fit an SM");
  // One block per SM: the grid barrier needs every block resident at once.
  const uint32_t blocks = uint32_t(dev.sm_count);
  return cuda_status(
      launch_kernel(c.dependent_launch, kernel, dim3(blocks), dim3(Config::kThreads), size_t(smem),
                    stream, gu.row_ptr.data(), gu.values.data(), gu.deltas.data(),
                    dn.row_ptr.data(), dn.values.data(), dn.deltas.data(),
                    uint32_t(dn.entries()), uint32_t(hidden), uint32_t(inter),
                    static_cast<const T*>(c.input), static_cast<T*>(c.x), static_cast<T*>(c.h),
                    c.barrier, c.input_rms, c.rms_eps, cap),
      "macko.swiglu_mlp launch");
}

}  // namespace

Status check(const macko::Matrix& gu, const macko::Matrix& dn) {
  const std::string who = "macko.swiglu_mlp: ";
  if (gu.shape.dtype != dn.shape.dtype)
    return invalid_argument(who + "gate_up and down hold different dtypes");
  if (gu.shape.dtype != DType::fp16 && gu.shape.dtype != DType::bf16)
    return invalid_argument(who + "macko holds fp16/bf16 values only");
  const int64_t hidden = dn.shape.rows, inter = dn.shape.cols;
  if (hidden < 1 || inter < 1 || gu.shape.rows != 2 * inter || gu.shape.cols != hidden) {
    return invalid_argument(who + "gate_up must be (2 x intermediate, hidden) = (" +
                            std::to_string(2 * inter) + ", " + std::to_string(hidden) +
                            ") for down (" + std::to_string(hidden) + ", " +
                            std::to_string(inter) + "); it is (" +
                            std::to_string(gu.shape.rows) + ", " + std::to_string(gu.shape.cols) +
                            ")");
  }
  if (hidden >= (int64_t(1) << 30) || inter >= (int64_t(1) << 30))
    return unsupported(who + "dimensions must stay below 2^30");
  return Status::success();
}

int64_t stage_bytes(int64_t hidden, int64_t inter, int max_smem_per_block) {
  return int64_t(stage_entries(hidden, inter, dynamic_smem_bytes(max_smem_per_block))) * 5 / 2;
}

Status run(const Call& c, Stream stream) {
  if (!c.gate_up || !c.down || !c.input || !c.x || !c.h || !c.barrier)
    return invalid_argument("macko.swiglu_mlp: a null weight, activation or barrier pointer");
  SPARROW_RETURN_IF_ERROR(check(*c.gate_up, *c.down));
  SPARROW_ASSIGN_OR_RETURN(const DeviceInfo dev, current_device_info());
  if (dev.cc_major < 9)
    return unsupported("macko.swiglu_mlp needs sm_90 or later (bulk copies, grid barrier)");
  if (c.gate_up->shape.dtype == DType::fp16) return launch<__half>(c, dev, stream);
  return launch<__nv_bfloat16>(c, dev, stream);
}

}  // namespace sparrow::kernels::macko_swiglu_mlp
