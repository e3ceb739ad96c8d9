// The tca_bme.mma A-fragment decode (src/kernels/tca_bme/fragment.hpp) emulated on the CPU for
// every lane of every warp: each fragment register must hold the two W elements that
// mma.m16n8k16 expects there (row g / g + 8, columns 2 * tig, 2 * tig + 1 / + 8), with the value
// index found from popcounts exactly as the kernel does (earlier warps' bitmaps summed in pairs).
#include <gtest/gtest.h>

#include <vector>

#include "kernels/tca_bme/fragment.hpp"
#include "sparrow/patterns.hpp"
#include "sparrow/weight.hpp"

using namespace sparrow;

namespace {

void check_fragments(const HostMatrix& w) {
  auto enc = tca_bme::encode(w.view());
  ASSERT_TRUE(enc.ok()) << enc.status().to_string();
  const tca_bme::Matrix& m = enc.value();
  const auto& bitmaps = m.bitmaps.host();
  const auto& offsets = m.group_offsets.host();
  const uint16_t* values = m.values.host().data();
  const uint16_t* dense = static_cast<const uint16_t*>(w.data());
  for (int64_t gm = 0; gm < m.groups_m; ++gm) {
    for (int64_t gk = 0; gk < m.groups_k; ++gk) {
      const int64_t grp = gm * m.groups_k + gk;
      const uint64_t* bm = bitmaps.data() + grp * 64;
      const uint16_t* vs = values + offsets[size_t(grp)];
      for (int warp = 0; warp < 4; ++warp) {
        for (int lane = 0; lane < 32; ++lane) {
          uint32_t base = 0;  // the kernel's __reduce_add_sync over lanes < warp * 8
          for (int l = 0; l < warp * 8; ++l) {
            base += uint32_t(__builtin_popcountll(bm[2 * l]) + __builtin_popcountll(bm[2 * l + 1]));
          }
          const int g = lane / 4, tig = lane % 4;
          const auto lb = kernels::tca_bme_mma::lane_bits(lane);
          for (int tk = 0; tk < 4; ++tk) {
            for (int b = 0; b < 4; ++b) {
              const uint64_t word = bm[warp * 16 + tk * 4 + b];
              const uint32_t reg = kernels::tca_bme_mma::fragment_register(
                  uint32_t(word), uint32_t(word >> 32), base, lb, vs);
              const int64_t row = gm * 64 + warp * 16 + (b & 1) * 8 + g;
              const int64_t col = gk * 64 + tk * 16 + (b >> 1) * 8 + tig * 2;
              for (int h = 0; h < 2; ++h) {
                const uint16_t expect = (row < w.rows() && col + h < w.cols())
                                            ? dense[row * w.cols() + col + h]
                                            : uint16_t(0);
                const uint16_t got = uint16_t(reg >> (16 * h));
                // +0 and -0 are both "zero"; a stored -0 would be a non-zero in the bitmap.
                ASSERT_EQ(got, expect) << "group " << gm << "," << gk << " warp " << warp
                                       << " lane " << lane << " tk " << tk << " b " << b;
              }
            }
          }
        }
      }
    }
  }
}

// One tca_bme group as tca_bme.decode sees it: its records (built as the kernel builds them) and
// its values.
struct GroupView {
  int64_t gm = 0, gk = 0;
  kernels::tca_bme_mma::HalfRecord rec[128];
  const uint16_t* values = nullptr;
  uint32_t count = 0;  // values of the group
};

// Encodes w as tca_bme and calls visit(group) for every group, stopping at a fatal failure.
template <class F>
void for_each_group(const HostMatrix& w, F&& visit) {
  auto enc = tca_bme::encode(w.view());
  ASSERT_TRUE(enc.ok()) << enc.status().to_string();
  const tca_bme::Matrix& m = enc.value();
  for (int64_t grp = 0; grp < m.groups(); ++grp) {
    GroupView g;
    g.gm = grp / m.groups_k, g.gk = grp % m.groups_k;
    kernels::tca_bme_mma::group_records(m.bitmaps.host().data() + grp * 64, g.rec);
    const uint32_t first = m.group_offsets.host()[size_t(grp)];
    g.values = m.values.host().data() + first;
    g.count = m.group_offsets.host()[size_t(grp) + 1] - first;
    visit(g);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// The element of W at (row, col), zero in the padding beyond M x K.
uint16_t dense_at(const HostMatrix& w, int64_t row, int64_t col) {
  const uint16_t* dense = static_cast<const uint16_t*>(w.data());
  return row < w.rows() && col < w.cols() ? dense[row * w.cols() + col] : uint16_t(0);
}

// tca_bme.decode's per-group records: fragment_pair from record 2j + high must give the same
// registers as the dense matrix, for every tile, lane and register.
void check_records(const HostMatrix& w) {
  for_each_group(w, [&](const GroupView& g) {
    for (int t = 0; t < 16; ++t)
      for (int lane = 0; lane < 32; ++lane) {
        const auto lb = kernels::tca_bme_mma::lane_bits(lane);
        for (int q = 0; q < 4; ++q) {
          const auto& r = g.rec[2 * (4 * t + q) + int(lb.high)];
          const uint32_t reg = kernels::tca_bme_mma::fragment_pair(r.word, r.base, lb, g.values);
          const int64_t row = g.gm * 64 + (t / 4) * 16 + (q & 1) * 8 + lane / 4;
          const int64_t col = g.gk * 64 + (t % 4) * 16 + (q >> 1) * 8 + (lane % 4) * 2;
          for (int h = 0; h < 2; ++h) {
            ASSERT_EQ(uint16_t(reg >> (16 * h)), dense_at(w, row, col + h))
                << "group " << g.gm << "," << g.gk << " tile " << t << " lane " << lane << " q " << q;
          }
        }
      }
  });
}

// A group's values as the kernels' shared-memory stage holds them: then other bytes (here 0xBEEF),
// which the unconditional loads may read past the group's last value.
std::vector<uint16_t> staged(const GroupView& g) {
  std::vector<uint16_t> stage(g.values, g.values + g.count);
  stage.resize(g.count + 4, 0xBEEF);
  return stage;
}

// The shared-memory decode of one nibble whose first value is stage[p], as the kernels do it: the
// table entry, the high pair's start (e.x >> 16) bytes after the low pair's, and per bit pair f a
// byte permute of the values at the pair's start and the next position (that second value replaced
// by 0xDEADBEEF unless f == 3, the only selector that reads it).
kernels::tca_bme_mma::RegPair permuted_nibble(const std::vector<uint16_t>& stage, uint32_t nib,
                                             uint32_t p) {
  namespace f = kernels::tca_bme_mma;
  const f::NibbleEntry e = f::nibble_entry(nib);
  auto pair = [&](uint32_t bits, uint32_t at, uint32_t sel) {
    return f::byte_perm(stage[at], bits == 3 ? stage[at + 1] : 0xDEADBEEFu, sel);
  };
  return {pair(nib & 3u, p, e.x), pair(nib >> 2, p + (e.x >> 16) / 2, e.y)};
}

// tca_bme.decode's nibble order: for every tile and lane, the two registers of each of the lane's
// rows must hold W at the physical columns its k slots stand for (4t, 4t+1 | 4t+2, 4t+3), both
// from nibble_pair (the reference read) and from the kernel's path (permuted_nibble).
void check_nibbles(const HostMatrix& w) {
  namespace f = kernels::tca_bme_mma;
  for_each_group(w, [&](const GroupView& g) {
    const std::vector<uint16_t> stage = staged(g);
    for (int t = 0; t < 16; ++t)
      for (int lane = 0; lane < 32; ++lane) {
        const f::NibbleLane nl = f::nibble_lane(lane);
        for (int half = 0; half < 2; ++half) {  // rows 0-7 / 8-15 of the tile: bitmap 2 pair + half
          const auto& r = g.rec[2 * (4 * t + 2 * nl.pair + half) + int(nl.high)];
          const f::RegPair ref = f::nibble_pair(r.word, r.base, nl, stage.data());
          const uint32_t a = r.base + f::popcount32(r.word & nl.below);
          const f::RegPair got = permuted_nibble(stage, (r.word >> nl.shift) & 0xFu, a);
          const int64_t row = g.gm * 64 + (t / 4) * 16 + half * 8 + lane / 4;
          const int64_t col = g.gk * 64 + (t % 4) * 16 + (lane % 4) * 4;
          for (int i = 0; i < 4; ++i) {
            const uint16_t expect = dense_at(w, row, col + i);
            const int sh = 16 * (i & 1);
            ASSERT_EQ(uint16_t((i < 2 ? ref.lo : ref.hi) >> sh), expect)
                << "group " << g.gm << "," << g.gk << " tile " << t << " lane " << lane
                << " half " << half;
            ASSERT_EQ(uint16_t((i < 2 ? got.lo : got.hi) >> sh), expect)
                << "group " << g.gm << "," << g.gk << " tile " << t << " lane " << lane
                << " half " << half << " (window loads and byte permutes)";
          }
        }
      }
  });
}

// tca_bme.wgmma_smem's producer (smem_wgmma_kernel.cuh) writes whole 8-element rows of the A tile:
// per byte i of a half-bitmap (row 4h + i of the 8x8 bitmap) the row's first value follows the
// set bits of the earlier bytes, its two nibbles index the same table as the register decode, the
// high pair of each nibble starts `e.x >> 16` bytes after the low one, and eight unconditional
// 2-byte loads feed four byte permutes (permuted_nibble per nibble), so a change to the nibble table
// that the register decode's tests accept but this producer does not understand fails here.
void check_tile_rows(const HostMatrix& w) {
  namespace f = kernels::tca_bme_mma;
  for_each_group(w, [&](const GroupView& g) {
    const std::vector<uint16_t> stage = staged(g);
    for (int j = 0; j < 64; ++j) {
      for (int h = 0; h < 2; ++h) {
        const auto& r = g.rec[2 * j + h];
        for (int i = 0; i < 4; ++i) {
          const uint32_t byte = (r.word >> (8 * i)) & 0xFFu;
          const uint32_t at = r.base + f::popcount32(r.word & ((1u << (8 * i)) - 1u));
          // Nibble n: columns 4n .. 4n + 3, its first value after the low nibble's.
          const f::RegPair lo = permuted_nibble(stage, byte & 0xFu, at);
          const f::RegPair hi = permuted_nibble(stage, byte >> 4, at + f::popcount32(byte & 0xFu));
          const uint32_t out[4] = {lo.lo, lo.hi, hi.lo, hi.hi};
          const int t = j / 4, q = j % 4;
          const int64_t row = g.gm * 64 + (t / 4) * 16 + (q & 1) * 8 + 4 * h + i;
          const int64_t col = g.gk * 64 + (t % 4) * 16 + (q >> 1) * 8;
          for (int c = 0; c < 8; ++c) {
            ASSERT_EQ(uint16_t(out[c / 2] >> (16 * (c & 1))), dense_at(w, row, col + c))
                << "group " << g.gm << "," << g.gk << " bitmap " << j << " half " << h << " row "
                << i << " column " << c;
          }
        }
      }
    }
  });
}

}  // namespace

TEST(TcaBmeFragment, SharedTileRowsGiveTheDenseElements) {
  for (double sp : {0.0, 0.3, 0.5, 0.9, 0.999}) {
    check_tile_rows(patterns::random(DType::fp16, 130, 200, sp, 37));
  }
  check_tile_rows(patterns::magnitude(DType::bf16, 70, 129, 0.6, 38));
}

TEST(TcaBmeFragment, NibbleOrderGivesTheDenseElements) {
  for (double sp : {0.0, 0.3, 0.5, 0.9, 0.999}) {
    check_nibbles(patterns::random(DType::fp16, 130, 200, sp, 27));
  }
  check_nibbles(patterns::magnitude(DType::bf16, 70, 129, 0.6, 28));
  check_nibbles(patterns::random(DType::bf16, 1, 1, 0.0, 29));
}

// Every nibble's table entry: the byte permutes of the values the kernel loads (v0, v1 at the
// nibble's first value, v2, v3 the entry's step later) give the nibble's four elements, zero at
// clear bits, whatever a pair's second value holds when the pair does not use it.
TEST(TcaBmeFragment, NibbleTableCoversAllSixteenPatterns) {
  namespace f = kernels::tca_bme_mma;
  const uint16_t window[6] = {0x1201, 0x3423, 0x5645, 0x7867, 0x9A89, 0xBCAB};  // distinct bytes
  for (uint32_t nib = 0; nib < 16; ++nib) {
    const f::NibbleEntry e = f::nibble_entry(nib);
    const uint32_t step = (e.x >> 16) / 2;
    const uint32_t f0 = nib & 3u, f1 = nib >> 2;
    const uint32_t lo = f::byte_perm(window[0], f0 == 3 ? window[1] : 0xDEADBEEFu, e.x);
    const uint32_t hi = f::byte_perm(window[step], f1 == 3 ? window[step + 1] : 0xDEADBEEFu, e.y);
    uint32_t next = 0;
    for (int i = 0; i < 4; ++i) {
      const uint16_t expect = (nib >> i) & 1u ? window[next++] : uint16_t(0);
      const uint16_t got = uint16_t((i < 2 ? lo : hi) >> (16 * (i & 1)));
      EXPECT_EQ(got, expect) << "nibble " << nib << " element " << i;
    }
  }
}

TEST(TcaBmeFragment, RecordsGiveTheDenseElements) {
  for (double sp : {0.0, 0.5, 0.9, 0.999}) {
    check_records(patterns::random(DType::fp16, 130, 200, sp, 17));
  }
  check_records(patterns::magnitude(DType::bf16, 70, 129, 0.6, 18));
}

TEST(TcaBmeFragment, MatchesDenseAtEveryLane) {
  for (double sp : {0.0, 0.5, 0.9, 0.999}) {
    check_fragments(patterns::random(DType::fp16, 130, 200, sp, 7));
  }
  check_fragments(patterns::magnitude(DType::bf16, 64, 64, 0.6, 8));
  check_fragments(patterns::random(DType::bf16, 1, 1, 0.0, 9));
}
