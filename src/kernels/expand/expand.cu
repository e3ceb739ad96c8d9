// Expanding compressed weights to dense on the GPU (the first half of <format>.expand_cublas).
// Each kernel writes every element of its rows (zeros, and zero padding up to ld, included), so
// the workspace needs no memset pass, and leaves in coalesced 16-byte stores: csr and macko rows
// are assembled in shared memory first; tca_bme rows are written from the group staged there.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "core/cuda_check.hpp"
#include "kernels/decode_common.cuh"  // warp_inclusive_scan
#include "kernels/device_info.hpp"
#include "kernels/expand/expand.hpp"
#include "kernels/tensor_core/mma.cuh"  // cp.async

namespace sparrow::kernels::expand {

namespace {

// Each warp builds a row in shared memory one window of kWindowBytes at a time, then writes the
// window out with coalesced 16-byte stores. Zeroing the row in global memory and scattering
// 2-byte stores into it measured 227 us for csr.expand_cublas against 170 us this way (H100,
// 11008x4096, 50 %, N = 64, GEMM included).
constexpr int kWindowBytes = 8192;

// Zeroes `bytes` (a multiple of 16) of a warp's shared window.
__device__ __forceinline__ void zero_window(uint8_t* win, int bytes, int lane) {
  for (int b = lane * 16; b < bytes; b += 32 * 16)
    *reinterpret_cast<uint4*>(win + b) = make_uint4(0, 0, 0, 0);
}

// Copies `bytes` (a multiple of 16) of a warp's window to global memory.
__device__ __forceinline__ void store_window(uint8_t* out, const uint8_t* win, int bytes,
                                             int lane) {
  for (int b = lane * 16; b < bytes; b += 32 * 16)
    *reinterpret_cast<uint4*>(out + b) = *reinterpret_cast<const uint4*>(win + b);
}

// Eight consecutive 2- or 4-byte elements (csr values or columns) packed in 32-bit words.
template <class T>
struct Pack8 {
  static constexpr int kWords = 2 * int(sizeof(T));
  uint32_t w[kWords];
  __device__ __forceinline__ uint32_t get(int i) const {
    if constexpr (sizeof(T) == 2) return (w[i / 2] >> (16 * (i % 2))) & 0xFFFFu;
    return w[i];
  }
};
// Elements base .. base+7 of p: 16-byte loads when `vec` (p 16-byte aligned; base is a multiple
// of 8) and all eight lie before `lim`, else element by element, zero from lim on.
template <class T>
__device__ __forceinline__ Pack8<T> load8(const T* __restrict__ p, uint32_t base, uint32_t lim,
                                          bool vec) {
  Pack8<T> r;
  if (vec && base + 8 <= lim) {
#pragma unroll
    for (int q = 0; q < Pack8<T>::kWords / 4; ++q) {
      const uint4 x = __ldg(reinterpret_cast<const uint4*>(p + base) + q);
      r.w[4 * q] = x.x, r.w[4 * q + 1] = x.y, r.w[4 * q + 2] = x.z, r.w[4 * q + 3] = x.w;
    }
    return r;
  }
#pragma unroll
  for (int q = 0; q < Pack8<T>::kWords; ++q) r.w[q] = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    if (base + i < lim) {
      const uint32_t v = uint32_t(p[base + i]);
      if constexpr (sizeof(T) == 2) {
        r.w[i / 2] |= v << (16 * (i % 2));
      } else {
        r.w[i] = v;
      }
    }
  }
  return r;
}

// csr and macko rows: one window loop, a per-format step policy.
//
// A warp per row builds the row in its shared window (kWindowBytes) one window at a time: zero
// it, place steps of 256 entries (lane l takes entries 8l..8l+7: 16-byte loads, coalesced over
// the warp) until the row ends or a step reaches past the window, store the window with
// coalesced 16-byte stores. kStepsAhead steps are loaded before the first is placed, so a row
// costs one memory round trip per 1024 entries; the old loops placed 32 entries per round trip
// (11008x4096 at 50 %: macko's expansion alone took 167 us that way; csr.expand_cublas at
// N = 64, GEMM included, 170.5 us against 100.2 now). A row's entries are in column order, so a
// step that reaches past the window is placed again for the next window: entries before the
// window fail the column test.
//
// A policy says what a step of a format is:
//   Elem             the raw bits of one value (uint16_t, or uint32_t for fp32 csr)
//   Step             what one lane loads for one step (values and where their columns come from)
//   RowState         what a row carries from step to step (macko: the columns before the step)
//   row_ptr          the rows' entry ranges: row r is [row_ptr[r], row_ptr[r + 1])
//   load(base, e)    the lane's 8 entries base .. base+7 (zero past e)
//   place(...)       writes the lane's entries that fall in the window [w0, w1) and returns false
//                    (warp-uniform) when the step must be placed again for the next window; it
//                    advances RowState only when it returns true.
constexpr int kRowWarps = 4;
constexpr int kStepsAhead = 4;
constexpr uint32_t kStep = 256;  // entries: 8 per lane

// csr: columns are stored, values and columns are read as 8-element packs. E: the value's raw
// bits, C: the column type.
template <class E, class C>
struct CsrSteps {
  using Elem = E;
  struct Step {
    Pack8<E> v;
    Pack8<C> c;
  };
  struct RowState {};
  const uint32_t* __restrict__ row_ptr;
  const C* __restrict__ cols;
  const E* __restrict__ values;
  bool vec;  // values and cols 16-byte aligned: packs load as 16-byte vectors

  __device__ __forceinline__ Step load(uint32_t base, uint32_t e) const {
    return {load8(values, base, e, vec), load8(cols, base, e, vec)};
  }
  __device__ __forceinline__ bool place(const Step& st, uint32_t base, uint32_t s, uint32_t e,
                                        uint32_t w0, uint32_t w1, E* win, RowState&) const {
    bool past = false;  // an entry of this step lies beyond the window
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const bool in = base + i >= s && base + i < e;
      const uint32_t col = st.c.get(i);
      if (in && col >= w0 && col < w1) win[col - w0] = E(st.v.get(i));
      past |= in && col >= w1;
    }
    return !__any_sync(0xffffffffu, past);
  }
};

// macko: 16 bytes of values and 4 of deltas per lane and step; the columns come from an in-lane
// prefix of (delta + 1) and one warp scan, as in macko.warp_row, on top of the row's carry.
struct MackoSteps {
  using Elem = uint16_t;
  struct Step {
    uint4 v;
    uint32_t d;
  };
  struct RowState {
    uint32_t carry = 0;  // sum of (delta + 1) over the row's entries before the step
  };
  const uint32_t* __restrict__ row_ptr;
  const uint16_t* __restrict__ values;
  const uint8_t* __restrict__ deltas;

  __device__ __forceinline__ Step load(uint32_t base, uint32_t e) const {
    if (base >= e) return {make_uint4(0, 0, 0, 0), 0u};
    return {__ldg(reinterpret_cast<const uint4*>(values + base)),
            __ldg(reinterpret_cast<const uint32_t*>(deltas + base / 2))};
  }
  __device__ __forceinline__ bool place(const Step& st, uint32_t base, uint32_t s, uint32_t e,
                                        uint32_t w0, uint32_t w1, uint16_t* win,
                                        RowState& row) const {
    const uint32_t vw[4] = {st.v.x, st.v.y, st.v.z, st.v.w};
    uint32_t pre[8], run = 0;  // inclusive prefix of (delta + 1) over the lane's row entries
    uint32_t in_row = 0;        // bit i: entry base + i belongs to the row
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const bool in = base + i >= s && base + i < e;
      in_row |= uint32_t(in) << i;
      run += in ? ((st.d >> (4 * i)) & 0xFu) + 1u : 0u;
      pre[i] = run;
    }
    const uint32_t scan = decode::warp_inclusive_scan(run, int(threadIdx.x % 32));
    const uint32_t before = row.carry + scan - run;  // columns before the lane's first entry
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t col = before + pre[i] - 1;
      if (((in_row >> i) & 1u) && col >= w0 && col < w1) {
        win[col - w0] = uint16_t(vw[i / 2] >> (16 * (i % 2)));
      }
    }
    const uint32_t total = __shfl_sync(0xffffffffu, scan, 31);
    if (row.carry + total > w1) return false;  // the step's last entry is past the window
    row.carry += total;
    return true;
  }
};

template <class Steps>
__global__ void __launch_bounds__(kRowWarps * 32)
    expand_row_windows_kernel(Steps fmt, int64_t r0, int64_t rows, int64_t ld,
                              typename Steps::Elem* __restrict__ dst) {
  using E = typename Steps::Elem;
  constexpr int64_t kWindow = kWindowBytes / int64_t(sizeof(E));  // columns per window
  __shared__ __align__(16) E windows[kRowWarps][kWindow];
  const int lane = threadIdx.x % 32;
  E* win = windows[threadIdx.x / 32];
  const int64_t stride = int64_t(gridDim.x) * kRowWarps;
  for (int64_t r = int64_t(blockIdx.x) * kRowWarps + threadIdx.x / 32; r < rows; r += stride) {
    const uint32_t s = __ldg(fmt.row_ptr + r0 + r), e = __ldg(fmt.row_ptr + r0 + r + 1);
    uint32_t wb = s & ~7u;  // the next step's first entry (steps start 16-byte aligned)
    typename Steps::RowState row;
    for (int64_t c0 = 0; c0 < ld; c0 += kWindow) {
      const uint32_t w0 = uint32_t(c0), w1 = uint32_t(c0 + kWindow);
      zero_window(reinterpret_cast<uint8_t*>(win), kWindowBytes, lane);
      __syncwarp();
      bool more = wb < e;
      while (more) {
        typename Steps::Step st[kStepsAhead];
#pragma unroll
        for (int u = 0; u < kStepsAhead; ++u) st[u] = fmt.load(wb + u * kStep + lane * 8, e);
#pragma unroll
        for (int u = 0; u < kStepsAhead; ++u) {
          if (wb >= e || !fmt.place(st[u], wb + lane * 8, s, e, w0, w1, win, row)) {
            more = false;  // warp-uniform: the row ended, or the step is placed again next window
            break;
          }
          wb += kStep;
        }
      }
      __syncwarp();
      const int64_t n = ld - c0 < kWindow ? ld - c0 : kWindow;  // ld: a multiple of 8
      store_window(reinterpret_cast<uint8_t*>(dst + r * ld + c0),
                   reinterpret_cast<const uint8_t*>(win), int(n * int64_t(sizeof(E))), lane);
      __syncwarp();
    }
  }
}

// tca_bme: a warp per 64x64 group. The group's 64 bitmaps (512 B) and its values (16-byte
// aligned, at most 8 KB) land in the warp's shared buffer with cp.async, in one round trip; one
// warp scan of popcounts gives each bitmap's first value. Then the warp writes the group's rows
// straight from there: 8 lanes cover a row's 64 columns (one 128-byte line), 4 rows per step.
// Lane (row, 8 columns) is one byte of one 8x8 bitmap: its set bits' values are consecutive,
// from the bitmap's first value plus the popcount of the bitmap's rows above. No tile is zeroed
// or staged (the old kernel built the 64x64 tile in shared memory and placed values bit by bit:
// ~120 us of expansion on 11008x4096 at 50 %).
constexpr int kGroupWarps = 4;
struct GroupBuffer {
  uint64_t bitmaps[64];
  uint32_t first[64];          // each bitmap's first value in `values`
  uint16_t values[64 * 64];    // a dense group at most
};

__global__ void __launch_bounds__(kGroupWarps * 32)
    expand_tca_bme_kernel(const uint64_t* __restrict__ bitmaps,
                          const uint32_t* __restrict__ group_offsets,
                          const uint16_t* __restrict__ values, int64_t gm0, int64_t n_groups,
                          int64_t groups_k, int64_t r0, int64_t r1, int64_t ld,
                          uint16_t* __restrict__ dst) {
  __shared__ __align__(16) GroupBuffer buffers[kGroupWarps];
  const int lane = threadIdx.x % 32;
  GroupBuffer& gb = buffers[threadIdx.x / 32];
  const int64_t stride = int64_t(gridDim.x) * kGroupWarps;
  // This lane's 8 columns of the group (c8 .. c8 + 7) and, per row, which bitmap holds them:
  // tensor-core tile column tk, and the left or right 8x8 half of it.
  const int c = lane % 8, tk = c / 2, right = c % 2;
  for (int64_t w = int64_t(blockIdx.x) * kGroupWarps + threadIdx.x / 32; w < n_groups;
       w += stride) {
    const int64_t gm = gm0 + w / groups_k, gk = w % groups_k;
    const int64_t g = gm * groups_k + gk;
    const uint32_t v0 = __ldg(group_offsets + g), nv = __ldg(group_offsets + g + 1) - v0;
    tc::cp_async16(&gb.bitmaps[2 * lane], bitmaps + g * 64 + 2 * lane, 16);
    for (uint32_t q = lane; q < nv / 8; q += 32) {  // nv is a multiple of 8
      tc::cp_async16(&gb.values[8 * q], values + v0 + 8 * q, 16);
    }
    tc::cp_async_commit();
    tc::cp_async_wait<0>();
    __syncwarp();
    {
      const uint64_t b0 = gb.bitmaps[2 * lane], b1 = gb.bitmaps[2 * lane + 1];
      const uint32_t p0 = __popcll(b0), p1 = __popcll(b1);
      const uint32_t scan = decode::warp_inclusive_scan(p0 + p1, lane);
      gb.first[2 * lane] = scan - p0 - p1;
      gb.first[2 * lane + 1] = scan - p1;
    }
    __syncwarp();
    const int64_t col = gk * 64 + c * 8;
#pragma unroll 2
    for (int step = 0; step < 16; ++step) {
      const int rr = step * 4 + lane / 8;  // row in the group
      const int b = ((rr / 16) * 4 + tk) * 4 + ((rr % 16) / 8) + 2 * right;
      const int br = rr % 8;  // row in the 8x8 bitmap
      const uint64_t bm = gb.bitmaps[b];
      const uint32_t bits = uint32_t(bm >> (8 * br)) & 0xFFu;
      const uint32_t start = gb.first[b] + uint32_t(__popcll(bm & ((uint64_t(1) << (8 * br)) - 1)));
      uint32_t out[4];
#pragma unroll
      for (int j = 0; j < 8; j += 2) {
        const uint32_t lo = (bits >> j) & 1u
                                ? gb.values[start + __popc(bits & ((1u << j) - 1))] : 0u;
        const uint32_t hi = (bits >> (j + 1)) & 1u
                                ? gb.values[start + __popc(bits & ((2u << j) - 1))] : 0u;
        out[j / 2] = lo | (hi << 16);
      }
      const int64_t row = gm * 64 + rr;
      if (row < r1 && col < ld) {
        *reinterpret_cast<uint4*>(dst + (row - r0) * ld + col) =
            make_uint4(out[0], out[1], out[2], out[3]);
      }
    }
    __syncwarp();  // the buffer is refilled for the warp's next group
  }
}

// Enough blocks to fill the GPU a few times over; the kernels stride over the rest.
int grid_for(int64_t warps_needed, int warps_per_block, int sm_count) {
  const int64_t cap = int64_t(sm_count) * 16;
  const int64_t blocks = (warps_needed + warps_per_block - 1) / warps_per_block;
  return int(blocks < cap ? (blocks > 0 ? blocks : 1) : cap);
}

}  // namespace

int64_t expanded_ld(int64_t k) { return (k + 7) / 8 * 8; }

Status expand_rows(const Weight& w, int64_t r0, int64_t r1, void* dst, int64_t ld,
                   Stream stream) {
  const int64_t rows = r1 - r0;
  if (rows <= 0) return Status::success();
  const Shape& s = shape_of(w);
  SPARROW_ASSIGN_OR_RETURN(DeviceInfo dev, current_device_info());
  auto grid_for = [&dev](int64_t warps, int per_block) {
    return expand::grid_for(warps, per_block, dev.sm_count);
  };
  switch (format_of(w)) {
    case Format::csr: {
      const auto& m = std::get<csr::Matrix>(w);
      const int grid = grid_for(rows, kRowWarps);
      const uint32_t* rp = m.row_ptr.data();
      auto launch = [&](auto* out, const auto* cols) {
        using E = std::remove_pointer_t<decltype(out)>;
        const E* vals = reinterpret_cast<const E*>(m.values.data());
        const bool vec =
            (reinterpret_cast<uintptr_t>(vals) | reinterpret_cast<uintptr_t>(cols)) % 16 == 0;
        using C = std::remove_cv_t<std::remove_pointer_t<decltype(cols)>>;
        expand_row_windows_kernel<<<grid, kRowWarps * 32, 0, stream>>>(
            CsrSteps<E, C>{rp, cols, vals, vec}, r0, rows, ld, out);
      };
      if (dtype_size(s.dtype) == 4) {
        if (m.index_bits == 16)
          launch(static_cast<uint32_t*>(dst), m.col16.data());
        else
          launch(static_cast<uint32_t*>(dst), m.col32.data());
      } else {
        if (m.index_bits == 16)
          launch(static_cast<uint16_t*>(dst), m.col16.data());
        else
          launch(static_cast<uint16_t*>(dst), m.col32.data());
      }
      break;
    }
    case Format::macko: {
      const auto& m = std::get<macko::Matrix>(w);
      expand_row_windows_kernel<<<grid_for(rows, kRowWarps), kRowWarps * 32, 0, stream>>>(
          MackoSteps{m.row_ptr.data(), m.values.data(), m.deltas.data()}, r0, rows, ld,
          static_cast<uint16_t*>(dst));
      break;
    }
    case Format::tca_bme: {
      const auto& m = std::get<tca_bme::Matrix>(w);
      if (r0 % tca_bme::kGroupRows != 0) {
        return invalid_argument("expand_rows: tca_bme bands start at a multiple of 64 rows");
      }
      const int64_t gm0 = r0 / tca_bme::kGroupRows;
      const int64_t gm1 = (r1 + tca_bme::kGroupRows - 1) / tca_bme::kGroupRows;
      const int64_t n_groups = (gm1 - gm0) * m.groups_k;
      expand_tca_bme_kernel<<<grid_for(n_groups, kGroupWarps), kGroupWarps * 32, 0, stream>>>(
          m.bitmaps.data(), m.group_offsets.data(), m.values.data(), gm0, n_groups, m.groups_k, r0,
          r1, ld, static_cast<uint16_t*>(dst));
      break;
    }
    default:
      return unsupported(std::string("expand_rows: no GPU expansion for the ") +
                         format_name(format_of(w)) + " format");
  }
  SPARROW_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return Status::success();
}

}  // namespace sparrow::kernels::expand
