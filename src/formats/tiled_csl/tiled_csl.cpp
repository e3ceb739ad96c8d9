// tiled_csl: host encode / decode / validate. The layout is specified in
// include/sparrow/formats/tiled_csl.hpp; the GPU kernels read exactly that.
#include "sparrow/formats/tiled_csl.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace sparrow::tiled_csl {

namespace {

constexpr int64_t kTileElements = kTileRows * kTileCols;  // 8192: locations fit 13 bits
constexpr int kBanks = 32;                                // 4-byte shared-memory banks
constexpr int kRun = 32;                                  // entries one warp stores at once

int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); }  // a >= 0, no overflow

// Bank of the 4-byte word that a tile element lands in when the tile sits in shared memory with
// rows kSmemPitch halfs apart.
int smem_bank(uint32_t location) {
  const uint32_t r = location / uint32_t(kTileCols), c = location % uint32_t(kTileCols);
  return int(((r * uint32_t(kSmemPitch) + c) / 2) % kBanks);
}

// Rows and columns of tile (tm, tk); edge tiles are partial.
int64_t tile_rows(const Shape& s, int64_t tm) {
  return std::min(kTileRows, s.rows - tm * kTileRows);
}
int64_t tile_cols(const Shape& s, int64_t tk) {
  return std::min(kTileCols, s.cols - tk * kTileCols);
}

// Permutes one tile's entries (given in location order) so that every run of 32 consecutive
// entries spreads over as many banks as possible.
//
// How: group the entries by bank (stable, so each bank keeps location order), banks with more
// entries first, then deal that list column by column into a (runs x 32) table: slot (run j,
// position p) is output entry j*32 + p. The last run holds only the leftover `rem` entries, so
// columns p >= rem are one slot shorter. Each bank is a contiguous stretch of the dealt list, and
// a stretch of s entries walked down full columns visits every run at most ceil(s / runs) times
// -- the least possible, since s entries must share `runs` runs. Putting the largest banks first
// keeps them in the full columns; only small banks reach the short ones, where a stretch may
// visit a run one extra time (this matters only for tiles with a handful of runs). A completely
// dense tile gets 32 distinct banks in every run. O(n) per tile and deterministic.
void reorder_tile(uint32_t* entries, int64_t n, std::vector<uint32_t>& dealt) {
  if (n <= 1) return;
  std::array<int64_t, kBanks> count{};
  for (int64_t i = 0; i < n; ++i) ++count[size_t(smem_bank(entry_location(entries[i])))];
  std::array<int, kBanks> order{};  // banks by descending count, ties by bank number
  for (int b = 0; b < kBanks; ++b) order[size_t(b)] = b;
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return count[size_t(a)] != count[size_t(b)] ? count[size_t(a)] > count[size_t(b)] : a < b;
  });
  std::array<int64_t, kBanks> start{};  // where each bank's stretch begins in `dealt`
  int64_t at = 0;
  for (int b : order) {
    start[size_t(b)] = at;
    at += count[size_t(b)];
  }
  dealt.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    dealt[size_t(start[size_t(smem_bank(entry_location(entries[i])))]++)] = entries[i];
  }
  const int64_t runs = ceil_div(n, kRun);
  const int64_t rem = n - (runs - 1) * kRun;  // entries in the last run, 1..32
  int64_t i = 0;
  for (int64_t p = 0; p < kRun; ++p) {
    const int64_t column_len = p < rem ? runs : runs - 1;
    for (int64_t j = 0; j < column_len; ++j) entries[j * kRun + p] = dealt[size_t(i++)];
  }
}

Status check_host(const Matrix& m) {
  if (m.tile_offsets.on_device() || m.entries.on_device()) {
    return invalid_argument("tiled_csl: the weight is on the device; copy it to the host first");
  }
  return Status::success();
}

}  // namespace

Result<Matrix> encode(const ConstMatrixView& w, bool reorder) {
  SPARROW_RETURN_IF_ERROR(check_encode_input(w, /*allow_fp32=*/false, "tiled_csl"));
  Matrix m;
  m.shape = {w.rows, w.cols, w.dtype};
  m.tiles_m = ceil_div(w.rows, kTileRows);
  m.tiles_k = ceil_div(w.cols, kTileCols);
  m.reordered = reorder;
  const int64_t tiles_k = m.tiles_k;
  const uint16_t* src = static_cast<const uint16_t*>(w.data);
  auto row_ptr = [&](int64_t r) { return src + size_t(r) * size_t(w.ld); };

  // Pass 1: non-zeros per tile -> tile offsets (32-bit, so the total must fit).
  std::vector<uint32_t> offsets(size_t(m.tiles()) + 1, 0);
  uint64_t total = 0;
  std::vector<uint64_t> band_counts(static_cast<size_t>(tiles_k));
  for (int64_t tm = 0; tm < m.tiles_m; ++tm) {
    std::fill(band_counts.begin(), band_counts.end(), 0);
    const int64_t r_end = std::min(w.rows, (tm + 1) * kTileRows);
    for (int64_t r = tm * kTileRows; r < r_end; ++r) {
      const uint16_t* row = row_ptr(r);
      for (int64_t tk = 0; tk < tiles_k; ++tk) {
        const int64_t c0 = tk * kTileCols, c1 = std::min(w.cols, c0 + kTileCols);
        uint64_t nz = 0;
        for (int64_t c = c0; c < c1; ++c) nz += !is_zero16(row[c]);
        band_counts[size_t(tk)] += nz;
      }
    }
    for (int64_t tk = 0; tk < tiles_k; ++tk) {
      total += band_counts[size_t(tk)];
      if (total > std::numeric_limits<uint32_t>::max()) {
        return unsupported("tiled_csl: the matrix has more than 2^32 - 1 non-zeros, which the "
                           "32-bit tile offsets cannot address; split it into row blocks");
      }
      offsets[size_t(tm * tiles_k + tk) + 1] = uint32_t(total);
    }
  }

  // Pass 2: append each row's piece of each tile in order, which yields location order (r major,
  // c minor) within every tile. A row piece is gathered branch-free into a 64-entry scratch.
  std::vector<uint32_t> entries(static_cast<size_t>(total));
  std::vector<uint32_t> cursor(static_cast<size_t>(tiles_k));
  std::array<uint32_t, kTileCols + 1> piece{};
  for (int64_t tm = 0; tm < m.tiles_m; ++tm) {
    for (int64_t tk = 0; tk < tiles_k; ++tk) {
      cursor[size_t(tk)] = offsets[size_t(tm * tiles_k + tk)];
    }
    const int64_t r_end = std::min(w.rows, (tm + 1) * kTileRows);
    for (int64_t r = tm * kTileRows; r < r_end; ++r) {
      const uint16_t* row = row_ptr(r);
      const uint32_t loc_row = uint32_t(r - tm * kTileRows) * uint32_t(kTileCols);
      for (int64_t tk = 0; tk < tiles_k; ++tk) {
        const int64_t c0 = tk * kTileCols, width = std::min(kTileCols, w.cols - c0);
        int64_t n = 0;
        for (int64_t c = 0; c < width; ++c) {
          const uint16_t bits = row[c0 + c];
          piece[size_t(n)] = pack_entry(bits, loc_row + uint32_t(c));
          n += !is_zero16(bits);
        }
        std::copy_n(piece.data(), n, entries.data() + cursor[size_t(tk)]);
        cursor[size_t(tk)] += uint32_t(n);
      }
    }
  }

  if (reorder) {
    std::vector<uint32_t> scratch;
    scratch.reserve(size_t(kTileElements));
    for (int64_t t = 0; t < m.tiles(); ++t) {
      reorder_tile(entries.data() + offsets[size_t(t)],
                   int64_t(offsets[size_t(t) + 1]) - int64_t(offsets[size_t(t)]), scratch);
    }
  }
  m.tile_offsets = Buffer<uint32_t>(std::move(offsets));
  m.entries = Buffer<uint32_t>(std::move(entries));
  return m;
}

Status validate(const Matrix& m) {
  SPARROW_RETURN_IF_ERROR(check_host(m));
  const Shape& s = m.shape;
  if (s.rows <= 0 || s.cols <= 0) {
    return corrupt_data("tiled_csl: non-positive shape " + std::to_string(s.rows) + " x " +
                        std::to_string(s.cols));
  }
  if (s.dtype != DType::fp16 && s.dtype != DType::bf16) {
    return corrupt_data("tiled_csl: dtype must be fp16 or bf16, got " +
                        std::string(dtype_name(s.dtype)));
  }
  if (m.tiles_m != ceil_div(s.rows, kTileRows) || m.tiles_k != ceil_div(s.cols, kTileCols)) {
    return corrupt_data("tiled_csl: tile grid " + std::to_string(m.tiles_m) + " x " +
                        std::to_string(m.tiles_k) + " does not match the shape " +
                        std::to_string(s.rows) + " x " + std::to_string(s.cols) +
                        " (expected ceil(rows/128) x ceil(cols/64))");
  }
  // Compare sizes by division so that a garbage shape cannot overflow tiles_m * tiles_k.
  const size_t n_offsets = m.tile_offsets.size();
  if (n_offsets == 0 || (n_offsets - 1) % size_t(m.tiles_k) != 0 ||
      (n_offsets - 1) / size_t(m.tiles_k) != size_t(m.tiles_m)) {
    return corrupt_data("tiled_csl: tile_offsets has " + std::to_string(n_offsets) +
                        " entries, expected tiles + 1 = " + std::to_string(m.tiles_m) + " * " +
                        std::to_string(m.tiles_k) + " + 1");
  }
  const uint32_t* off = m.tile_offsets.data();
  const uint64_t nnz = m.entries.size();
  if (off[0] != 0) {
    return corrupt_data("tiled_csl: tile_offsets[0] is " + std::to_string(off[0]) + ", not 0");
  }
  if (off[n_offsets - 1] != nnz) {
    return corrupt_data("tiled_csl: tile_offsets[tiles] = " + std::to_string(off[n_offsets - 1]) +
                        " but there are " + std::to_string(nnz) + " entries");
  }

  std::array<uint64_t, kTileElements / 64> seen{};  // one bit per location of a tile
  const uint32_t* entries = m.entries.data();
  for (int64_t tm = 0; tm < m.tiles_m; ++tm) {
    const int64_t rows = tile_rows(s, tm);
    for (int64_t tk = 0; tk < m.tiles_k; ++tk) {
      const int64_t t = tm * m.tiles_k + tk;
      const int64_t cols = tile_cols(s, tk);
      const uint32_t begin = off[t], end = off[t + 1];
      auto where = [&] {  // built only for a message
        return "tile " + std::to_string(t) + " (rows " + std::to_string(tm * kTileRows) +
               "+, cols " + std::to_string(tk * kTileCols) + "+)";
      };
      if (end < begin) {
        return corrupt_data("tiled_csl: tile_offsets decrease at " + where() + ": " +
                            std::to_string(begin) + " then " + std::to_string(end));
      }
      if (end - begin > uint64_t(rows * cols)) {
        return corrupt_data("tiled_csl: " + where() + " has " + std::to_string(end - begin) +
                            " entries but only " + std::to_string(rows * cols) + " places");
      }
      // Offsets are only known non-decreasing up to this tile, so a later decrease could hide an
      // offset past the end: check before reading.
      if (end > nnz) {
        return corrupt_data("tiled_csl: tile_offsets point past the " + std::to_string(nnz) +
                            " entries at " + where());
      }
      seen.fill(0);
      for (uint32_t e = begin; e < end; ++e) {
        const uint32_t loc = entry_location(entries[e]);
        const int64_t r = loc / kTileCols, c = loc % kTileCols;
        if (r >= rows || c >= cols) {
          return corrupt_data("tiled_csl: entry " + std::to_string(e) + " of " + where() +
                              " has location " + std::to_string(loc) + " = (row " +
                              std::to_string(r) + ", col " + std::to_string(c) +
                              "), outside the tile's " + std::to_string(rows) + " x " +
                              std::to_string(cols) + " elements");
        }
        uint64_t& word = seen[loc / 64];
        const uint64_t bit = uint64_t(1) << (loc % 64);
        if (word & bit) {
          return corrupt_data("tiled_csl: " + where() + " holds location " + std::to_string(loc) +
                              " (row " + std::to_string(r) + ", col " + std::to_string(c) +
                              ") twice (entry " + std::to_string(e) + ")");
        }
        word |= bit;
      }
    }
  }
  return Status::success();
}

Result<HostMatrix> decode(const Matrix& m) {
  SPARROW_RETURN_IF_ERROR(validate(m));
  HostMatrix out(m.shape.dtype, m.shape.rows, m.shape.cols);
  uint16_t* o = static_cast<uint16_t*>(out.data());
  const uint32_t* off = m.tile_offsets.data();
  const uint32_t* entries = m.entries.data();
  for (int64_t tm = 0; tm < m.tiles_m; ++tm) {
    for (int64_t tk = 0; tk < m.tiles_k; ++tk) {
      const int64_t t = tm * m.tiles_k + tk;
      for (uint32_t e = off[t]; e < off[t + 1]; ++e) {
        const uint32_t loc = entry_location(entries[e]);
        const int64_t r = tm * kTileRows + loc / kTileCols, c = tk * kTileCols + loc % kTileCols;
        o[size_t(r) * size_t(m.shape.cols) + size_t(c)] = entry_value(entries[e]);
      }
    }
  }
  return out;
}

}  // namespace sparrow::tiled_csl
