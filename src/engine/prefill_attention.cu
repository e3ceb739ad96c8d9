// Causal attention of a prefill pass on the tensor cores (see prefill_attention.hpp).
//
// Why: the split-K kernel in gpu_ops.cu gives every (row, head, split) its own block and walks
// the keys one at a time on the CUDA cores, so a prefill pass reads each key once per query row
// and spends ~20 instructions per key and row. On the H200 (7B, session 54) attention was more
// than half of pp512 from an empty cache (23.2 ms a pass, 10.7 ms without attention) and 89 %
// at a cache of 3072 keys. Here a block takes 64 query rows of one head, so a key tile in shared
// memory serves 64 rows, and both products run as mma.m16n8k16 (FlashAttention-2's scheme):
//
//   per key tile (BLK_K = 64 keys, copied with cp.async, kStages tiles in flight):
//     S = Q K^T             (16, 64) per warp: Q's A fragments stay in registers for the pass,
//                           K's B fragments come from ldmatrix (keys are rows of K, dims along
//                           them: the "col-major B" the mma wants);
//     online softmax        running max m and sum l per row, kept by the 4 lanes of a quad;
//     O = O * corr + P V    (16, D): S's accumulators are P's A fragments after rounding to the
//                           element type, V's B fragments come from ldmatrix.trans.
//
// Masking: key j is seen by the row at position p when j <= p. A block reads keys 0 .. the
// position of its last row; keys past a row's position score -inf. Every row sees key 0, so after
// the first tile every row's m is finite and exp2(-inf - m) = 0 needs no special case.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <type_traits>

#include "core/cuda_check.hpp"
#include "engine/prefill_attention.hpp"
#include "kernels/dependent_launch.cuh"
#include "kernels/device_info.hpp"
#include "kernels/element.cuh"
#include "kernels/tensor_core/mma.cuh"

namespace sparrow::engine::gpu {
namespace {

using kernels::mma_16816;
using kernels::tc::cp_async16;
using kernels::tc::cp_async_commit;
using kernels::tc::cp_async_wait;
using kernels::tc::ldmatrix_x4;
using kernels::tc::smem_addr;

// The tile configuration: WARPS warps of 16 query rows each, key tiles of 64, STAGES copies in
// flight. Shipped: 4 warps, 2 stages (SPARROW_ENGINE_PREFILL_WARPS=8 and
// SPARROW_ENGINE_PREFILL_STAGES=3 select the others, experiment knobs read once).
template <int D, int WARPS, int STAGES>
struct PrefillTile {
  static constexpr int kWarps = WARPS;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kRows = 16 * kWarps;  // BLK_Q: query rows per block
  static constexpr int kKeys = 64;           // BLK_K: keys per shared-memory tile
  // Elements per shared-memory row: D + 8, so the 8 rows one ldmatrix phase reads start 16 bytes
  // apart in bank space (no conflicts).
  static constexpr int kPitch = D + 8;
  static constexpr int kStages = STAGES;
  // (stage, K | V, BLK_K, kPitch) elements of 2 bytes.
  static constexpr size_t kSmemBytes = size_t(kStages) * 2 * kKeys * kPitch * 2;
};

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// Two floats rounded to T, packed low first (an mma A-fragment register).
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// Block (query tile, head, sequence). Warp w owns rows 16 w .. 16 w + 15 of the tile; lane
// (g = lane / 4, t = lane % 4) holds rows g and g + 8 of it (the mma fragment layout).
template <class T, class C>
__global__ void __launch_bounds__(C::kThreads)
    prefill_attention_kernel(const T* q, const T* k_cache, const T* v_cache, T* out,
                             RowLayout rows, AttentionShape s) {
  constexpr int D = C::kPitch - 8;
  kernels::begin_dependent();  // q and the caches come from the kernels before
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);  // (kStages, K | V, BLK_K, kPitch)
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int64_t head = blockIdx.y, b = blockIdx.z;
  const int64_t i0 = int64_t(blockIdx.x) * C::kRows;
  const int64_t last = min(rows.count, i0 + C::kRows) - 1;  // the tile's last row
  const int64_t pos0 = rows.pos0[0];
  const int64_t n_keys = pos0 + last + 1;
  const int64_t kvh = head / (s.heads / s.kv_heads), kvd = s.kv_heads * D;
  const T* kb = k_cache + b * s.context * kvd + kvh * D;
  const T* vb = v_cache + b * s.context * kvd + kvh * D;

  // Key tile kt into stage st: 16-byte pieces, keys past n_keys zero-filled (never read from the
  // cache: positions past the pass's last row are unwritten). Past the last tile an empty group
  // is committed, so every iteration waits for the same count.
  const int64_t n_tiles = (n_keys + C::kKeys - 1) / C::kKeys;
  auto load_tile = [&](int64_t kt, int st) {
    if (kt < n_tiles) {
      T* ks = smem + size_t(st) * 2 * C::kKeys * C::kPitch;
      T* vs = ks + C::kKeys * C::kPitch;
      constexpr int kPiecesPerKey = D / 8;
#pragma unroll
      for (int p = threadIdx.x; p < C::kKeys * kPiecesPerKey; p += C::kThreads) {
        const int key = p / kPiecesPerKey, c = (p % kPiecesPerKey) * 8;
        const int64_t j = kt * C::kKeys + key;
        const bool in = j < n_keys;
        const int64_t at = (in ? j : 0) * kvd + c;
        cp_async16(ks + key * C::kPitch + c, kb + at, in ? 16 : 0);
        cp_async16(vs + key * C::kPitch + c, vb + at, in ? 16 : 0);
      }
    }
    cp_async_commit();
  };
#pragma unroll
  for (int st = 0; st + 1 < C::kStages; ++st) load_tile(st, st);

  // Q's A fragments for the whole pass: qa[kk] covers dims 16 kk .. 16 kk + 15 of rows g, g + 8.
  const int64_t q_ld = rows.q_ld ? rows.q_ld : s.heads * D;
  const int64_t row_lo = i0 + 16 * warp + g, row_hi = row_lo + 8;
  uint32_t qa[D / 16][4];
  {
    const T* q_lo = q + (b * rows.count + row_lo) * q_ld + head * D;
    const T* q_hi = q_lo + 8 * q_ld;
    const bool lo_in = row_lo < rows.count, hi_in = row_hi < rows.count;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const int c = 16 * kk + 2 * t;
      qa[kk][0] = lo_in ? *reinterpret_cast<const uint32_t*>(q_lo + c) : 0u;
      qa[kk][1] = hi_in ? *reinterpret_cast<const uint32_t*>(q_hi + c) : 0u;
      qa[kk][2] = lo_in ? *reinterpret_cast<const uint32_t*>(q_lo + c + 8) : 0u;
      qa[kk][3] = hi_in ? *reinterpret_cast<const uint32_t*>(q_hi + c + 8) : 0u;
    }
  }
  // Positions of the lane's two rows (rows past the pass: the last row's, so their softmax stays
  // finite; they are not written).
  const int64_t pos_lo = pos0 + min(row_lo, last), pos_hi = pos0 + min(row_hi, last);
  const float scale_log2 = 1.4426950408889634f / sqrtf(float(D));  // exp(x) = exp2(x log2 e)

  float o[D / 8][4];  // O: dims 8 nd + 2 t, + 1 of rows g (o[nd][0..1]) and g + 8 (o[nd][2..3])
#pragma unroll
  for (int nd = 0; nd < D / 8; ++nd) o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0.f;
  float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.f, l_hi = 0.f;  // l: this lane's share

  int stage = 0;  // kt % kStages
  for (int64_t kt = 0; kt < n_tiles; ++kt) {
    // Tile kt has landed once at most kStages - 2 later groups are pending; the barrier also
    // says every warp is done with tile kt - 1, whose stage the next copy overwrites.
    cp_async_wait<C::kStages - 2>();
    __syncthreads();
    load_tile(kt + C::kStages - 1, stage == 0 ? C::kStages - 1 : stage - 1);
    const T* ks = smem + size_t(stage) * 2 * C::kKeys * C::kPitch;  // (BLK_K, kPitch)
    const T* vs = ks + C::kKeys * C::kPitch;                        // (BLK_K, kPitch)
    stage = stage + 1 == C::kStages ? 0 : stage + 1;

    // S = Q K^T: s_acc[nt] is keys 8 nt .. 8 nt + 7 of the tile.
    float s_acc[C::kKeys / 8][4];
#pragma unroll
    for (int nt = 0; nt < C::kKeys / 8; ++nt)
      s_acc[nt][0] = s_acc[nt][1] = s_acc[nt][2] = s_acc[nt][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      // A k-step's K fragments, all loaded before its mmas: the asm statements keep program
      // order, so an ldmatrix just before each pair of mmas would expose its latency every time.
      // Matrices: keys 16 np + (0..7 | 8..15) x dims 16 kk + (0..7 | 8..15); lane groups of 8
      // address (keys lo, dims lo), (keys lo, dims hi), (keys hi, dims lo), (keys hi, dims hi).
      uint32_t kf[C::kKeys / 16][4];
#pragma unroll
      for (int np = 0; np < C::kKeys / 16; ++np) {
        const int key = 16 * np + (lane & 7) + ((lane >> 4) << 3);
        const int dim = 16 * kk + ((lane >> 3) & 1) * 8;
        ldmatrix_x4(kf[np], ks + key * C::kPitch + dim);
      }
#pragma unroll
      for (int np = 0; np < C::kKeys / 16; ++np) {
        mma_16816<T>(s_acc[2 * np], qa[kk], kf[np][0], kf[np][1]);
        mma_16816<T>(s_acc[2 * np + 1], qa[kk], kf[np][2], kf[np][3]);
      }
    }

    // Mask, then the online softmax (in log2 units).
    const int64_t j_base = kt * C::kKeys + 2 * t;
    float mx_lo = -INFINITY, mx_hi = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < C::kKeys / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int64_t j = j_base + 8 * nt + e;
        s_acc[nt][e] = j <= pos_lo ? s_acc[nt][e] * scale_log2 : -INFINITY;
        s_acc[nt][2 + e] = j <= pos_hi ? s_acc[nt][2 + e] * scale_log2 : -INFINITY;
        mx_lo = fmaxf(mx_lo, s_acc[nt][e]);
        mx_hi = fmaxf(mx_hi, s_acc[nt][2 + e]);
      }
    }
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {  // the quad holds the row's 64 keys
      mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, off));
      mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, off));
    }
    const float mn_lo = fmaxf(m_lo, mx_lo), mn_hi = fmaxf(m_hi, mx_hi);  // finite: key 0
    const float corr_lo = exp2f(m_lo - mn_lo), corr_hi = exp2f(m_hi - mn_hi);
    m_lo = mn_lo;
    m_hi = mn_hi;
    l_lo *= corr_lo;
    l_hi *= corr_hi;
#pragma unroll
    for (int nd = 0; nd < D / 8; ++nd) {
      o[nd][0] *= corr_lo;
      o[nd][1] *= corr_lo;
      o[nd][2] *= corr_hi;
      o[nd][3] *= corr_hi;
    }

    // O += P V, 16 keys per mma step: P's A fragment from s_acc[2 kk2], s_acc[2 kk2 + 1].
#pragma unroll
    for (int kk2 = 0; kk2 < C::kKeys / 16; ++kk2) {
      float p[2][4];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int e = 0; e < 4; ++e) p[h][e] = exp2f(s_acc[2 * kk2 + h][e] - (e < 2 ? m_lo : m_hi));
        l_lo += p[h][0] + p[h][1];
        l_hi += p[h][2] + p[h][3];
      }
      const uint32_t pa[4] = {pack2<T>(p[0][0], p[0][1]), pack2<T>(p[0][2], p[0][3]),
                              pack2<T>(p[1][0], p[1][1]), pack2<T>(p[1][2], p[1][3])};
      // The step's V fragments, all loaded before its mmas (as K's above). Transposed matrices:
      // keys 16 kk2 + (0..7 | 8..15) x dims 16 dp + (0..7 | 8..15); lane groups address (keys
      // lo, dims lo), (keys hi, dims lo), (keys lo, dims hi), (keys hi, dims hi): the B fragments
      // (b0, b1) of dim tiles 2 dp and 2 dp + 1.
      uint32_t vf[D / 16][4];
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        const int key = 16 * kk2 + (lane & 7) + ((lane >> 3) & 1) * 8;
        const int dim = 16 * dp + (lane >> 4) * 8;
        ldmatrix_x4_trans(vf[dp], vs + key * C::kPitch + dim);
      }
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        mma_16816<T>(o[2 * dp], pa, vf[dp][0], vf[dp][1]);
        mma_16816<T>(o[2 * dp + 1], pa, vf[dp][2], vf[dp][3]);
      }
    }
  }

  // The row sums over the quad, then O / l into the output rows of the pass.
#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, off);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, off);
  }
  const float inv_lo = 1.f / l_lo, inv_hi = 1.f / l_hi;
  const int64_t out_ld = s.heads * D;
  T* out_lo = out + (b * rows.count + row_lo) * out_ld + head * D + 2 * t;
  T* out_hi = out_lo + 8 * out_ld;
#pragma unroll
  for (int nd = 0; nd < D / 8; ++nd) {
    if (row_lo < rows.count)
      *reinterpret_cast<uint32_t*>(out_lo + 8 * nd) =
          pack2<T>(o[nd][0] * inv_lo, o[nd][1] * inv_lo);
    if (row_hi < rows.count)
      *reinterpret_cast<uint32_t*>(out_hi + 8 * nd) =
          pack2<T>(o[nd][2] * inv_hi, o[nd][3] * inv_hi);
  }
}

template <class T, class C>
Status launch(const void* q, const void* k_cache, const void* v_cache, void* out,
              const RowLayout& rows, const AttentionShape& s, Stream stream) {
  auto kernel = prefill_attention_kernel<T, C>;
  SPARROW_RETURN_IF_ERROR(cuda_status(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           int(C::kSmemBytes)),
      "prefill_attention shared memory"));
  const dim3 grid(unsigned((rows.count + C::kRows - 1) / C::kRows), unsigned(s.heads),
                  unsigned(rows.batch));
  return cuda_status(
      kernels::launch_kernel(true, kernel, grid, dim3(C::kThreads), C::kSmemBytes, stream,
                             static_cast<const T*>(q), static_cast<const T*>(k_cache),
                             static_cast<const T*>(v_cache), static_cast<T*>(out), rows, s),
      "prefill_attention launch");
}

// Runtime head_dim and the experiment knobs -> the kernel template, in one place.
template <class T>
Status dispatch(const void* q, const void* k_cache, const void* v_cache, void* out,
                const RowLayout& rows, const AttentionShape& s, Stream stream) {
  static const int warps = kernels::env_knob("SPARROW_ENGINE_PREFILL_WARPS", 4) == 8 ? 8 : 4;
  static const int stages = kernels::env_knob("SPARROW_ENGINE_PREFILL_STAGES", 2) == 3 ? 3 : 2;
  auto with = [&](auto d) -> Status {
    constexpr int D = decltype(d)::value;
    auto go = [&](auto tile) {
      return launch<T, decltype(tile)>(q, k_cache, v_cache, out, rows, s, stream);
    };
    if (warps == 8) return stages == 3 ? go(PrefillTile<D, 8, 3>{}) : go(PrefillTile<D, 8, 2>{});
    return stages == 3 ? go(PrefillTile<D, 4, 3>{}) : go(PrefillTile<D, 4, 2>{});
  };
  return s.head_dim == 64 ? with(std::integral_constant<int, 64>{})
                          : with(std::integral_constant<int, 128>{});
}

}  // namespace

bool prefill_attention_fits(const void* q, const void* k_cache, const void* v_cache,
                            const RowLayout& rows, const AttentionShape& s) {
  if (s.head_dim != 64 && s.head_dim != 128) return false;
  if (rows.count < 1 || rows.batch < 1 || s.kv_heads < 1 || s.heads % s.kv_heads != 0)
    return false;
  const int64_t q_ld = rows.q_ld ? rows.q_ld : s.heads * s.head_dim;
  // 4-byte loads of q pairs; 16-byte copies of cache rows.
  return reinterpret_cast<uintptr_t>(q) % 4 == 0 && q_ld % 2 == 0 &&
         (reinterpret_cast<uintptr_t>(k_cache) | reinterpret_cast<uintptr_t>(v_cache)) % 16 ==
             0;
}

Status prefill_attention(const void* q, const void* k_cache, const void* v_cache, void* out,
                         const RowLayout& rows, const AttentionShape& s, DType t, Stream stream) {
  if (!prefill_attention_fits(q, k_cache, v_cache, rows, s)) {
    return invalid_argument(
        "prefill_attention: head_dim 64 or 128, whole query groups, q pairs 4-byte aligned and "
        "caches 16-byte aligned");
  }
  switch (t) {
    case DType::fp16:
      return dispatch<__half>(q, k_cache, v_cache, out, rows, s, stream);
    case DType::bf16:
      return dispatch<__nv_bfloat16>(q, k_cache, v_cache, out, rows, s, stream);
    default:
      return unsupported("prefill_attention runs fp16 or bf16");
  }
}

}  // namespace sparrow::engine::gpu
