// The streaming read both the benchmark's bandwidth ceiling (bench: stream_read) and the engine's
// read-only experiment (engine/gpu_ops.cu: read_arrays) are made of.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sparrow::kernels {

// Independent 16-byte loads each thread keeps in flight.
constexpr int kStreamReadUnroll = 4;

// XOR of the 16-byte words p[i], i in [begin, end), that a grid-stride thread owns (begin + first,
// then every `stride`), read with streaming loads (__ldcs: evict-first, the data is used once).
// Callers compare the XOR with a value it cannot be expected to have, so no load is dropped.
__device__ __forceinline__ uint32_t stream_read_xor(const uint4* __restrict__ p, size_t begin,
                                                    size_t end, size_t first, size_t stride) {
  uint32_t acc = 0;
  size_t i = begin + first;
  for (; i + (kStreamReadUnroll - 1) * stride < end; i += kStreamReadUnroll * stride) {
    uint4 v[kStreamReadUnroll];
#pragma unroll
    for (int u = 0; u < kStreamReadUnroll; ++u) v[u] = __ldcs(p + i + u * stride);
#pragma unroll
    for (int u = 0; u < kStreamReadUnroll; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < end; i += stride) {
    const uint4 v = __ldcs(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  return acc;
}

}  // namespace sparrow::kernels
