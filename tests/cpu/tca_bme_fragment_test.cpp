// The tca_bme.mma A-fragment decode (src/kernels/tca_bme/fragment.hpp) emulated on the CPU for
// every lane of every warp: each fragment register must hold the two W elements that
// mma.m16n8k16 expects there (row g / g + 8, columns 2 * tig, 2 * tig + 1 / + 8), with the value
// index found from popcounts exactly as the kernel does (earlier warps' bitmaps summed in pairs).
#include <gtest/gtest.h>

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

// tca_bme.decode's per-group records: fragment_pair from record 2j + high must give the same
// registers as the dense matrix, for every tile, lane and register.
void check_records(const HostMatrix& w) {
  auto enc = tca_bme::encode(w.view());
  ASSERT_TRUE(enc.ok()) << enc.status().to_string();
  const tca_bme::Matrix& m = enc.value();
  const uint16_t* dense = static_cast<const uint16_t*>(w.data());
  for (int64_t grp = 0; grp < m.groups(); ++grp) {
    const int64_t gm = grp / m.groups_k, gk = grp % m.groups_k;
    kernels::tca_bme_mma::HalfRecord rec[128];
    kernels::tca_bme_mma::group_records(m.bitmaps.host().data() + grp * 64, rec);
    const uint16_t* vs = m.values.host().data() + m.group_offsets.host()[size_t(grp)];
    for (int t = 0; t < 16; ++t)
      for (int lane = 0; lane < 32; ++lane) {
        const auto lb = kernels::tca_bme_mma::lane_bits(lane);
        for (int q = 0; q < 4; ++q) {
          const auto& r = rec[2 * (4 * t + q) + int(lb.high)];
          const uint32_t reg = kernels::tca_bme_mma::fragment_pair(r.word, r.base, lb, vs);
          const int64_t row = gm * 64 + (t / 4) * 16 + (q & 1) * 8 + lane / 4;
          const int64_t col = gk * 64 + (t % 4) * 16 + (q >> 1) * 8 + (lane % 4) * 2;
          for (int h = 0; h < 2; ++h) {
            const uint16_t expect = (row < w.rows() && col + h < w.cols())
                                        ? dense[row * w.cols() + col + h]
                                        : uint16_t(0);
            ASSERT_EQ(uint16_t(reg >> (16 * h)), expect)
                << "group " << grp << " tile " << t << " lane " << lane << " q " << q;
          }
        }
      }
  }
}

}  // namespace

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
