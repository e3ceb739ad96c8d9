// Pruning masks: score every element, then zero the lowest-scoring elements, N:M vectors or
// blocks, exactly round(sparsity * count) of them.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/rng.hpp"
#include "sparrow/prune.hpp"

namespace sparrow::prune {

const char* method_name(Method m) {
  switch (m) {
    case Method::magnitude: return "magnitude";
    case Method::random: return "random";
    case Method::wanda: return "wanda";
  }
  return "?";
}

std::optional<Method> parse_method(std::string_view s) {
  if (s == "magnitude") return Method::magnitude;
  if (s == "random") return Method::random;
  if (s == "wanda") return Method::wanda;
  return std::nullopt;
}

Result<Structure> parse_structure(std::string_view text) {
  Structure s;
  const std::string t(text);
  if (t == "unstructured") return s;
  if (t.rfind("block:", 0) == 0) {
    int br = 0, bc = 0;
    char x = 0, extra = 0;
    const int got = std::sscanf(t.c_str() + 6, "%d%c%d%c", &br, &x, &bc, &extra);
    if (got == 1) bc = br;
    if (!(got == 1 || (got == 3 && x == 'x')) || br < 1 || bc < 1 || br > 4096 || bc > 4096) {
      return invalid_argument("bad block structure '" + t + "' (expected block:BxB or block:B, 1..4096)");
    }
    s.kind = Structure::Kind::block;
    s.block_rows = br;
    s.block_cols = bc;
    return s;
  }
  auto p = nm::parse_pattern(t);
  if (!p) {
    return invalid_argument("unknown structure '" + t +
                            "' (expected unstructured, N:M, N:M:L with 1 <= N < M <= 256, or "
                            "block:BxB)");
  }
  s.kind = Structure::Kind::nm;
  s.nm = *p;
  return s;
}

std::string structure_name(const Structure& s) {
  switch (s.kind) {
    case Structure::Kind::unstructured: return "unstructured";
    case Structure::Kind::nm:
      return std::to_string(s.nm.n) + ":" + std::to_string(s.nm.m) +
             (s.nm.l > 1 ? ":" + std::to_string(s.nm.l) : "");
    case Structure::Kind::block:
      return "block:" + std::to_string(s.block_rows) + "x" + std::to_string(s.block_cols);
  }
  return "?";
}

double zero_fraction(const ConstMatrixView& w) {
  int64_t z = 0;
  for (int64_t r = 0; r < w.rows; ++r)
    for (int64_t c = 0; c < w.cols; ++c) z += w.zero_at(r, c);
  return double(z) / (double(w.rows) * double(w.cols));
}

namespace {

// Marks in `drop` the `count` lowest of scores[0..n) (ties: lower position first). Uses one
// nth_element for the threshold, then a pass in position order for the ties.
void drop_lowest(const float* scores, size_t n, size_t count, uint8_t* drop, size_t stride = 1) {
  if (count == 0) return;
  if (count >= n) {
    for (size_t i = 0; i < n; ++i) drop[i * stride] = 1;
    return;
  }
  std::vector<float> tmp(scores, scores + n);
  std::nth_element(tmp.begin(), tmp.begin() + int64_t(count - 1), tmp.end());
  const float thr = tmp[count - 1];
  size_t below = 0;
  for (size_t i = 0; i < n; ++i) below += scores[i] < thr;
  size_t ties = count - below;
  for (size_t i = 0; i < n; ++i) {
    if (scores[i] < thr || (scores[i] == thr && ties > 0)) {
      if (scores[i] == thr) --ties;
      drop[i * stride] = 1;
    }
  }
}

size_t count_for(double sparsity, size_t n) {
  return std::min(n, size_t(std::llround(sparsity * double(n))));
}

}  // namespace

Result<std::vector<uint8_t>> compute_mask(const ConstMatrixView& w, const MaskOptions& o) {
  SPARROW_RETURN_IF_ERROR(check_view(w, "W"));
  const bool is_nm = o.structure.kind == Structure::Kind::nm;
  if (!is_nm && !(o.sparsity >= 0.0 && o.sparsity < 1.0)) {
    return invalid_argument("sparsity must be in [0, 1), got " + std::to_string(o.sparsity));
  }
  const int64_t M = w.rows, K = w.cols;
  if (o.method == Method::wanda) {
    if (!o.input_norms || int64_t(o.input_norms->size()) != K) {
      return invalid_argument("wanda needs one input-channel norm per column (" +
                              std::to_string(K) + "), got " +
                              std::to_string(o.input_norms ? o.input_norms->size() : 0));
    }
  }
  // Scores, row-major.
  std::vector<float> score(size_t(M * K));
  Rng rng(o.seed);
  for (int64_t r = 0; r < M; ++r)
    for (int64_t c = 0; c < K; ++c) {
      float s = std::fabs(w.at(r, c));
      if (o.method == Method::wanda) s *= (*o.input_norms)[size_t(c)];
      if (o.method == Method::random) s = float(rng.uniform());
      score[size_t(r * K + c)] = s;
    }

  std::vector<uint8_t> drop(size_t(M * K), 0);
  switch (o.structure.kind) {
    case Structure::Kind::unstructured:
      if (o.granularity == Granularity::layer) {
        drop_lowest(score.data(), score.size(), count_for(o.sparsity, score.size()), drop.data());
      } else {
        for (int64_t r = 0; r < M; ++r) {
          drop_lowest(&score[size_t(r * K)], size_t(K), count_for(o.sparsity, size_t(K)),
                      &drop[size_t(r * K)]);
        }
      }
      break;
    case Structure::Kind::nm: {
      const nm::Pattern p = o.structure.nm;
      SPARROW_RETURN_IF_ERROR(nm::check_pattern(p));
      if (K % p.m != 0) {
        return invalid_argument("N:M structure " + structure_name(o.structure) +
                                ": M = " + std::to_string(p.m) + " does not divide K = " +
                                std::to_string(K) + " (the input dimension)");
      }
      // Each group of M column-vectors (L rows tall) keeps its N highest-scoring vectors.
      std::vector<float> vs(size_t(p.m));
      std::vector<uint8_t> vdrop(size_t(p.m));
      for (int64_t rb = 0; rb < M; rb += p.l) {
        const int64_t re = std::min<int64_t>(rb + p.l, M);
        for (int64_t g = 0; g < K; g += p.m) {
          for (int j = 0; j < p.m; ++j) {
            double s = 0;
            for (int64_t r = rb; r < re; ++r) s += score[size_t(r * K + g + j)];
            vs[size_t(j)] = float(s);
          }
          std::fill(vdrop.begin(), vdrop.end(), 0);
          drop_lowest(vs.data(), size_t(p.m), size_t(p.m - p.n), vdrop.data());
          for (int j = 0; j < p.m; ++j)
            if (vdrop[size_t(j)])
              for (int64_t r = rb; r < re; ++r) drop[size_t(r * K + g + j)] = 1;
        }
      }
      break;
    }
    case Structure::Kind::block: {
      const int64_t br = o.structure.block_rows, bc = o.structure.block_cols;
      const int64_t nbr = (M + br - 1) / br, nbc = (K + bc - 1) / bc;
      // Mean score, so partial edge blocks compete fairly.
      std::vector<float> bs(size_t(nbr * nbc));
      for (int64_t i = 0; i < nbr; ++i)
        for (int64_t j = 0; j < nbc; ++j) {
          double s = 0;
          int64_t n = 0;
          for (int64_t r = i * br; r < std::min(M, (i + 1) * br); ++r)
            for (int64_t c = j * bc; c < std::min(K, (j + 1) * bc); ++c, ++n) s += score[size_t(r * K + c)];
          bs[size_t(i * nbc + j)] = float(s / double(n));
        }
      std::vector<uint8_t> bdrop(bs.size(), 0);
      if (o.granularity == Granularity::layer) {
        drop_lowest(bs.data(), bs.size(), count_for(o.sparsity, bs.size()), bdrop.data());
      } else {
        for (int64_t i = 0; i < nbr; ++i) {
          drop_lowest(&bs[size_t(i * nbc)], size_t(nbc), count_for(o.sparsity, size_t(nbc)),
                      &bdrop[size_t(i * nbc)]);
        }
      }
      for (int64_t r = 0; r < M; ++r)
        for (int64_t c = 0; c < K; ++c)
          drop[size_t(r * K + c)] = bdrop[size_t((r / br) * nbc + c / bc)];
      break;
    }
  }
  for (auto& d : drop) d = !d;  // now the keep mask
  return drop;
}

Result<HostMatrix> apply_mask(const ConstMatrixView& w, const std::vector<uint8_t>& keep) {
  SPARROW_RETURN_IF_ERROR(check_view(w, "W"));
  if (int64_t(keep.size()) != w.rows * w.cols) return invalid_argument("mask size does not match W");
  HostMatrix out(w.dtype, w.rows, w.cols);
  const size_t es = dtype_size(w.dtype);
  auto* dst = static_cast<uint8_t*>(out.data());
  const auto* src = static_cast<const uint8_t*>(w.data);
  for (int64_t r = 0; r < w.rows; ++r)
    for (int64_t c = 0; c < w.cols; ++c)
      if (keep[size_t(r * w.cols + c)])
        std::copy_n(src + size_t(r * w.ld + c) * es, es, dst + size_t(r * w.cols + c) * es);
  return out;
}

}  // namespace sparrow::prune
