// macko.swiglu_mlp (see swiglu_mlp.hpp for what and why). Warp 31 of each block copies weights,
// warps 0..30 compute:
//   - the copying warp streams the block's rows through a ring of shared-memory slots with
//     bulk copies (the copy engine moves them; no thread spends instructions per byte): first the
//     block's gate rows, then its up rows, then its down rows, each slot as many whole rows as fit
//     a slot's entries. It reads only weights, so it starts before the previous kernel has
//     finished and runs on into down's rows while the grid is still in phase A or at the barrier;
//   - phase A (after the wait for the previous kernel and the input staged in shared memory as
//     floats): the computing warps decode each slot's rows (unit j of the block to warp j % 31;
//     a unit is a row, or two rows, one per half warp, where gate_up's rows are short) from
//     shared memory into g and u (rounded as the separate gate_up matmul rounds them); each
//     block then writes h = silu(g) * u of its rows (rounded as the swiglu kernel rounds it);
//   - a grid barrier (every block resident: one block per SM, grid = SM count), after which the
//     next kernel may launch;
//   - phase B: all of h into shared memory, then down's rows from the ring, added to x.
// The row walk (slot_row_dot) is macko.warp_row's step decode, reading a ring slot.
#include "kernels/macko/swiglu_mlp.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "core/cuda_check.hpp"
#include "kernels/decode_common.cuh"
#include "kernels/dependent_launch.cuh"
#include "kernels/device_info.hpp"
#include "kernels/shared_memory.cuh"
#include "kernels/tensor_core/bulk_copy.cuh"

namespace sparrow::kernels::macko_swiglu_mlp {

namespace {

using decode::byte_of;
using decode::entry_steps;
using decode::keep_values;
using decode::lane_columns;
using decode::rms_scale;
using decode::row_keep;
using decode::RowKeep;
using decode::warp_sum;


// The sum over a row's entries [s, e) of value * act[column], the entries in a ring slot whose
// first entry is slot_base (values at vals_addr, deltas at deltas_addr, shared memory), act the
// activations as floats in shared memory with a zero at act[-1]. Per step lane l decodes the 8
// entries at an 8-aligned index (one 16-byte and one 4-byte shared load), as macko.warp_row does:
//   - columns byte-parallel: the entries' column steps (delta + 1) go into bytes, one multiply
//     sums them (prefix sums of entry pairs), so an entry's column is the lane's start column plus
//     one byte (one prmt) and its act address one more instruction; a warp scan of the lanes'
//     totals gives each lane's start;
//   - no per-entry range test: in the row's first and last lanes (one step each) entries of the
//     neighbouring rows get value 0 and column step 0. Those before the row's start then sit on
//     column -1, which reads the zero at act[-1]; those after its end on the row's last column.
// The scalar version of this (a range test and a running column per entry) issued 172
// instructions per step and kept the fused kernel issue-bound (ncu, session 32); this one is
// about half.
// LANES = 16 runs two rows per warp, one per half (each lane passes its half's row): at 90 %
// sparsity a row is ~2 warp steps, nearly all of them a row's first or last, and the halves share
// the step's fixed work (macko.warp_row's half_warp instance does the same). The sum comes back in
// every lane of the half.
template <class T, int LANES>
__device__ __forceinline__ float slot_row_dot(uint32_t s, uint32_t e, uint32_t slot_base,
                                              uint32_t vals_addr, uint32_t deltas_addr,
                                              uint32_t act_addr, int lane) {
  static_assert(LANES == 16 || LANES == 32, "a row per warp or per half warp");
  constexpr uint32_t kRowStep = LANES * Config::kChunk;  // entries of a row per step
  const int sl = lane % LANES;
  const uint32_t first = s & ~7u;
  uint32_t steps = e > first ? (e - first + kRowStep - 1) / kRowStep : 0u;
  if constexpr (LANES < 32) steps = max(steps, __shfl_xor_sync(0xffffffffu, steps, 16));
  uint32_t base = first + uint32_t(sl) * Config::kChunk;
  uint32_t carry = 0;  // the row's column steps before this step
  float acc = 0.f;
  for (uint32_t st = 0; st < steps; ++st, base += kRowStep) {
    uint4 v = make_uint4(0, 0, 0, 0);
    uint32_t d = 0;
    if (base < e) {
      const uint32_t o = base - slot_base;
      v = lds128(vals_addr + 2 * o);
      d = lds32(deltas_addr + o / 2);
    }
    // Column steps of the lane's entries as bytes (decode_common.cuh).
    uint32_t ev, od;
    entry_steps(d, ev, od);
    if (base < s || base + Config::kChunk > e) {
      // Entries of the neighbouring rows (decode_common.cuh): step 0 and value 0.
      const RowKeep keep = row_keep(base, s, e);
      ev &= keep.ev_keep;
      od &= keep.od_keep;
      keep_values(v, keep.ev_keep, keep.od_keep);
    }
    const auto [ends, starts, before, step] = lane_columns<LANES>(ev, od, sl);
    // Column before the lane's first entry (the row starts from column -1).
    const uint32_t col0 = carry + before - 1u;
    carry += step;
    uint32_t xl = act_addr + 4u * col0;
    asm("" : "+r"(xl));  // opaque: each address is then one add, not re-derived
    float xv[Config::kChunk];
#pragma unroll
    for (int i = 0; i < Config::kChunk; ++i)
      xv[i] = lds_f32(xl + 4u * byte_of(i & 1 ? ends : starts, i / 2));
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float2 p = unpack2<T>(words[q]);
      acc = fmaf(p.x, xv[2 * q], acc);
      acc = fmaf(p.y, xv[2 * q + 1], acc);
    }
  }
#pragma unroll
  for (int o = LANES / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  return acc;
}

__device__ __forceinline__ uint32_t load_acquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Thread 0 of each block: returns once every block of the grid has arrived; writes its block made
// before (ordered by the block barrier that precedes the call) are visible to every block after
// it (the caller's block barrier after the call spreads that to its threads). bar[0] counts
// arrivals, bar[1] is the generation the last arrival advances; both persist between launches
// (the count is back at 0 after each barrier).
__device__ __forceinline__ void grid_arrive_and_wait(uint32_t* bar, uint32_t blocks) {
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

__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

// dst[i] = src[i] as floats, i < n, by the block's first `threads` threads, 8 elements per 16-byte
// load where src is 16-byte aligned (one or two loads per thread for Llama sizes, all in flight
// together, instead of a dependent round trip per element). L2: src was written by other blocks of
// this kernel (read past L1). Returns this thread's sum of squares.
template <bool L2, class T>
__device__ __forceinline__ float stage_floats(float* dst, const T* src, uint32_t n,
                                              uint32_t threads) {
  float ss = 0.f;
  const bool vec = reinterpret_cast<uintptr_t>(src) % 16 == 0;
  const uint32_t vecs = vec ? n / 8 : 0;
  for (uint32_t i = threadIdx.x; i < vecs; i += threads) {
    const uint4* p = reinterpret_cast<const uint4*>(src) + i;
    const uint4 v = L2 ? __ldcg(p) : *p;
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float2 f = unpack2<T>(w[q]);
      dst[8 * i + 2 * q] = f.x;
      dst[8 * i + 2 * q + 1] = f.y;
      ss = fmaf(f.x, f.x, fmaf(f.y, f.y, ss));
    }
  }
  for (uint32_t i = vecs * 8 + threadIdx.x; i < n; i += threads) {
    const float f = to_float(L2 ? __ldcg(src + i) : src[i]);
    dst[i] = f;
    ss = fmaf(f, f, ss);
  }
  return ss;
}

// Floats of the activation region (the input in phase A, h in phase B), rounded up so the stage
// after it starts 128-byte aligned.
__host__ __device__ constexpr uint32_t act_floats(uint32_t hidden, uint32_t inter) {
  return ((hidden > inter ? hidden : inter) + 31u) / 32u * 32u;
}
// The activations start at this byte of the dynamic shared memory (act[-1] below it, and the
// ring after the activations stays 128-byte aligned).
constexpr uint32_t kActOffset = 128;

// Stage slots of the ring: which rows a slot holds and where their entries start.
struct StageRows {
  uint32_t seg;         // 0: gate rows, 1: up rows (both of gate_up), 2: down rows
  uint32_t row_begin;   // rows [row_begin, row_end) of the segment's matrix
  uint32_t row_end;
  uint32_t entry_base;  // the slot's first entry (32-aligned)
};

// A block's rows of one matrix: [a, b), with row_ptr[a..b] copied to shared memory at `rp`.
struct Segment {
  const uint16_t* vals;
  const uint8_t* deltas;
  uint32_t entries;  // the matrix's entry count (a multiple of 32)
  uint32_t a, b;
  uint32_t* rp;
};

__device__ __forceinline__ uint32_t ceil32(uint32_t v) { return (v + 31u) & ~31u; }

template <class T>
__global__ void __launch_bounds__(Config::kThreads, 1)
    swiglu_mlp_kernel(const uint32_t* __restrict__ gu_ptr, const uint16_t* __restrict__ gu_vals,
                      const uint8_t* __restrict__ gu_deltas, uint32_t gu_entries,
                      const uint32_t* __restrict__ dn_ptr, const uint16_t* __restrict__ dn_vals,
                      const uint8_t* __restrict__ dn_deltas, uint32_t dn_entries, uint32_t hidden,
                      uint32_t inter, const T* input, T* x, T* h, uint32_t* barrier,
                      bool input_rms, float eps, uint32_t slot_entries, bool gate_up_half_warps,
                      uint64_t* timeline) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // The ring: Config::kRingEntries entries in `stages` slots of `cap` entries each.
  const uint32_t cap = slot_entries;  // a launch parameter (Call::slot_entries)
  const uint32_t stages = Config::kRingEntries / slot_entries;  // a power of two (check())
  const uint32_t stage_shift = __ffs(stages) - 1;  // k / stages and k % stages without a divide
  constexpr uint32_t kConsumers = Config::kThreads / 32 - 1;  // warps 0..30; warp 31 copies
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ __align__(8) uint64_t full[Config::kMaxStages], empty[Config::kMaxStages];
  __shared__ StageRows slot_rows[Config::kMaxStages];
  __shared__ float warp_part[32];
  // act[-1] = 0 (the column of entries masked before a row's start), then the activations.
  float* act = reinterpret_cast<float*>(smem + kActOffset);  // (max(hidden, inter)): input, h
  unsigned char* ring = smem + kActOffset + act_floats(hidden, inter) * 4;  // stages x slot
  const uint32_t act_addr = static_cast<uint32_t>(__cvta_generic_to_shared(act));
  const uint32_t slot_bytes = cap * 2 + cap / 2;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  auto mark = [&](int point) {
    if (timeline && threadIdx.x == 0)
      timeline[size_t(blockIdx.x) * kTimelinePoints + point] = global_timer_ns();
  };
  // The ring's events of fill k < kTracedFills: kind 0 copy issued, 1 landed (seen by warp 0),
  // 2 its slot free again for fill k + stages (seen by the copying warp), 3 warp 0 starts waiting
  // for it (so 1 - 3 is how long the computing warps waited for the copy).
  auto trace_fill = [&](int kind, uint32_t k) {
    if (timeline && k < uint32_t(kTracedFills))
      timeline[size_t(blockIdx.x) * kTimelinePoints + kTimelineFixedPoints +
               kind * kTracedFills + k] = global_timer_ns();
  };
  mark(0);

  // This block's rows: gate rows [pa, pb) with the up rows inter + [pa, pb), down rows [r0, r1).
  const uint32_t pa = uint32_t(uint64_t(inter) * blockIdx.x / gridDim.x);
  const uint32_t pb = uint32_t(uint64_t(inter) * (blockIdx.x + 1) / gridDim.x);
  const uint32_t r0 = uint32_t(uint64_t(hidden) * blockIdx.x / gridDim.x);
  const uint32_t r1 = uint32_t(uint64_t(hidden) * (blockIdx.x + 1) / gridDim.x);
  // The block's row_ptr slices, one copy for the copying warp (slot boundaries) and one for the
  // computing warps (row extents): each side fills its own, so they share nothing but the ring.
  const uint32_t slice_words = 2 * (pb - pa + 1) + (r1 - r0 + 1);
  uint32_t* rp_copy = reinterpret_cast<uint32_t*>(ring + stages * slot_bytes);
  uint32_t* rp_compute = rp_copy + slice_words;
  float* g_u = reinterpret_cast<float*>(rp_compute + slice_words);  // (2 * (pb - pa)): g, then u
  // Segment g with its slice in `rp` (selects, not an indexed array: that would live in local
  // memory).
  auto segment = [&](uint32_t g, uint32_t* rp) {
    return g == 0 ? Segment{gu_vals, gu_deltas, gu_entries, pa, pb, rp}
         : g == 1 ? Segment{gu_vals, gu_deltas, gu_entries, inter + pa, inter + pb,
                            rp + (pb - pa + 1)}
                  : Segment{dn_vals, dn_deltas, dn_entries, r0, r1, rp + 2 * (pb - pa + 1)};
  };
  // Threads first..first+count-1 copy the three slices into `rp` (weights: before the wait).
  auto load_slices = [&](uint32_t* rp, uint32_t first, uint32_t count) {
    for (uint32_t g = 0; g < 3; ++g) {
      const Segment sg = segment(g, rp);
      const uint32_t* ptr = g < 2 ? gu_ptr : dn_ptr;
      for (uint32_t i = threadIdx.x - first; i <= sg.b - sg.a; i += count)
        sg.rp[i] = __ldg(ptr + sg.a + i);
    }
  };
  if (threadIdx.x == 0) {
    act[-1] = 0.f;
    for (uint32_t i = 0; i < stages; ++i) {
      tc::mbar_init(static_cast<uint32_t>(__cvta_generic_to_shared(&full[i])), 1);
      tc::mbar_init(static_cast<uint32_t>(__cvta_generic_to_shared(&empty[i])), kConsumers * 32);
    }
    tc::mbar_init_fence();
  }
  __syncthreads();

  if (warp == kConsumers) {
    // The copying warp: every slot of the ring in turn, as many whole rows of the current
    // segment as fit cap entries, one bulk copy of their values and one of their deltas. It
    // reads weights only, so it starts before the previous kernel has finished, and it runs on
    // into down's rows while the grid is still in phase A or at the barrier. The slot's last row
    // is found by the whole warp, 32 candidate rows per step (one thread walking them one by
    // one issued the first copies 5-11 µs after the kernel started, session 32).
    load_slices(rp_copy, kConsumers * 32, 32);
    __syncwarp();
    uint32_t k = 0;
    for (uint32_t g = 0; g < 3; ++g) {
      const Segment sg = segment(g, rp_copy);
      for (uint32_t r = sg.a; r < sg.b;) {
        const uint32_t base = sg.rp[r - sg.a] & ~31u;
        // The slot holds rows [r, re): the longest run whose 32-aligned end fits cap entries (a
        // prefix of the candidates: row_ptr does not decrease). Row r always fits (check()).
        uint32_t re = r + 1;
        for (;;) {
          const uint32_t c = re + 1 + uint32_t(lane);
          const bool fits = c <= sg.b && ceil32(sg.rp[c - sg.a]) - base <= cap;
          const uint32_t n = __popc(__ballot_sync(0xffffffffu, fits));
          re += n;
          if (n < 32) break;
        }
        if (lane == 0) {
          const uint32_t end = min(ceil32(sg.rp[re - sg.a]), sg.entries);
          const int slot = int(k & (stages - 1));
          if (k >= stages) {
            tc::mbar_wait(static_cast<uint32_t>(__cvta_generic_to_shared(&empty[slot])),
                          ((k >> stage_shift) - 1) & 1);
            trace_fill(2, k - stages);
          }
          slot_rows[slot] = StageRows{g, r, re, base};
          const uint32_t fb = static_cast<uint32_t>(__cvta_generic_to_shared(&full[slot]));
          const uint32_t n = end > base ? end - base : 0u;
          tc::mbar_arrive_expect_tx(fb, n * 2 + n / 2);
          if (n > 0) {
            const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(ring)) +
                                 uint32_t(slot) * slot_bytes;
            tc::bulk_copy(dst, sg.vals + base, n * 2, fb);
            tc::bulk_copy(dst + cap * 2, sg.deltas + base / 2, n / 2, fb);
          }
          trace_fill(0, k);
        }
        __syncwarp();
        ++k;
        r = re;
      }
    }
    return;  // the consumers' barriers below are named ones that leave this warp out
  }

  constexpr int kConsumerBar = 1;  // named barrier of the consumer warps
  auto consumers_sync = [] { tc::named_barrier(kConsumerBar, kConsumers * 32); };
  load_slices(rp_compute, 0, kConsumers * 32);  // visible after the first consumers_sync
  wait_for_previous();
  mark(1);
  // The input as floats and its sum of squares (every block reads all of it: 8 KB at 4096).
  const float ss = warp_sum(stage_floats<false>(act, input, hidden, kConsumers * 32));
  if (lane == 0) warp_part[warp] = ss;
  consumers_sync();
  mark(2);
  float scale = 1.f;
  if (input_rms) {
    float total = 0.f;
    for (uint32_t v = 0; v < kConsumers; ++v) total += warp_part[v];
    scale = rms_scale(total, hidden, eps);
  }

  // The slots in the producer's order: slot k % stages, its (k / stages)-th fill. A segment's
  // row j (counting from the block's first row of phase A or B) is warp j % kConsumers's.
  uint32_t k = 0;
  // `pre(row)` runs before the row's dot product (a load to have in flight), `out(row, pre, dot)`
  // after it.
  // Rows go to warps in units: a row (LANES = 32) or two neighbouring rows of a slot, one per half
  // warp (LANES = 16); unit u of the block's sequence is warp u % kConsumers's. `pre(row, lead)`
  // runs before a row's dot product (a load to have in flight), `out(row, lead, before, dot)`
  // after it; `lead` is true in the lane that writes the row's result.
  auto consume = [&](uint32_t rows, auto lanes, auto&& pre, auto&& out) {
    constexpr int LANES = decltype(lanes)::value;
    constexpr uint32_t kRowsPerUnit = 32 / LANES;
    uint32_t seen = 0;
    // This warp's first unit in the next slot, kept up to date instead of worked out (two
    // divisions) per slot.
    uint32_t first = uint32_t(warp);
    while (seen < rows) {
      const int slot = int(k & (stages - 1));
      if (threadIdx.x == 0) trace_fill(3, k);
      tc::mbar_wait(static_cast<uint32_t>(__cvta_generic_to_shared(&full[slot])),
                    (k >> stage_shift) & 1);
      if (threadIdx.x == 0) trace_fill(1, k);
      const StageRows st = slot_rows[slot];
      const Segment sg = segment(st.seg, rp_compute);
      const uint32_t sv = static_cast<uint32_t>(__cvta_generic_to_shared(ring)) +
                          uint32_t(slot) * slot_bytes;
      const uint32_t n_rows = st.row_end - st.row_begin;
      const uint32_t n_units = (n_rows + kRowsPerUnit - 1) / kRowsPerUnit;
      uint32_t unit = first;
      for (; unit < n_units; unit += kConsumers) {
        const uint32_t row = st.row_begin + unit * kRowsPerUnit + uint32_t(lane) / LANES;
        const bool valid = row < st.row_end;  // the second half of a slot's odd last unit: none
        const bool lead = valid && lane % LANES == 0;
        const uint32_t s = valid ? sg.rp[row - sg.a] : 0u, e = valid ? sg.rp[row - sg.a + 1] : 0u;
        const float before = pre(row, lead);
        const float dot = slot_row_dot<T, LANES>(s, e, st.entry_base, sv, sv + cap * 2, act_addr,
                                                 lane);
        out(row, lead, before, dot);
      }
      // Every thread that read the slot arrives (each thread's reads ordered before its release).
      tc::mbar_arrive(static_cast<uint32_t>(__cvta_generic_to_shared(&empty[slot])));
      first = unit - n_units;  // unit is the first of this warp's units past the slot
      seen += n_rows;
      ++k;
    }
  };

  // 3. Phase A: g and u of the block's rows into shared memory, rounded to T as the separate
  // gate_up matmul writes them; then h = silu(g) * u of the block's rows [pa, pb), rounded once as
  // the swiglu kernel rounds it, to global memory for every block.
  auto gate_up_out = [&](uint32_t row, bool lead, float, float dot) {
    if (lead) g_u[row < inter ? row - pa : (pb - pa) + (row - inter - pa)] =
        to_float(from_float<T>(dot * scale));
  };
  auto nothing_before = [](uint32_t, bool) { return 0.f; };
  if (gate_up_half_warps) {
    consume(2 * (pb - pa), std::integral_constant<int, 16>{}, nothing_before, gate_up_out);
  } else {
    consume(2 * (pb - pa), std::integral_constant<int, 32>{}, nothing_before, gate_up_out);
  }
  consumers_sync();
  for (uint32_t i = threadIdx.x; i < pb - pa; i += kConsumers * 32) {
    h[pa + i] = from_float<T>(silu_times(g_u[i], g_u[(pb - pa) + i]));
  }

  // 4. Every block's part of h is written; every block has read the input (x may change now).
  consumers_sync();
  mark(3);
  if (threadIdx.x == 0) grid_arrive_and_wait(barrier, gridDim.x);
  consumers_sync();
  mark(4);
  let_next_launch();

  // 5. Phase B: h into shared memory as floats (written by other blocks in this kernel: read
  // through L2), then down's rows from the ring, added to x.
  stage_floats<true>(act, h, inter, kConsumers * 32);
  consumers_sync();
  mark(5);
  consume(
      r1 - r0, std::integral_constant<int, 32>{},
      [&](uint32_t row, bool lead) { return lead ? to_float(__ldcg(x + row)) : 0.f; },
      [&](uint32_t row, bool lead, float before, float dot) {
        if (lead) x[row] = from_float<T>(dot + before);
      });
  if (timeline) {
    consumers_sync();
    mark(6);
  }
#else
  __trap();  // sm_90 and later only (run() refuses other devices)
#endif
}

// Dynamic shared memory of a launch: the activations as floats, the ring, two copies of the
// block's row_ptr slices (a block's rows of a matrix are at most ceil(rows / blocks); a slice
// holds one word more), the block's g and u.
int64_t smem_bytes(int64_t hidden, int64_t inter, int blocks) {
  const int64_t gate_slice = (inter + blocks - 1) / blocks + 1;
  const int64_t down_slice = (hidden + blocks - 1) / blocks + 1;
  return kActOffset + int64_t(act_floats(uint32_t(hidden), uint32_t(inter))) * 4 +
         int64_t(Config::kRingEntries) * 5 / 2 + 2 * 4 * (2 * gate_slice + down_slice) +
         4 * 2 * gate_slice;
}

// Whether gate_up's rows run two per warp (slot_row_dot's LANES = 16): where they are short on
// average (Config::kHalfWarpBelowEntriesPerRow), unless `requested` (Call::half_warps) is 0 or 1.
bool gate_up_half_warps(const macko::Matrix& gu, int requested) {
  if (requested == 0 || requested == 1) return requested == 1;
  return gu.entries() < gu.shape.rows * int64_t(Config::kHalfWarpBelowEntriesPerRow);
}

// What a launch needs to know about the kernel on the current device, asked once per kernel,
// device and dynamic shared-memory size (the engine calls the kernel once per layer and token,
// and the answers do not change): the kernel's static shared memory and its blocks per SM. The
// function's dynamic shared-memory limit is only ever raised, to the largest size asked for, so
// an entry cached for a larger size stays launchable after a smaller one. A size above
// `max_smem` (with the static part) is not asked about: per_sm stays 0.
struct LaunchFacts {
  int64_t static_smem = 0;
  int per_sm = 0;
};

template <class Kernel>
Status launch_facts(Kernel kernel, int64_t smem, int64_t max_smem, LaunchFacts& facts) {
  struct Entry {
    const void* kernel;
    int device;
    int64_t smem;
    LaunchFacts facts;
  };
  static std::mutex mu;
  static std::vector<Entry> cache;
  int dev = 0;
  SPARROW_CUDA_RETURN_IF_ERROR(cudaGetDevice(&dev));
  const void* key = reinterpret_cast<const void*>(kernel);
  const std::lock_guard<std::mutex> lock(mu);
  for (const Entry& e : cache) {
    if (e.kernel == key && e.device == dev && e.smem == smem) {
      facts = e.facts;
      return Status::success();
    }
  }
  cudaFuncAttributes attr{};
  SPARROW_CUDA_RETURN_IF_ERROR(cudaFuncGetAttributes(&attr, kernel));
  facts.static_smem = int64_t(attr.sharedSizeBytes);
  facts.per_sm = 0;
  // More than a block may have: nothing to set or ask (the caller refuses it).
  if (smem + facts.static_smem > max_smem) return Status::success();
  // The limit so far: the largest size cached for this kernel and device (each was set first).
  int64_t limit = 0;
  for (const Entry& e : cache) {
    if (e.kernel == key && e.device == dev) limit = std::max(limit, e.smem);
  }
  if (smem > limit) {
    SPARROW_CUDA_RETURN_IF_ERROR(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  }
  SPARROW_CUDA_RETURN_IF_ERROR(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &facts.per_sm, kernel, Config::kThreads, size_t(smem)));
  cache.push_back({key, dev, smem, facts});
  return Status::success();
}

template <class T>
Status launch(const Call& c, const DeviceInfo& dev, Stream stream) {
  const macko::Matrix& gu = *c.gate_up;
  const macko::Matrix& dn = *c.down;
  const int64_t hidden = dn.shape.rows, inter = dn.shape.cols;
  const int slot = c.slot_entries > 0 ? c.slot_entries : Config::kSlotEntries;
  // One block per SM: the grid barrier needs every block resident at once.
  const int blocks = dev.sm_count;
  const int64_t smem = smem_bytes(hidden, inter, blocks);
  auto kernel = swiglu_mlp_kernel<T>;
  LaunchFacts facts;
  SPARROW_RETURN_IF_ERROR(launch_facts(kernel, smem, dev.max_smem_per_block, facts));
  if (smem + facts.static_smem > dev.max_smem_per_block)
    return unsupported("macko.swiglu_mlp: hidden " + std::to_string(hidden) + " / intermediate " +
                       std::to_string(inter) + " need " + std::to_string(smem) +
                       " bytes of shared memory per block; this GPU has " +
                       std::to_string(dev.max_smem_per_block));
  if (facts.per_sm < 1) return unsupported("macko.swiglu_mlp: a block does not fit an SM");
  return cuda_status(
      launch_kernel(c.dependent_launch, kernel, dim3(unsigned(blocks)), dim3(Config::kThreads),
                    size_t(smem), stream, gu.row_ptr.data(), gu.values.data(), gu.deltas.data(),
                    uint32_t(gu.entries()), dn.row_ptr.data(), dn.values.data(),
                    dn.deltas.data(), uint32_t(dn.entries()), uint32_t(hidden), uint32_t(inter),
                    static_cast<const T*>(c.input), static_cast<T*>(c.x),
                    static_cast<T*>(c.h), c.barrier, c.input_rms, c.rms_eps,
                    uint32_t(slot), gate_up_half_warps(gu, c.half_warps), c.timeline),
      "macko.swiglu_mlp launch");
}

}  // namespace

Status check(const macko::Matrix& gu, const macko::Matrix& dn, int slot_entries) {
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
  // A row's entries, widened to 32-aligned ends, must fit one slot of the ring.
  const int64_t longest = std::max(gu.max_row_entries, dn.max_row_entries);
  const int slot = slot_entries > 0 ? slot_entries : Config::kSlotEntries;
  if (slot <= 0 || (slot & (slot - 1)) != 0 || Config::kRingEntries / slot > Config::kMaxStages ||
      Config::kRingEntries / slot < 2)
    return invalid_argument(who + "slot_entries " + std::to_string(slot) +
                            " must be a power of two that divides " +
                            std::to_string(Config::kRingEntries) + " into 2.." +
                            std::to_string(Config::kMaxStages) + " slots");
  if (longest + 64 > int64_t(slot))
    return unsupported(who + "a row of " + std::to_string(longest) +
                       " entries does not fit a ring slot of " + std::to_string(slot));
  return Status::success();
}

Status run(const Call& c, Stream stream) {
  if (!c.gate_up || !c.down || !c.input || !c.x || !c.h || !c.barrier)
    return invalid_argument("macko.swiglu_mlp: a null weight, activation or barrier pointer");
  SPARROW_RETURN_IF_ERROR(check(*c.gate_up, *c.down, c.slot_entries));
  SPARROW_ASSIGN_OR_RETURN(const DeviceInfo dev, current_device_info());
  if (dev.cc_major < 9)
    return unsupported("macko.swiglu_mlp needs sm_90 or later (bulk copies, grid barrier)");
  if (c.gate_up->shape.dtype == DType::fp16) return launch<__half>(c, dev, stream);
  return launch<__nv_bfloat16>(c, dev, stream);
}

}  // namespace sparrow::kernels::macko_swiglu_mlp
