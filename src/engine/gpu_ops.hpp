// The GPU backend's non-matmul kernels (src/engine/gpu_ops.cu): embeddings, RMSNorm, RoPE + KV
// cache append, split-K decode/prefill attention, SwiGLU, row gather and argmax. Activations are
// the model's dtype (fp16 or bf16) with fp32 arithmetic inside every kernel. All launches are
// asynchronous on `stream`, allocate nothing and are CUDA-graph capturable; positions are read
// from device memory so a captured decode step serves every position.
#pragma once

#include <cstdint>

#include "sparrow/dtype.hpp"
#include "sparrow/matmul.hpp"
#include "sparrow/status.hpp"

namespace sparrow::engine::gpu {

// x[r, :] = embed[tokens[r], :]. x: (rows, hidden), embed: (vocab, hidden).
Status embed(const int32_t* tokens, const void* embed, void* x, int64_t rows, int64_t hidden,
             DType t, Stream stream);

// out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight (weight fp32).
Status rms_norm(const void* x, const float* weight, float eps, void* out, int64_t rows,
                int64_t hidden, DType t, Stream stream);

// The rows of one pass: `batch` sequences x `count` tokens, row r = b * count + i at position
// *pos0 + i. rope_and_cache rotates q (rows, heads * head_dim) in place and k, and writes k and
// v into the caches (batch, context, kv_heads, head_dim) at their positions; head_dim must be
// even and heads a multiple of kv_heads (invalid_argument otherwise).
struct RowLayout {
  int64_t batch = 1, count = 1;
  const int32_t* pos0 = nullptr;  // device: position of each sequence's first row in this pass
  // Row strides (elements) of q and of k / v; 0: packed rows (heads * head_dim, kv_heads *
  // head_dim). q, k and v as column blocks of one fused projection output share one stride.
  int64_t q_ld = 0, kv_ld = 0;
};
struct AttentionShape {
  int64_t heads = 0, kv_heads = 0, head_dim = 0, context = 0;
};
Status rope_and_cache(void* q, const void* k, const void* v, void* k_cache, void* v_cache,
                      const float* inv_freq, const RowLayout& rows, const AttentionShape& s,
                      DType t, Stream stream);

// Flash-decoding: each (row, head) attends over positions 0 .. its own, split into `n_splits`
// ranges of `split_len` keys processed by separate blocks (partials: rows * heads * n_splits *
// (head_dim + 2) floats), then combined by a second kernel; with one split the first kernel
// writes out itself (no second launch; partials unused). split_len 0: each row's keys are shared
// evenly by the n_splits blocks (whatever its position). out: (rows, heads * head_dim).
// head_dim <= 256.
// Decode steps (rows.count == 1) can fold rope_and_cache into attention (`rope` non-null): q, k
// and v are then the projections before rotation (q is read, not rotated in place). Every block
// rotates its q head; the block whose keys include the row's own position rotates the new key,
// uses it from shared memory, and (the first q head of each kv group) appends k and v to the
// caches. Same arithmetic and rounding as rope_and_cache followed by attention: the outputs and
// caches are bit-identical. One kernel fewer per layer. With `rope` (and head_dim 64 / 128 / 256)
// the kernel reads rows.pos0 and the caches' positions below each row's own before it waits for
// the previous kernel (dependent launch): those must not be written by the kernels of the same
// step (the engine stages pos0 from the host; earlier positions come from earlier steps).
// `block_warps` (4, 8 or 16): warps per split block of the head_dim 64 / 128 / 256 kernel, which
// take the split's keys in turn (the other head_dims run 4): more warps take a split's keys in
// fewer dependent steps. A grid of at most one block per SM asked in 16-warp blocks runs 8-warp
// blocks with more key steps in flight instead (decode_attention_deep in attention_plan.hpp;
// SPARROW_ENGINE_ATTN_DEEP=0 turns that off).
struct DecodeRope {
  const void* k = nullptr;  // (rows, kv_ld) keys before rotation
  const void* v = nullptr;  // (rows, kv_ld)
  void* k_cache = nullptr;  // the caches attention reads (written at each row's position)
  void* v_cache = nullptr;
  const float* inv_freq = nullptr;  // (head_dim / 2)
};
Status attention(const void* q, const void* k_cache, const void* v_cache, void* out,
                 float* partials, const RowLayout& rows, const AttentionShape& s, int64_t split_len,
                 int64_t n_splits, DType t, Stream stream, const DecodeRope* rope = nullptr,
                 int block_warps = 4);
size_t attention_partials_floats(int64_t rows, const AttentionShape& s, int64_t n_splits);
// Blocks of attention's split kernel (16-byte aligned caches of s.head_dim, block_warps warps)
// that fit one SM at once on the current device: the engine sizes a decode step's splits so that
// its rows * heads * n_splits blocks run in one wave.
Result<int> attention_blocks_per_sm(const AttentionShape& s, DType t, int block_warps);

// out[r, j] = silu(gate[r * ld + j]) * up[r * ld + j] for r < rows, j < cols; out is packed
// (rows, cols) and may be gate. Separate gate and up buffers: ld = cols; [gate | up] column blocks
// of one fused projection output: up = gate + cols, ld = 2 * cols.
Status swiglu(void* out, const void* gate, const void* up, int64_t rows, int64_t cols, int64_t ld,
              DType t, Stream stream);

// slots[index] = %globaltimer (ns) once the previous kernel on `stream` has finished (dependent
// launch: the next kernel may start early). SPARROW_ENGINE_STAMPS, step_stamps.hpp.
Status stamp(uint64_t* slots, int index, Stream stream);

// dst[b, :] = src[b * count + count - 1, :] (the last row of each sequence).
Status gather_last_rows(const void* src, void* dst, int64_t batch, int64_t count, int64_t cols,
                        DType t, Stream stream);

// Reads every byte of up to kMaxReadArrays device arrays and writes nothing: the experiment
// SPARROW_ENGINE_READ_ONLY (engine/role_overrides.hpp) launches it in place of a matmul to see
// what the step would take if that matmul ran at the speed of a plain read of its weight. Like
// the matmuls it reads weights before waiting for the previous kernel (dependent launch) and
// lets the next kernel launch at once; `plan` says how much it reads before the wait and how.
constexpr int kMaxReadArrays = 4;
struct ReadArrays {
  const void* data[kMaxReadArrays] = {};
  size_t bytes[kMaxReadArrays] = {};
  int count = 0;
};
struct ReadPlan {
  // 256-thread blocks per SM, 1..8: 8 fills every SM as a streaming read does; fewer leave room
  // for the next kernels of the chain to start (and read their weights) while this one runs.
  int blocks_per_sm = 8;
  // Bytes per SM (in array order, spread over the blocks) read before the wait; the rest after
  // it. SIZE_MAX: everything before. A kernel that computes can hold only what fits on chip
  // (shared memory, registers) while its input is not ready.
  size_t early_bytes_per_sm = SIZE_MAX;
  // The early bytes copied into shared memory with cp.async (as a kernel that stages its weight
  // would) instead of loaded into registers and dropped; needs a finite early_bytes_per_sm that
  // fits a block's shared memory.
  bool stage_in_shared = false;
};
Status read_arrays(const ReadArrays& arrays, const ReadPlan& plan, Stream stream);

// What a greedy decode step hands the next one on the device, so steps can be enqueued without
// the host in between (the engine's decode_greedy): row r's pick becomes the next step's token
// tokens[r] (an id outside the vocabulary, which argmax returns when every logit is NaN, is fed
// as 0 so the next step reads a valid embedding; the host sees the bad id and stops), the picks
// also go to history[(pos % history_rows) * history_ld + r] (host-mapped memory the host reads
// once the step's event has fired), and *pos (RowLayout::pos0) advances by one after every row
// has read it (`arrived`: a device word, zero between launches, counts the rows done).
struct GreedyFeed {
  int32_t* tokens = nullptr;
  int32_t* pos = nullptr;
  int32_t* history = nullptr;
  int64_t history_rows = 0;
  int64_t history_ld = 0;
  uint32_t* arrived = nullptr;
};

// out[r] = index of the largest logits[r, :] (lowest index among equal ones); with `feed`, also
// what GreedyFeed says (one row per sequence: a decode step).
Status argmax(const void* logits, int32_t* out, int64_t rows, int64_t vocab, DType t,
              Stream stream, const GreedyFeed* feed = nullptr);

}  // namespace sparrow::engine::gpu
