// tiled_csl: lossless round trip on any shape and density, the bank-conflict-aware order, byte
// accounting, the reference walk, and rejection of corrupted buffers.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "core/rng.hpp"
#include "cpu/test_util.hpp"
#include "sparrow/patterns.hpp"
#include "sparrow/reference.hpp"
#include "sparrow/weight.hpp"

using namespace sparrow;

namespace {

constexpr DType kDtypes[] = {DType::fp16, DType::bf16};

struct Size {
  int64_t rows, cols;
};
constexpr Size kSmallShapes[] = {{1, 1}, {1, 300}, {300, 1}, {7, 13}, {130, 70}};

// Encodes, checks the entry count and validation, decodes, and compares with `w`.
void expect_round_trip(const HostMatrix& w, bool reorder, const std::string& what) {
  SCOPED_TRACE(what + (reorder ? " reordered" : " location order"));
  auto enc = tiled_csl::encode(w.view(), reorder);
  ASSERT_TRUE(enc.ok()) << enc.status().to_string();
  EXPECT_EQ(enc->nnz(), test::count_nonzeros(w.view()));
  EXPECT_EQ(enc->reordered, reorder);
  EXPECT_EQ(enc->storage_bytes(), size_t(4 * enc->nnz() + 4 * (enc->tiles() + 1)));
  auto dec = tiled_csl::decode(enc.value());
  ASSERT_TRUE(dec.ok()) << dec.status().to_string();
  EXPECT_TRUE(same_values(dec->view(), w.view()));
}

// The test matrices of one shape: densities from full to empty, and zero rows and columns.
std::vector<std::pair<std::string, HostMatrix>> density_cases(DType t, int64_t rows, int64_t cols,
                                                             uint64_t seed) {
  std::vector<std::pair<std::string, HostMatrix>> out;
  for (double s : {0.0, 0.5, 0.9, 0.99}) {
    out.emplace_back("sparsity " + std::to_string(s), patterns::random(t, rows, cols, s, seed));
  }
  HostMatrix one(t, rows, cols);  // nearly all zero: a single non-zero in the last element
  one.set(rows - 1, cols - 1, -0.75f);
  out.emplace_back("one non-zero", std::move(one));
  out.emplace_back("all zero", HostMatrix(t, rows, cols));
  HostMatrix holes = patterns::random(t, rows, cols, 0.3, seed + 1);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      if (r % 5 == 2 || c % 7 == 3) holes.set(r, c, 0.f);
  out.emplace_back("zero rows and columns", std::move(holes));
  return out;
}

// Bank of a tile location in the kernels' shared tile (pitch 72 halfs, 32 four-byte banks).
int bank_of(uint32_t location) {
  const uint32_t r = location / 64, c = location % 64;
  return int(((r * uint32_t(tiled_csl::kSmemPitch) + c) / 2) % 32);
}

// Largest number of entries that share a bank within one run of 32 consecutive entries.
int max_bank_multiplicity(const uint32_t* entries, int64_t n) {
  int worst = 0;
  for (int64_t run = 0; run < n; run += 32) {
    std::array<int, 32> count{};
    for (int64_t i = run; i < std::min(n, run + 32); ++i) {
      worst = std::max(worst, ++count[size_t(bank_of(tiled_csl::entry_location(entries[i])))]);
    }
  }
  return worst;
}

// Per tile, the sorted entries: what must agree between the two orders.
std::vector<std::vector<uint32_t>> sorted_tiles(const tiled_csl::Matrix& m) {
  std::vector<std::vector<uint32_t>> out;
  const uint32_t* off = m.tile_offsets.data();
  for (int64_t t = 0; t < m.tiles(); ++t) {
    out.emplace_back(m.entries.data() + off[t], m.entries.data() + off[t + 1]);
    std::sort(out.back().begin(), out.back().end());
  }
  return out;
}

}  // namespace

TEST(TiledCsl, RoundTripSmallShapesEveryDensity) {
  for (DType t : kDtypes)
    for (const Size& sz : kSmallShapes)
      for (auto& [name, w] : density_cases(t, sz.rows, sz.cols, 17))
        for (bool reorder : {false, true}) {
          expect_round_trip(w, reorder,
                            std::string(dtype_name(t)) + " " + std::to_string(sz.rows) + "x" +
                                std::to_string(sz.cols) + " " + name);
        }
}

TEST(TiledCsl, RoundTripLargeOddShape) {
  // 4097 x 4095: a one-row tile band at the bottom and a 63-column tile edge at the right.
  expect_round_trip(patterns::random(DType::fp16, 4097, 4095, 0.5, 3), true, "fp16 4097x4095");
  expect_round_trip(patterns::random(DType::bf16, 4097, 4095, 0.9, 4), false, "bf16 4097x4095");
}

TEST(TiledCsl, PatternsDecodeTheSameInBothOrders) {
  for (const char* pattern : {"random", "magnitude", "block:4x4"}) {
    auto spec = patterns::parse(pattern);
    ASSERT_TRUE(spec.ok());
    for (DType t : kDtypes) {
      auto w = patterns::generate(spec.value(), t, 300, 200, 0.7, 9);
      ASSERT_TRUE(w.ok());
      expect_round_trip(w.value(), false, pattern);
      expect_round_trip(w.value(), true, pattern);
      auto plain = tiled_csl::encode(w->view(), false);
      auto reordered = tiled_csl::encode(w->view(), true);
      ASSERT_TRUE(plain.ok() && reordered.ok());
      // Same offsets, same entries per tile; only the order inside a tile differs.
      EXPECT_EQ(plain->tile_offsets.host(), reordered->tile_offsets.host());
      EXPECT_EQ(sorted_tiles(plain.value()), sorted_tiles(reordered.value()));
      EXPECT_NE(plain->entries.host(), reordered->entries.host()) << pattern;
    }
  }
}

TEST(TiledCsl, LayoutOfATinyMatrix) {
  // 3 x 70: two tiles (columns 0..63 and 64..69). Values checked through their bits.
  HostMatrix w(DType::fp16, 3, 70);
  w.set(0, 5, 1.0f);    // tile 0, location 0*64+5 = 5
  w.set(2, 0, -2.0f);   // tile 0, location 2*64+0 = 128
  w.set(1, 66, 0.5f);   // tile 1, location 1*64+2 = 66
  w.set(1, 1, -0.0f);   // signed zero: dropped
  auto enc = tiled_csl::encode(w.view(), false);
  ASSERT_TRUE(enc.ok());
  EXPECT_EQ(enc->tiles_m, 1);
  EXPECT_EQ(enc->tiles_k, 2);
  EXPECT_EQ(enc->tile_offsets.host(), (std::vector<uint32_t>{0, 2, 3}));
  EXPECT_EQ(enc->entries.host(),
            (std::vector<uint32_t>{(5u << 16) | 0x3C00u, (128u << 16) | 0xC000u,
                                   (66u << 16) | 0x3800u}));
}

TEST(TiledCsl, LocationOrderWithoutReorder) {
  auto w = patterns::random(DType::fp16, 300, 200, 0.6, 2);
  auto enc = tiled_csl::encode(w.view(), false);
  ASSERT_TRUE(enc.ok());
  const uint32_t* off = enc->tile_offsets.data();
  for (int64_t t = 0; t < enc->tiles(); ++t)
    for (uint32_t e = off[t] + 1; e < off[t + 1]; ++e)
      EXPECT_LT(tiled_csl::entry_location(enc->entries.data()[e - 1]),
                tiled_csl::entry_location(enc->entries.data()[e]));
}

TEST(TiledCsl, FullDensityTileGets32BanksPerRun) {
  // Three full 128 x 64 tiles (8192 entries each) and one partial tile.
  auto w = patterns::random(DType::fp16, 256, 100, 0.0, 6);
  expect_round_trip(w, true, "dense 256x100");
  auto enc = tiled_csl::encode(w.view(), true);
  ASSERT_TRUE(enc.ok());
  EXPECT_EQ(enc->tile_offsets.host()[1], 8192u);
  for (int64_t tm = 0; tm < 2; ++tm) {
    const uint32_t* off = enc->tile_offsets.data();
    const int64_t t = tm * enc->tiles_k;  // the full tile of this band
    EXPECT_EQ(off[t + 1] - off[t], 8192u);
    EXPECT_EQ(max_bank_multiplicity(enc->entries.data() + off[t], 8192), 1);
  }
}

TEST(TiledCsl, ReorderReducesBankMultiplicity) {
  // A single 128 x 64 tile at 50 % random: location order packs a run into about one tile row,
  // where both halves of a 4-byte word and the next row's shifted banks collide.
  auto w = patterns::random(DType::fp16, 128, 64, 0.5, 21);
  auto plain = tiled_csl::encode(w.view(), false);
  auto reordered = tiled_csl::encode(w.view(), true);
  ASSERT_TRUE(plain.ok() && reordered.ok());
  const int64_t n = plain->nnz();
  ASSERT_EQ(n, 4096);
  const int before = max_bank_multiplicity(plain->entries.data(), n);
  const int after = max_bank_multiplicity(reordered->entries.data(), n);
  // No order can beat ceil(largest bank / runs): that bank's entries must share the runs.
  std::array<int64_t, 32> per_bank{};
  for (uint32_t e : plain->entries.host()) {
    ++per_bank[size_t(bank_of(tiled_csl::entry_location(e)))];
  }
  const int64_t runs = (n + 31) / 32;
  const int64_t bound = (*std::max_element(per_bank.begin(), per_bank.end()) + runs - 1) / runs;
  std::printf("max bank multiplicity per 32-entry run: location order %d, reordered %d "
              "(lower bound %lld)\n", before, after, (long long)bound);
  EXPECT_LT(after, before);
  EXPECT_EQ(after, bound);
}

TEST(TiledCsl, ReorderReachesTheBoundAtEveryDensity) {
  // One 128 x 64 tile per case. The reordered worst bank multiplicity per run should be the lower
  // bound ceil(largest bank / runs); with few runs (a very sparse tile) the short last run may
  // cost one more. Location order is never better.
  int at_bound = 0, cases = 0;
  for (double density : {0.01, 0.02, 0.05, 0.1, 0.3, 0.5, 0.9, 1.0})
    for (uint64_t seed = 1; seed <= 5; ++seed) {
      auto w = patterns::random(DType::bf16, 128, 64, 1.0 - density, seed);
      auto plain = tiled_csl::encode(w.view(), false);
      auto reordered = tiled_csl::encode(w.view(), true);
      ASSERT_TRUE(plain.ok() && reordered.ok());
      const int64_t n = plain->nnz();
      std::array<int64_t, 32> per_bank{};
      for (uint32_t e : plain->entries.host()) {
        ++per_bank[size_t(bank_of(tiled_csl::entry_location(e)))];
      }
      const int64_t runs = (n + 31) / 32;
      const int64_t bound = (*std::max_element(per_bank.begin(), per_bank.end()) + runs - 1) / runs;
      const int before = max_bank_multiplicity(plain->entries.data(), n);
      const int after = max_bank_multiplicity(reordered->entries.data(), n);
      EXPECT_LE(after, before) << density << " seed " << seed;
      EXPECT_LE(after, bound + (runs < 8 ? 1 : 0)) << density << " seed " << seed;
      if (runs >= 8) EXPECT_EQ(after, bound) << density << " seed " << seed;
      at_bound += after == bound;
      ++cases;
    }
  std::printf("reordered tiles at the lower bound: %d of %d\n", at_bound, cases);
}

TEST(TiledCsl, EncodeIsDeterministic) {
  auto w = patterns::magnitude(DType::bf16, 200, 150, 0.8, 8);
  auto a = tiled_csl::encode(w.view(), true);
  auto b = tiled_csl::encode(w.view(), true);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->entries.host(), b->entries.host());
  EXPECT_EQ(a->tile_offsets.host(), b->tile_offsets.host());
}

TEST(TiledCsl, EffectiveDensityIsAboutTwiceDensity) {
  for (double density : {0.5, 0.3, 0.1}) {
    auto w = patterns::random(DType::fp16, 1024, 1024, 1.0 - density, 4);
    auto enc = encode(Format::tiled_csl, w.view());
    ASSERT_TRUE(enc.ok());
    // 4 bytes per non-zero (2 per dense element -> 2d) plus 4 bytes per tile offset.
    const double offsets = 4.0 * (8 * 16 + 1) / (2.0 * 1024 * 1024);
    EXPECT_NEAR(d_eff(enc.value()), 2 * density + offsets, 1e-5) << density;
  }
}

TEST(TiledCsl, ReferenceMatmulEqualsDense) {
  for (DType t : kDtypes)
    for (Size sz : {Size{130, 70}, Size{300, 129}, Size{1, 1}}) {
      auto w = patterns::magnitude(t, sz.rows, sz.cols, 0.6, 12);
      auto dense = encode(Format::dense, w.view());
      auto sparse = encode(Format::tiled_csl, w.view());
      ASSERT_TRUE(dense.ok() && sparse.ok());
      for (int64_t n : {1, 5, 17}) {
        auto x = patterns::dense_random(t, n, sz.cols, 100 + n);
        auto want = reference::matmul_f64(dense.value(), x.view());
        auto got = reference::matmul_f64(sparse.value(), x.view());
        ASSERT_TRUE(want.ok() && got.ok()) << got.status().to_string();
        double num = 0, den = 0;
        for (size_t i = 0; i < want->size(); ++i) {
          num += (got.value()[i] - want.value()[i]) * (got.value()[i] - want.value()[i]);
          den += want.value()[i] * want.value()[i];
        }
        EXPECT_LE(std::sqrt(num), 1e-12 * std::sqrt(den)) << sz.rows << "x" << sz.cols;
      }
    }
}

TEST(TiledCsl, RejectsFp32) {
  HostMatrix w(DType::fp32, 4, 4);
  auto enc = tiled_csl::encode(w.view());
  ASSERT_FALSE(enc.ok());
  EXPECT_EQ(enc.status().code(), Code::unsupported);
}

namespace {

// 200 x 100: tiles (0,0) full, (0,1) 128 x 36, (1,0) 72 x 64, (1,1) 72 x 36.
tiled_csl::Matrix valid_matrix() {
  auto w = patterns::random(DType::fp16, 200, 100, 0.5, 31);
  return tiled_csl::encode(w.view(), true).value();
}

void expect_rejected(const tiled_csl::Matrix& m, const std::string& what,
                     const std::string& message_part) {
  SCOPED_TRACE(what);
  Status s = tiled_csl::validate(m);
  EXPECT_EQ(s.code(), Code::corrupt_data) << s.to_string();
  EXPECT_NE(s.message().find(message_part), std::string::npos) << s.message();
  auto dec = tiled_csl::decode(m);
  ASSERT_FALSE(dec.ok());
  EXPECT_EQ(dec.status().code(), Code::corrupt_data);
}

}  // namespace

TEST(TiledCsl, CorruptBuffersAreRejected) {
  ASSERT_TRUE(tiled_csl::validate(valid_matrix()).ok());
  using Edit = std::function<void(tiled_csl::Matrix&)>;
  auto off = [](tiled_csl::Matrix& m) -> std::vector<uint32_t>& { return m.tile_offsets.host(); };
  auto ent = [](tiled_csl::Matrix& m) -> std::vector<uint32_t>& { return m.entries.host(); };
  const std::vector<std::tuple<std::string, std::string, Edit>> cases = {
      {"offsets too short", "tile_offsets has",
       [&](auto& m) { off(m).pop_back(); m.tile_offsets.sync_size(); }},
      {"first offset", "tile_offsets[0]", [&](auto& m) { off(m)[0] = 1; }},
      {"last offset", "tile_offsets[tiles]",
       [&](auto& m) { ent(m).pop_back(); m.entries.sync_size(); }},
      {"decreasing offsets", "decrease", [&](auto& m) { off(m)[2] = off(m)[1] - 1; }},
      {"offset past the end", "", [&](auto& m) { off(m)[2] = uint32_t(ent(m).size() + 1000); }},
      {"too many entries for a tile", "places",
       [&](auto& m) { off(m)[3] = off(m)[2] + 72 * 64 + 1; }},
      {"column outside a partial tile", "outside the tile",
       [&](auto& m) {  // tile 1 is 128 x 36: column 40 does not exist
         const uint32_t e = off(m)[1];
         ent(m)[e] = tiled_csl::pack_entry(0x3C00, 3 * 64 + 40);
       }},
      {"row outside a partial tile", "outside the tile",
       [&](auto& m) {  // tile 2 is 72 x 64: row 100 does not exist
         ent(m)[off(m)[2]] = tiled_csl::pack_entry(0x3C00, 100 * 64 + 1);
       }},
      {"location past the tile", "outside the tile",
       [&](auto& m) { ent(m)[0] = tiled_csl::pack_entry(0x3C00, 0xFFFF); }},
      {"duplicate location", "twice",
       [&](auto& m) {
         const uint32_t e = off(m)[0] + 10;
         ent(m)[e] = tiled_csl::pack_entry(0x4000, tiled_csl::entry_location(ent(m)[e + 7]));
       }},
      {"tile grid rows", "tile grid", [&](auto& m) { m.tiles_m = 3; }},
      {"tile grid cols", "tile grid", [&](auto& m) { m.tiles_k = 1; }},
      {"zero rows", "non-positive shape", [&](auto& m) { m.shape.rows = 0; }},
      {"huge shape", "tile_offsets has",
       [&](auto& m) {
         m.shape.rows = int64_t(1) << 62;
         m.tiles_m = m.shape.rows / 128;
       }},
      {"fp32", "dtype", [&](auto& m) { m.shape.dtype = DType::fp32; }},
  };
  for (const auto& [what, part, edit] : cases) {
    tiled_csl::Matrix m = valid_matrix();
    edit(m);
    expect_rejected(m, what, part);
  }
}

TEST(TiledCsl, RandomBitFlipsNeverCrash) {
  // Mutations of a valid encoding: validate either accepts (then decode must work) or reports
  // corrupt_data; it must never read out of bounds (run under ASan/valgrind to be sure).
  const tiled_csl::Matrix base = valid_matrix();
  Rng rng(77);
  int rejected = 0;
  for (int trial = 0; trial < 300; ++trial) {
    tiled_csl::Matrix m = base;
    for (int flips = 0; flips < 3; ++flips) {
      if (rng.uniform() < 0.3) {
        auto& o = m.tile_offsets.host();
        o[rng.below(o.size())] ^= 1u << rng.below(32);
      } else {
        auto& e = m.entries.host();
        e[rng.below(e.size())] ^= 1u << (16 + rng.below(16));  // location bits
      }
    }
    Status s = tiled_csl::validate(m);
    if (s.ok()) {
      EXPECT_TRUE(tiled_csl::decode(m).ok());
    } else {
      EXPECT_EQ(s.code(), Code::corrupt_data) << s.to_string();
      EXPECT_FALSE(tiled_csl::decode(m).ok());
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 200);
}

TEST(TiledCsl, EncodesAStridedView) {
  // A 150 x 100 window of a 160 x 130 matrix (ld = 130): encode must follow the view's ld.
  auto big = patterns::random(DType::bf16, 160, 130, 0.4, 13);
  ConstMatrixView window = big.view();
  window.rows = 150;
  window.cols = 100;
  auto enc = tiled_csl::encode(window, true);
  ASSERT_TRUE(enc.ok());
  auto dec = tiled_csl::decode(enc.value());
  ASSERT_TRUE(dec.ok());
  EXPECT_TRUE(same_values(dec->view(), window));
}
