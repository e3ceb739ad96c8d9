// macko.warp_row's one-token entry split: Y = X * W^T for one token with the weight's entries dealt
// to warps by count instead of by row (merge-path SpMV), so a long row of a magnitude-pruned
// weight is shared by several warps instead of setting the kernel's time. See entry_split.cu.
#pragma once

#include <cstdint>

#include "kernels/kernel.hpp"
#include "sparrow/formats/macko.hpp"

namespace sparrow::kernels::macko_entry_split {

// Whether macko.warp_row runs a one-token call as an entry split: for uneven rows (the longest
// above kEvenRowsRatio x the average, macko_warp_row::rows_are_even) that fit one wave of the row
// kernel's warps (rows <= sm_count x kOneTokenWarpsPerSm: each long row, or its piece, is then
// one warp's whole work and sets the kernel's time; with more rows, the row kernel's longest-first
// row_order starts the long rows in the first wave), when the call is a dependent launch
// (MatmulOptions::dependent_launch, the engine's), whose prologue (step records, first entries)
// then overlaps the previous kernel. Measured on the H100 (session 39, bench/NOTES-decode.md),
// magnitude rows, N = 1, time against the row kernel: dependent launches on 4096 rows 0.68-0.91x
// at 70-90 % (4096x11008 at 90 %: 13.03 -> 8.87 µs), 0.92-1.01x at 50 %; on 11008-22016 rows
// 1.01-1.14x; plain launches 0.94-1.30x (the prologue's extra loads are not hidden). The 7B
// engine at batch 1 with this rule (o_proj and down_proj where macko): 263.8 / 363.1 / 542.0 ->
// 268.8 / 377.7 / 572.9 t/s at 50 / 70 / 90 %; splitting every uneven weight instead: 264.3 /
// 360.3 / 535.3 -> 264.3 / 372.5 / 548.8. `requested` 0 / 1 overrides the rule (-1: the rule).
bool use_entry_split(int64_t rows, int64_t entries, int64_t max_row_entries, int sm_count,
                     bool dependent, int requested);

// Blocks of a launch: `resident` blocks per SM on `sm_count` SMs (one wave), at least one.
int64_t launch_blocks(int sm_count, int resident);

struct Call {
  const void* x;     // (K) one token, the weight's dtype
  void* y;           // (M)
  const void* bias;  // (M) or null
  bool accumulate;
  bool dependent;    // launched with programmatic dependent launch (dependent_launch.cuh)
  bool input_rms;    // MatmulOptions::input_rms
  float rms_eps;
  int sm_count;
};

// One launch for a device macko weight with its step_rows (derive()). X is copied into shared
// memory when macko_warp_row::one_token_shared_x says so, and the blocks take 16 warps where
// macko_warp_row::one_token_block_warps does (the row kernel's rules).
Status launch(const macko::Matrix& mm, const Call& c, Stream stream);

}  // namespace sparrow::kernels::macko_entry_split
