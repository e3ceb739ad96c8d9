// macko.warp_row, entry-balanced one-token kernel. The per-step decode is the one-token warp
// kernel's (warp_row.cu): lane l takes 8 entries (16 bytes of values, 4 of deltas) of a 256-entry
// step, columns come from a warp scan of (delta + 1), X is gathered through L1, 8 gathers issued
// together with columns clamped to K - 1. What differs is who does which entries:
//
//   grid    one wave of blocks. Block b takes the rows that start in its share of the steps,
//           [b, b + 1) * steps / blocks: its first row is step_index[j].first_row of its first
//           step j (one load; rows never cross blocks, so a row's sum never leaves the block).
//   block   its entries [E0, E1) are cut at step boundaries into 8 equal runs, one per warp. A run
//           may start inside a row: step_index[j].carry is that row's column count at the cut,
//           which is all the decode needs to go on from there (no walk over the deltas before).
//   warp    walks the rows of its run in order: a row is its entries inside the run, masked at
//           both ends. The next step is always in flight: the row's next one or, at its last,
//           the next row's first. Row extents come from row_ptr 32 rows at a time (a lane each,
//           read by shuffles).
//   sums    a row wholly inside one run is written by its warp. A row cut by runs leaves a partial
//           in shared memory per warp; the warp where the row starts adds the later warps' parts
//           in warp order and writes it: deterministic, no atomics.
//
// Rows of trailing zero-entry rows (after the last entry) are written by the last block.
// With a dependent launch (kernels/dependent_launch.cuh) everything up to the first step's loads
// and an L2 prefetch of the rest of the run happens before the previous kernel has finished.
#include "kernels/macko/balanced.hpp"

#include <algorithm>
#include <variant>

#include "core/cuda_check.hpp"
#include "kernels/decode_common.cuh"
#include "kernels/dependent_launch.cuh"
#include "kernels/device_info.hpp"

namespace sparrow::kernels::macko_balanced {

using namespace decode;

namespace {

constexpr int kWarps = Config::kThreads / 32;
constexpr uint32_t kStep = uint32_t(macko::kIndexStep);  // entries per warp step: 32 lanes x 8
constexpr uint32_t kChunk = 8;                           // entries per lane per step
constexpr uint32_t kNone = 0xFFFFFFFFu;

template <class T>
__global__ void __launch_bounds__(Config::kThreads, Config::kMinBlocksPerSm)
    balanced_kernel(const uint32_t* __restrict__ row_ptr, const uint16_t* __restrict__ vals,
                    const uint8_t* __restrict__ deltas, const uint2* __restrict__ index,
                    uint32_t m, uint32_t k, uint32_t total_steps, const T* __restrict__ x,
                    T* __restrict__ y, const T* __restrict__ bias, bool accumulate,
                    bool prefetch) {
  let_next_launch();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint32_t blocks = gridDim.x, b = blockIdx.x;

  // This block: rows [r0, r1), entries [e0, e1).
  const uint32_t j_lo = uint32_t(uint64_t(b) * total_steps / blocks);
  const uint32_t j_hi = uint32_t(uint64_t(b + 1) * total_steps / blocks);
  const uint32_t r0 = __ldg(&index[j_lo].x), r1 = __ldg(&index[j_hi].x);
  const uint32_t e0 = __ldg(row_ptr + r0), e1 = __ldg(row_ptr + r1);
  // This warp: entries [ra, rb), cut at step boundaries.
  const uint64_t js = e0 / kStep, je = (uint64_t(e1) + kStep - 1) / kStep;
  const uint64_t per = (je - js + kWarps - 1) / kWarps;
  const uint32_t ra = uint32_t(std::max<uint64_t>(e0, (js + per * warp) * kStep));
  const uint32_t rb = uint32_t(std::min<uint64_t>(e1, (js + per * (warp + 1)) * kStep));
  const bool any = ra < rb;

  // The first row: r0 for the first run; else the row holding entry ra (a step boundary, > e0).
  uint32_t r = r0, carry0 = 0;
  bool mid = false;
  if (any && ra > e0) {
    const uint2 ix = __ldg(&index[ra / kStep]);
    r = ix.x;
    if (r >= m || __ldg(row_ptr + r) > ra) {  // ra is inside row r - 1
      r -= 1;
      mid = true;
      carry0 = ix.y;
    }
  }
  // Row extents, 32 row_ptr values at a time from row `rc`: lane i holds row_ptr[rc + i].
  uint32_t rc = r;
  uint32_t cached = rc + lane <= m ? __ldg(row_ptr + rc + lane) : kNone;
  auto extent = [&](uint32_t row, uint32_t& s, uint32_t& e) {
    if (row + 1 > rc + 31) {  // warp-uniform
      rc = row;
      cached = rc + lane <= m ? __ldg(row_ptr + rc + lane) : kNone;
    }
    s = __shfl_sync(0xffffffffu, cached, int(row - rc));
    e = __shfl_sync(0xffffffffu, cached, int(row + 1 - rc));
  };

  // The row being decoded: entries [lo, hi) of it, steps from wb, column carry.
  uint32_t s = 0, e = 0;
  if (any && r < m) extent(r, s, e);
  uint32_t lo = mid ? ra : s, hi = min(rb, e);
  uint32_t wb = mid ? ra : (s & ~(kChunk - 1));
  uint32_t carry = mid ? carry0 : wb - s;  // mod 2^32: cancels the masked entries before s

  auto load = [&](uint32_t base, uint32_t limit, uint4& v, uint32_t& d) {
    v = make_uint4(0, 0, 0, 0);
    d = 0;
    if (base < limit) {
      v = load_stream16(vals + base);
      d = load_stream4(deltas + base / 2);
    }
  };
  uint4 v;
  uint32_t d;
  load(wb + lane * kChunk, any ? hi : 0u, v, d);
  bool loaded = true;  // (v, d) hold row r's step at wb
  if (prefetch && any) {
    // The rest of this run into L2 while the previous kernel finishes (lines of 64 values and
    // of 256 deltas).
    for (uint32_t i = wb + kStep + lane * 64u; i < rb; i += 32 * 64u) prefetch_l2(vals + i);
    for (uint32_t i = wb + kStep + lane * 256u; i < rb; i += 32 * 256u) prefetch_l2(deltas + i / 2);
  }
  wait_for_previous();

  // The cut rows' partials, in shared memory as they are known (fewer live registers): the row
  // this run continues (first) and the row it starts and leaves unfinished (last).
  __shared__ uint32_t s_first_row[kWarps], s_last_row[kWarps];
  __shared__ float s_first_sum[kWarps], s_last_sum[kWarps];
  if (lane == 0) s_first_row[warp] = s_last_row[warp] = kNone;
  while (any && r < m && (mid || s < rb)) {
    if (!loaded) load(wb + lane * kChunk, hi, v, d);
    loaded = false;
    float acc = 0.f;
    for (; wb < hi; wb += kStep) {  // warp-uniform
      const uint32_t base = wb + lane * kChunk;
      // The next step in flight: this row's next, or the next row's first.
      uint4 vn;
      uint32_t dn;
      if (wb + kStep < hi) {
        load(base + kStep, hi, vn, dn);
      } else if (r + 1 < m) {
        uint32_t s2, e2;
        extent(r + 1, s2, e2);
        load((s2 & ~(kChunk - 1)) + lane * kChunk, s2 < rb ? min(rb, e2) : 0u, vn, dn);
        loaded = true;
      }
      // Entries outside [lo, hi) belong to other rows or runs: before lo they add one column
      // each (the carry cancels them) and nothing else; from hi on they add nothing.
      if (base < lo || base + kChunk > hi) {
        uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const uint32_t idx = base + i;
          if (idx < lo) d &= ~(0xFu << (4 * i));
          if (idx < lo || idx >= hi) w[i / 2] &= (i & 1) ? 0x0000FFFFu : 0xFFFF0000u;
        }
        v = make_uint4(w[0], w[1], w[2], w[3]);
      }
      const uint32_t pairs = (d & 0x0F0F0F0Fu) + ((d >> 4) & 0x0F0F0F0Fu);
      const uint32_t total = ((pairs * 0x01010101u) >> 24) + 8u;
      const uint32_t incl = warp_inclusive_scan(total, lane);
      uint32_t col = carry + (incl - total) - 1u;
      carry += __shfl_sync(0xffffffffu, incl, 31);
      const uint32_t words[4] = {v.x, v.y, v.z, v.w};
      float xv[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        col += ((d >> (4 * i)) & 0xFu) + 1u;
        xv[i] = to_float(__ldg(x + min(col, k - 1u)));
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float2 pair = unpack2<T>(words[i / 2]);
        acc += ((i & 1) ? pair.y : pair.x) * xv[i];
      }
      v = vn;
      d = dn;
    }
    acc = warp_sum(acc);
    const bool cut_after = e > rb;  // the row goes on in the next run
    if (lane == 0) {
      if (mid) {  // started in an earlier run: a partial for the row's owner
        s_first_row[warp] = r;
        s_first_sum[warp] = acc;
      } else if (cut_after) {  // starts here, goes on: this warp adds the parts and writes it
        s_last_row[warp] = r;
        s_last_sum[warp] = acc;
      } else {
        store_output(y + r, acc, bias, r, accumulate);
      }
    }
    mid = false;
    if (++r >= m) break;
    extent(r, s, e);
    lo = s;
    hi = min(rb, e);
    wb = s & ~(kChunk - 1);
    carry = wb - s;
  }

  __syncthreads();
  const uint32_t last_row = s_last_row[warp];
  if (lane == 0 && last_row != kNone) {
    float sum = s_last_sum[warp];
    for (int w = warp + 1; w < kWarps && s_first_row[w] == last_row; ++w) sum += s_first_sum[w];
    store_output(y + last_row, sum, bias, last_row, accumulate);
  }
  if (b == blocks - 1) {  // rows after the last entry (empty): y = bias (+ y)
    for (uint32_t row = r1 + threadIdx.x; row < m; row += blockDim.x)
      store_output(y + row, 0.f, bias, row, accumulate);
  }
}

template <class T>
Status launch(const macko::Matrix& mm, const Problem& p, const DeviceInfo& dev, Stream stream) {
  const int64_t total_steps = int64_t(mm.step_index.size() / 2) - 1;
  const int64_t blocks = grid_blocks(total_steps * macko::kIndexStep, dev.sm_count);
  const bool dependent = p.opt.dependent_launch;
  const bool prefetch = dependent && dependent_launch_enabled();
  return cuda_status(
      launch_kernel(dependent, balanced_kernel<T>, dim3(unsigned(blocks)), dim3(Config::kThreads),
                    0, stream, mm.row_ptr.data(), mm.values.data(), mm.deltas.data(),
                    reinterpret_cast<const uint2*>(mm.step_index.data()),
                    uint32_t(mm.shape.rows), uint32_t(mm.shape.cols), uint32_t(total_steps),
                    static_cast<const T*>(p.x.data), static_cast<T*>(p.y.data),
                    static_cast<const T*>(p.opt.bias), p.opt.accumulate, prefetch),
      "macko.warp_row (balanced) launch");
}

}  // namespace

int64_t grid_blocks(int64_t used_entries, int sm_count) {
  const int64_t steps = (used_entries + macko::kIndexStep - 1) / macko::kIndexStep;
  const int64_t wave = int64_t(std::max(sm_count, 1)) * Config::kMinBlocksPerSm;
  const int64_t by_work = steps / (kWarps * Config::kMinStepsPerWarp);
  return std::max<int64_t>(1, std::min(wave, by_work));
}

bool supported(const Weight& w) {
  const auto* mm = std::get_if<macko::Matrix>(&w);
  if (!mm || mm->shape.rows >= (int64_t(1) << 31) || mm->shape.cols >= (int64_t(1) << 30)) {
    return false;
  }
  // The index has 2 * (ceil(used / 256) + 1) values, used = row_ptr[rows] (on the device here).
  // The stored entries are used rounded up to 32, which gives the same step count: a missing
  // index, or one of another matrix's size, shows (validate compares contents on the host).
  const int64_t steps = (mm->entries() + macko::kIndexStep - 1) / macko::kIndexStep;
  return int64_t(mm->step_index.size()) == 2 * (steps + 1);
}

Status run(const Problem& p, Stream stream) {
  SPARROW_RETURN_IF_ERROR(check_problem(p, Format::macko));
  if (p.n() != 1) return invalid_argument("macko balanced kernel: one token only (N = 1)");
  if (!supported(p.w)) {
    return invalid_argument(
        "macko balanced kernel: the weight has no step index (macko::derive builds it)");
  }
  const auto& mm = std::get<macko::Matrix>(p.w);
  if (mm.shape.dtype == DType::fp32) return invalid_argument("macko holds fp16/bf16 values only");
  SPARROW_ASSIGN_OR_RETURN(const DeviceInfo dev, current_device_info());
  if (mm.shape.dtype == DType::fp16) return launch<__half>(mm, p, dev, stream);
  return launch<__nv_bfloat16>(mm, p, dev, stream);
}

}  // namespace sparrow::kernels::macko_balanced
