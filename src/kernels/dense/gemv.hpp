// dense.gemv: Y = X * W^T for a dense weight and few tokens (decode, N = 1..16), at the bandwidth
// floor. See docs/kernels.md ("dense.gemv") for the design.
#pragma once

#include <cstdint>

#include "kernels/kernel.hpp"
#include "kernels/warp_residency.hpp"

namespace sparrow::kernels::dense_gemv {

struct Config {
  static constexpr int kRowsPerTile = 16;     // one mma.m16n8k16 M tile; a block has 1 or 2
  static constexpr int kStepK = 32;           // K elements a warp consumes per step (4 lanes x 8)
  static constexpr int kStepsInFlight = 4;    // steps whose loads a lane issues before any mma
  // Warps of a block, splitting K between them. One M tile (1..8 tokens, 73-79 registers: 24
  // warps per SM resident) takes this many, two blocks per SM (16 gave 4096-row weights a second
  // wave, session 6), unless fewer warps per block let the whole grid be resident at once (plan's
  // one-wave rule, session 51: 12288 and 22016 rows). Otherwise wide blocks finish soonest, so
  // the grid's last blocks leave SMs idle for the shortest time: 12 warps ran 2-4 % faster than
  // a ~32-warps-per-SM sizing on 12288..32000-row weights (28672x8192: 3 warps, 1.7 waves) and
  // the same elsewhere (session 35, bench/NOTES-decode.md).
  static constexpr int kMaxWarps = 12;
  // Two M tiles: up to a whole SM's resident warps in one block (90-98 registers: 19-21 warps),
  // for weights with fewer 32-row tiles than SMs, where a block is alone on its SM anyway.
  static constexpr int kMaxWarpsTwoTiles = 20;
  static constexpr int kMinWarpsOneWave = 2;  // the fewest the one-wave rule (plan) gives a block
  static constexpr int max_warps(int m_tiles) {
    return m_tiles > 1 ? kMaxWarpsTwoTiles : kMaxWarps;
  }
  static constexpr int kTokensPerPass = 16;   // two mma N tiles; more tokens run as more passes
  // Two M tiles (9..16 tokens) take 90-98 registers, ~20 warps per SM. Where their grid cannot be
  // resident at once (plan), blocks are sized for ~32 warps per SM (a 12-warp block would be alone
  // on its SM: measured 1.04-1.08x the time on 22016x4096 and 32000x4096).
  static constexpr int kTargetWarpsPerSm = 32;
};

// Blocks of w warps resident per SM, w = 1..max_warps(m_tiles) (0 unused; measure_warp_residency).
using Residency = WarpResidency<Config::kMaxWarpsTwoTiles>;

struct LaunchPlan {
  int64_t blocks = 0;  // one per 16 * m_tiles rows of W
  int warps = 0;       // warps per block (K split)
};

// Launch shape for an M x K weight (ld = K rounded up to 8), m_tiles 16-row tiles per block, on
// a device with `sm_count` SMs. Without `one_wave`: kMaxWarps warps per block for one tile,
// ~kTargetWarpsPerSm warps per SM for two; never more warps per block than there are K steps.
// With `one_wave` (the instance's residency): as many warps per block as let the whole grid be
// resident at once (at least kMinWarpsOneWave), else the rule above. requested_warps > 0
// overrides the warps per block (up to Config::max_warps(m_tiles)).
LaunchPlan plan(int64_t m, int64_t ld, int sm_count, int m_tiles, int requested_warps = 0,
                const Residency* one_wave = nullptr);

Status run(const Problem& p, Stream stream);
// run's kernel with the choices its experiment knobs make spelled out (tests run each variant).
struct Variant {
  bool l2_prefetch = true;  // weight loads ask L2 for the whole 128-byte line
  int two_tile_warps = 0;   // > 0: warps per block of the two-tile instance (else plan's rule)
  int one_tile_warps = 0;   // > 0: warps per block of the one-tile instance (else plan's rule)
  bool one_tile_one_wave = true;  // the one-wave plan for one tile too (two tiles always)
};
Status run_with(const Problem& p, Stream stream, const Variant& v);
// dense.gemv takes MatmulOptions::input_rms at every N: each block reads all of X for its dot
// products and sums the squares of what it reads on the way.
bool takes_input_rms(const Weight& w, int64_t n);
// And MatmulOptions::output_swiglu at every N (of a weight of 2F rows: kernels::takes_output_swiglu
// checks the count): the tiles pair gate row o with up row F + o instead of 16 neighbouring rows.
bool takes_output_swiglu(const Weight& w, int64_t n);

}  // namespace sparrow::kernels::dense_gemv
