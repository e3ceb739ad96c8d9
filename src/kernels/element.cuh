// The element types of the GPU kernels (fp16 and bf16 storage, fp32 arithmetic) and the one
// tensor-core step the mma kernels share, in one place for the decode kernels
// (decode_common.cuh), the tensor-core kernels (tensor_core/mma.cuh) and the engine's own ops.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace sparrow::kernels {

// ---- element types -----------------------------------------------------------------------------
template <class T> __device__ __forceinline__ float to_float(T v);
template <> __device__ __forceinline__ float to_float<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <> __device__ __forceinline__ float to_float<float>(float v) { return v; }

// Rounded to nearest (even).
template <class T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }

// SwiGLU of one element, silu(gate) * up, from the two values as stored (already rounded to the
// storage type): the engine's SwiGLU kernel, macko.swiglu_mlp and dense.gemv's output_swiglu
// epilogue compute it the same way, so fused and separate runs give the same bits.
__device__ __forceinline__ float silu_times(float gate, float up) {
  return gate / (1.0f + __expf(-gate)) * up;
}

// Two packed 16-bit elements (one 32-bit register, low half first) as floats.
template <class T> __device__ __forceinline__ float2 unpack2(uint32_t u);
template <> __device__ __forceinline__ float2 unpack2<__half>(uint32_t u) {
  __half2 h = *reinterpret_cast<__half2*>(&u);
  return __half22float2(h);
}
template <> __device__ __forceinline__ float2 unpack2<__nv_bfloat16>(uint32_t u) {
  __nv_bfloat162 h = *reinterpret_cast<__nv_bfloat162*>(&u);
  return __bfloat1622float2(h);
}

// ---- tensor cores ------------------------------------------------------------------------------
// D = A (16x16, row) * B (16x8, col) + D, fp32 accumulators. Fragment layout (g = lane/4,
// t = lane%4): a[0] = A[g][2t..2t+1], a[1] = A[g+8][2t..], a[2] = A[g][2t+8..], a[3] = A[g+8][2t+8..];
// b[0] = B[2t..2t+1][g], b[1] = B[2t+8..2t+9][g]; c[0..1] = D[g][2t..2t+1], c[2..3] = D[g+8][2t..].
template <class T>
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1);
template <>
__device__ __forceinline__ void mma_16816<__half>(float (&c)[4], const uint32_t (&a)[4],
                                                  uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4],
                                                         uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace sparrow::kernels
