// macko.warp_row's one-token entry split (merge-path SpMV over macko's entries).
//
// Why: the row kernel gives each row one warp (or 2 / 4 pieces), so its time is its longest
// row's. Magnitude-pruned weights have rows 2.4-4.7x the average (bench/NOTES-decode.md, session
// 18), and there it measured 1.1-1.5x its random-pattern time; splitting long rows into more
// pieces cost a per-piece prologue (the row's earlier deltas summed) and measured slower
// (session 18). Here the entries are dealt by count instead, and a warp starts mid-row from the
// weight's step_rows records (row and column count at every 256-entry step) instead of walking
// the row's earlier deltas. The records and the run's start are still a few dependent loads before
// the first entries: hidden behind the previous kernel under a dependent launch, 2-4 µs on a plain
// one (use_entry_split runs it under dependent launches only).
//
// Work split:
//   - block b takes the rows [r0, r1) whose first entries fall in its share of the steps
//     (steps * b / blocks onwards), so a row never spans two blocks and Y needs no cross-block sum;
//   - the block's entries [row_ptr[r0], row_ptr[r1]) are split into one contiguous run of steps per
//     warp; a warp starts at its first step's record: the row holding it and that row's column
//     count before it (step_rows), and walks the steps across row boundaries;
//   - rows that start and end inside a warp's run are written by that warp; a row that a warp
//     starts before its run (head) or continues past it (tail) leaves a partial sum in shared
//     memory, and one thread adds each row's partials in warp order and writes it (deterministic).
// Per step (lane l: entries base + 8l .. + 7, 16 bytes of values, 4 of deltas) the columns come
// from the same byte-parallel prefix sums as the row kernel (decode_common.cuh, lane_columns).
// An interior step (the whole step inside the warp's run, no row starting in it) runs the row
// kernel's step. Otherwise entries outside the run get value 0 and column step 0, each row start b
// in the step resets the column base of the entries from b on to the step's prefix before b, and
// each finished row's products are summed over the warp (a masked warp reduction per row end).
// The next row starts come from a cache of 32 row_ptr values per warp (one load per 32 rows).
#include "kernels/macko/entry_split.hpp"

#include <algorithm>

#include "core/cuda_check.hpp"
#include "kernels/decode_common.cuh"
#include "kernels/dependent_launch.cuh"
#include "kernels/device_info.hpp"
#include "kernels/macko/warp_row.hpp"

namespace sparrow::kernels::macko_entry_split {

using namespace decode;

namespace {

constexpr uint32_t kChunk = 8;             // entries per lane per step (16 bytes of values)
constexpr uint32_t kStep = 32 * kChunk;    // entries per warp step
static_assert(int64_t(kStep) == macko::kStepEntries, "step_rows records one step each");

// Blocks of WARPS warps, 40 warps per SM (8-warp blocks: a 48-register cap, ptxas sm_90 ~30 bytes
// of spills; 16-warp blocks: 2 per SM, 55 registers). The row kernel's 48 warps per SM (a
// 40-register cap: ~90 bytes of spills here) measured 1.3-1.9x slower (session 39, c2).
template <int WARPS>
struct Shape {
  static constexpr int kThreads = WARPS * 32;
  static constexpr int kMinBlocksPerSm = 40 / WARPS;
};

template <class T, int WARPS, bool XSMEM, bool RMS>
__global__ void __launch_bounds__(Shape<WARPS>::kThreads, Shape<WARPS>::kMinBlocksPerSm)
    entry_split_kernel(const uint32_t* __restrict__ row_ptr, const uint4* __restrict__ step_rows,
                       const uint16_t* __restrict__ vals, const uint8_t* __restrict__ deltas,
                       uint32_t m, uint32_t steps, uint32_t k, const T* __restrict__ x,
                       T* __restrict__ y, const T* __restrict__ bias, bool accumulate,
                       float rms_eps) {
  let_next_launch();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

  // ---- the block's rows [r0, r1) and entries [e0, e1) ----
  // From the records at the block's share of the steps: the first row starting at or after each
  // end, and its start (one load each, independent).
  const uint64_t nblocks = gridDim.x, b = blockIdx.x;
  const uint4 rec0 = __ldg(step_rows + uint64_t(steps) * b / nblocks);
  const uint4 rec1 = __ldg(step_rows + uint64_t(steps) * (b + 1) / nblocks);
  // (Block 0 starts at row 0 and entry 0; with no entries at all, record 0 is the last one.)
  const uint32_t r0 = b == 0 ? 0u : rec0.z, e0 = b == 0 ? 0u : rec0.w;
  const uint32_t r1 = rec1.z, e1 = rec1.w;
  const bool has_rows = r0 < r1;
  // Warp w's run of entries [a, a_end): the block's steps split evenly, clipped to [e0, e1).
  const uint32_t s0 = e0 / kStep, ns = (e1 + kStep - 1) / kStep - s0;
  auto bound = [&](int w) -> uint32_t {
    if (w == 0) return e0;
    if (w == WARPS) return e1;
    const uint64_t at = (uint64_t(s0) + uint64_t(ns) * uint64_t(w) / WARPS) * kStep;
    return uint32_t(std::min<uint64_t>(std::max<uint64_t>(at, e0), e1));
  };
  const uint32_t a = bound(warp), a_end = bound(warp + 1);
  const bool active = a < a_end;
  const bool last_warp = warp == WARPS - 1;

  // The first step's 8 entries of this lane (weights only: before the wait), issued before the
  // loads that depend on the run's record.
  uint32_t st = a / kStep;
  uint4 v = make_uint4(0, 0, 0, 0);
  uint32_t d = 0;
  auto load = [&](uint32_t cb, uint4& vv, uint32_t& dd) {
    if (cb < a_end) {
      vv = load_stream16(vals + cb);
      dd = load_stream4(deltas + cb / 2);
    }
  };
  if (active) load(st * kStep + uint32_t(lane) * kChunk, v, d);

  // The row holding the run's first entry and its column count before it: the block's first row
  // where the run starts the block (a row start), else the step's record (a is a step start).
  uint32_t cur = r0, carry = 0;
  if (active && a != e0) {
    const uint4 rec = __ldg(step_rows + a / kStep);
    cur = rec.x, carry = rec.y;
  }
  const bool open_in = carry > 0;  // the run starts inside row `cur` (its head)
  const uint32_t head_row = cur;

  // Row starts: lane i caches row_ptr[cached + i] (all ones past row m).
  uint32_t cached = cur + 1, bq = 0xFFFFFFFFu;
  auto fill = [&](uint32_t from) {
    cached = from;
    bq = from + uint32_t(lane) <= m ? __ldg(row_ptr + from + lane) : 0xFFFFFFFFu;
  };
  // row_ptr[r] for r > cur (warp-uniform r).
  auto row_start = [&](uint32_t r) -> uint32_t {
    if (r < cached || r - cached >= 32) fill(r);
    return __shfl_sync(0xffffffffu, bq, int(r - cached));
  };
  uint32_t nxt = 0xFFFFFFFFu;  // row_ptr[cur + 1]: where the next row starts
  if (active || (last_warp && has_rows)) {
    fill(cur + 1);
    nxt = __shfl_sync(0xffffffffu, bq, 0);
  }
  wait_for_previous();

  // ---- X: copied into shared memory (XSMEM), its sum of squares (RMS) ----
  extern __shared__ __align__(16) unsigned char x_smem_raw[];
  __shared__ float rms_part[RMS ? WARPS : 1];
  if constexpr (XSMEM || RMS) {
    float ss = copy_x_sum_sq<T, XSMEM, RMS>(reinterpret_cast<T*>(x_smem_raw), x, k);
    if constexpr (RMS) {
      ss = warp_sum(ss);
      if (lane == 0) rms_part[warp] = ss;
    }
    __syncthreads();
  }
  float scale = 1.f;
  if constexpr (RMS) {
    float total = 0.f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) total += rms_part[w];
    scale = rms_scale(total, k, rms_eps);
  }
  auto write_row = [&](uint32_t r, float sum) {
    store_output(y + r, RMS ? sum * scale : sum, bias, r, accumulate);
  };
  uint32_t xs_addr = static_cast<uint32_t>(__cvta_generic_to_shared(x_smem_raw));
  asm("" : "+r"(xs_addr));  // kept in a register

  // Partial sums of rows that cross warp runs: head (state 1: the row ends in this run, 2: it
  // also continues past it) and tail (a row this run starts and does not finish).
  __shared__ float head_sum[WARPS], tail_sum[WARPS];
  __shared__ uint32_t head_rows[WARPS];
  __shared__ int head_state[WARPS];
  __shared__ bool has_tail[WARPS];
  if (lane == 0) head_state[warp] = 0, has_tail[warp] = false;
  // A finished row: the run's head (its partial to shared memory) or a whole row (to Y).
  auto finish_row = [&](uint32_t r, float sum) {
    if (r == head_row && open_in) {
      if (lane == 0) head_sum[warp] = sum, head_rows[warp] = r, head_state[warp] = 1;
    } else if (lane == 0) {
      write_row(r, sum);
    }
  };

  float acc = 0.f;  // this lane's partial sum of row `cur`
  const uint32_t st_end = (a_end + kStep - 1) / kStep;
  for (; active && st < st_end; ++st) {
    const uint32_t base = st * kStep;
    const uint32_t lo = max(base, a), hi = min(base + kStep, a_end);
    const uint32_t cb = base + uint32_t(lane) * kChunk;
    uint4 vn = v;
    uint32_t dn = d;
    load(cb + kStep, vn, dn);  // the next step's chunk, in flight while this one decodes
    uint32_t ev, od;
    entry_steps(d, ev, od);
    const bool whole = lo == base && hi == base + kStep;
    const uint32_t next_start = nxt;
    if (whole && next_start >= hi) {
      // Interior step: the row kernel's step (every entry is row cur's, every column >= 0).
      const LaneColumns lc = lane_columns<32>(ev, od, lane);
      const int32_t col0 = int32_t(carry + lc.before) - 1;
      carry += lc.step;
      float xv[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const uint32_t col = uint32_t(col0) + byte_of(i & 1 ? lc.ends : lc.starts, i / 2);
        xv[i] = XSMEM ? to_float(lds_element<T>(xs_addr + 2u * col)) : to_float(__ldg(x + col));
      }
      const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float2 pair = unpack2<T>(words[i / 2]);
        acc += ((i & 1) ? pair.y : pair.x) * xv[i];
      }
    } else {
      if (!whole) {
        // Entries outside the run: value 0, column step 0.
        const RowKeep kp = row_keep(cb, lo, hi);
        ev &= kp.ev_keep;
        od &= kp.od_keep;
        keep_values(v, kp.ev_keep, kp.od_keep);
      }
      const uint32_t w4[4] = {v.x, v.y, v.z, v.w};
      const LaneColumns lc = lane_columns<32>(ev, od, lane);
      // Entry i's column is its step-local inclusive prefix minus its row's base, minus 1: the
      // base is -carry for row cur, and the prefix before its first entry for a row starting here.
      uint32_t sub[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) sub[i] = 0u - carry;
      uint32_t last_base = 0u;
      uint32_t r = cur;
      for (uint32_t bnd = next_start; bnd < hi; bnd = row_start(++r + 1)) {
        // The step's prefix before entry bnd: its owner lane's exclusive sum plus its own
        // entries before it.
        const uint32_t pos = bnd - base;
        const int owner = int(pos / kChunk);
        const uint32_t p = pos % kChunk;
        const uint32_t o_before = __shfl_sync(0xffffffffu, lc.before, owner);
        const uint32_t o_ends = __shfl_sync(0xffffffffu, lc.ends, owner);
        const uint32_t o_starts = __shfl_sync(0xffffffffu, lc.starts, owner);
        const uint32_t inner =
            p == 0 ? 0u : (((p - 1) & 1 ? o_ends : o_starts) >> (8 * ((p - 1) / 2))) & 0xFFu;
        last_base = o_before + inner;
#pragma unroll
        for (int i = 0; i < 8; ++i) sub[i] = cb + i >= bnd ? last_base : sub[i];
      }
      float pr[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const uint32_t q = lc.before + byte_of(i & 1 ? lc.ends : lc.starts, i / 2);
        // Masked entries (value 0) may sit on column -1: clamped to a real one.
        const uint32_t col = min(q - sub[i] - 1u, k - 1u);
        pr[i] = XSMEM ? to_float(lds_element<T>(xs_addr + 2u * col)) : to_float(__ldg(x + col));
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float2 pair = unpack2<T>(w4[i / 2]);
        pr[i] *= (i & 1) ? pair.y : pair.x;
      }
      // Each row that ends in this step: its products so far, summed over the warp.
      const bool starts_here = next_start < hi;
      uint32_t bnd = next_start;
      for (; bnd < hi; bnd = row_start(++cur + 1)) {
        float part = acc;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          if (cb + i < bnd) part += pr[i], pr[i] = 0.f;
        }
        finish_row(cur, warp_sum(part));
        acc = 0.f;
      }
      nxt = bnd;
#pragma unroll
      for (int i = 0; i < 8; ++i) acc += pr[i];
      carry = starts_here ? lc.step - last_base : carry + lc.step;
    }
    v = vn;
    d = dn;
  }

  // ---- the run's last row: finished exactly at a_end, or continuing into the next warp ----
  if (active || (last_warp && has_rows)) {
    const float sum = warp_sum(acc);
    if (nxt == a_end) {
      finish_row(cur, sum);
      // The block's last run also writes the empty rows starting at its end (the matrix's
      // trailing empty rows, in the last block).
      if (last_warp) {
        for (uint32_t r = cur + 1 + uint32_t(lane); r < r1; r += 32) write_row(r, 0.f);
      }
    } else if (cur == head_row && open_in) {
      if (lane == 0) head_sum[warp] = sum, head_rows[warp] = cur, head_state[warp] = 2;
    } else if (lane == 0) {
      tail_sum[warp] = sum, has_tail[warp] = true;
    }
  }
  __syncthreads();
  // Rows across runs: each one's partials added in warp order (a tail, middles, the closing head).
  if (threadIdx.x == 0) {
    float run = 0.f;
    for (int w = 0; w < WARPS; ++w) {
      if (head_state[w] != 0) {
        run += head_sum[w];
        if (head_state[w] == 1) write_row(head_rows[w], run), run = 0.f;
      }
      if (has_tail[w]) run = tail_sum[w];
    }
  }
}

template <class T, int WARPS, bool XSMEM, bool RMS>
cudaError_t launch_instance(const macko::Matrix& mm, const Call& c, Stream stream) {
  using S = Shape<WARPS>;
  auto kernel = entry_split_kernel<T, WARPS, XSMEM, RMS>;
  const size_t smem = XSMEM ? size_t(mm.shape.cols) * sizeof(T) : 0;
  if (smem > 48 * 1024) {
    const cudaError_t e =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e != cudaSuccess) return e;
  }
  // Blocks an SM holds at once, asked once per instance and X size.
  static thread_local size_t asked_smem = ~size_t(0);
  static thread_local int resident = 0;
  if (asked_smem != smem) {
    const cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &resident, kernel, S::kThreads, smem);
    if (e != cudaSuccess) return e;
    asked_smem = smem;
  }
  const int64_t steps = int64_t(mm.step_rows.size() / 4) - 1;
  const int64_t blocks = std::min(launch_blocks(c.sm_count, resident), std::max<int64_t>(steps, 1));
  return launch_kernel(c.dependent, kernel, dim3(unsigned(blocks)), dim3(S::kThreads),
                       smem, stream, mm.row_ptr.data(),
                       reinterpret_cast<const uint4*>(mm.step_rows.data()), mm.values.data(),
                       mm.deltas.data(), uint32_t(mm.shape.rows), uint32_t(steps),
                       uint32_t(mm.shape.cols), static_cast<const T*>(c.x), static_cast<T*>(c.y),
                       static_cast<const T*>(c.bias), c.accumulate, c.rms_eps);
}

template <class T, int WARPS, bool XSMEM>
cudaError_t launch_rms(const macko::Matrix& mm, const Call& c, Stream stream) {
  return c.input_rms ? launch_instance<T, WARPS, XSMEM, true>(mm, c, stream)
                     : launch_instance<T, WARPS, XSMEM, false>(mm, c, stream);
}

// The one runtime -> template choice: block warps (8 / 16), X copied or gathered, norm.
template <class T>
cudaError_t launch_typed(const macko::Matrix& mm, const Call& c, Stream stream) {
  namespace wr = macko_warp_row;
  const int64_t rows = mm.shape.rows, cols = mm.shape.cols;
  const bool xs = wr::one_token_shared_x(rows, cols, mm.entries(), int(sizeof(T)), -1);
  if (wr::one_token_block_warps(rows, cols, mm.entries(), xs, 0) == 16) {
    return xs ? launch_rms<T, 16, true>(mm, c, stream) : launch_rms<T, 16, false>(mm, c, stream);
  }
  return xs ? launch_rms<T, 8, true>(mm, c, stream) : launch_rms<T, 8, false>(mm, c, stream);
}

}  // namespace

bool use_entry_split(int64_t rows, int64_t entries, int64_t max_row_entries, int sm_count,
                     bool dependent, int requested) {
  if (requested == 0 || requested == 1) return requested == 1;
  const int64_t slots = int64_t(std::max(sm_count, 1)) * macko_warp_row::kOneTokenWarpsPerSm;
  return dependent && rows <= slots &&
         !macko_warp_row::rows_are_even(rows, entries, max_row_entries);
}

int64_t launch_blocks(int sm_count, int resident) {
  return std::max<int64_t>(1, int64_t(std::max(sm_count, 1)) * std::max(resident, 1));
}

Status launch(const macko::Matrix& mm, const Call& c, Stream stream) {
  const int64_t rows = mm.shape.rows;
  if (mm.step_rows.size() < 4 || !mm.step_rows.on_device()) {
    return invalid_argument("macko entry split: the weight has no step_rows on the GPU (derive())");
  }
  if (rows >= int64_t(1) << 31 || mm.shape.cols > macko_warp_row::kOneTokenMaxCols) {
    return invalid_argument("macko entry split: shape past its 32-bit row and column arithmetic");
  }
  const cudaError_t e = mm.shape.dtype == DType::fp16
                            ? launch_typed<__half>(mm, c, stream)
                            : launch_typed<__nv_bfloat16>(mm, c, stream);
  return cuda_status(e, "macko entry split launch");
}

}  // namespace sparrow::kernels::macko_entry_split
