// Sparsity pattern generators for tests and benchmarks: dense matrices with zeros in the places a
// pruning method would put them. All deterministic by seed; non-zero values are never 0.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "sparrow/formats/nm.hpp"
#include "sparrow/matrix.hpp"

namespace sparrow::patterns {

enum class Kind : uint8_t { random, magnitude, block, nm };

struct Spec {
  Kind kind = Kind::random;
  int block_rows = 1, block_cols = 1;  // block:BxB
  nm::Pattern nm{};                    // nm:N:M[:L]
};
// "random", "magnitude", "block:4x4" (or "block:4"), "nm:2:4", "nm:2:4:8"; error names the
// accepted forms.
Result<Spec> parse(std::string_view text);
std::string to_string(const Spec& s);

// Random unstructured: exactly round(sparsity * rows * cols) zeros at uniformly random places.
HostMatrix random(DType t, int64_t rows, int64_t cols, double sparsity, uint64_t seed);

// Dense trained-like weights (no zeros): |w| ~ |N(0,1)| * `scale` * row_scale[r] * col_scale[c]
// with log-normal per-output-row and per-input-channel scales and ~1 % outlier input channels
// (8x), as seen in trained LLM linear layers (LLM.int8(), Wanda). Used by magnitude() below and
// by `sparrow synth`.
HostMatrix trained_like(DType t, int64_t rows, int64_t cols, uint64_t seed, double scale = 0.02);

// Trained-like weights (per-row and per-column scale spread, a few outlier input channels) with
// the smallest-magnitude round(sparsity * rows * cols) elements zeroed by one global threshold,
// so rows end up with uneven non-zero counts as in magnitude-pruned LLMs.
HostMatrix magnitude(DType t, int64_t rows, int64_t cols, double sparsity, uint64_t seed);

// b_r x b_c blocks, exactly round(sparsity * blocks) of them zero (edge blocks may be partial).
HostMatrix block(DType t, int64_t rows, int64_t cols, int block_rows, int block_cols,
                 double sparsity, uint64_t seed);

// N:M (vector-wise when L > 1) with a random choice of kept vectors per group. The pattern fixes
// the sparsity at 1 - N/M; `extra_sparsity` additionally zeroes that fraction of the kept values.
HostMatrix nm_pattern(DType t, int64_t rows, int64_t cols, const nm::Pattern& p,
                      double extra_sparsity, uint64_t seed);

// Dispatches on `spec`; for nm, `sparsity` beyond 1 - N/M goes into extra zeros.
Result<HostMatrix> generate(const Spec& spec, DType t, int64_t rows, int64_t cols,
                            double sparsity, uint64_t seed);

// Dense random matrix with no zeros (activations, X), values uniform in [-1, 1).
HostMatrix dense_random(DType t, int64_t rows, int64_t cols, uint64_t seed);

}  // namespace sparrow::patterns
