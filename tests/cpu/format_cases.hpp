// Inputs shared by the per-format CPU tests: the pattern x shape x sparsity sweep, matrices with
// all-zero rows and columns, and a comparison of a format's reference product with the dense one.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "sparrow/patterns.hpp"
#include "sparrow/reference.hpp"
#include "sparrow/weight.hpp"

namespace sparrow::test {

struct Case {
  DType dtype;
  std::string pattern;  // patterns::parse syntax
  int64_t rows, cols;
  double sparsity;
  std::string name() const {
    return std::string(dtype_name(dtype)) + " " + pattern + " " + std::to_string(rows) + "x" +
           std::to_string(cols) + " s=" + std::to_string(sparsity);
  }
};

constexpr double kNearlyAllZero = 1.0 - 1e-6;

// Every dtype x pattern x small shape x sparsity.
inline std::vector<Case> small_cases() {
  std::vector<Case> out;
  const std::pair<int64_t, int64_t> shapes[] = {{1, 1}, {1, 300}, {300, 1}, {7, 13}, {130, 70}};
  for (DType t : {DType::fp16, DType::bf16})
    for (const char* p : {"random", "magnitude", "block:4x4", "nm:2:4"})
      for (auto [m, k] : shapes)
        for (double s : {0.0, 0.5, 0.9, 0.99, kNearlyAllZero}) out.push_back({t, p, m, k, s});
  return out;
}

// 4097 x 4095 takes about a second per matrix on the CI machine, so every pattern appears once,
// with the dtypes and sparsities spread over them.
inline std::vector<Case> large_cases() {
  return {{DType::fp16, "random", 4097, 4095, 0.5},
          {DType::bf16, "magnitude", 4097, 4095, 0.9},
          {DType::fp16, "block:4x4", 4097, 4095, kNearlyAllZero},
          {DType::bf16, "nm:2:4", 4097, 4095, 0.0}};
}

inline HostMatrix make(const Case& c, uint64_t seed = 17) {
  if (c.pattern == "nm:2:4") {
    // Straight to the generator: patterns::parse("nm:...") needs the nm format's own parser,
    // which these tests should not depend on. Sparsity beyond 0.5 zeroes kept values too.
    const double extra = std::max(0.0, (c.sparsity - 0.5) / 0.5);
    return patterns::nm_pattern(c.dtype, c.rows, c.cols, nm::Pattern{2, 4, 1}, extra, seed);
  }
  auto spec = patterns::parse(c.pattern);
  EXPECT_TRUE(spec.ok()) << spec.status().to_string();
  auto w = patterns::generate(spec.value(), c.dtype, c.rows, c.cols, c.sparsity, seed);
  EXPECT_TRUE(w.ok()) << w.status().to_string();
  return std::move(w).value();
}

// A random matrix whose listed rows and columns are all zero (first, last and inner ones).
inline HostMatrix with_zero_lines(DType t, int64_t rows, int64_t cols, double sparsity,
                                  const std::vector<int64_t>& zero_rows,
                                  const std::vector<int64_t>& zero_cols, uint64_t seed = 5) {
  HostMatrix w = patterns::random(t, rows, cols, sparsity, seed);
  for (int64_t r : zero_rows)
    for (int64_t c = 0; c < cols; ++c) w.set(r, c, 0.f);
  for (int64_t c : zero_cols)
    for (int64_t r = 0; r < rows; ++r) w.set(r, c, 0.f);
  return w;
}

// reference::matmul_f64 through `format` equals it through dense, within 1e-12 relative.
inline void expect_reference_matches_dense(Format format, const HostMatrix& w, int64_t n,
                                           uint64_t seed) {
  auto sparse = encode(format, w.view());
  auto dense = encode(Format::dense, w.view());
  ASSERT_TRUE(sparse.ok()) << sparse.status().to_string();
  ASSERT_TRUE(dense.ok()) << dense.status().to_string();
  HostMatrix x = patterns::dense_random(w.dtype(), n, w.cols(), seed);
  auto ys = reference::matmul_f64(sparse.value(), x.view());
  auto yd = reference::matmul_f64(dense.value(), x.view());
  ASSERT_TRUE(ys.ok()) << ys.status().to_string();
  ASSERT_TRUE(yd.ok()) << yd.status().to_string();
  ASSERT_EQ(ys->size(), yd->size());
  double scale = 0.0;
  for (double v : yd.value()) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < yd->size(); ++i) {
    ASSERT_LE(std::fabs(ys.value()[i] - yd.value()[i]), 1e-12 * std::max(scale, 1e-300))
        << "element " << i << " of " << n << " x " << w.rows();
  }
}

}  // namespace sparrow::test
