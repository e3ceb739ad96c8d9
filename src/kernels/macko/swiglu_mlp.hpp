// macko.swiglu_mlp: a Llama MLP block for one token in one persistent kernel,
//   x += down · (silu(g) ⊙ u),  [g; u] = gate_up · norm(input),
// for macko weights (gate_up the [gate; up] rows stacked, down (hidden, inter)).
//
// Why one kernel: at batch 1 the decode step is a chain of short kernels, and at high sparsity each
// matmul is too small to reach DRAM bandwidth on its own (7B, 90 %: gate_up 22.5 MB in ~17 µs,
// down 11.3 MB in ~12.5 µs inside the engine's chain). Session 28's read-only proxy showed the
// targets need each matmul's weight bytes read while the kernel before it still computes. Here
// every block copies its share of down's weights into shared memory (one bulk copy, before the
// wait for the previous kernel) while the grid computes gate_up; one grid-wide barrier separates
// the two phases; down then decodes from shared memory.
//
// One block per SM, every block resident at once (the grid barrier needs it): the grid is the SM
// count, each block takes a whole SM's shared memory, and the next kernel is only allowed to
// launch after the barrier, so its blocks cannot take an SM a block of this grid still waits for.
#pragma once

#include <cstdint>

#include "sparrow/formats/macko.hpp"
#include "sparrow/status.hpp"
#include "sparrow/matmul.hpp"

namespace sparrow::kernels::macko_swiglu_mlp {

struct Config {
  static constexpr int kThreads = 1024;  // 32 warps: one block per SM
  static constexpr int kChunk = 8;       // entries a lane decodes per step (16 bytes of values)
};

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
};

// Whether the kernel runs these weights: macko, same dtype (fp16 / bf16), shapes that chain
// (gate_up 2I x H, down H x I) and fit its 32-bit index arithmetic. An error says what does not.
Status check(const macko::Matrix& gate_up, const macko::Matrix& down);

// Shared memory the down stage gets per block on this device (bytes; the rest of down's rows of a
// block, past the stage, are read from global memory after the barrier).
int64_t stage_bytes(int64_t hidden, int64_t inter, int max_smem_per_block);

Status run(const Call& c, Stream stream);

}  // namespace sparrow::kernels::macko_swiglu_mlp
