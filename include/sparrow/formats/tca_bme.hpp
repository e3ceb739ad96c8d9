// tca_bme (SpInfer's Tensor-Core-Aware Bitmap Encoding).
//
// The matrix (padded with zeros to multiples of 64) is cut into 64x64 group tiles, each into
// 4x4 tensor-core tiles of 16x16, each into 2x2 bitmap tiles of 8x8 with one 64-bit bitmap.
//
//   group g      = gm * groups_k + gk                 rows gm*64.., cols gk*64..
//   tc tile t    = tm * 4 + tk      (0..15)           rows +tm*16,  cols +tk*16
//   bitmap b     = 0:(rows 0-7, cols 0-7)  1:(rows 8-15, cols 0-7)
//                  2:(rows 0-7, cols 8-15) 3:(rows 8-15, cols 8-15)
//                  -- the order of the A-fragment registers of mma.m16n8k16 (a0a1, a2a3, a4a5, a6a7)
//   bit          = r * 8 + c  within the 8x8 tile (set = non-zero)
//
//   bitmaps        ((g * 16 + t) * 4 + b)      uint64
//   group_offsets  (groups + 1)                first value of each group; multiples of 8
//   values         the non-zeros of each group in (t, b, bit) order, each group zero-padded to
//                  a multiple of 8 elements so every group starts 16-byte aligned (cp.async)
//
// A thread finds its element's value at group_offsets[g] + popcount of all earlier bitmaps of the
// group + popcount(bitmap & ((1 << bit) - 1)).
#pragma once

#include "sparrow/formats/common.hpp"

namespace sparrow::tca_bme {

constexpr int64_t kGroupRows = 64;
constexpr int64_t kGroupCols = 64;
constexpr int64_t kTcTile = 16;
constexpr int64_t kBitmapTile = 8;
constexpr int64_t kTcTilesPerGroup = (kGroupRows / kTcTile) * (kGroupCols / kTcTile);  // 16
constexpr int64_t kBitmapsPerGroup = kTcTilesPerGroup * 4;                              // 64
constexpr int64_t kValueAlign = 8;  // elements (16 bytes)

struct Matrix {
  Shape shape;
  int64_t groups_m = 0;            // ceil(rows / 64)
  int64_t groups_k = 0;            // ceil(cols / 64)
  int64_t nnz = 0;
  Buffer<uint64_t> bitmaps;        // (groups * 64)
  Buffer<uint32_t> group_offsets;  // (groups + 1)
  Buffer<uint16_t> values;         // (group_offsets[groups])
  // Derived when the matrix is built (encode, checkpoint load, concat_rows) by derive(), not
  // stored in files: the most values one group stores (group_offsets[g + 1] - group_offsets[g],
  // at most 4096), which tca_bme.mma sizes its shared-memory stages by (group_offsets may be on
  // the GPU when it launches).
  int64_t max_group_values = 0;
  // Also derived: strip_starts (groups * 4), for each group and each of its four 16-row strips
  // (tc tiles 4s..4s+3, bitmaps 16s..16s+15) the number of the group's values before the strip.
  // The CUDA-core decode kernels give a strip of a group to one warp: with its start the warp
  // reads only its strip's 16 bitmaps instead of all 64 to count what precedes it. 8 bytes per
  // group, counted in derived_bytes(), not storage_bytes().
  Buffer<uint16_t> strip_starts;
  // Also derived: the most values one strip of one group holds (at most 1024). The one-token
  // kernel's bulk copies size their shared-memory stages by it (at 50 % random ~580 against the
  // 1024 a dense strip needs, so about twice the warps fit an SM).
  int64_t max_strip_values = 0;

  int64_t groups() const { return groups_m * groups_k; }
  size_t storage_bytes() const { return bitmaps.bytes() + group_offsets.bytes() + values.bytes(); }
  size_t derived_bytes() const { return strip_starts.bytes(); }
};

constexpr int64_t kStripsPerGroup = kGroupRows / kTcTile;  // 4

Result<Matrix> encode(const ConstMatrixView& w);  // fp16 or bf16
Result<HostMatrix> decode(const Matrix& m);
Status validate(const Matrix& m);
// Fills max_group_values, strip_starts and max_strip_values from the host group_offsets and bitmaps (nothing for a
// device matrix). Safe on malformed offsets or bitmaps; validate reports them.
void derive(Matrix& m);

}  // namespace sparrow::tca_bme
