// macko.warp_row. Each warp owns one row at a time (rows strided over a persistent grid). Per step
// lane l loads the 8 entries starting at an 8-aligned index: 16 bytes of values and the matching
// 4 bytes of deltas. Rows are not aligned in the entry array, so entries before the row's start
// or past its end (the neighbouring rows') are masked: they add nothing to the column count and
// are not multiplied. Columns: each entry advances the column by delta + 1; a lane sums its own 8,
// a warp inclusive scan gives the lane's start, and the last lane's total carries to the next
// step. X is staged transposed in shared memory (X^T[k][token]) when it fits, so one column's
// N token values come in one 2/8/16/32-byte shared load; else it is gathered through L1.
#include "kernels/macko/warp_row.hpp"

#include <algorithm>
#include <variant>

#include "core/cuda_check.hpp"
#include "kernels/decode_common.cuh"
#include "kernels/device_info.hpp"
#include "kernels/token_bucket.hpp"

namespace sparrow::kernels::macko_warp_row {

using namespace decode;

namespace {

// The NB token values of column `col` as floats.
template <class T, int NB, bool XS>
__device__ __forceinline__ void x_column(const T* xs, const T* __restrict__ x, int64_t ldx, int n,
                                         int64_t col, float (&xf)[NB]) {
  if constexpr (XS) {
    const T* p = xs + col * NB;
    if constexpr (NB == 1) {
      xf[0] = to_float(p[0]);
    } else {
      // NB/2 words, loaded as the widest vectors NB allows (8 or 16 bytes).
      uint32_t wds[NB / 2];
      if constexpr (NB == 4) {
        const uint2 v = *reinterpret_cast<const uint2*>(p);
        wds[0] = v.x, wds[1] = v.y;
      } else {
#pragma unroll
        for (int q = 0; q < NB / 8; ++q) {
          const uint4 v = reinterpret_cast<const uint4*>(p)[q];
          wds[4 * q] = v.x, wds[4 * q + 1] = v.y, wds[4 * q + 2] = v.z, wds[4 * q + 3] = v.w;
        }
      }
#pragma unroll
      for (int i = 0; i < NB / 2; ++i) {
        const float2 f = unpack2<T>(wds[i]);
        xf[2 * i] = f.x, xf[2 * i + 1] = f.y;
      }
    }
  } else {
#pragma unroll
    for (int j = 0; j < NB; ++j) xf[j] = j < n ? to_float(__ldg(x + int64_t(j) * ldx + col)) : 0.f;
  }
}

template <class T, int NB, bool XS>
__global__ void __launch_bounds__(Config::kWarpsPerBlock * 32)
    macko_kernel(const uint32_t* __restrict__ row_ptr, const uint16_t* __restrict__ vals,
                 const uint8_t* __restrict__ deltas, int64_t m, int64_t k,
                 const T* __restrict__ x, int64_t ldx, int n, T* __restrict__ y, int64_t ldy,
                 const T* __restrict__ bias, bool accumulate) {
  extern __shared__ uint4 smem[];
  T* xs = reinterpret_cast<T*>(smem);  // (K, NB) X^T, tokens >= n zero
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if constexpr (XS) {
    for (int j = 0; j < NB; ++j) {
      for (int64_t c = threadIdx.x; c < k; c += blockDim.x) {
        xs[c * NB + j] = j < n ? x[int64_t(j) * ldx + c] : from_float<T>(0.f);
      }
    }
    __syncthreads();
  }

  for (int64_t row = int64_t(blockIdx.x) * Config::kWarpsPerBlock + warp; row < m;
       row += int64_t(gridDim.x) * Config::kWarpsPerBlock) {
    const int64_t s = row_ptr[row], e = row_ptr[row + 1];
    float acc[NB];
#pragma unroll
    for (int j = 0; j < NB; ++j) acc[j] = 0.f;
    int64_t carry = 0;  // sum of (delta + 1) over the row's entries before this step

    int64_t wb = s & ~int64_t(Config::kChunk - 1);  // warp's first aligned index
    // Software pipeline: the next step's loads are in flight while this one is decoded.
    uint4 v_next = make_uint4(0, 0, 0, 0);
    uint32_t d_next = 0;
    if (wb + lane * Config::kChunk < e) {
      v_next = load_stream16(vals + wb + lane * Config::kChunk);
      d_next = load_stream4(deltas + (wb + lane * Config::kChunk) / 2);
    }
    for (; wb < e; wb += 32 * Config::kChunk) {
      const int64_t base = wb + lane * Config::kChunk;
      const uint4 v = v_next;
      const uint32_t d = d_next;
      const int64_t nb = base + 32 * Config::kChunk;
      v_next = make_uint4(0, 0, 0, 0);
      d_next = 0;
      if (nb < e) {
        v_next = load_stream16(vals + nb);
        d_next = load_stream4(deltas + nb / 2);
      }
      uint32_t pre[8];  // inclusive sums of (delta + 1) over this lane's entries
      uint32_t run = 0;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const bool in = base + i >= s && base + i < e;
        run += in ? ((d >> (4 * i)) & 0xFu) + 1u : 0u;
        pre[i] = run;
      }
      const uint32_t incl = warp_inclusive_scan(run, lane);
      const int64_t col0 = carry + int64_t(incl - run) - 1;
      carry += __shfl_sync(0xffffffffu, incl, 31);
      const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const bool in = base + i >= s && base + i < e;
        const int64_t col = col0 + pre[i];
        if (in && col < k) {
          const float2 pair = unpack2<T>(words[i / 2]);
          const float wv = (i & 1) ? pair.y : pair.x;
          float xf[NB];
          x_column<T, NB, XS>(xs, x, ldx, n, col, xf);
#pragma unroll
          for (int j = 0; j < NB; ++j) acc[j] += wv * xf[j];
        }
      }
    }
#pragma unroll
    for (int j = 0; j < NB; ++j) acc[j] = warp_sum(acc[j]);
    float mine = 0.f;  // lane j writes token j
#pragma unroll
    for (int j = 0; j < NB; ++j) mine = lane == j ? acc[j] : mine;
    if (lane < NB && lane < n) {
      store_output(y + int64_t(lane) * ldy + row, mine, bias, row, accumulate);
    }
  }
}

template <class T, int NB, bool XS>
Status launch_one(const macko::Matrix& mm, const LaunchPlan& lp, const T* x, int64_t ldx, int nt,
                  T* y, int64_t ldy, const T* bias, bool accumulate, Stream stream) {
  auto kernel = macko_kernel<T, NB, XS>;
  if (lp.smem_bytes > 48 * 1024) {
    SPARROW_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, lp.smem_bytes));
  }
  kernel<<<unsigned(lp.blocks), Config::kWarpsPerBlock * 32, lp.smem_bytes, stream>>>(
      mm.row_ptr.data(), mm.values.data(), mm.deltas.data(), mm.shape.rows, mm.shape.cols, x, ldx,
      nt, y, ldy, bias, accumulate);
  SPARROW_CUDA_CHECK_LAUNCH("macko.warp_row");
  return Status::success();
}

template <class T, int NB>
Status launch_bucket(const macko::Matrix& mm, const LaunchPlan& lp, const T* x, int64_t ldx,
                     int nt, T* y, int64_t ldy, const T* bias, bool accumulate, Stream stream) {
  if (lp.x_shared) return launch_one<T, NB, true>(mm, lp, x, ldx, nt, y, ldy, bias, accumulate, stream);
  return launch_one<T, NB, false>(mm, lp, x, ldx, nt, y, ldy, bias, accumulate, stream);
}

// The one runtime-N -> template choice: token bucket, then where X lives.
template <class T>
Status launch_pass(const macko::Matrix& mm, const LaunchPlan& lp, int nb, const T* x, int64_t ldx,
                   int nt, T* y, int64_t ldy, const T* bias, bool accumulate, Stream stream) {
  switch (nb) {
    case 1: return launch_bucket<T, 1>(mm, lp, x, ldx, nt, y, ldy, bias, accumulate, stream);
    case 4: return launch_bucket<T, 4>(mm, lp, x, ldx, nt, y, ldy, bias, accumulate, stream);
    case 8: return launch_bucket<T, 8>(mm, lp, x, ldx, nt, y, ldy, bias, accumulate, stream);
    default: return launch_bucket<T, 16>(mm, lp, x, ldx, nt, y, ldy, bias, accumulate, stream);
  }
}

template <class T>
Status launch(const macko::Matrix& mm, const Problem& p, const DeviceInfo& dev, Stream stream) {
  const T* x = static_cast<const T*>(p.x.data);
  T* y = static_cast<T*>(p.y.data);
  const T* bias = static_cast<const T*>(p.opt.bias);
  for (int64_t t0 = 0; t0 < p.n(); t0 += kMaxTokensPerPass) {
    const int nt = int(std::min<int64_t>(kMaxTokensPerPass, p.n() - t0));
    const int nb = token_bucket(nt);
    const LaunchPlan lp = plan(mm.shape.rows, mm.shape.cols, nb, int(sizeof(T)), dev.sm_count,
                               dev.max_smem_per_block, dev.max_smem_per_sm);
    SPARROW_RETURN_IF_ERROR(launch_pass<T>(mm, lp, nb, x + t0 * p.x.ld, p.x.ld, nt,
                                           y + t0 * p.y.ld, p.y.ld, bias, p.opt.accumulate,
                                           stream));
  }
  return Status::success();
}

}  // namespace

LaunchPlan plan(int64_t m, int64_t k, int nb, int es, int sm_count, int smem_per_block,
                int smem_per_sm) {
  LaunchPlan lp;
  const int64_t xs_bytes = k * nb * es;
  const int64_t budget = std::min<int64_t>(Config::kXSharedBudget, smem_per_block);
  lp.x_shared = xs_bytes <= budget;
  lp.smem_bytes = lp.x_shared ? int(xs_bytes) : 0;
  int per_sm = Config::kMaxBlocksPerSm;
  if (lp.x_shared && lp.smem_bytes > 0) {
    // Leave 1 KiB per block for the runtime's own reservation.
    per_sm = int(std::clamp<int64_t>(smem_per_sm / (lp.smem_bytes + 1024), 1, per_sm));
  }
  const int64_t needed = (m + Config::kWarpsPerBlock - 1) / Config::kWarpsPerBlock;
  lp.blocks = std::max<int64_t>(1, std::min<int64_t>(needed, int64_t(std::max(sm_count, 1)) * per_sm));
  return lp;
}

Status run(const Problem& p, Stream stream) {
  SPARROW_RETURN_IF_ERROR(check_problem(p, Format::macko));
  const auto& mm = std::get<macko::Matrix>(p.w);
  if (mm.shape.dtype == DType::fp32) return invalid_argument("macko holds fp16/bf16 values only");
  SPARROW_ASSIGN_OR_RETURN(const DeviceInfo dev, current_device_info());
  if (mm.shape.dtype == DType::fp16) return launch<__half>(mm, p, dev, stream);
  return launch<__nv_bfloat16>(mm, p, dev, stream);
}

}  // namespace sparrow::kernels::macko_warp_row
