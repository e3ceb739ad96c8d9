// Causal attention of a prefill pass (rows.count tokens of each sequence, at positions *pos0 ..
// *pos0 + count - 1) on the tensor cores: a block takes 64 query rows of one head and walks the
// cached keys 0 .. the last row's position in tiles of 64, FlashAttention-2 style
// (prefill_attention.cu says how). k and v must already be in the caches (rope_and_cache).
// fp16 / bf16, head_dim 64 or 128, heads a multiple of kv_heads, q pairs 4-byte aligned and the
// caches 16-byte aligned (prefill_attention_fits); the GPU backend sends prefill passes here when
// they fit and pay (attention_plan.hpp). The probabilities are rounded to the element type before
// the P V product (as in FlashAttention), so results differ from the split-K kernel's in the last
// bits.
#pragma once

#include "engine/gpu_ops.hpp"

namespace sparrow::engine::gpu {

bool prefill_attention_fits(const void* q, const void* k_cache, const void* v_cache,
                            const RowLayout& rows, const AttentionShape& s);

// out: (batch * count, heads * head_dim), packed.
Status prefill_attention(const void* q, const void* k_cache, const void* v_cache, void* out,
                         const RowLayout& rows, const AttentionShape& s, DType t, Stream stream);

}  // namespace sparrow::engine::gpu
