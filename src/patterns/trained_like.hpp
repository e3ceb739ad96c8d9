// Internal pieces of patterns::trained_like, shared with `sparrow synth` (which fills large
// tensors in parallel row chunks with the same statistics).
#pragma once

#include <cstdint>
#include <vector>

#include "core/rng.hpp"
#include "sparrow/dtype.hpp"

namespace sparrow::patterns::detail {

// Log-normal per-output-row and per-input-channel scales, ~1 % outlier input channels (x8).
void draw_channel_scales(Rng& rng, int64_t rows, int64_t cols, std::vector<float>& row_scale,
                         std::vector<float>& col_scale);
// One signed weight: |N(0,1)| * scale * row_scale * col_scale rounded to `t`, never zero.
float trained_like_value(Rng& rng, DType t, double scale, float row_scale, float col_scale);
// Calls of rng.next() each trained_like_value makes, always (one Rng::normal: two uniforms):
// trained_like jumps its generator by this much per element to fill blocks in parallel.
constexpr uint64_t kDrawsPerValue = 2;

}  // namespace sparrow::patterns::detail
