// The split-K choice of the tensor-core SpMM kernels as plain host arithmetic (no CUDA), so the
// CPU tests can check it: launch.cuh asks the device how many blocks of each split count run at
// once and passes those counts here.
#pragma once

#include <cstdint>

namespace sparrow::kernels::tc {

// The portable cluster size limit. 16-block clusters (H100's non-portable limit) were measured
// slower: 4096x4096 N=8 tca_bme 23.0 us with up to 16 splits vs 19.9 us with up to 8
// (bench/NOTES-tc.md): per-block prologue/epilogue costs grow with the split count.
constexpr int kMaxSplits = 8;
constexpr int kMinStepsPerSplit = 4;  // below this the pipeline prologue dominates a split

// What one block costs beyond its k steps (the offsets and the first stage before the pipeline
// runs, the split-K reduction after it), in k steps. Without it the cost below let a third wave
// of 7 splits (10 steps each) beat one wave of 2 (32 steps): tca_bme.mma on 22016x4096 at N = 32
// ran 66.8 us with 7 splits and 63.2-63.5 us with 2 (H100, session 44, SPARROW_TC_MAX_SPLITS).
constexpr int kSplitFixedSteps = kMinStepsPerSplit;

// The split count s in 1..most that minimises (waves of blocks) x (k steps per split + the fixed
// steps of a block), where slots[s - 1] is how many blocks run at once with clusters of s (<= 0:
// that size does not fit). Ties go to fewer splits (less epilogue work); 1 if nothing fits.
inline int choose_splits_by_cost(const int64_t* slots, int most, int64_t output_tiles,
                                 int64_t k_steps, int fixed_steps = kSplitFixedSteps) {
  int best = 1;
  int64_t best_cost = INT64_MAX;
  for (int s = 1; s <= most; ++s) {
    if (slots[s - 1] <= 0) continue;
    const int64_t waves = (output_tiles * s + slots[s - 1] - 1) / slots[s - 1];
    const int64_t cost = waves * ((k_steps + s - 1) / s + fixed_steps);
    if (cost < best_cost) best_cost = cost, best = s;
  }
  return best;
}

// How the split-K reduction by push (mma.cuh, store_reduced_pushed) deals a tile's quads (four
// consecutive output elements along M) to the blocks of a cluster: chunks of kPushChunk quads
// round robin, so that each block stores whole 32-byte sectors of a 16-bit Y row and each gets a
// share at any split count. Every block sends the quads others own into the owner's receive area
// of `splits` slots of slot() quads (slot q from block q); the owner sums its quads in rank order.
constexpr int kPushChunk = 4;
struct PushedSlices {
  int quads;   // of the tile (rows below N x quads per row, a multiple of kPushChunk)
  int splits;  // blocks of the cluster

  constexpr int round() const { return kPushChunk * splits; }  // quads dealt per round of chunks
  constexpr int slot() const { return (quads + round() - 1) / round() * kPushChunk; }
  constexpr int owner(int e) const { return e / kPushChunk % splits; }
  // Quad e's place in its owner's slot of each block.
  constexpr int index(int e) const { return e / round() * kPushChunk + e % kPushChunk; }
  // How many quads block `rank` owns, and the tile quad of its i-th.
  constexpr int owned(int rank) const {
    const int full = quads / round(), rest = quads - full * round() - rank * kPushChunk;
    return full * kPushChunk + (rest < 0 ? 0 : rest < kPushChunk ? rest : kPushChunk);
  }
  constexpr int quad(int rank, int i) const {
    return i / kPushChunk * round() + rank * kPushChunk + i % kPushChunk;
  }
};
// The most quads a receive area holds, for any split count up to kMaxSplits.
constexpr int64_t push_receive_quads(int64_t tile_quads) {
  return tile_quads + int64_t(kMaxSplits) * kPushChunk;
}

}  // namespace sparrow::kernels::tc
