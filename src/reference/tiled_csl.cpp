// Reference walk of tiled_csl: row r lives in tile row r / 128; scan each of its tiles' entries
// and keep those whose location is in-tile row r % 128 (entries may be in any order).
#include "reference/row_entries.hpp"

namespace sparrow::reference {

void row_entries(const tiled_csl::Matrix& m, int64_t r, RowEntries& out) {
  const int64_t tm = r / tiled_csl::kTileRows;
  const uint32_t tile_row = uint32_t(r % tiled_csl::kTileRows);
  const uint32_t* off = m.tile_offsets.data();
  const uint32_t* entries = m.entries.data();
  for (int64_t tk = 0; tk < m.tiles_k; ++tk) {
    const int64_t t = tm * m.tiles_k + tk;
    for (uint32_t e = off[t]; e < off[t + 1]; ++e) {
      const uint32_t loc = tiled_csl::entry_location(entries[e]);
      if (loc / uint32_t(tiled_csl::kTileCols) != tile_row) continue;
      out.cols.push_back(tk * tiled_csl::kTileCols + loc % uint32_t(tiled_csl::kTileCols));
      const uint16_t bits = tiled_csl::entry_value(entries[e]);
      out.values.push_back(load_as_float(&bits, m.shape.dtype, 0));
    }
  }
}

}  // namespace sparrow::reference
