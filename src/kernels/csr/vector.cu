// csr.vector. A warp walks one row (or one of its `pieces`) in steps of 256 non-zeros: lane l
// takes the 8 consecutive non-zeros starting at an 8-aligned index, so values and indices arrive
// in 16-byte loads (the row's first and last chunk also hold neighbouring rows' entries, masked
// off by index). The final chunk of the whole array (past nnz rounded down to 8) is read element
// by element, since CSR arrays carry no tail padding.
//
// Pieces: a row's steps split over 2 or 4 warps of one block (explicit column indices let a warp
// start anywhere in a row), whose sums meet in shared memory and are added in piece order, so the
// result does not depend on timing. With fewer rows than the GPU holds warps, or with uneven rows
// (magnitude pruning: the longest 2-5x the average), a warp per row leaves the kernel as long as
// its longest row while most warp slots idle.
#include "kernels/csr/vector.hpp"

#include <algorithm>
#include <cstring>
#include <variant>

#include "core/cuda_check.hpp"
#include "kernels/decode_common.cuh"
#include "kernels/device_info.hpp"
#include "kernels/per_device_cache.hpp"
#include "kernels/token_bucket.hpp"

namespace sparrow::kernels::csr_vector {

using namespace decode;

namespace {

// Elements base..base+7 of p (base a multiple of 8), zero past `limit`.
template <class E>
__device__ __forceinline__ void load_chunk(const E* p, int64_t base, int64_t limit, E (&out)[8]) {
  if (base + 8 <= limit) {
    constexpr int kPieces = int(sizeof(E) * 8 / 16);
    uint4 raw[kPieces];
#pragma unroll
    for (int i = 0; i < kPieces; ++i) raw[i] = load_stream16(p + base + i * (16 / sizeof(E)));
    memcpy(out, raw, sizeof(out));
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) out[i] = base + i < limit ? p[base + i] : E(0);
  }
}

template <class T, class I, int NB, int PIECES>
__global__ void __launch_bounds__(Config::kWarpsPerBlock * 32)
    csr_kernel(const uint32_t* __restrict__ row_ptr, const I* __restrict__ cols,
               const T* __restrict__ vals, int64_t nnz, int64_t m, const T* __restrict__ x,
               int64_t ldx, int n, T* __restrict__ y, int64_t ldy, const T* __restrict__ bias,
               bool accumulate) {
  static_assert(Config::kWarpsPerBlock % PIECES == 0, "a row's pieces share one block");
  __shared__ float part[PIECES > 1 ? Config::kWarpsPerBlock : 1][NB];  // (warps, tokens)
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int piece = warp % PIECES;
  const int64_t row = int64_t(blockIdx.x) * (Config::kWarpsPerBlock / PIECES) + warp / PIECES;
  // With one piece a warp past the last row leaves at once (no barrier follows); with pieces it
  // stays for the block's barrier.
  if (PIECES == 1 && row >= m) return;
  float acc[NB];
#pragma unroll
  for (int j = 0; j < NB; ++j) acc[j] = 0.f;
  if (row < m) {
    const int64_t s = row_ptr[row], e = row_ptr[row + 1];
    constexpr int64_t kStep = 32 * Config::kChunk;
    const int64_t first = s & ~int64_t(7);
    // This piece's steps of the row: [steps * piece / PIECES, steps * (piece + 1) / PIECES).
    const int64_t steps = (e - first + kStep - 1) / kStep;
    const int64_t w0 = first + steps * piece / PIECES * kStep;
    const int64_t w1 = std::min<int64_t>(e, first + steps * (piece + 1) / PIECES * kStep);
    for (int64_t wb = w0; wb < w1; wb += kStep) {
      const int64_t base = wb + lane * Config::kChunk;
      if (base >= e) continue;
      T v[8];
      I c[8];
      load_chunk(vals, base, nnz, v);
      load_chunk(cols, base, nnz, c);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int64_t idx = base + i;
        if (idx < s || idx >= e) continue;
        const float wv = to_float(v[i]);
#pragma unroll
        for (int j = 0; j < NB; ++j) {
          if (j < n) acc[j] += wv * to_float(__ldg(x + int64_t(j) * ldx + c[i]));
        }
      }
    }
  }
#pragma unroll
  for (int j = 0; j < NB; ++j) acc[j] = warp_sum(acc[j]);
  float mine = 0.f;  // lane j holds token j
#pragma unroll
  for (int j = 0; j < NB; ++j) mine = lane == j ? acc[j] : mine;
  if constexpr (PIECES > 1) {
    if (lane < NB) part[warp][lane] = mine;
    __syncthreads();
    if (piece != 0 || row >= m) return;
    mine = 0.f;
    if (lane < NB) {
#pragma unroll
      for (int q = 0; q < PIECES; ++q) mine += part[warp + q][lane];
    }
  }
  if (lane < NB && lane < n) store_output(y + int64_t(lane) * ldy + row, mine, bias, row, accumulate);
}

// Warps of `kernel` (blocks of kWarpsPerBlock) one SM holds at once, asked once per device and
// kernel.
template <class Kernel>
Result<int> resident_warps_per_sm(Kernel kernel) {
  return per_device_kernel_value<int>(kernel, [&]() -> Result<int> {
    int blocks = 0;
    SPARROW_CUDA_RETURN_IF_ERROR(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &blocks, kernel, Config::kWarpsPerBlock * 32, 0));
    return blocks * Config::kWarpsPerBlock;
  });
}

template <class T, class I, int NB, int PIECES>
Status launch_pass(const I* cols, const T* vals, const csr::Matrix& cm, const T* x, int64_t ldx,
                   int n, T* y, int64_t ldy, const T* bias, bool accumulate, Stream stream) {
  const int64_t m = cm.shape.rows;
  const dim3 grid(unsigned(blocks_for(m, PIECES))), block(Config::kWarpsPerBlock * 32);
  csr_kernel<T, I, NB, PIECES><<<grid, block, 0, reinterpret_cast<cudaStream_t>(stream)>>>(
      cm.row_ptr.data(), cols, vals, cm.nnz(), m, x, ldx, n, y, ldy, bias, accumulate);
  SPARROW_CUDA_CHECK_LAUNCH("csr.vector");
  return Status::success();
}

template <class T, class I, int NB>
Status launch_tokens(const I* cols, const T* vals, const csr::Matrix& cm, const T* x,
                     int64_t ldx, int n, T* y, int64_t ldy, const T* bias, bool accumulate,
                     int sm_count, Stream stream) {
  // The one-piece kernel's residency stands for all three (the pieces add one shared array and a
  // barrier, not registers that matter).
  SPARROW_ASSIGN_OR_RETURN(const int per_sm, resident_warps_per_sm(csr_kernel<T, I, NB, 1>));
  switch (pieces_for(cm.shape.rows, cm.nnz(), cm.max_row_nnz, int64_t(sm_count) * per_sm, n,
                     pieces_override())) {
    case 4:
      return launch_pass<T, I, NB, 4>(cols, vals, cm, x, ldx, n, y, ldy, bias, accumulate, stream);
    case 2:
      return launch_pass<T, I, NB, 2>(cols, vals, cm, x, ldx, n, y, ldy, bias, accumulate, stream);
    default:
      return launch_pass<T, I, NB, 1>(cols, vals, cm, x, ldx, n, y, ldy, bias, accumulate, stream);
  }
}

template <class T, class I>
Status launch(const csr::Matrix& cm, const I* cols, const Problem& p, Stream stream) {
  SPARROW_ASSIGN_OR_RETURN(const DeviceInfo dev, current_device_info());
  const T* vals = reinterpret_cast<const T*>(cm.values.data());
  const T* x = static_cast<const T*>(p.x.data);
  T* y = static_cast<T*>(p.y.data);
  const T* bias = static_cast<const T*>(p.opt.bias);
  for (int64_t t0 = 0; t0 < p.n(); t0 += kMaxTokensPerPass) {
    const int nt = int(std::min<int64_t>(kMaxTokensPerPass, p.n() - t0));
    const T* xp = x + t0 * p.x.ld;
    T* yp = y + t0 * p.y.ld;
    auto pass = [&]() -> Status {
#define SPARROW_CSR_TOKENS(NB)                                                               \
  launch_tokens<T, I, NB>(cols, vals, cm, xp, p.x.ld, nt, yp, p.y.ld, bias, p.opt.accumulate, \
                          dev.sm_count, stream)
      switch (token_bucket(nt)) {
        case 1: return SPARROW_CSR_TOKENS(1);
        case 4: return SPARROW_CSR_TOKENS(4);
        case 8: return SPARROW_CSR_TOKENS(8);
        default: return SPARROW_CSR_TOKENS(16);
      }
#undef SPARROW_CSR_TOKENS
    };
    SPARROW_RETURN_IF_ERROR(pass());
  }
  return Status::success();
}

template <class T>
Status launch_values(const csr::Matrix& cm, const Problem& p, Stream stream) {
  if (cm.index_bits == 16) return launch<T, uint16_t>(cm, cm.col16.data(), p, stream);
  return launch<T, uint32_t>(cm, cm.col32.data(), p, stream);
}

}  // namespace

int64_t blocks_for(int64_t rows, int pieces) {
  const int64_t rows_per_block = Config::kWarpsPerBlock / std::max(pieces, 1);
  return (rows + rows_per_block - 1) / rows_per_block;
}

int pieces_for(int64_t rows, int64_t nnz, int64_t max_row_nnz, int64_t resident_warps,
               int tokens, int requested) {
  if (requested == 1 || requested == 2 || requested == 4) return requested;
  for (int p : {4, 2}) {
    if (rows * p <= resident_warps) return p;
  }
  // Beyond one wave only uneven rows gain (the longest at least 1.5x the average); at one token
  // only with pieces of a step (256 non-zeros) or more on average (H100, session 40,
  // bench/NOTES-decode.md: 11008x4096 at 90 %, 1.6 steps a row, took 1.13x the time in 4 pieces
  // at N = 1 and 0.86x at N = 8).
  const int64_t avg = nnz / std::max<int64_t>(rows, 1);
  if (rows <= 0 || 2 * max_row_nnz < 3 * std::max<int64_t>(avg, 1)) return 1;
  if (tokens > 1) return 4;
  const int64_t steps = avg / (32 * Config::kChunk);
  return steps >= 4 ? 4 : steps >= 2 ? 2 : 1;
}

int pieces_override() {
  static const int v = env_knob("SPARROW_CSR_PIECES", 0);
  return v;
}

Status run(const Problem& p, Stream stream) {
  SPARROW_RETURN_IF_ERROR(check_problem(p, Format::csr));
  const auto& cm = std::get<csr::Matrix>(p.w);
  if (cm.index_bits != 16 && cm.index_bits != 32) {
    return invalid_argument("csr weight has index_bits " + std::to_string(cm.index_bits) +
                            " (expected 16 or 32)");
  }
  switch (cm.shape.dtype) {
    case DType::fp16: return launch_values<__half>(cm, p, stream);
    case DType::bf16: return launch_values<__nv_bfloat16>(cm, p, stream);
    case DType::fp32: return launch_values<float>(cm, p, stream);
  }
  return invalid_argument("csr.vector: unknown dtype");
}

}  // namespace sparrow::kernels::csr_vector
