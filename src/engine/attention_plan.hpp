// Which attention kernel a pass of the GPU backend runs and how many blocks a decode step splits
// each (row, head)'s keys into: the backend's rules, pure functions so they are tested on the CPU
// (tests/cpu/attention_plan_test.cpp).
#pragma once

#include <algorithm>
#include <cstdint>

namespace sparrow::engine {

// `rows` sequences of `heads` query heads at position `pos` (each reads pos + 1 keys): one split
// per `keys_per_split` keys, rounded up to a power of two (a captured graph per count), then
// halved until rows x heads x splits blocks fit `wave_blocks` (the split kernel's blocks that
// are resident at once on the whole GPU), at most `max_splits` (the partials buffer's). Early in
// a long context one block per head takes every key and no combine kernel runs; deeper, more
// blocks read the cache at once, but a second wave of blocks costs more than the splits gain:
// 7B at 90 % on the H200, cache of 2048 keys, batch 1: 9 splits of 32 heads (288 blocks, 264
// resident) 429 t/s, 8 splits 473; batch 4: 2 splits 1007, 4 splits 979 (bench/NOTES-decode.md,
// session 54).
inline int64_t decode_attention_splits(int64_t rows, int64_t heads, int64_t pos,
                                       int64_t keys_per_split, int64_t wave_blocks,
                                       int64_t max_splits) {
  const int64_t need = (pos + keys_per_split) / keys_per_split;
  int64_t n = 1;
  while (n < need) n *= 2;
  while (n > 1 && rows * heads * n > wave_blocks) n /= 2;
  return std::max<int64_t>(1, std::min(n, max_splits));
}

// Whether a decode attention grid of `blocks` blocks (rows x heads x splits) asked in 16-warp
// blocks runs the deep key ring instead (gpu_ops.cu, split_kernel_for: 8-warp blocks with eight
// key steps in flight, ~120 registers a thread): only a grid of at most one block per SM, where
// the deep block's registers (as many as a 16-warp two-step block's) cost no residency among the
// grid's own blocks. A tg128 step of the 7B at batch 1 (32 blocks): +1.0 % dense, +1.8 % at 90 %
// on the H200 (session 55); batch 2 and above launch more blocks than SMs.
inline bool decode_attention_deep(int64_t blocks, int64_t sm_count, int block_warps) {
  return block_warps == 16 && blocks <= sm_count;
}

// Whether a prefill pass of `rows` query rows (batch x tokens) runs the tensor-core kernel
// (prefill_attention.hpp) rather than the split-K one. Its blocks take 64 rows of a head and
// cost about the same with 16 rows as with 64, where the split-K kernel's cost grows with the
// rows: 7B dense on the H200 at a cache of 2048 keys (session 54), pp16 at batch 1 ran 2013
// against 2350 t/s, pp16 at batch 4 (64 rows) 8097 against 4700, pp64 at batch 1 8303 against
// 4668. Below 32 rows the split-K kernel.
constexpr int64_t kTensorCorePrefillMinRows = 32;
inline bool prefill_on_tensor_cores(int64_t rows) { return rows >= kTensorCorePrefillMinRows; }

}  // namespace sparrow::engine
