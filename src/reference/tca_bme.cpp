// Reference walk of one tca_bme row: for every group along the row, find the row's byte in each
// bitmap that covers it and locate each set bit's value by popcounts, the way a kernel thread
// does (group offset + popcount of the earlier bitmaps + popcount of the earlier bits).
#include "reference/row_entries.hpp"

namespace sparrow::reference {

void row_entries(const tca_bme::Matrix& m, int64_t r, RowEntries& out) {
  using namespace sparrow::tca_bme;
  const int64_t gm = r / kGroupRows;
  const int64_t tm = (r % kGroupRows) / kTcTile;            // tc tile row within the group
  const int64_t half = (r % kTcTile) / kBitmapTile;         // 0: bitmaps 0 and 2, 1: bitmaps 1 and 3
  const int64_t row_in_tile = r % kBitmapTile;              // which byte of the 64-bit bitmap
  const uint64_t* bitmaps = m.bitmaps.data();
  for (int64_t gk = 0; gk < m.groups_k; ++gk) {
    const int64_t g = gm * m.groups_k + gk;
    const uint64_t* gb = bitmaps + g * kBitmapsPerGroup;  // (16 tc tiles, 4 bitmaps)
    uint64_t before = m.group_offsets.data()[g];          // values of earlier bitmaps
    for (int64_t t = 0; t < kTcTilesPerGroup; ++t) {
      for (int64_t sub = 0; sub < 4; ++sub) {
        const uint64_t bits = gb[t * 4 + sub];
        if (t / 4 == tm && sub % 2 == half) {
          const int64_t col0 = gk * kGroupCols + (t % 4) * kTcTile + (sub / 2) * kBitmapTile;
          for (int c = 0; c < kBitmapTile; ++c) {
            const int bit = int(row_in_tile) * 8 + c;
            if (((bits >> bit) & 1) == 0) continue;
            const uint64_t v = before + __builtin_popcountll(bits & ((uint64_t(1) << bit) - 1));
            out.cols.push_back(col0 + c);
            out.values.push_back(load_as_float(m.values.data(), m.shape.dtype, v));
          }
        }
        before += __builtin_popcountll(bits);
      }
    }
  }
}

}  // namespace sparrow::reference
