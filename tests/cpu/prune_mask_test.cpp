// Pruning masks on hand-computed examples, and schedules.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "sparrow/prune.hpp"

using namespace sparrow;
using namespace sparrow::prune;

namespace {

HostMatrix from_rows(const std::vector<std::vector<float>>& rows, DType t = DType::fp32) {
  HostMatrix m(t, int64_t(rows.size()), int64_t(rows[0].size()));
  for (size_t r = 0; r < rows.size(); ++r)
    for (size_t c = 0; c < rows[r].size(); ++c) m.set(int64_t(r), int64_t(c), rows[r][c]);
  return m;
}

std::vector<uint8_t> mask(const HostMatrix& w, MaskOptions o) {
  auto m = compute_mask(w.view(), o);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? m.value() : std::vector<uint8_t>{};
}

}  // namespace

TEST(PruneMask, MagnitudeLayerAndRow) {
  // Row 0 holds all the large values: a per-layer threshold empties row 1, per-row does not.
  const HostMatrix w = from_rows({{9, -8, 7, 6}, {1, -2, 0.5f, 3}});
  MaskOptions o;
  o.sparsity = 0.5;
  o.granularity = Granularity::layer;
  EXPECT_EQ(mask(w, o), (std::vector<uint8_t>{1, 1, 1, 1, 0, 0, 0, 0}));
  o.granularity = Granularity::row;
  EXPECT_EQ(mask(w, o), (std::vector<uint8_t>{1, 1, 0, 0, 0, 1, 0, 1}));
  // Ties broken by position: the earlier equal element goes first.
  const HostMatrix t = from_rows({{1, 1, 1, 1}});
  o.sparsity = 0.25;
  EXPECT_EQ(mask(t, o), (std::vector<uint8_t>{0, 1, 1, 1}));
  // Signs do not matter, exact count: round(0.3 * 8) = 2 zeros.
  o.granularity = Granularity::layer;
  o.sparsity = 0.3;
  EXPECT_EQ(mask(w, o), (std::vector<uint8_t>{1, 1, 1, 1, 0, 1, 0, 1}));
}

TEST(PruneMask, RandomExactCountAndSeeded) {
  HostMatrix w(DType::fp16, 37, 53);
  for (int64_t r = 0; r < 37; ++r)
    for (int64_t c = 0; c < 53; ++c) w.set(r, c, 1.0f + float(r * 53 + c) / 4096.0f);
  MaskOptions o;
  o.method = Method::random;
  o.sparsity = 0.37;
  o.seed = 5;
  auto a = mask(w, o);
  const size_t kept = size_t(std::accumulate(a.begin(), a.end(), 0));
  EXPECT_EQ(a.size() - kept, size_t(std::llround(0.37 * 37 * 53)));
  EXPECT_EQ(mask(w, o), a);
  o.seed = 6;
  EXPECT_NE(mask(w, o), a);
  o.granularity = Granularity::row;
  auto rows = mask(w, o);
  for (int64_t r = 0; r < 37; ++r) {
    int z = 0;
    for (int64_t c = 0; c < 53; ++c) z += !rows[size_t(r * 53 + c)];
    EXPECT_EQ(z, int(std::llround(0.37 * 53)));
  }
}

TEST(PruneMask, NmAlongK) {
  const HostMatrix w = from_rows({{1, -4, 3, 2, 0.1f, 0.2f, 0.4f, 0.3f},
                                  {5, 1, 1, 6, 7, 8, 1, 2}});
  MaskOptions o;
  o.structure = parse_structure("2:4").value();
  EXPECT_EQ(mask(w, o), (std::vector<uint8_t>{0, 1, 1, 0, 0, 0, 1, 1,  //
                                              1, 0, 0, 1, 1, 1, 0, 0}));
  // Vector-wise 1:2 with L = 2: column pairs scored by the sum over both rows.
  o.structure = parse_structure("1:2:2").value();
  // group (0,1): |1|+|5|=6 vs 4+1=5 -> keep col 0; (2,3): 3+1=4 vs 2+6=8 -> col 3;
  // (4,5): 7.1 vs 8.2 -> col 5; (6,7): 1.4 vs 2.3 -> col 7
  EXPECT_EQ(mask(w, o), (std::vector<uint8_t>{1, 0, 0, 1, 0, 1, 0, 1,  //
                                              1, 0, 0, 1, 0, 1, 0, 1}));
  // M must divide K, and the message says so.
  o.structure = parse_structure("2:4").value();
  const HostMatrix odd = from_rows({{1, 2, 3, 4, 5, 6}});
  auto bad = compute_mask(odd.view(), o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("does not divide K = 6"), std::string::npos);
}

TEST(PruneMask, Blocks) {
  // 4x4 in 2x2 blocks with mean |w| 1, 10, 2, 20 (block order (0,0), (0,1), (1,0), (1,1)).
  const HostMatrix w = from_rows({{1, 1, 10, 10}, {1, 1, 10, 10}, {2, 2, 20, 20}, {2, 2, 20, 20}});
  MaskOptions o;
  o.structure = parse_structure("block:2x2").value();
  o.sparsity = 0.5;
  EXPECT_EQ(mask(w, o), (std::vector<uint8_t>{0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1}));
  o.sparsity = 0.25;
  EXPECT_EQ(mask(w, o), (std::vector<uint8_t>{0, 0, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}));
  EXPECT_FALSE(parse_structure("block:0").ok());
  EXPECT_FALSE(parse_structure("3:2").ok());
}

TEST(PruneMask, WandaUsesInputNorms) {
  // Magnitude alone would drop columns 0 and 1; the input norms make column 0 and 1 matter.
  const HostMatrix w = from_rows({{1, 2, 3, 4}, {1, 2, 3, 4}});
  std::vector<float> norms = {10, 3, 1, 0.5f};  // scores: 10, 6, 3, 2
  MaskOptions o;
  o.method = Method::wanda;
  o.granularity = Granularity::row;
  o.sparsity = 0.5;
  o.input_norms = &norms;
  EXPECT_EQ(mask(w, o), (std::vector<uint8_t>{1, 1, 0, 0, 1, 1, 0, 0}));
  std::vector<float> short_norms = {1, 2};
  o.input_norms = &short_norms;
  EXPECT_FALSE(compute_mask(w.view(), o).ok());
}

TEST(PruneMask, SparsityRange) {
  const HostMatrix w = from_rows({{1, 2}});
  for (double s : {-0.1, 1.0, 1.5, std::nan("")}) {
    MaskOptions o;
    o.sparsity = s;
    EXPECT_EQ(compute_mask(w.view(), o).status().code(), Code::invalid_argument) << s;
  }
}

TEST(PruneSchedule, OwlKeepsTheMeanAndLowersTheEnds) {
  const auto s = owl_schedule(8, 0.5);
  ASSERT_EQ(s.size(), 8u);
  EXPECT_NEAR(std::accumulate(s.begin(), s.end(), 0.0) / 8, 0.5, 1e-12);
  EXPECT_LT(s.front(), 0.5);
  EXPECT_LT(s.back(), 0.5);
  EXPECT_GT(s[3], 0.5);
  for (double x : owl_schedule(32, 0.95)) EXPECT_LE(x, 0.99 + 1e-12);
  for (double x : owl_schedule(32, 0.02)) EXPECT_GE(x, -1e-12);
  EXPECT_EQ(layer_index("model.layers.17.mlp.up_proj.weight"), 17);
  EXPECT_EQ(layer_index("lm_head.weight"), -1);

  const auto path = std::filesystem::temp_directory_path() / "sparrow_sched_test.json";
  std::ofstream(path) << R"({"layers\\.0\\.": 0.2, "mlp": 0.7})";
  auto f = Schedule::from_file(path.string(), 0.5);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->sparsity_for("model.layers.0.mlp.up_proj.weight"), 0.2);  // first match wins
  EXPECT_EQ(f->sparsity_for("model.layers.3.mlp.up_proj.weight"), 0.7);
  EXPECT_EQ(f->sparsity_for("model.layers.3.self_attn.q_proj.weight"), 0.5);
  std::ofstream(path) << R"({"mlp": 1.2})";
  EXPECT_FALSE(Schedule::from_file(path.string(), 0.5).ok());
  std::filesystem::remove(path);
}
