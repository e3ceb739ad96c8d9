// Hopper warpgroup MMA (wgmma.mma_async, sm_90a only) for the tensor-core SpMM kernels that take
// their A operand (the decoded weight) from registers and B (X) from shared memory.
//
// What a caller must know:
//   - Four consecutive warps (a warpgroup, starting at a warp index divisible by 4) issue every
//     wgmma together. Warp q of the warpgroup owns rows 16q .. 16q + 15 of the 64-row tile, and
//     its A fragment and accumulators have exactly the per-warp layouts of mma.m16n8k16 (a0a1: row
//     g, columns 2t, 2t+1; a2a3: row g + 8; a4a5 / a6a7: columns + 8; accumulator [j][i] of n8 tile
//     j: row g + 8 (i / 2), column 8j + 2t + i % 2), so the fragment decode and the epilogue of the
//     mma.sync kernels (mma.cuh) serve both.
//   - wgmma is asynchronous: fence() before the first wgmma after registers it reads were
//     written, commit() after issuing a group, wait<n>() before touching its A registers,
//     accumulators or the shared memory it reads again. ptxas inserts waits itself where it cannot
//     prove a register is not in flight (and says so: "wgmma ... serialized").
//   - B tiles are (N, 64) fp16/bf16 in rows of 128 bytes with the 128-byte swizzle (16-byte piece c
//     of row n stored at piece c ^ (n % 8)), each tile starting on a 1024-byte boundary;
//     sw128_desc() describes one, and a k16 slice j of it starts 32 j bytes further on.
//   - Shared memory written by ordinary stores that a wgmma reads next needs
//     fence_proxy_async() in each writing thread before the barrier that publishes it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/shared_memory.cuh"  // lds128 / sts128, which the wgmma kernels stage tiles with

namespace sparrow::kernels::tc {

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Orders this thread's generic-proxy shared-memory writes before later async-proxy reads (wgmma).
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Keeps the compiler from moving reads or writes of an accumulator across a wgmma wait.
__device__ __forceinline__ void fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }

// The shared-memory matrix descriptor of a K-major B tile with the 128-byte swizzle: start
// address (bits 0-13, in 16-byte units), leading byte offset (16-29; unused by swizzled K-major
// tiles whose k extent is one swizzle row, set to 1), stride byte offset (32-45: 1024 bytes from
// one 8-row group to the next), swizzle mode (62-63: 1 = 128 bytes).
__device__ __forceinline__ uint64_t sw128_desc(uint32_t smem_byte_addr) {
  return uint64_t((smem_byte_addr & 0x3FFFFu) >> 4) | (uint64_t(1) << 16) |
         (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

// WgmmaRS<T, N>::mma(d, a, desc_b, accumulate): one m64nNk16 wgmma, A (bf16 or fp16) from
// registers, fp32 accumulators; accumulate = 0 overwrites d.
template <class T, int N>
struct WgmmaRS;
// WgmmaSS<T, N>::mma(d, desc_a, desc_b, accumulate): the same with A (64 x 16, K-major) in shared
// memory too.
template <class T, int N>
struct WgmmaSS;

#include "kernels/tensor_core/wgmma_rs.inc"

}  // namespace sparrow::kernels::tc
