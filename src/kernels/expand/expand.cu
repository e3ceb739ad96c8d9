// Expanding compressed weights to dense on the GPU (the first half of <format>.expand_cublas).
// Each kernel writes every element of its rows (zeros, and zero padding up to ld, included), so
// the workspace needs no memset pass. Rows (csr, macko) or 64x64 tiles (tca_bme) are assembled in
// shared memory and leave in coalesced 16-byte stores.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "core/cuda_check.hpp"
#include "kernels/device_info.hpp"
#include "kernels/expand/expand.hpp"

namespace sparrow::kernels::expand {

namespace {

constexpr int kThreads = 256;  // 8 warps per block
constexpr int kWarps = kThreads / 32;
// Each warp builds a row in shared memory one window of this many bytes at a time, then writes
// the window out with coalesced 16-byte stores. Zeroing the row in global memory and scattering
// 2-byte stores into it measured 227 us for csr.expand_cublas against 170 us this way (H100,
// 11008x4096, 50 %, N = 64, GEMM included).
constexpr int kWindowBytes = 4096;

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

// The columns of up to 32 consecutive entries of a row, one per lane, starting at entry `i0`
// (csr: read; macko: a warp scan of (delta + 1) plus the carry of the row's earlier entries).
template <class C>
struct CsrColumns {
  const C* cols;
  __device__ __forceinline__ int64_t operator()(uint32_t i, bool in_row, int64_t /*carry*/,
                                                int64_t& /*chunk_sum*/) const {
    return in_row ? int64_t(cols[i]) : INT64_MAX;
  }
};
struct MackoColumns {
  const uint8_t* deltas;
  __device__ __forceinline__ int64_t operator()(uint32_t i, bool in_row, int64_t carry,
                                                int64_t& chunk_sum) const {
    const int lane = threadIdx.x % 32;
    int inc = 0;
    if (in_row) {
      const uint8_t byte = deltas[i / 2];
      inc = int((i & 1) ? (byte >> 4) : (byte & 0xF)) + 1;
    }
    int scan = inc;  // inclusive
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int up = __shfl_up_sync(0xffffffffu, scan, o);
      if (lane >= o) scan += up;
    }
    chunk_sum = __shfl_sync(0xffffffffu, scan, 31);
    return in_row ? carry + scan - 1 : INT64_MAX;
  }
};

// csr and macko: a warp per row, the row built window by window. E is the element's raw bits
// (uint16_t for fp16/bf16, uint32_t for fp32 csr). Entries are in column order, so each window
// takes the next whole chunks of 32 entries that end inside it; a chunk that straddles the
// window's end is read again for the next window (with the same carry), its earlier entries
// skipped by the column check.
template <class E, class Columns>
__global__ void __launch_bounds__(kThreads)
    expand_rows_kernel(const uint32_t* __restrict__ row_ptr, Columns columns,
                       const E* __restrict__ values, int64_t r0, int64_t rows, int64_t ld,
                       E* __restrict__ dst) {
  __shared__ __align__(16) uint8_t windows[kWarps][kWindowBytes];
  constexpr int64_t kWindow = kWindowBytes / int64_t(sizeof(E));  // elements
  const int lane = threadIdx.x % 32;
  E* win = reinterpret_cast<E*>(windows[threadIdx.x / 32]);
  const int64_t warp = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int64_t stride = int64_t(gridDim.x) * kWarps;
  for (int64_t r = warp; r < rows; r += stride) {
    const uint32_t e = row_ptr[r0 + r + 1];
    uint32_t i0 = row_ptr[r0 + r];
    int64_t carry = 0;
    for (int64_t c0 = 0; c0 < ld; c0 += kWindow) {
      const int64_t c1 = c0 + kWindow;
      zero_window(reinterpret_cast<uint8_t*>(win), kWindowBytes, lane);
      __syncwarp();
      while (i0 < e) {
        const uint32_t i = i0 + uint32_t(lane);
        const bool in_row = i < e;
        int64_t chunk_sum = 0;
        const int64_t col = columns(i, in_row, carry, chunk_sum);
        const E v = in_row ? values[i] : E(0);
        if (col >= c0 && col < c1 && v != E(0)) win[col - c0] = v;
        const int valid = int(min(uint32_t(32), e - i0));
        const int done = __popc(__ballot_sync(0xffffffffu, in_row && col < c1));
        if (done < valid) break;  // the chunk reaches past this window
        carry += chunk_sum;
        i0 += uint32_t(valid);
      }
      __syncwarp();
      const int64_t n = min(kWindow, ld - c0);
      store_window(reinterpret_cast<uint8_t*>(dst + r * ld + c0),
                   reinterpret_cast<const uint8_t*>(win), int(n * int64_t(sizeof(E))), lane);
      __syncwarp();
    }
  }
}

// tca_bme: a warp per 64x64 group tile, built in shared memory and written out with 16-byte
// stores. Lane l owns bitmaps 2l and 2l+1: it places their set bits' values (consecutive in the
// value array, after the popcount prefix of the bitmaps before) into the tile.
constexpr int kTileWarps = 4;  // 4 x 8 KB tiles per block
__global__ void __launch_bounds__(kTileWarps * 32)
    expand_tca_bme_kernel(const uint64_t* __restrict__ bitmaps,
                          const uint32_t* __restrict__ group_offsets,
                          const uint16_t* __restrict__ values, int64_t gm0, int64_t n_groups,
                          int64_t groups_k, int64_t r0, int64_t r1, int64_t ld,
                          uint16_t* __restrict__ dst) {
  __shared__ __align__(16) uint16_t tiles[kTileWarps][64 * 64];  // (64 rows, 64 cols)
  const int lane = threadIdx.x % 32;
  uint16_t* tile = tiles[threadIdx.x / 32];
  const int64_t warp = int64_t(blockIdx.x) * kTileWarps + threadIdx.x / 32;
  const int64_t stride = int64_t(gridDim.x) * kTileWarps;
  for (int64_t w = warp; w < n_groups; w += stride) {
    const int64_t gm = gm0 + w / groups_k, gk = w % groups_k;
    const int64_t g = gm * groups_k + gk;
    zero_window(reinterpret_cast<uint8_t*>(tile), 64 * 64 * 2, lane);
    const uint64_t bm[2] = {bitmaps[g * 64 + 2 * lane], bitmaps[g * 64 + 2 * lane + 1]};
    const int pc0 = __popcll(bm[0]);
    int scan = pc0 + __popcll(bm[1]);
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int up = __shfl_up_sync(0xffffffffu, scan, o);
      if (lane >= o) scan += up;
    }
    const uint16_t* v = values + group_offsets[g] + (scan - pc0 - __popcll(bm[1]));
    __syncwarp();  // the tile is zero before anyone places values
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int j = 2 * lane + h;         // bitmap within the group
      const int t = j / 4, bsub = j % 4;  // tensor-core tile, bitmap within it
      const int row0 = (t / 4) * 16 + (bsub & 1) * 8, col0 = (t % 4) * 16 + (bsub >> 1) * 8;
      // The bitmap's values are consecutive: load 8 at a time (independent loads in flight; one
      // load per set bit in a loop measured latency-bound), then place them bit by bit.
      uint64_t bits = bm[h];
      const uint16_t* vb = v;
      v += __popcll(bits);
      for (int left = __popcll(bits); left > 0; left -= 8, vb += 8) {
        uint16_t buf[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) buf[u] = u < left ? vb[u] : uint16_t(0);
#pragma unroll
        for (int u = 0; u < 8; ++u) {
          if (bits == 0) break;
          const int q = __ffsll(static_cast<long long>(bits)) - 1;
          bits &= bits - 1;
          tile[(row0 + q / 8) * 64 + col0 + q % 8] = buf[u];
        }
      }
    }
    __syncwarp();
    // 64 rows x 128 bytes: 8 lanes per row, 4 rows per step; only rows < r1, columns < ld.
    const int64_t cbase = gk * 64;
    for (int idx = lane; idx < 64 * 8; idx += 32) {
      const int rr = idx / 8, cc = (idx % 8) * 8;
      const int64_t row = gm * 64 + rr;
      if (row < r1 && cbase + cc < ld)
        *reinterpret_cast<uint4*>(dst + (row - r0) * ld + cbase + cc) =
            *reinterpret_cast<const uint4*>(tile + rr * 64 + cc);
    }
    __syncwarp();
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
      const int grid = grid_for(rows, kWarps);
      const uint32_t* rp = m.row_ptr.data();
      auto launch = [&](auto* out, auto cols) {
        using E = std::remove_pointer_t<decltype(out)>;
        expand_rows_kernel<<<grid, kThreads, 0, stream>>>(
            rp, cols, reinterpret_cast<const E*>(m.values.data()), r0, rows, ld, out);
      };
      if (dtype_size(s.dtype) == 4) {
        if (m.index_bits == 16)
          launch(static_cast<uint32_t*>(dst), CsrColumns<uint16_t>{m.col16.data()});
        else
          launch(static_cast<uint32_t*>(dst), CsrColumns<uint32_t>{m.col32.data()});
      } else {
        if (m.index_bits == 16)
          launch(static_cast<uint16_t*>(dst), CsrColumns<uint16_t>{m.col16.data()});
        else
          launch(static_cast<uint16_t*>(dst), CsrColumns<uint32_t>{m.col32.data()});
      }
      break;
    }
    case Format::macko: {
      const auto& m = std::get<macko::Matrix>(w);
      expand_rows_kernel<<<grid_for(rows, kWarps), kThreads, 0, stream>>>(
          m.row_ptr.data(), MackoColumns{m.deltas.data()}, m.values.data(), r0, rows, ld,
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
      expand_tca_bme_kernel<<<grid_for(n_groups, kTileWarps), kTileWarps * 32, 0, stream>>>(
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
