// csr.vector. A warp walks one row in steps of 256 non-zeros: lane l takes the 8 consecutive
// non-zeros starting at an 8-aligned index, so values and indices arrive in 16-byte loads (the
// row's first and last chunk also hold neighbouring rows' entries, masked off by index). The
// final chunk of the whole array (past nnz rounded down to 8) is read element by element, since
// CSR arrays carry no tail padding.
#include "kernels/csr/vector.hpp"

#include <algorithm>
#include <cstring>
#include <variant>

#include "core/cuda_check.hpp"
#include "kernels/decode_common.cuh"
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

template <class T, class I, int NB>
__global__ void __launch_bounds__(Config::kWarpsPerBlock * 32)
    csr_kernel(const uint32_t* __restrict__ row_ptr, const I* __restrict__ cols,
               const T* __restrict__ vals, int64_t nnz, int64_t m, const T* __restrict__ x,
               int64_t ldx, int n, T* __restrict__ y, int64_t ldy, const T* __restrict__ bias,
               bool accumulate) {
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * Config::kWarpsPerBlock + (threadIdx.x >> 5);
  if (row >= m) return;  // whole warp; no block-level barrier follows
  const int64_t s = row_ptr[row], e = row_ptr[row + 1];
  float acc[NB];
#pragma unroll
  for (int j = 0; j < NB; ++j) acc[j] = 0.f;

  for (int64_t wb = s & ~int64_t(7); wb < e; wb += 32 * Config::kChunk) {
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
#pragma unroll
  for (int j = 0; j < NB; ++j) acc[j] = warp_sum(acc[j]);
  float mine = 0.f;  // lane j writes token j
#pragma unroll
  for (int j = 0; j < NB; ++j) mine = lane == j ? acc[j] : mine;
  if (lane < NB && lane < n) store_output(y + int64_t(lane) * ldy + row, mine, bias, row, accumulate);
}

template <class T, class I>
Status launch(const csr::Matrix& cm, const I* cols, const Problem& p, Stream stream) {
  const T* vals = reinterpret_cast<const T*>(cm.values.data());
  const T* x = static_cast<const T*>(p.x.data);
  T* y = static_cast<T*>(p.y.data);
  const T* bias = static_cast<const T*>(p.opt.bias);
  const int64_t m = cm.shape.rows, nnz = cm.nnz();
  const dim3 grid(unsigned(blocks_for(m))), block(Config::kWarpsPerBlock * 32);
  for (int64_t t0 = 0; t0 < p.n(); t0 += kMaxTokensPerPass) {
    const int nt = int(std::min<int64_t>(kMaxTokensPerPass, p.n() - t0));
    const T* xp = x + t0 * p.x.ld;
    T* yp = y + t0 * p.y.ld;
#define SPARROW_CSR_LAUNCH(NB)                                                                   \
  csr_kernel<T, I, NB><<<grid, block, 0, stream>>>(cm.row_ptr.data(), cols, vals, nnz, m, xp,    \
                                                   p.x.ld, nt, yp, p.y.ld, bias, p.opt.accumulate)
    switch (token_bucket(nt)) {
      case 1: SPARROW_CSR_LAUNCH(1); break;
      case 4: SPARROW_CSR_LAUNCH(4); break;
      case 8: SPARROW_CSR_LAUNCH(8); break;
      default: SPARROW_CSR_LAUNCH(16); break;
    }
#undef SPARROW_CSR_LAUNCH
    SPARROW_CUDA_CHECK_LAUNCH("csr.vector");
  }
  return Status::success();
}

template <class T>
Status launch_values(const csr::Matrix& cm, const Problem& p, Stream stream) {
  if (cm.index_bits == 16) return launch<T, uint16_t>(cm, cm.col16.data(), p, stream);
  return launch<T, uint32_t>(cm, cm.col32.data(), p, stream);
}

}  // namespace

int64_t blocks_for(int64_t rows) {
  return (rows + Config::kWarpsPerBlock - 1) / Config::kWarpsPerBlock;
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
