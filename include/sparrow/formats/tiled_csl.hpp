// tiled_csl (Flash-LLM's Tiled-CSL): per 128x64 tile, a list of (value, location) pairs.
//
//   tile t       = tm * tiles_k + tk             rows tm*128.., cols tk*64..  (edge tiles partial)
//   tile_offsets (tiles + 1)                     first entry of each tile
//   entries      uint32: low 16 bits = value bits, high 16 bits = location r * 64 + c in the tile
//
// Within a tile, entries are in location order, or, with `reordered`, permuted so that each run
// of 32 consecutive entries (one warp-wide shared-memory store) touches as many distinct banks as
// possible for a shared tile whose rows are kSmemPitch elements apart (64 + 8 padding, the pitch
// that keeps ldmatrix conflict-free). Both orders decode to the same matrix.
#pragma once

#include "sparrow/formats/common.hpp"

namespace sparrow::tiled_csl {

constexpr int64_t kTileRows = 128;
constexpr int64_t kTileCols = 64;
constexpr int64_t kSmemPitch = 72;  // elements

struct Matrix {
  Shape shape;
  int64_t tiles_m = 0;  // ceil(rows / 128)
  int64_t tiles_k = 0;  // ceil(cols / 64)
  bool reordered = false;
  Buffer<uint32_t> tile_offsets;  // (tiles + 1)
  Buffer<uint32_t> entries;       // (nnz)

  int64_t tiles() const { return tiles_m * tiles_k; }
  int64_t nnz() const { return int64_t(entries.size()); }
  size_t storage_bytes() const { return tile_offsets.bytes() + entries.bytes(); }
};

inline uint32_t pack_entry(uint16_t value_bits, uint32_t location) {
  return (location << 16) | value_bits;
}
inline uint16_t entry_value(uint32_t e) { return uint16_t(e & 0xFFFFu); }
inline uint32_t entry_location(uint32_t e) { return e >> 16; }

Result<Matrix> encode(const ConstMatrixView& w, bool reorder = true);  // fp16 or bf16
Result<HostMatrix> decode(const Matrix& m);
Status validate(const Matrix& m);

}  // namespace sparrow::tiled_csl
