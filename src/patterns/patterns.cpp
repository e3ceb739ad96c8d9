#include "sparrow/patterns.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/parallel.hpp"
#include "core/rng.hpp"
#include "patterns/trained_like.hpp"

namespace sparrow::patterns {

namespace {

// A non-zero weight-like value: magnitude in [1/64, 1), random sign. Never rounds to zero.
float nonzero_value(Rng& rng) {
  const double mag = rng.uniform(1.0 / 64.0, 1.0);
  return float(rng.uniform() < 0.5 ? -mag : mag);
}

uint64_t zeros_for(double sparsity, uint64_t total) {
  return std::min<uint64_t>(total, uint64_t(std::llround(sparsity * double(total))));
}

}  // namespace

Result<Spec> parse(std::string_view text) {
  Spec s;
  const std::string t(text);
  if (t == "random") return s;
  if (t == "magnitude") {
    s.kind = Kind::magnitude;
    return s;
  }
  const Status bad = invalid_argument("unknown pattern '" + t +
                                      "' (expected random, magnitude, block:BxB or nm:N:M[:L])");
  if (t.rfind("block:", 0) == 0) {
    s.kind = Kind::block;
    int br = 0, bc = 0;
    char x = 0, extra = 0;
    const std::string rest = t.substr(6);
    const int got = std::sscanf(rest.c_str(), "%d%c%d%c", &br, &x, &bc, &extra);
    if (got == 1) {
      bc = br;
    } else if (got != 3 || x != 'x') {
      return bad;
    }
    if (br < 1 || bc < 1 || br > 4096 || bc > 4096) {
      return invalid_argument("block size must be between 1 and 4096, got '" + rest + "'");
    }
    s.block_rows = br;
    s.block_cols = bc;
    return s;
  }
  if (t.rfind("nm:", 0) == 0) {
    s.kind = Kind::nm;
    auto p = nm::parse_pattern(t.substr(3));
    if (!p) {
      return invalid_argument("bad N:M pattern '" + t.substr(3) +
                              "' (expected N:M or N:M:L with 1 <= N < M <= 256, 1 <= L <= 256)");
    }
    s.nm = *p;
    return s;
  }
  return bad;
}

std::string to_string(const Spec& s) {
  switch (s.kind) {
    case Kind::random: return "random";
    case Kind::magnitude: return "magnitude";
    case Kind::block:
      return "block:" + std::to_string(s.block_rows) + "x" + std::to_string(s.block_cols);
    case Kind::nm:
      return "nm:" + std::to_string(s.nm.n) + ":" + std::to_string(s.nm.m) +
             (s.nm.l > 1 ? ":" + std::to_string(s.nm.l) : "");
  }
  return "?";
}

HostMatrix random(DType t, int64_t rows, int64_t cols, double sparsity, uint64_t seed) {
  HostMatrix w(t, rows, cols);
  Rng rng(seed);
  const uint64_t total = uint64_t(rows) * uint64_t(cols);
  ExactSelector zero(total, zeros_for(sparsity, total));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const bool z = zero.pick(rng);
      const float v = nonzero_value(rng);
      if (!z) w.set(r, c, v);
    }
  return w;
}

namespace detail {

void draw_channel_scales(Rng& rng, int64_t rows, int64_t cols, std::vector<float>& row_scale,
                         std::vector<float>& col_scale) {
  // Trained linear layers have per-output-row and per-input-channel scale spreads and a few
  // outlier input channels (LLM.int8(), Wanda): |W| is far from i.i.d.
  row_scale.resize(size_t(rows));
  col_scale.resize(size_t(cols));
  for (auto& s : row_scale) s = float(std::exp(0.35 * rng.normal()));
  for (auto& s : col_scale) s = float(std::exp(0.5 * rng.normal()) * (rng.uniform() < 0.01 ? 8 : 1));
}

float trained_like_value(Rng& rng, DType t, double scale, float row_scale, float col_scale) {
  const double g = rng.normal();
  // Round through the dtype so ranking happens on the values actually stored.
  float v = float(std::max(std::fabs(g), 1e-3) * scale * row_scale * col_scale);
  v = round_to_dtype(v, t);
  if (v == 0.f) v = t == DType::bf16 ? 1e-30f : 6.1035156e-05f;  // smallest normals
  return g < 0 ? -v : v;
}

}  // namespace detail

HostMatrix trained_like(DType t, int64_t rows, int64_t cols, uint64_t seed, double scale) {
  Rng rng(seed);
  std::vector<float> row_scale, col_scale;
  detail::draw_channel_scales(rng, rows, cols, row_scale, col_scale);
  HostMatrix w(t, rows, cols);
  // Element (r, c) is the (r * cols + c)-th value after the scales, and each value takes
  // kDrawsPerValue draws, so blocks of rows run in parallel, each from the generator advanced to
  // its first element: the serial sequence, in a fraction of the time (a 32000 x 4096 embedding
  // table took ~10 s on one core).
  const int64_t block_rows = std::max<int64_t>(1, (int64_t(1) << 20) / std::max<int64_t>(cols, 1));
  const int64_t blocks = (rows + block_rows - 1) / block_rows;
  const Status s = parallel_for(blocks, 0, [&](int64_t b) -> Status {
    Rng local = rng;
    const int64_t r0 = b * block_rows, r1 = std::min(rows, r0 + block_rows);
    local.advance(detail::kDrawsPerValue * uint64_t(r0) * uint64_t(cols));
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < cols; ++c)
        w.set(r, c,
              detail::trained_like_value(local, t, scale, row_scale[size_t(r)], col_scale[size_t(c)]));
    return {};
  });
  (void)s;  // the blocks cannot fail
  return w;
}

HostMatrix magnitude(DType t, int64_t rows, int64_t cols, double sparsity, uint64_t seed) {
  const HostMatrix dense = trained_like(t, rows, cols, seed);
  std::vector<float> mag(size_t(rows * cols));
  std::vector<uint8_t> neg(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float v = dense.at(r, c);
      const size_t i = size_t(r * cols + c);
      mag[i] = std::fabs(v);
      neg[i] = v < 0;
    }

  const uint64_t total = mag.size();
  const uint64_t nzero = zeros_for(sparsity, total);
  float thr = 0.f;
  if (nzero > 0) {
    std::vector<float> tmp(mag);
    std::nth_element(tmp.begin(), tmp.begin() + int64_t(nzero - 1), tmp.end());
    thr = tmp[size_t(nzero - 1)];
  }
  uint64_t below = 0;
  for (float m : mag) below += (nzero > 0 && m < thr);
  uint64_t ties_to_zero = nzero - below;  // elements equal to thr that are zeroed, in order

  HostMatrix w(t, rows, cols);
  for (size_t i = 0; i < total; ++i) {
    bool zero = false;
    if (nzero > 0 && mag[i] < thr) zero = true;
    if (nzero > 0 && mag[i] == thr && ties_to_zero > 0) {
      zero = true;
      --ties_to_zero;
    }
    if (!zero) store_from_float(w.data(), t, i, neg[i] ? -mag[i] : mag[i]);
  }
  return w;
}

HostMatrix block(DType t, int64_t rows, int64_t cols, int br, int bc, double sparsity,
                 uint64_t seed) {
  HostMatrix w(t, rows, cols);
  Rng rng(seed);
  const int64_t nbr = (rows + br - 1) / br, nbc = (cols + bc - 1) / bc;
  const uint64_t nblocks = uint64_t(nbr * nbc);
  ExactSelector zero(nblocks, zeros_for(sparsity, nblocks));
  std::vector<uint8_t> keep(nblocks);
  for (auto& k : keep) k = !zero.pick(rng);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float v = nonzero_value(rng);
      if (keep[size_t((r / br) * nbc + c / bc)]) w.set(r, c, v);
    }
  return w;
}

HostMatrix nm_pattern(DType t, int64_t rows, int64_t cols, const nm::Pattern& p,
                      double extra_sparsity, uint64_t seed) {
  HostMatrix w(t, rows, cols);
  Rng rng(seed);
  std::vector<int> perm(size_t(p.m));
  for (int64_t rb = 0; rb < rows; rb += p.l) {
    for (int64_t g0 = 0; g0 < cols; g0 += p.m) {
      const int avail = int(std::min<int64_t>(p.m, cols - g0));
      for (int i = 0; i < avail; ++i) perm[size_t(i)] = i;
      for (int i = 0; i < std::min(p.n, avail); ++i) {  // partial Fisher-Yates: N distinct
        const int j = i + int(rng.below(uint64_t(avail - i)));
        std::swap(perm[size_t(i)], perm[size_t(j)]);
        for (int64_t r = rb; r < std::min<int64_t>(rb + p.l, rows); ++r) {
          const float v = nonzero_value(rng);
          if (rng.uniform() >= extra_sparsity) w.set(r, g0 + perm[size_t(i)], v);
        }
      }
    }
  }
  return w;
}

Result<HostMatrix> generate(const Spec& spec, DType t, int64_t rows, int64_t cols,
                            double sparsity, uint64_t seed) {
  if (rows <= 0 || cols <= 0) {
    return invalid_argument("matrix sizes must be positive (got " + std::to_string(rows) + " x " +
                            std::to_string(cols) + ")");
  }
  if (!(sparsity >= 0.0 && sparsity <= 1.0)) {
    return invalid_argument("sparsity must be in [0, 1], got " + std::to_string(sparsity));
  }
  switch (spec.kind) {
    case Kind::random: return random(t, rows, cols, sparsity, seed);
    case Kind::magnitude: return magnitude(t, rows, cols, sparsity, seed);
    case Kind::block:
      return block(t, rows, cols, spec.block_rows, spec.block_cols, sparsity, seed);
    case Kind::nm: {
      SPARROW_RETURN_IF_ERROR(nm::check_pattern(spec.nm));
      const double kept = double(spec.nm.n) / double(spec.nm.m);
      const double extra = std::max(0.0, (sparsity - (1.0 - kept)) / kept);
      return nm_pattern(t, rows, cols, spec.nm, extra, seed);
    }
  }
  return invalid_argument("unknown pattern kind");
}

HostMatrix dense_random(DType t, int64_t rows, int64_t cols, uint64_t seed) {
  HostMatrix x(t, rows, cols);
  Rng rng(seed);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      float v = float(rng.uniform(-1.0, 1.0));
      if (v == 0.f) v = 0.5f;
      x.set(r, c, v);
    }
  return x;
}

}  // namespace sparrow::patterns
