// tca_bme: host encode / decode / validate. The layout is documented in
// include/sparrow/formats/tca_bme.hpp and docs/formats/tca_bme.md.
#include "sparrow/formats/tca_bme.hpp"

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "formats/tca_bme/tile_geometry.hpp"

namespace sparrow::tca_bme {

namespace {

constexpr uint64_t kMaxValues = std::numeric_limits<uint32_t>::max();

std::string str(uint64_t v) { return std::to_string(v); }

}  // namespace

Result<Matrix> encode(const ConstMatrixView& w) {
  SPARROW_RETURN_IF_ERROR(check_encode_input(w, /*allow_fp32=*/false, "tca_bme"));
  const int64_t M = w.rows, K = w.cols;
  const int64_t groups_m = ceil_div(M, kGroupRows), groups_k = ceil_div(K, kGroupCols);
  const int64_t groups = groups_m * groups_k;
  const uint16_t* base = static_cast<const uint16_t*>(w.data);

  // Pass 1: set one bit per non-zero, reading W row by row (its storage order). Eight
  // consecutive columns of a row are one byte of one bitmap (byte r % 8), so each 8-column
  // chunk is gathered into a byte without a branch per element (a coin flip at density 0.5).
  std::vector<uint64_t> bitmaps(size_t(groups * kBitmapsPerGroup), 0);
  for (int64_t r = 0; r < M; ++r) {
    const uint16_t* row = base + r * w.ld;
    const int64_t gm = r / kGroupRows, rg = r % kGroupRows;
    for (int64_t c8 = 0; c8 < K; c8 += kBitmapTile) {
      const int64_t n = std::min<int64_t>(kBitmapTile, K - c8);
      uint64_t byte = 0;
      for (int64_t j = 0; j < n; ++j) byte |= uint64_t(!is_zero16(row[c8 + j])) << j;
      const int64_t g = gm * groups_k + c8 / kGroupCols;
      const BitPosition p = position_in_group(rg, c8 % kGroupCols);  // p.bit = (rg % 8) * 8
      bitmaps[size_t(g * kBitmapsPerGroup + p.bitmap)] |= byte << p.bit;
    }
  }

  // Group offsets from popcounts; each group padded to kValueAlign elements.
  std::vector<uint32_t> offsets(size_t(groups) + 1, 0);
  uint64_t total = 0, nnz = 0;
  for (int64_t g = 0; g < groups; ++g) {
    uint64_t n = 0;
    for (int64_t b = 0; b < kBitmapsPerGroup; ++b) {
      n += popcount64(bitmaps[size_t(g * kBitmapsPerGroup + b)]);
    }
    nnz += n;
    total += round_up(n, kValueAlign);
    if (total > kMaxValues) {
      return unsupported("tca_bme: the matrix needs more than 2^32 - 1 stored values (non-zeros "
                         "plus per-group padding; passed at group " + str(uint64_t(g)) + " of " +
                         str(uint64_t(groups)) + "), which 32-bit group offsets cannot address; "
                         "split the matrix");
    }
    offsets[size_t(g) + 1] = uint32_t(total);
  }

  // Pass 2: values of each group in (tc tile, bitmap, bit) order, walking the set bits.
  std::vector<uint16_t> values(size_t(total), 0);
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t r0 = (g / groups_k) * kGroupRows, c0 = (g % groups_k) * kGroupCols;
    uint64_t v = offsets[size_t(g)];
    for (int64_t b = 0; b < kBitmapsPerGroup; ++b) {
      const TileOrigin o = bitmap_origin(b);
      for (uint64_t bits = bitmaps[size_t(g * kBitmapsPerGroup + b)]; bits != 0; bits &= bits - 1) {
        const int bit = lowest_bit(bits);
        const int64_t r = r0 + o.row + bit / kBitmapTile, c = c0 + o.col + bit % kBitmapTile;
        values[v++] = base[r * w.ld + c];
      }
    }
  }

  Matrix m;
  m.shape = {M, K, w.dtype};
  m.groups_m = groups_m;
  m.groups_k = groups_k;
  m.nnz = int64_t(nnz);
  m.bitmaps = Buffer<uint64_t>(std::move(bitmaps));
  m.group_offsets = Buffer<uint32_t>(std::move(offsets));
  m.values = Buffer<uint16_t>(std::move(values));
  derive(m);
  return m;
}

// strip_starts of include/sparrow/formats/tca_bme.hpp (empty when the bitmaps are not whole
// groups: validate reports that) and the most values one strip holds.
struct StripCounts {
  std::vector<uint16_t> starts;
  int64_t most = 0;
};
static StripCounts count_strips(const std::vector<uint64_t>& bm) {
  StripCounts out;
  if (bm.size() % kBitmapsPerGroup != 0) return out;
  const size_t groups = bm.size() / kBitmapsPerGroup;
  constexpr int64_t kBitmapsPerStrip = kBitmapsPerGroup / kStripsPerGroup;  // 16
  out.starts.resize(groups * kStripsPerGroup);
  for (size_t g = 0; g < groups; ++g) {
    uint32_t before = 0;  // at most 3 * 1024
    for (int64_t s = 0; s < kStripsPerGroup; ++s) {
      out.starts[g * kStripsPerGroup + size_t(s)] = uint16_t(before);
      uint32_t in_strip = 0;
      for (int64_t b = 0; b < kBitmapsPerStrip; ++b) {
        in_strip += uint32_t(popcount64(bm[g * kBitmapsPerGroup + size_t(s * kBitmapsPerStrip + b)]));
      }
      before += in_strip;
      out.most = std::max<int64_t>(out.most, in_strip);
    }
  }
  return out;
}

void derive(Matrix& m) {
  if (m.group_offsets.on_device() || m.bitmaps.on_device()) return;
  const std::vector<uint32_t>& off = m.group_offsets.host();
  int64_t most = 0;
  for (size_t g = 1; g < off.size(); ++g) {
    if (off[g] >= off[g - 1]) most = std::max<int64_t>(most, int64_t(off[g] - off[g - 1]));
  }
  m.max_group_values = most;
  StripCounts strips = count_strips(m.bitmaps.host());
  m.strip_starts = Buffer<uint16_t>(std::move(strips.starts));
  m.max_strip_values = strips.most;
}

Status validate(const Matrix& m) {
  const Shape& s = m.shape;
  if (m.bitmaps.on_device() || m.group_offsets.on_device() || m.values.on_device() ||
      m.strip_starts.on_device()) {
    return invalid_argument("tca_bme: validate needs host buffers; call to_host() first");
  }
  if (s.rows <= 0 || s.cols <= 0) {
    return corrupt_data("tca_bme: non-positive shape " + std::to_string(s.rows) + " x " +
                        std::to_string(s.cols));
  }
  if (s.dtype != DType::fp16 && s.dtype != DType::bf16) {
    return corrupt_data("tca_bme: dtype must be fp16 or bf16");
  }
  if (m.groups_m != ceil_div(s.rows, kGroupRows) || m.groups_k != ceil_div(s.cols, kGroupCols)) {
    return corrupt_data("tca_bme: " + std::to_string(m.groups_m) + " x " +
                        std::to_string(m.groups_k) + " groups do not match the " +
                        std::to_string(s.rows) + " x " + std::to_string(s.cols) + " shape");
  }
  // The bitmap count is checked by division so a garbage shape cannot overflow the product.
  const uint64_t groups_m = uint64_t(m.groups_m), groups_k = uint64_t(m.groups_k);
  if (m.bitmaps.size() % kBitmapsPerGroup != 0 ||
      m.bitmaps.size() / kBitmapsPerGroup / groups_k != groups_m ||
      m.bitmaps.size() / kBitmapsPerGroup % groups_k != 0) {
    return corrupt_data("tca_bme: " + str(m.bitmaps.size()) + " bitmaps, expected " +
                        std::to_string(kBitmapsPerGroup) + " per group for " + str(groups_m) +
                        " x " + str(groups_k) + " groups");
  }
  const uint64_t groups = groups_m * groups_k;
  if (m.group_offsets.size() != groups + 1) {
    return corrupt_data("tca_bme: group_offsets has " + str(m.group_offsets.size()) +
                        " entries, expected groups + 1 = " + str(groups + 1));
  }
  const uint32_t* off = m.group_offsets.data();
  const uint64_t* bm = m.bitmaps.data();
  if (off[0] != 0) return corrupt_data("tca_bme: group_offsets[0] is " + str(off[0]) + ", not 0");
  if (off[groups] != m.values.size()) {
    return corrupt_data("tca_bme: group_offsets[groups] = " + str(off[groups]) + " but values has " +
                        str(m.values.size()) + " elements");
  }
  // Offsets first, all of them: monotone up to off[groups] == values.size() keeps every group's
  // value range inside the array before any value is read.
  for (uint64_t g = 0; g < groups; ++g) {
    if (off[g + 1] < off[g]) {
      return corrupt_data("tca_bme: group_offsets decrease at group " + str(g) + " (" +
                          str(off[g]) + " -> " + str(off[g + 1]) + ")");
    }
    if (off[g + 1] % kValueAlign != 0) {
      return corrupt_data("tca_bme: group_offsets[" + str(g + 1) + "] = " + str(off[g + 1]) +
                          " is not a multiple of " + std::to_string(kValueAlign));
    }
  }
  uint64_t nnz = 0, most = 0;
  for (uint64_t g = 0; g < groups; ++g) {
    // Edge groups: bits for rows >= M or columns >= K must be clear.
    const int64_t valid_rows = std::min<int64_t>(kGroupRows, s.rows - int64_t(g / groups_k) * kGroupRows);
    const int64_t valid_cols = std::min<int64_t>(kGroupCols, s.cols - int64_t(g % groups_k) * kGroupCols);
    uint64_t n = 0;
    for (int64_t b = 0; b < kBitmapsPerGroup; ++b) {
      const uint64_t bits = bm[g * kBitmapsPerGroup + uint64_t(b)];
      n += popcount64(bits);
      const uint64_t outside = bits & ~inside_mask(b, valid_rows, valid_cols);
      if (outside != 0) {
        const TileOrigin o = bitmap_origin(b);
        const int bit = lowest_bit(outside);
        return corrupt_data("tca_bme: group " + str(g) + " bitmap " + std::to_string(b) +
                            " marks row " + std::to_string(o.row + bit / kBitmapTile) +
                            ", column " + std::to_string(o.col + bit % kBitmapTile) +
                            " of the group, outside the " + std::to_string(s.rows) + " x " +
                            std::to_string(s.cols) + " matrix");
      }
    }
    const uint64_t stored = off[g + 1] - off[g];
    if (stored != round_up(n, kValueAlign)) {
      return corrupt_data("tca_bme: group " + str(g) + " bitmaps hold " + str(n) +
                          " non-zeros but its offsets span " + str(stored) +
                          " values (expected " + str(round_up(n, kValueAlign)) + ")");
    }
    const uint16_t* v = m.values.data() + off[g];
    for (uint64_t i = 0; i < n; ++i) {
      if (is_zero16(v[i])) {
        return corrupt_data("tca_bme: group " + str(g) + " value " + str(i) +
                            " is zero where its bitmap marks a non-zero");
      }
    }
    for (uint64_t i = n; i < stored; ++i) {
      if (v[i] != 0) {
        return corrupt_data("tca_bme: group " + str(g) + " padding value " + str(i) +
                            " is not zero");
      }
    }
    nnz += n;
    most = std::max(most, stored);
  }
  if (m.nnz < 0 || uint64_t(m.nnz) != nnz) {
    return corrupt_data("tca_bme: nnz field is " + std::to_string(m.nnz) + " but the bitmaps mark " +
                        str(nnz) + " non-zeros");
  }
  if (m.max_group_values < 0 || uint64_t(m.max_group_values) != most) {
    return corrupt_data("tca_bme: max_group_values is " + std::to_string(m.max_group_values) +
                        " but the largest group stores " + str(most) +
                        " values (call derive())");
  }
  const StripCounts strips = count_strips(m.bitmaps.host());
  if (m.strip_starts.host() != strips.starts) {
    return corrupt_data("tca_bme: strip_starts does not match the bitmaps (call derive())");
  }
  if (m.max_strip_values != strips.most) {
    return corrupt_data("tca_bme: max_strip_values is " + std::to_string(m.max_strip_values) +
                        " but the fullest strip holds " + std::to_string(strips.most) +
                        " values (call derive())");
  }
  return Status::success();
}

Result<HostMatrix> decode(const Matrix& m) {
  SPARROW_RETURN_IF_ERROR(validate(m));
  const int64_t K = m.shape.cols;
  HostMatrix out(m.shape.dtype, m.shape.rows, K);
  uint16_t* o = static_cast<uint16_t*>(out.data());
  const uint64_t* bm = m.bitmaps.data();
  const uint16_t* vals = m.values.data();
  for (int64_t g = 0; g < m.groups(); ++g) {
    const int64_t r0 = (g / m.groups_k) * kGroupRows, c0 = (g % m.groups_k) * kGroupCols;
    uint64_t v = m.group_offsets.data()[g];
    for (int64_t b = 0; b < kBitmapsPerGroup; ++b) {
      const TileOrigin t = bitmap_origin(b);
      for (uint64_t bits = bm[g * kBitmapsPerGroup + b]; bits != 0; bits &= bits - 1) {
        const int bit = lowest_bit(bits);
        o[(r0 + t.row + bit / kBitmapTile) * K + c0 + t.col + bit % kBitmapTile] = vals[v++];
      }
    }
  }
  return out;
}

}  // namespace sparrow::tca_bme
