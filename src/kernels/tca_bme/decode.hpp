// tca_bme.decode: Y = X * W^T for a tca_bme (bitmap) weight and few tokens (N = 1..16 per pass),
// the bitmaps decoded straight into mma.m16n8k16 A fragments. See docs/kernels.md
// ("tca_bme.decode").
#pragma once

#include <cstdint>

#include "kernels/kernel.hpp"

namespace sparrow::kernels::tca_bme_decode {

struct Config {
  static constexpr int kRowsPerBlock = 16;   // one tensor-core strip of a 64-row group row
  static constexpr int kMaxWarps = 16;       // warps of a block, splitting the groups along K
  static constexpr int kTokensPerPass = 16;  // two mma N tiles
  static constexpr int kTargetWarpsPerSm = 32;
  // Values of one strip of one group: at most 16 x 64, plus one chunk for 16-byte alignment.
  static constexpr int kStripChunks = 16 * 64 / 8 + 1;  // 16-byte chunks
};

struct LaunchPlan {
  int64_t blocks = 0;  // one per 16-row strip
  int warps = 0;
};

LaunchPlan plan(int64_t m, int64_t groups_k, int sm_count);

Status run(const Problem& p, Stream stream);

}  // namespace sparrow::kernels::tca_bme_decode
