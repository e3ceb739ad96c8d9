// Hopper (sm_90) bulk copies and the shared-memory barriers that track them: the copy engine moves
// a whole tile (a 1D byte range, or a box of a tensor described by a CUtensorMap) into shared
// memory and counts its bytes on an mbarrier, so no thread spends instructions per 16 bytes; and
// st.async, a store into another cluster block's shared memory counted on that block's mbarrier.
//
//   mbarrier: init(count) once; each phase completes when `count` arrivals happened and every
//   byte announced with arrive_expect_tx has landed. wait(parity) blocks until the phase of that
//   parity (0 for the 1st, 3rd, ... completion, 1 for the 2nd, ...) has completed.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace sparrow::kernels::tc {

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Makes barrier initialisation visible to the copy engine (then a __syncthreads for the threads).
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// One arrival that also announces `bytes` the copy engine will deliver in this phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
// CLUSTER: with acquire semantics at cluster scope, for bytes other blocks of the cluster stored
// (st_async16 below); else the default (acquire, this block).
template <bool CLUSTER = false>
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    if constexpr (CLUSTER) {
      asm volatile(
          "{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], "
          "%2;\nselp.u32 %0, 1, 0, p;\n}\n"
          : "=r"(done)
          : "r"(bar), "r"(parity)
          : "memory");
    } else {
      asm volatile(
          "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
          "selp.u32 %0, 1, 0, p;\n}\n"
          : "=r"(done)
          : "r"(bar), "r"(parity)
          : "memory");
    }
  } while (!done);
}

// The address of shared-memory location `addr` (this block's) in block `rank` of the cluster.
__device__ __forceinline__ uint32_t cluster_addr(uint32_t addr, int rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}
// 16 bytes into another block's shared memory, counted on its mbarrier (both cluster addresses).
__device__ __forceinline__ void st_async16(uint32_t dst, const float4 v, uint32_t bar) {
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, "
      "[%5];\n" ::"r"(dst),
      "r"(__float_as_uint(v.x)), "r"(__float_as_uint(v.y)), "r"(__float_as_uint(v.z)),
      "r"(__float_as_uint(v.w)), "r"(bar)
      : "memory");
}

// bytes (a multiple of 16, both addresses 16-byte aligned) global -> shared, counted on `bar`.
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void* src, uint32_t bytes,
                                          uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}
// The box at (c0 innermost, c1) of a 2D tensor map global -> shared, counted on `bar`; elements
// outside the tensor arrive as zeros.
__device__ __forceinline__ void tensor_copy_2d(uint32_t dst, const CUtensorMap* map, int c0, int c1,
                                               uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, "
      "%3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}

// Named barrier `id` (1..15; 0 is __syncthreads) over `threads` threads (a multiple of 32).
__device__ __forceinline__ void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace sparrow::kernels::tc
