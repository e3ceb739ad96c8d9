// The GPU backend's element-wise, normalisation and attention kernels (see gpu_ops.hpp).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cfloat>
#include <type_traits>

#include "core/cuda_check.hpp"
#include "kernels/dependent_launch.cuh"
#include "kernels/element.cuh"
#include "kernels/stream_read.cuh"
#include "engine/attention_plan.hpp"
#include "engine/gpu_ops.hpp"

namespace sparrow::engine::gpu {

// Every kernel here starts with begin_dependent() (rms_norm: after loading its weights) and
// launches with PDL (kernels/dependent_launch.cuh): a decode step is a chain of short kernels.
constexpr bool kDependent = true;
using kernels::from_float;
using kernels::launch_kernel;
using kernels::to_float;
using kernels::unpack2;

namespace {

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Runtime dtype -> kernel template, in one place.
template <class F>
Status dispatch_dtype(DType t, F&& f) {
  switch (t) {
    case DType::fp16:
      return f(__half{});
    case DType::bf16:
      return f(__nv_bfloat16{});
    default:
      return unsupported("the GPU engine runs fp16 or bf16 activations");
  }
}

int blocks_for(int64_t n, int threads) { return int((n + threads - 1) / threads); }

// Threads of the one-block-per-row kernels (rms_norm, argmax). In decode there is one row, so
// the block is the whole kernel: 256 threads measured 6.6 µs (rms_norm over 4096) and 23.6 µs
// (argmax over 32000) on the H100, bound by each thread's serial chain of loads.
constexpr int kRowThreads = 1024;

// ---- embeddings, norms, element-wise ------------------------------------------------------------

template <class T>
__global__ void embed_kernel(const int32_t* tokens, const T* embed, T* x, int64_t hidden) {
  kernels::begin_dependent();  // reads activations at once (dependent_launch.cuh)
  const int64_t r = blockIdx.x;
  const T* src = embed + int64_t(tokens[r]) * hidden;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) x[r * hidden + i] = src[i];
}

// One block per row: sum of squares in fp32 (block reduction), then scale. The norm weight does
// not depend on the previous kernel: with a dependent launch each thread loads its (up to
// kNormWeightsPerThread) weights before waiting, which takes a memory round trip off the chain.
constexpr int kNormWeightsPerThread = 8;
template <class T>
__global__ void rms_norm_kernel(const T* x, const float* w, float eps, T* out, int64_t hidden) {
  kernels::let_next_launch();
  float wv[kNormWeightsPerThread];
  const bool preloaded = hidden <= int64_t(blockDim.x) * kNormWeightsPerThread;
#pragma unroll
  for (int e = 0; e < kNormWeightsPerThread; ++e) {
    const int64_t i = threadIdx.x + int64_t(e) * blockDim.x;
    wv[e] = preloaded && i < hidden ? w[i] : 0.0f;
  }
  kernels::wait_for_previous();
  __shared__ float warp_sums[32];
  const T* row = x + int64_t(blockIdx.x) * hidden;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
    const float v = to_float(row[i]);
    ss += v * v;
  }
  ss = warp_sum(ss);
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = ss;
  __syncthreads();
  if (threadIdx.x < 32) {
    float v = threadIdx.x < (blockDim.x >> 5) ? warp_sums[threadIdx.x] : 0.0f;
    v = warp_sum(v);
    if (threadIdx.x == 0) warp_sums[0] = v;
  }
  __syncthreads();
  const float inv = rsqrtf(warp_sums[0] / float(hidden) + eps);
  T* o = out + int64_t(blockIdx.x) * hidden;
  // As HF: normalise in fp32, round to the dtype, then multiply by the weight.
  if (preloaded) {
#pragma unroll
    for (int e = 0; e < kNormWeightsPerThread; ++e) {
      const int64_t i = threadIdx.x + int64_t(e) * blockDim.x;
      if (i < hidden) o[i] = from_float<T>(wv[e] * to_float(from_float<T>(to_float(row[i]) * inv)));
    }
  } else {
    for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x)
      o[i] = from_float<T>(w[i] * to_float(from_float<T>(to_float(row[i]) * inv)));
  }
}

// out[r, j] = silu(gate[r * ld + j]) * up[r * ld + j] over rows x cols; out is packed (rows, cols)
// and may be gate itself (each element is read before it is written).
template <class T>
__global__ void swiglu_kernel(T* out, const T* gate, const T* up, int64_t rows, int64_t cols,
                              int64_t ld) {
  kernels::begin_dependent();  // reads activations at once (dependent_launch.cuh)
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  const int64_t at = i / cols * ld + i % cols;
  out[i] = from_float<T>(kernels::silu_times(to_float(gate[at]), to_float(up[at])));
}

// Every byte of the arrays, 16 at a time with kernels::kStreamReadUnroll loads in flight per thread (the tail
// of an array that is not a multiple of 16 bytes byte by byte, by the first threads); the XOR of
// everything is compared with a value it cannot be expected to have, so no load is dropped.
// The first `early` bytes (in array order) are read before the wait for the previous kernel, the
// rest after it: a kernel that computes can only load as much of its weight before its input
// is ready as it has room for on chip (all of it: `early` = SIZE_MAX).
constexpr int kReadThreads = 256;

// XOR of the words [split[j], end) of every array (what is left after the wait), and of each
// array's last bytes when its size is not a multiple of 16 (one byte per thread).
__device__ __forceinline__ uint32_t read_after_split(const ReadArrays& a, const size_t* split,
                                                     size_t first, size_t stride) {
  uint32_t acc = 0;
  for (int j = 0; j < a.count; ++j) {
    const size_t n = a.bytes[j] / 16;
    acc ^= kernels::stream_read_xor(static_cast<const uint4*>(a.data[j]), split[j], n, first,
                                    stride);
    const size_t tail = a.bytes[j] % 16;
    if (first < tail) acc ^= static_cast<const uint8_t*>(a.data[j])[n * 16 + first];
  }
  return acc;
}

// SPARROW_ENGINE_STAMPS (step_stamps.hpp): the time the previous kernel finished, in ns of
// %globaltimer, into slots[index]. The next kernel may launch at once.
__global__ void stamp_kernel(uint64_t* slots, int index) {
  kernels::begin_dependent();
  if (threadIdx.x == 0) {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    slots[index] = t;
  }
}

__global__ void read_arrays_kernel(ReadArrays a, size_t early, uint32_t* sink) {
  kernels::let_next_launch();
  uint32_t acc = 0;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  const size_t first = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  size_t split[kMaxReadArrays];  // (array) 16-byte words read before the wait
  size_t budget = early / 16;
  for (int j = 0; j < a.count; ++j) {
    split[j] = min(budget, a.bytes[j] / 16);
    budget -= split[j];
    acc ^= kernels::stream_read_xor(static_cast<const uint4*>(a.data[j]), 0, split[j], first,
                                    stride);
  }
  kernels::wait_for_previous();  // keeps the chain's order transitive
  acc ^= read_after_split(a, split, first, stride);
  if (acc == 0x9E3779B9u && sink) *sink = acc;
}

// ReadPlan::stage_in_shared: what a kernel that stages its weight in shared memory could do.
// Block b copies its contiguous share of the first `early` bytes into shared memory with
// cp.async before the wait, reads them back from shared memory after it, then reads the rest
// from global memory as read_arrays_kernel does.
__global__ void read_arrays_smem_kernel(ReadArrays a, size_t early, uint32_t* sink) {
  kernels::let_next_launch();
  extern __shared__ uint4 staged[];  // (words this block stages)
  const uint32_t staged_addr = static_cast<uint32_t>(__cvta_generic_to_shared(staged));
  size_t split[kMaxReadArrays];
  size_t budget = early / 16, used = 0;
  for (int j = 0; j < a.count; ++j) {
    split[j] = min(budget, a.bytes[j] / 16);
    budget -= split[j];
    const size_t per = (split[j] + gridDim.x - 1) / gridDim.x;
    const size_t w0 = min(split[j], per * blockIdx.x), w1 = min(split[j], w0 + per);
    const uint4* p = static_cast<const uint4*>(a.data[j]);
    for (size_t w = w0 + threadIdx.x; w < w1; w += blockDim.x) {
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(
                       staged_addr + uint32_t((used + w - w0) * 16)),
                   "l"(p + w));
    }
    used += per;
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
  kernels::wait_for_previous();
  asm volatile("cp.async.wait_all;" ::: "memory");
  __syncthreads();
  uint32_t acc = 0;
  for (size_t i = threadIdx.x; i < used; i += blockDim.x) {
    const uint4 v = staged[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  const size_t first = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  acc ^= read_after_split(a, split, first, stride);
  if (acc == 0x9E3779B9u && sink) *sink = acc;
}

template <class T>
__global__ void gather_last_kernel(const T* src, T* dst, int64_t count, int64_t cols) {
  kernels::begin_dependent();  // reads activations at once (dependent_launch.cuh)
  const int64_t b = blockIdx.x;
  const T* s = src + (b * count + count - 1) * cols;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) dst[b * cols + i] = s[i];
}

// One block per row; (value, index) reduction with the lowest index winning ties. With a feed
// (GreedyFeed), the pick also feeds the next step, and the last block to finish advances the
// position every block read first.
template <class T>
__global__ void argmax_kernel(const T* logits, int32_t* out, int64_t vocab, GreedyFeed feed) {
  kernels::begin_dependent();  // reads activations at once (dependent_launch.cuh)
  __shared__ float best_v[32];
  __shared__ int32_t best_i[32];
  const T* row = logits + int64_t(blockIdx.x) * vocab;
  float v = -FLT_MAX;
  int32_t idx = INT32_MAX;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float x = to_float(row[i]);
    if (x > v) {  // i increases, so the first maximum of this thread is kept
      v = x;
      idx = int32_t(i);
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int32_t oi = __shfl_xor_sync(0xffffffffu, idx, o);
    if (ov > v || (ov == v && oi < idx)) {
      v = ov;
      idx = oi;
    }
  }
  if ((threadIdx.x & 31) == 0) {
    best_v[threadIdx.x >> 5] = v;
    best_i[threadIdx.x >> 5] = idx;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < int(blockDim.x >> 5); ++w)
      if (best_v[w] > v || (best_v[w] == v && best_i[w] < idx)) {
        v = best_v[w];
        idx = best_i[w];
      }
    out[blockIdx.x] = idx;
    if (feed.pos) {
      const int32_t pos = *feed.pos;
      feed.tokens[blockIdx.x] = idx >= 0 && idx < vocab ? idx : 0;
      feed.history[(pos % feed.history_rows) * feed.history_ld + blockIdx.x] = idx;
      // Every block has read pos once the counter reaches the grid: the last one advances it and
      // leaves the counter at zero for the next launch.
      __threadfence();
      if (atomicAdd(feed.arrived, 1u) == gridDim.x - 1) {
        *feed.pos = pos + 1;
        *feed.arrived = 0;
      }
    }
  }
}

// ---- rotary embeddings + KV cache ---------------------------------------------------------------

// Rotates the pair (x1, x2) = (x[j], x[j + half]) of one head by pos * inv_freq[j] (fp32 angle
// as HF computes it; HF's rotate_half convention), rounded to T. The one rotation both
// rope_cache_kernel and the folded decode path use, so the two give the same bits: each product
// and the sum are rounded on their own (__fmul_rn / __fadd_rn keep the compiler from contracting
// them into an fma in one caller and not the other). rope_angle is the half that depends on no
// activation: the folded decode path works it out before waiting for the previous kernel.
struct RopeAngle {
  float sn = 0.0f, cs = 0.0f;
};
__device__ __forceinline__ RopeAngle rope_angle(int64_t j, int64_t pos, const float* inv_freq) {
  RopeAngle a;
  sincosf(float(pos) * inv_freq[j], &a.sn, &a.cs);
  return a;
}
template <class T>
__device__ __forceinline__ void rope_rotate_values(float x1, float x2, RopeAngle a, T& lo, T& hi) {
  lo = from_float<T>(__fadd_rn(__fmul_rn(x1, a.cs), -__fmul_rn(x2, a.sn)));
  hi = from_float<T>(__fadd_rn(__fmul_rn(x2, a.cs), __fmul_rn(x1, a.sn)));
}
template <class T>
__device__ __forceinline__ void rope_rotate(const T* x, int64_t j, int64_t half, RopeAngle a,
                                            T& lo, T& hi) {
  rope_rotate_values(to_float(x[j]), to_float(x[j + half]), a, lo, hi);
}

// V elements of T as one load or store (V = 2: 4 bytes).
template <class T, int V>
struct alignas(sizeof(T) * V) Elems {
  T e[V];
};

// Block (row, group of heads): the row's rotation angles into shared memory once (sin then cos
// of pos * inv_freq[j] for the half = head_dim / 2 pairs), then each thread rotates items of V
// adjacent pairs (V-element loads at j and j + half) of the group's heads: q heads in place, kv
// heads from k into the key cache; then the group's kv heads' values are copied into the value
// cache (16 bytes at a time where both rows allow it). Heads count q heads first, then kv heads.
// A thread issues the loads of kRopeItems items before their stores, so a thread's round trips to
// memory overlap (q is rotated in place: the compiler cannot move a later load above a store).
//
// Why this shape: the previous kernel ran a block of head_dim / 2 threads per (row, head), each
// thread its own sincosf and one pair: 32768 blocks of 64 threads for a 7B prefill pass of 512
// rows, which took 39.7 µs (H200, session 54) to move ~25 MB.
constexpr int kRopeThreads = 256;
constexpr int kRopeItems = 4;  // items in flight per thread
template <class T, int V>
__global__ void rope_cache_kernel(T* q, const T* k, const T* v, T* k_cache, T* v_cache,
                                  const float* inv_freq, RowLayout rows, AttentionShape s,
                                  int64_t heads_per_block, bool wide_values) {
  extern __shared__ float rope_angles[];  // (2, half): sin, then cos
  kernels::begin_dependent();  // reads activations at once (dependent_launch.cuh)
  const int64_t r = blockIdx.x;
  const int64_t b = r / rows.count, i = r % rows.count;
  const int64_t pos = int64_t(rows.pos0[0]) + i;
  const int64_t hd = s.head_dim, half = hd / 2;
  const int64_t qd = s.heads * hd, kvd = s.kv_heads * hd;
  const int64_t qld = rows.q_ld ? rows.q_ld : qd, kvld = rows.kv_ld ? rows.kv_ld : kvd;
  const int64_t h0 = int64_t(blockIdx.y) * heads_per_block;
  const int64_t h1 = min(h0 + heads_per_block, s.heads + s.kv_heads);
  float* sn = rope_angles;
  float* cs = rope_angles + half;
  for (int64_t j = threadIdx.x; j < half; j += blockDim.x) {
    const RopeAngle a = rope_angle(j, pos, inv_freq);
    sn[j] = a.sn;
    cs[j] = a.cs;
  }
  __syncthreads();
  T* q_row = q + r * qld;
  const T* k_row = k + r * kvld;
  T* kc_row = k_cache + (b * s.context + pos) * kvd;
  using E = Elems<T, V>;
  const int64_t per_head = half / V;
  const int64_t items = (h1 - h0) * per_head;
  for (int64_t it0 = threadIdx.x; it0 < items; it0 += int64_t(kRopeItems) * blockDim.x) {
    E lo[kRopeItems], hi[kRopeItems];
#pragma unroll
    for (int u = 0; u < kRopeItems; ++u) {
      const int64_t it = it0 + int64_t(u) * blockDim.x;
      if (it >= items) break;
      const int64_t head = h0 + it / per_head, j = (it % per_head) * V;
      const T* src = head < s.heads ? q_row + head * hd : k_row + (head - s.heads) * hd;
      lo[u] = *reinterpret_cast<const E*>(src + j);
      hi[u] = *reinterpret_cast<const E*>(src + j + half);
    }
#pragma unroll
    for (int u = 0; u < kRopeItems; ++u) {
      const int64_t it = it0 + int64_t(u) * blockDim.x;
      if (it >= items) break;
      const int64_t head = h0 + it / per_head, j = (it % per_head) * V;
      T* dst = head < s.heads ? q_row + head * hd : kc_row + (head - s.heads) * hd;
      E olo, ohi;
#pragma unroll
      for (int e = 0; e < V; ++e)
        rope_rotate_values(to_float(lo[u].e[e]), to_float(hi[u].e[e]),
                           RopeAngle{sn[j + e], cs[j + e]}, olo.e[e], ohi.e[e]);
      *reinterpret_cast<E*>(dst + j) = olo;
      *reinterpret_cast<E*>(dst + j + half) = ohi;
    }
  }
  // The values of the group's kv heads [kv0, kv1).
  const int64_t kv0 = max(h0, s.heads) - s.heads, kv1 = max(h1, s.heads) - s.heads;
  if (kv0 >= kv1) return;
  const T* v_src = v + r * kvld + kv0 * hd;
  T* v_dst = v_cache + (b * s.context + pos) * kvd + kv0 * hd;
  const int64_t n = (kv1 - kv0) * hd;
  if (wide_values) {  // n, v_src and v_dst in whole 16-byte words (checked by the launcher)
    constexpr int64_t kPer = 16 / int64_t(sizeof(T));
    for (int64_t e = threadIdx.x; e < n / kPer; e += blockDim.x)
      reinterpret_cast<uint4*>(v_dst)[e] = reinterpret_cast<const uint4*>(v_src)[e];
  } else {
    for (int64_t e = threadIdx.x; e < n; e += blockDim.x) v_dst[e] = v_src[e];
  }
}

// ---- attention ----------------------------------------------------------------------------------

constexpr int kAttnWarps = 4;
constexpr int kMaxDimPerLane = 8;  // head_dim <= 256
// fold_rope gives thread j pair j: a block has at least head_dim / 2 threads.
static_assert(32 * kAttnWarps >= 32 * kMaxDimPerLane / 2, "fold_rope: one pair per thread");

// Keys [begin, end) of block (row at `pos`, `split`): fixed ranges of split_len, or (split_len 0)
// the row's pos + 1 keys shared evenly by the n_splits blocks, so a decode step early in a long
// context still spreads its keys over every block instead of leaving most of them empty. With
// no keys (past the row's position) the block writes an empty partial and returns false.
__device__ __forceinline__ void split_range(int64_t pos, int64_t split, int64_t split_len,
                                            int64_t n_splits, int64_t& begin, int64_t& end) {
  const int64_t per = split_len > 0 ? split_len : (pos + n_splits) / n_splits;
  begin = split * per;
  end = min(begin + per, pos + 1);
}
__device__ __forceinline__ bool has_keys_or_write_empty(int64_t begin, int64_t end, float* part) {
  if (begin < end) return true;
  if (threadIdx.x == 0) {
    part[0] = -INFINITY;
    part[1] = 0.0f;
  }
  return false;
}
__device__ __forceinline__ bool split_keys(int64_t pos, int64_t split, int64_t split_len,
                                           int64_t n_splits, float* part, int64_t& begin,
                                           int64_t& end) {
  split_range(pos, split, split_len, n_splits, begin, end);
  return has_keys_or_write_empty(begin, end, part);
}

// DecodeRope on the device (k == nullptr: not folded).
template <class T>
struct FoldedRope {
  const T* k = nullptr;
  const T* v = nullptr;
  T* k_cache = nullptr;
  T* v_cache = nullptr;
  const float* inv_freq = nullptr;
};

// The folded rope_and_cache of one attention block (row r of sequence b at `pos`, q head `head`
// of kv head `kvh`, keys [begin, end)); nothing when f.k is null. Otherwise q's head is rotated
// into qs (hd) and `qr` points there; when the block's keys include `pos` the rotated new key and
// its value go into kv_new (2, hd), written to the caches by the group's first q head, and the
// result is true (the block reads key `pos` from kv_new). Ends with a block barrier when folding.
// Thread j rotates pair j (head_dim / 2 <= blockDim.x) by `angle`, rope_angle(j, pos, inv_freq),
// which the caller may work out early (it depends on no activation).
template <class T>
__device__ __forceinline__ bool fold_rope(const FoldedRope<T>& f, const T*& qr, int64_t r,
                                          int64_t b, int64_t pos, int64_t begin, int64_t end,
                                          int64_t head, int64_t kvh, const RowLayout& rows,
                                          const AttentionShape& s, T* qs, T* kv_new,
                                          RopeAngle angle) {
  if (!f.k) return false;
  const bool new_key = begin <= pos && pos < end;
  const int64_t hd = s.head_dim, half = hd / 2, kvd = s.kv_heads * hd;
  const int64_t kvld = rows.kv_ld ? rows.kv_ld : kvd;
  const bool writer = new_key && head % (s.heads / s.kv_heads) == 0;
  const T* kr = f.k + r * kvld + kvh * hd;
  const T* vr = f.v + r * kvld + kvh * hd;
  T* kc = f.k_cache + (b * s.context + pos) * kvd + kvh * hd;
  T* vc = f.v_cache + (b * s.context + pos) * kvd + kvh * hd;
  const int64_t j = threadIdx.x;
  if (j < half) {
    rope_rotate(qr, j, half, angle, qs[j], qs[j + half]);
    if (new_key) {
      rope_rotate(kr, j, half, angle, kv_new[j], kv_new[j + half]);
      if (writer) kc[j] = kv_new[j], kc[j + half] = kv_new[j + half];
    }
  }
  if (new_key) {
    for (int64_t e = threadIdx.x; e < hd; e += blockDim.x) {
      kv_new[hd + e] = vr[e];
      if (writer) vc[e] = vr[e];
    }
  }
  __syncthreads();
  qr = qs;
  return new_key;
}

// The block's partial (m, l, acc[hd]) from its warps' online-softmax states in shared memory
// (sm, sl: one per warp; sacc: W rows of `ld` floats, W the block's warps): the largest m of the
// warps that saw keys, and l and acc rescaled to it and summed. Call after a __syncthreads(). With
// one split the block holds the whole row: it writes acc / l to `out` (hd) instead, and no
// combine kernel runs (a decode step early in the cache, which the engine gives one split: one
// launch fewer per layer; a combine done by the last of several split blocks measured slower than
// the second kernel, sessions 5 and 10).
template <class T, int W = kAttnWarps>
__device__ __forceinline__ void write_block_partial(float* part, T* out, int64_t n_splits,
                                                    const float* sm, const float* sl,
                                                    const float* sacc, int ld, int64_t hd) {
  float M = -INFINITY;
  for (int w = 0; w < W; ++w)
    if (sl[w] > 0.0f) M = fmaxf(M, sm[w]);
  float L = 0.0f;
  for (int w = 0; w < W; ++w)
    if (sl[w] > 0.0f) L += sl[w] * __expf(sm[w] - M);
  if (threadIdx.x == 0 && n_splits > 1) {
    part[0] = M;
    part[1] = L;
  }
  for (int64_t d = threadIdx.x; d < hd; d += blockDim.x) {
    float a = 0.0f;
    for (int w = 0; w < W; ++w)
      if (sl[w] > 0.0f) a += sacc[w * ld + d] * __expf(sm[w] - M);
    if (n_splits == 1) {
      out[d] = from_float<T>(a / L);
    } else {
      part[2 + d] = a;
    }
  }
}

// Block (row, head, split): 4 warps take the split's keys in turn, each keeping an online
// softmax (running max m, sum l, output acc) for its keys; lane L holds elements L, L+32, ... of
// q and acc. The warps merge in shared memory and the block writes (m, l, acc[head_dim]).
template <class T>
__global__ void attention_split_kernel(const T* q, const T* k_cache, const T* v_cache,
                                       float* partials, T* out, RowLayout rows, AttentionShape s,
                                       int64_t split_len, int64_t n_splits, FoldedRope<T> rope) {
  kernels::begin_dependent();  // reads activations at once (dependent_launch.cuh)
  const int64_t r = blockIdx.x, head = blockIdx.y, split = blockIdx.z;
  const int64_t b = r / rows.count, i = r % rows.count;
  const int64_t pos = int64_t(rows.pos0[0]) + i;
  const int64_t hd = s.head_dim;
  const int64_t kvh = head / (s.heads / s.kv_heads);
  const int64_t kvd = s.kv_heads * hd;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float* part = partials + ((r * s.heads + head) * n_splits + split) * (hd + 2);
  int64_t begin, end;
  if (!split_keys(pos, split, split_len, n_splits, part, begin, end)) return;

  const float scale = rsqrtf(float(hd));
  float qv[kMaxDimPerLane], acc[kMaxDimPerLane];
  const T* qr = q + r * (rows.q_ld ? rows.q_ld : s.heads * hd) + head * hd;
  __shared__ T q_rot[32 * kMaxDimPerLane], kv_new[2 * 32 * kMaxDimPerLane];
  const RopeAngle angle = rope.k && int64_t(threadIdx.x) < hd / 2
                              ? rope_angle(threadIdx.x, pos, rope.inv_freq)
                              : RopeAngle{};
  const bool new_key =
      fold_rope(rope, qr, r, b, pos, begin, end, head, kvh, rows, s, q_rot, kv_new, angle);
#pragma unroll
  for (int e = 0; e < kMaxDimPerLane; ++e) {
    const int64_t d = lane + 32 * e;
    qv[e] = d < hd ? to_float(qr[d]) * scale : 0.0f;
    acc[e] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  const T* kbase = k_cache + b * s.context * kvd + kvh * hd;
  const T* vbase = v_cache + b * s.context * kvd + kvh * hd;
  for (int64_t j = begin + warp; j < end; j += kAttnWarps) {
    const bool fresh = new_key && j == pos;  // the new key, from shared memory
    const T* kj = fresh ? kv_new : kbase + j * kvd;
    float dot = 0.0f;
#pragma unroll
    for (int e = 0; e < kMaxDimPerLane; ++e) {
      const int64_t d = lane + 32 * e;
      if (d < hd) dot += qv[e] * to_float(kj[d]);
    }
    dot = warp_sum(dot);
    const float m_new = fmaxf(m, dot);
    const float corr = __expf(m - m_new);
    const float p = __expf(dot - m_new);
    l = l * corr + p;
    const T* vj = fresh ? kv_new + hd : vbase + j * kvd;
#pragma unroll
    for (int e = 0; e < kMaxDimPerLane; ++e) {
      const int64_t d = lane + 32 * e;
      acc[e] = acc[e] * corr + (d < hd ? p * to_float(vj[d]) : 0.0f);
    }
    m = m_new;
  }

  // Merge the warps: (m, l) first, then the rescaled accumulators.
  __shared__ float sm[kAttnWarps], sl[kAttnWarps];
  __shared__ float sacc[kAttnWarps][32 * kMaxDimPerLane];
  if (lane == 0) {
    sm[warp] = m;
    sl[warp] = l;
  }
#pragma unroll
  for (int e = 0; e < kMaxDimPerLane; ++e) sacc[warp][lane + 32 * e] = acc[e];
  __syncthreads();
  write_block_partial(part, out + r * (s.heads * hd) + head * hd, n_splits, sm, sl, &sacc[0][0],
                      32 * kMaxDimPerLane, hd);
}

// The same block for head_dim = 8 * G (G = 8, 16, 32: head_dim 64, 128, 256), the common case:
// G lanes share a key, each loading 8 of its dimensions as one 16-byte load (the kernel above
// loads 2 bytes per lane and takes one key per warp at a time: at 4097 keys it measured 53 µs per
// layer against ~22 µs of bytes). A warp holds 32 / G keys per step and P steps' loads in
// flight; each lane group keeps its own online softmax, merged by shuffles, then across warps.
// P steps' loads in flight (a ring of P; split_kernel_for picks P, below). With
// kStepsInFlight the block keeps to 64 registers a thread (32 / W blocks of W warps fill an SM's
// register file): the engine's split rule sizes decode grids by this kernel's occupancy, and
// 16-warp blocks at 65 or more would halve it.
constexpr int kStepsInFlight = 2;
constexpr int kDeepWarps = 8;
constexpr int kDeepSteps = 8;
template <class T, int G, int W, int P>
__global__ void __launch_bounds__(32 * W, P == kStepsInFlight ? 32 / W : 1)
    attention_split_vec_kernel(const T* q, const T* k_cache, const T* v_cache, float* partials,
                               T* out, RowLayout rows, AttentionShape s, int64_t split_len,
                               int64_t n_splits, FoldedRope<T> rope) {
  // Decode with the folded RoPE (`early`): the position (staged from the host before the step),
  // the rotation angles and the first step's keys and values below `pos` (written by earlier
  // steps) depend on no kernel of this step, so they are read before waiting for the previous
  // kernel (qkv's matmul) and their latency overlaps it; only q, the new key and value, and the
  // empty-split partial wait. Measured in the engine (7B, 90 %, session 27): the phases around
  // the key loop, not the loop, were most of attention's 4.9 µs per layer. Otherwise (prefill,
  // whose keys the rope kernel just appended) everything waits first.
  kernels::let_next_launch();
  const bool early = rope.k != nullptr;
  if (!early) kernels::wait_for_previous();
  constexpr int kKeys = 32 / G;  // keys per warp step
  constexpr int hd = 8 * G;
  const int64_t r = blockIdx.x, head = blockIdx.y, split = blockIdx.z;
  const int64_t b = r / rows.count, i = r % rows.count;
  const int64_t pos = int64_t(rows.pos0[0]) + i;
  const int64_t kvh = head / (s.heads / s.kv_heads);
  const int64_t kvd = s.kv_heads * hd;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane % G, kk = lane / G;  // dims [8g, 8g + 8) of key slot kk
  float* part = partials + ((r * s.heads + head) * n_splits + split) * (hd + 2);
  int64_t begin, end;
  split_range(pos, split, split_len, n_splits, begin, end);
  const T* kbase = k_cache + b * s.context * kvd + kvh * hd + 8 * g;
  const T* vbase = v_cache + b * s.context * kvd + kvh * hd + 8 * g;
  auto load_cached = [&](int64_t j, uint4& kv, uint4& vv) {
    kv = *reinterpret_cast<const uint4*>(kbase + j * kvd);
    vv = *reinterpret_cast<const uint4*>(vbase + j * kvd);
  };
  // Key j of this lane at step 0: begin + warp * kKeys + kk; step st adds st * kStride. Slot u
  // of the ring (kr, vr) holds step u of each group of P steps: consumed, then refilled with the
  // step P later, so the P - 1 steps after it are in flight while a step computes (P = 2: the
  // next one, as before session 55).
  constexpr int64_t kStride = int64_t(W) * kKeys;
  int64_t j = begin + int64_t(warp) * kKeys + kk;
  uint4 kr[P], vr[P];
  RopeAngle angle;
#pragma unroll
  for (int u = 0; u < P; ++u) kr[u] = vr[u] = make_uint4(0, 0, 0, 0);
  if (early) {
    if (int64_t(threadIdx.x) < hd / 2) angle = rope_angle(threadIdx.x, pos, rope.inv_freq);
#pragma unroll
    for (int u = 0; u < P; ++u) {
      const int64_t ju = j + u * kStride;
      if (ju < end && ju != pos) load_cached(ju, kr[u], vr[u]);
    }
    kernels::wait_for_previous();
  }
  if (!has_keys_or_write_empty(begin, end, part)) return;
  const float scale = rsqrtf(float(hd));
  float qv[8], acc[8];
  const T* qr = q + r * (rows.q_ld ? rows.q_ld : s.heads * hd) + head * hd;
  __shared__ __align__(16) T q_rot[hd], kv_new[2 * hd];
  const bool new_key =
      fold_rope(rope, qr, r, b, pos, begin, end, head, kvh, rows, s, q_rot, kv_new, angle);
  qr += 8 * g;
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    qv[e] = to_float(qr[e]) * scale;
    acc[e] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  auto load = [&](int64_t j, uint4& kv, uint4& vv) {
    if (new_key && j == pos) {  // the new key, from shared memory
      kv = *reinterpret_cast<const uint4*>(kv_new + 8 * g);
      vv = *reinterpret_cast<const uint4*>(kv_new + hd + 8 * g);
    } else if (j < end) {
      load_cached(j, kv, vv);
    }
  };
#pragma unroll
  for (int u = 0; u < P; ++u) {
    // Everything when nothing was read early; else only a first group's new key (from shared
    // memory, now).
    const int64_t ju = j + u * kStride;
    if (!early || (new_key && ju == pos)) load(ju, kr[u], vr[u]);
  }
  for (int64_t j0 = begin + int64_t(warp) * kKeys; j0 < end; j0 += P * kStride, j += P * kStride) {
#pragma unroll
    for (int u = 0; u < P; ++u) {
      if (j0 + u * kStride >= end) break;  // the warp's keys are done (the same for every lane)
      const int64_t ju = j + u * kStride;
      const uint32_t kw[4] = {kr[u].x, kr[u].y, kr[u].z, kr[u].w};
      const uint32_t vw[4] = {vr[u].x, vr[u].y, vr[u].z, vr[u].w};
      float dot = 0.0f;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float2 kf = unpack2<T>(kw[e]);
        dot += qv[2 * e] * kf.x + qv[2 * e + 1] * kf.y;
      }
#pragma unroll
      for (int o = G / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
      if (ju < end) {  // a lane group past the split's end keeps its state
        const float m_new = fmaxf(m, dot);
        const float corr = __expf(m - m_new);
        const float p = __expf(dot - m_new);
        l = l * corr + p;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float2 vf = unpack2<T>(vw[e]);
          acc[2 * e] = acc[2 * e] * corr + p * vf.x;
          acc[2 * e + 1] = acc[2 * e + 1] * corr + p * vf.y;
        }
        m = m_new;
      }
      kr[u] = vr[u] = make_uint4(0, 0, 0, 0);  // the slot's next step, P steps later
      load(ju + P * kStride, kr[u], vr[u]);
    }
  }
  // Merge the warp's key slots (lanes g, g + G, ...) into lanes 0..G-1.
#pragma unroll
  for (int o = G; o < 32; o <<= 1) {
    const float mo = __shfl_xor_sync(0xffffffffu, m, o);
    const float lo = __shfl_xor_sync(0xffffffffu, l, o);
    const float mt = fmaxf(m, mo);
    const float a = l > 0.0f ? __expf(m - mt) : 0.0f, c = lo > 0.0f ? __expf(mo - mt) : 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] = acc[e] * a + __shfl_xor_sync(0xffffffffu, acc[e], o) * c;
    l = l * a + lo * c;
    m = mt;
  }
  // Then the warps (write_block_partial).
  __shared__ float sm[W], sl[W];
  __shared__ float sacc[W][hd];
  if (lane == 0) {
    sm[warp] = m;
    sl[warp] = l;
  }
  if (lane < G) {
#pragma unroll
    for (int e = 0; e < 8; ++e) sacc[warp][8 * lane + e] = acc[e];
  }
  __syncthreads();
  write_block_partial<T, W>(part, out + r * (s.heads * hd) + head * hd, n_splits, sm, sl,
                            &sacc[0][0], hd, hd);
}

// Block (row, head): combines the splits' partials into the output row.
template <class T>
__global__ void attention_combine_kernel(const float* partials, T* out, AttentionShape s,
                                         int64_t n_splits) {
  kernels::begin_dependent();  // reads activations at once (dependent_launch.cuh)
  const int64_t r = blockIdx.x, head = blockIdx.y, hd = s.head_dim;
  const float* part = partials + (r * s.heads + head) * n_splits * (hd + 2);
  float M = -INFINITY;
  for (int64_t sp = 0; sp < n_splits; ++sp)
    if (part[sp * (hd + 2) + 1] > 0.0f) M = fmaxf(M, part[sp * (hd + 2)]);
  float L = 0.0f;
  for (int64_t sp = 0; sp < n_splits; ++sp) {
    const float l = part[sp * (hd + 2) + 1];
    if (l > 0.0f) L += l * __expf(part[sp * (hd + 2)] - M);
  }
  for (int64_t d = threadIdx.x; d < hd; d += blockDim.x) {
    float a = 0.0f;
    for (int64_t sp = 0; sp < n_splits; ++sp) {
      const float* p = part + sp * (hd + 2);
      if (p[1] > 0.0f) a += p[2 + d] * __expf(p[0] - M);
    }
    out[r * (s.heads * hd) + head * hd + d] = from_float<T>(a / L);
  }
}

// The split kernel attention() launches and its warps per block: head_dim 64 / 128 / 256 over
// 16-byte aligned caches, the vectorised kernel in blocks of block_warps warps; otherwise the
// generic kernel's kAttnWarps.
template <class T>
struct SplitKernel {
  decltype(&attention_split_kernel<T>) kernel;
  int warps;
};
// Steps in flight of the vectorised kernel: kStepsInFlight as a rule. A grid of at most one
// block per SM (a decode step early in the cache: one split per head) runs kDeepWarps-warp blocks
// with kDeepSteps steps in flight instead: at a 16..144-key tg128 context (8 warps x 2 keys a step
// at head_dim 128) up to 128 keys load before the wait for qkv, where 16 warps x 2 steps load 64
// and then wait for memory at every step. The block holds ~120 registers a thread, 256 threads:
// as many registers as the 16-warp block at 64, which is what decides it. Blocks launch early
// (dependent launch) and sit on their SMs while the qkv matmul still runs; 16 warps x 8 steps
// (~61K registers, an SM's whole file) took those SMs from qkv: on the H200 (session 55, 7B,
// tg128 at batch 1, one machine) 16 x 8 ran the dense model +1.0 % but 90 % -1.0 % (macko's
// qkv) and 90 % after 512 cached tokens -2.0 %; 16 x 4 +1.3 / +0.7 / +0.1 %; 8 x 8 +1.0 / +1.8
// / +1.7 %. SPARROW_ENGINE_ATTN_DEEP=0 (experiment knob, read once) keeps the 16 x 2 blocks.
template <class T>
SplitKernel<T> split_kernel_for(int64_t head_dim, bool aligned, int block_warps, bool deep) {
  SplitKernel<T> k{attention_split_kernel<T>, kAttnWarps};
  auto vec = [&](auto g) {
    constexpr int G = decltype(g)::value;
    constexpr int P = kStepsInFlight;
    k.warps = deep ? kDeepWarps : block_warps;
    k.kernel = deep                ? attention_split_vec_kernel<T, G, kDeepWarps, kDeepSteps>
               : block_warps == 16 ? attention_split_vec_kernel<T, G, 16, P>
               : block_warps == 8  ? attention_split_vec_kernel<T, G, 8, P>
                                   : attention_split_vec_kernel<T, G, 4, P>;
  };
  if (aligned && head_dim == 64) vec(std::integral_constant<int, 8>{});
  if (aligned && head_dim == 128) vec(std::integral_constant<int, 16>{});
  if (aligned && head_dim == 256) vec(std::integral_constant<int, 32>{});
  return k;
}

}  // namespace

Status embed(const int32_t* tokens, const void* e, void* x, int64_t rows, int64_t hidden, DType t,
             Stream stream) {
  return dispatch_dtype(t, [&](auto tag) -> Status {
    using T = decltype(tag);
    return cuda_status(
        launch_kernel(kDependent, embed_kernel<T>, dim3(unsigned(rows)), dim3(256), 0, stream,
                      tokens, static_cast<const T*>(e), static_cast<T*>(x), hidden),
        "embed launch");
  });
}

Status rms_norm(const void* x, const float* w, float eps, void* out, int64_t rows, int64_t hidden,
                DType t, Stream stream) {
  return dispatch_dtype(t, [&](auto tag) -> Status {
    using T = decltype(tag);
    return cuda_status(
        launch_kernel(kDependent, rms_norm_kernel<T>, dim3(unsigned(rows)), dim3(kRowThreads), 0,
                      stream, static_cast<const T*>(x), w, eps, static_cast<T*>(out), hidden),
        "rms_norm launch");
  });
}

Status rope_and_cache(void* q, const void* k, const void* v, void* k_cache, void* v_cache,
                      const float* inv_freq, const RowLayout& rows, const AttentionShape& s,
                      DType t, Stream stream) {
  if (s.head_dim <= 0 || s.head_dim % 2 != 0 || s.heads <= 0 || s.kv_heads <= 0 ||
      s.heads % s.kv_heads != 0)
    return invalid_argument("rope_and_cache: head_dim must be even and positive and the q heads a "
                            "multiple of the kv heads (got head_dim " +
                            std::to_string(s.head_dim) + ", " + std::to_string(s.heads) + " / " +
                            std::to_string(s.kv_heads) + " heads)");
  return dispatch_dtype(t, [&](auto tag) -> Status {
    using T = decltype(tag);
    const int64_t hd = s.head_dim, half = hd / 2;
    const int64_t kvd = s.kv_heads * hd;
    const int64_t qld = rows.q_ld ? rows.q_ld : s.heads * hd, kvld = rows.kv_ld ? rows.kv_ld : kvd;
    auto aligned = [](const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; };
    // Two pairs per item where every row and head offset is even and the rows 4-byte aligned.
    const bool pairs = half % 2 == 0 && qld % 2 == 0 && kvld % 2 == 0 &&
                       aligned(q, 4) && aligned(k, 4) && aligned(k_cache, 4);
    const int64_t es = int64_t(sizeof(T));
    const bool wide_values = (hd * es) % 16 == 0 && (kvld * es) % 16 == 0 &&
                             (kvd * es) % 16 == 0 && aligned(v, 16) && aligned(v_cache, 16);
    // Heads per block: about kRopeItems items per thread, so a short pass (a decode step run
    // unfused, a few rows) still spreads over several blocks a row.
    const int64_t per_head = half / (pairs ? 2 : 1);  // half >= 1: head_dim is even, positive
    const int64_t heads = s.heads + s.kv_heads;
    const int64_t heads_per_block = std::clamp<int64_t>(
        int64_t(kRopeItems) * kRopeThreads / per_head, 1, heads);
    const dim3 grid(unsigned(rows.batch * rows.count),
                    unsigned((heads + heads_per_block - 1) / heads_per_block));
    const size_t smem = size_t(2 * half) * sizeof(float);
    auto launch = [&](auto kernel) {
      return cuda_status(
          launch_kernel(kDependent, kernel, grid, dim3(kRopeThreads), smem, stream,
                        static_cast<T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
                        static_cast<T*>(k_cache), static_cast<T*>(v_cache), inv_freq, rows, s,
                        heads_per_block, wide_values),
          "rope_and_cache launch");
    };
    return pairs ? launch(rope_cache_kernel<T, 2>) : launch(rope_cache_kernel<T, 1>);
  });
}

size_t attention_partials_floats(int64_t rows, const AttentionShape& s, int64_t n_splits) {
  return size_t(rows * s.heads * n_splits * (s.head_dim + 2));
}

Status attention(const void* q, const void* k_cache, const void* v_cache, void* out,
                 float* partials, const RowLayout& rows, const AttentionShape& s, int64_t split_len,
                 int64_t n_splits, DType t, Stream stream, const DecodeRope* rope,
                 int block_warps) {
  if (rope && (rows.count != 1 || !rope->k || !rope->v || !rope->k_cache || !rope->v_cache ||
               !rope->inv_freq)) {
    return invalid_argument(
        "attention: the folded rope is for decode steps (one row per sequence) with k, v, both "
        "caches and inv_freq given");
  }
  if (block_warps != 4 && block_warps != 8 && block_warps != 16)
    return invalid_argument("attention: blocks of 4, 8 or 16 warps");
  if (s.head_dim > 32 * kMaxDimPerLane) {
    return unsupported("attention supports head_dim <= 256 (got " + std::to_string(s.head_dim) +
                       ")");
  }
  if (n_splits < 1 || split_len < 0 || (split_len > 0 && split_len * n_splits < s.context)) {
    return invalid_argument("attention splits must cover the context");
  }
  return dispatch_dtype(t, [&](auto tag) -> Status {
    using T = decltype(tag);
    const dim3 grid(unsigned(rows.batch * rows.count), unsigned(s.heads), unsigned(n_splits));
    const bool aligned =
        (reinterpret_cast<uintptr_t>(k_cache) | reinterpret_cast<uintptr_t>(v_cache)) % 16 == 0;
    // The deep blocks replace 16-warp ones (the engine's decode blocks) in grids of at most one
    // block per SM (attention_plan.hpp; split_kernel_for says why).
    static const bool deep_allowed = kernels::env_knob("SPARROW_ENGINE_ATTN_DEEP", 1) != 0;
    bool deep = false;
    if (deep_allowed) {
      SPARROW_ASSIGN_OR_RETURN(const kernels::DeviceInfo dev, kernels::current_device_info());
      deep = decode_attention_deep(int64_t(grid.x) * grid.y * grid.z, dev.sm_count, block_warps);
    }
    const SplitKernel<T> split = split_kernel_for<T>(s.head_dim, aligned, block_warps, deep);
    FoldedRope<T> fold;
    if (rope) {
      fold = {static_cast<const T*>(rope->k), static_cast<const T*>(rope->v),
              static_cast<T*>(rope->k_cache), static_cast<T*>(rope->v_cache), rope->inv_freq};
    }
    SPARROW_RETURN_IF_ERROR(cuda_status(
        launch_kernel(kDependent, split.kernel, grid, dim3(32 * split.warps), 0, stream,
                      static_cast<const T*>(q), static_cast<const T*>(k_cache),
                      static_cast<const T*>(v_cache), partials, static_cast<T*>(out), rows, s,
                      split_len, n_splits, fold),
        "attention_split launch"));
    if (n_splits == 1) return Status{};  // the split kernel wrote out
    const dim3 grid2(unsigned(rows.batch * rows.count), unsigned(s.heads));
    return cuda_status(
        launch_kernel(kDependent, attention_combine_kernel<T>, grid2, dim3(128), 0, stream,
                      static_cast<const float*>(partials), static_cast<T*>(out), s, n_splits),
        "attention_combine launch");
  });
}

Result<int> attention_blocks_per_sm(const AttentionShape& s, DType t, int block_warps) {
  if (block_warps != 4 && block_warps != 8 && block_warps != 16)
    return invalid_argument("attention: blocks of 4, 8 or 16 warps");
  int per_sm = 0;
  SPARROW_RETURN_IF_ERROR(dispatch_dtype(t, [&](auto tag) -> Status {
    using T = decltype(tag);
    // The kernel of grids larger than the SM count (the question is only asked for those).
    const SplitKernel<T> split = split_kernel_for<T>(s.head_dim, true, block_warps, false);
    return cuda_status(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, split.kernel,
                                                                     32 * split.warps, 0),
                       "attention occupancy");
  }));
  return std::max(1, per_sm);
}

Status swiglu(void* out, const void* gate, const void* up, int64_t rows, int64_t cols,
              int64_t ld, DType t, Stream stream) {
  return dispatch_dtype(t, [&](auto tag) -> Status {
    using T = decltype(tag);
    return cuda_status(
        launch_kernel(kDependent, swiglu_kernel<T>, dim3(blocks_for(rows * cols, 256)), dim3(256),
                      0, stream, static_cast<T*>(out), static_cast<const T*>(gate),
                      static_cast<const T*>(up), rows, cols, ld),
        "swiglu launch");
  });
}

Status stamp(uint64_t* slots, int index, Stream stream) {
  if (!slots || index < 0) return invalid_argument("stamp: no slot");
  return cuda_status(launch_kernel(kDependent, stamp_kernel, dim3(1), dim3(32), 0, stream, slots,
                                   index),
                     "stamp launch");
}

Status gather_last_rows(const void* src, void* dst, int64_t batch, int64_t count, int64_t cols,
                        DType t, Stream stream) {
  return dispatch_dtype(t, [&](auto tag) -> Status {
    using T = decltype(tag);
    return cuda_status(
        launch_kernel(kDependent, gather_last_kernel<T>, dim3(unsigned(batch)), dim3(256), 0,
                      stream, static_cast<const T*>(src), static_cast<T*>(dst), count, cols),
        "gather_last_rows launch");
  });
}

Status read_arrays(const ReadArrays& arrays, const ReadPlan& plan, Stream stream) {
  if (arrays.count < 0 || arrays.count > kMaxReadArrays)
    return invalid_argument("read_arrays: 0.." + std::to_string(kMaxReadArrays) + " arrays");
  for (int j = 0; j < arrays.count; ++j)
    if (arrays.bytes[j] > 0 && arrays.data[j] == nullptr)
      return invalid_argument("read_arrays: a null array of " + std::to_string(arrays.bytes[j]) +
                              " bytes");
  if (plan.blocks_per_sm < 1 || plan.blocks_per_sm > 8)
    return invalid_argument("read_arrays: blocks_per_sm must be 1..8 (8 fills an SM)");
  SPARROW_ASSIGN_OR_RETURN(const kernels::DeviceInfo dev, kernels::current_device_info());
  const int blocks = dev.sm_count * plan.blocks_per_sm;
  const size_t early = plan.early_bytes_per_sm == SIZE_MAX
                           ? SIZE_MAX
                           : plan.early_bytes_per_sm * size_t(dev.sm_count);
  if (!plan.stage_in_shared) {
    return cuda_status(launch_kernel(kDependent, read_arrays_kernel, dim3(unsigned(blocks)),
                                     dim3(kReadThreads), 0, stream, arrays, early,
                                     static_cast<uint32_t*>(nullptr)),
                       "read_arrays launch");
  }
  // A block's share of the early bytes, plus one 16-byte word per array for the rounding up.
  const size_t smem = plan.early_bytes_per_sm == SIZE_MAX
                          ? SIZE_MAX
                          : plan.early_bytes_per_sm / size_t(plan.blocks_per_sm) +
                                16 * kMaxReadArrays;
  if (smem > size_t(dev.max_smem_per_block)) {
    return invalid_argument("read_arrays: staging " +
                            (smem == SIZE_MAX ? std::string("every byte")
                                              : std::to_string(smem) + " bytes per block") +
                            " in shared memory exceeds the " +
                            std::to_string(dev.max_smem_per_block) + " a block may use");
  }
  SPARROW_RETURN_IF_ERROR(
      cuda_status(cudaFuncSetAttribute(read_arrays_smem_kernel,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
                  "read_arrays shared memory"));
  return cuda_status(launch_kernel(kDependent, read_arrays_smem_kernel, dim3(unsigned(blocks)),
                                   dim3(kReadThreads), smem, stream, arrays, early,
                                   static_cast<uint32_t*>(nullptr)),
                     "read_arrays launch");
}

Status argmax(const void* logits, int32_t* out, int64_t rows, int64_t vocab, DType t,
              Stream stream, const GreedyFeed* feed) {
  if (feed && (!feed->tokens || !feed->pos || !feed->history || !feed->arrived ||
               feed->history_rows < 1 || feed->history_ld < rows)) {
    return invalid_argument("argmax: a greedy feed needs tokens, pos, arrived and a history of at "
                            "least one row of the batch's width");
  }
  return dispatch_dtype(t, [&](auto tag) -> Status {
    using T = decltype(tag);
    return cuda_status(
        launch_kernel(kDependent, argmax_kernel<T>, dim3(unsigned(rows)), dim3(kRowThreads), 0,
                      stream, static_cast<const T*>(logits), out, vocab,
                      feed ? *feed : GreedyFeed{}),
        "argmax launch");
  });
}

}  // namespace sparrow::engine::gpu
