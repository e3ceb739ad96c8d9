// Where an element of a 64x64 tca_bme group lives: which of the group's 64 bitmaps, which bit.
// Shared by encode, validate and decode (the reference walk spells the geometry out itself, so
// it is an independent reading of the header).
#pragma once

#include <algorithm>
#include <cstdint>

#include "sparrow/formats/tca_bme.hpp"

namespace sparrow::tca_bme {

// ceil(a / b) for a >= 0 without the overflow of (a + b - 1) / b.
inline int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); }
inline uint64_t round_up(uint64_t a, int64_t to) { return (a + uint64_t(to) - 1) / uint64_t(to) * uint64_t(to); }
inline int popcount64(uint64_t x) { return __builtin_popcountll(x); }
inline int lowest_bit(uint64_t x) { return __builtin_ctzll(x); }  // x != 0

struct BitPosition {
  int64_t bitmap;  // 0..63 within the group: tc_tile * 4 + sub-tile
  int bit;         // 0..63: r * 8 + c within the 8x8 tile
};

// Element (r, c) of a group, 0 <= r, c < 64.
inline BitPosition position_in_group(int64_t r, int64_t c) {
  const int64_t t = (r / kTcTile) * 4 + c / kTcTile;  // tc tile, row-major over the 4x4 tiles
  const int64_t rr = r % kTcTile, cc = c % kTcTile;   // inside the 16x16 tile
  // Sub-tile order 0:(top, left) 1:(bottom, left) 2:(top, right) 3:(bottom, right): the order of
  // mma.m16n8k16's A-fragment registers.
  const int64_t sub = rr / kBitmapTile + 2 * (cc / kBitmapTile);
  return {t * 4 + sub, int((rr % kBitmapTile) * kBitmapTile + cc % kBitmapTile)};
}

struct TileOrigin {
  int64_t row, col;  // of the 8x8 tile's (0, 0) within the group
};

// Inverse of position_in_group for the tile: bitmap b (0..63) covers rows row..row+7,
// cols col..col+7 of its group.
inline TileOrigin bitmap_origin(int64_t b) {
  const int64_t t = b / 4, sub = b % 4;
  return {(t / 4) * kTcTile + (sub & 1) * kBitmapTile, (t % 4) * kTcTile + (sub >> 1) * kBitmapTile};
}

// Bits of bitmap b that lie inside the matrix when only the first valid_rows rows and valid_cols
// columns of the group exist (edge groups).
inline uint64_t inside_mask(int64_t b, int64_t valid_rows, int64_t valid_cols) {
  const TileOrigin o = bitmap_origin(b);
  const int64_t nr = std::clamp<int64_t>(valid_rows - o.row, 0, kBitmapTile);
  const int64_t nc = std::clamp<int64_t>(valid_cols - o.col, 0, kBitmapTile);
  const uint64_t row_bits = (uint64_t(1) << nc) - 1;  // nc <= 8
  uint64_t mask = 0;
  for (int64_t i = 0; i < nr; ++i) mask |= row_bits << (i * kBitmapTile);
  return mask;
}

}  // namespace sparrow::tca_bme
