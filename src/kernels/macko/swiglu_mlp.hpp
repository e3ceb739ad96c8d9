// macko.swiglu_mlp: a Llama MLP block for one token in one persistent kernel,
//   x += down · (silu(g) ⊙ u),  [g; u] = gate_up · norm(input),
// for macko weights (gate_up the [gate; up] rows stacked, down (hidden, inter)).
//
// Why one kernel: at batch 1 the decode step is a chain of short kernels, and at high sparsity each
// matmul is too small to reach DRAM bandwidth on its own (7B, 90 %: gate_up 22.5 MB in ~17 µs,
// down 11.3 MB in ~12.5 µs inside the engine's chain). Session 28's read-only proxy showed that
// the targets need each matmul's weight bytes read while the kernel before it still computes.
// Here the weights stream into shared memory by bulk copies, decoupled from the decode: the
// copies start before the previous kernel has finished and run on into down's rows while the grid
// waits at the one barrier between gate_up and down.
//
// One block per SM, every block resident at once (the grid barrier needs it): the grid is the SM
// count, each block takes most of an SM's shared memory, and the next kernel may only launch after
// the barrier, so its blocks cannot take an SM a block of this grid still waits for.
//
// Status: an experiment (SPARROW_ENGINE_FUSED_MLP=1), correct but slower than the separate
// kernels on the H100 (session 32, 7B MLP, bf16, cold L2: 31.1 / 56.3 / 89.7 µs against the
// chain's 27.3 / 46.4 / 70.3 µs at 90 / 70 / 50 %; the engine at batch 1 −3..−4 % / −12 % at 90 /
// 70 %). Its 31 computing warps per SM issue ~1.1 warp instructions per entry (macko.warp_row:
// 0.64) and set the pace, the slowest block sets the barrier, every block then reads all of h,
// and at 50-70 % down's long rows leave most warps idle per slot (bench/NOTES-decode.md,
// "Session 32").
#pragma once

#include <cstdint>

#include "sparrow/formats/macko.hpp"
#include "sparrow/status.hpp"
#include "sparrow/matmul.hpp"

namespace sparrow::kernels::macko_swiglu_mlp {

struct Config {
  static constexpr int kThreads = 1024;  // 32 warps: one block per SM; warp 31 copies weights
  static constexpr int kChunk = 8;       // entries a lane decodes per step (16 bytes of values)
  // The ring of weight entries in shared memory: 160 KB (values and deltas), in slots of
  // kSlotEntries entries unless Call::slot_entries says otherwise (2..kMaxStages slots).
  static constexpr int kRingEntries = 65536;
  static constexpr int kSlotEntries = 16384;
  static constexpr int kMaxStages = 16;
  // gate_up's rows run two per warp (one per half) below this many entries per row on average:
  // a 90 % row of 4096 columns is ~500 entries, two warp steps of 256.
  static constexpr int kHalfWarpBelowEntriesPerRow = 1024;
};

// Points of Call::timeline per block: start, after the wait for the previous kernel, input
// staged, phase A done, after the grid barrier, h staged and the down stage landed, end.
// After them, per fill k < kTracedFills of the ring: when its copy was issued, when it landed
// (seen by warp 0), when its slot was free again (seen by the copying warp), when warp 0 began
// waiting for it.
constexpr int kTimelineFixedPoints = 7;
constexpr int kTracedFills = 24;
constexpr int kTimelinePoints = kTimelineFixedPoints + 4 * kTracedFills;

// Device words the grid barrier keeps between calls (zeroed once, by the caller, before the first).
constexpr int kBarrierWords = 2;

struct Call {
  const macko::Matrix* gate_up = nullptr;  // (2 * inter, hidden) on the device, [gate; up]
  const macko::Matrix* down = nullptr;     // (hidden, inter) on the device
  const void* input = nullptr;  // (hidden) gate_up's input: x itself when input_rms
  void* x = nullptr;            // (hidden) the residual, updated in place: x += down · h
  void* h = nullptr;            // (inter) scratch: silu(g) ⊙ u, rounded to the dtype
  uint32_t* barrier = nullptr;  // kBarrierWords device words, zero before the first call
  bool input_rms = false;       // gate_up's outputs scaled by 1 / rms(input) (gain folded in W)
  float rms_eps = 0.f;
  bool dependent_launch = false;  // launched with PDL (dependent_launch.cuh)
  uint64_t* timeline = nullptr;   // (SM count, kTimelinePoints) ns, or null: where the time goes
  int slot_entries = 0;  // ring slot size in entries, a power of two (0: Config::kSlotEntries)
  int half_warps = -1;    // gate_up's rows two per warp: 1 yes, 0 no, -1 by the average row length
};

// Whether the kernel runs these weights: macko, same dtype (fp16 / bf16), shapes that chain
// (gate_up 2I x H, down H x I), rows that fit a ring slot, 32-bit index arithmetic. An error says
// what does not. (run() also refuses activations that do not fit the GPU's shared memory.)
Status check(const macko::Matrix& gate_up, const macko::Matrix& down, int slot_entries = 0);

Status run(const Call& c, Stream stream);

}  // namespace sparrow::kernels::macko_swiglu_mlp
