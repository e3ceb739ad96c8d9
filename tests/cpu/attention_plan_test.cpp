// The GPU backend's attention rules: a decode step's splits, its key ring, the prefill kernel;
// and the argument checks of rope_and_cache, which refuse before anything reaches a GPU.
#include "engine/attention_plan.hpp"

#include <gtest/gtest.h>

#include "engine/gpu_ops.hpp"

using sparrow::engine::decode_attention_deep;
using sparrow::engine::decode_attention_splits;
using sparrow::engine::prefill_on_tensor_cores;

namespace {
// The 7B on the H200: 32 heads, 2 resident 16-warp blocks on each of 132 SMs, 256 keys a split.
constexpr int64_t kHeads = 32, kWave = 264, kKeys = 256, kMax = 1 << 20;
}  // namespace

TEST(AttentionPlan, OneSplitPer256KeysReadRoundedUpToAPowerOfTwo) {
  EXPECT_EQ(decode_attention_splits(1, kHeads, 0, kKeys, kWave, kMax), 1);
  EXPECT_EQ(decode_attention_splits(1, kHeads, 254, kKeys, kWave, kMax), 1);  // 255 keys
  EXPECT_EQ(decode_attention_splits(1, kHeads, 255, kKeys, kWave, kMax), 1);  // 256 keys
  EXPECT_EQ(decode_attention_splits(1, kHeads, 256, kKeys, kWave, kMax), 2);  // 257 keys
  EXPECT_EQ(decode_attention_splits(1, kHeads, 600, kKeys, kWave, kMax), 4);  // 3 needed
  EXPECT_EQ(decode_attention_splits(1, kHeads, 1100, kKeys, kWave, kMax), 8);
}

TEST(AttentionPlan, BlocksOfTheStepFitOneWave) {
  // 2048 keys at batch 1 ask for 9 -> 16 splits: 512 blocks, 264 resident; 8 splits (256) fit.
  EXPECT_EQ(decode_attention_splits(1, kHeads, 2100, kKeys, kWave, kMax), 8);
  EXPECT_EQ(decode_attention_splits(1, kHeads, 4000, kKeys, kWave, kMax), 8);
  // Batch 4: 128 blocks a split, so 2; batch 8 and 32 fill the wave with one split.
  EXPECT_EQ(decode_attention_splits(4, kHeads, 2100, kKeys, kWave, kMax), 2);
  EXPECT_EQ(decode_attention_splits(8, kHeads, 2100, kKeys, kWave, kMax), 1);
  EXPECT_EQ(decode_attention_splits(32, kHeads, 4000, kKeys, kWave, kMax), 1);
  // More blocks fit (a smaller head count, or a GPU with more SMs): more splits.
  EXPECT_EQ(decode_attention_splits(1, 8, 4000, kKeys, kWave, kMax), 16);
  EXPECT_EQ(decode_attention_splits(1, kHeads, 4000, kKeys, 4 * kWave, kMax), 16);
  // Never fewer than one, even when one split's blocks exceed the wave.
  EXPECT_EQ(decode_attention_splits(64, 64, 4000, kKeys, kWave, kMax), 1);
  EXPECT_EQ(decode_attention_splits(1, kHeads, 4000, kKeys, 0, kMax), 1);
}

TEST(AttentionPlan, AtMostTheBuffersSplits) {
  // The backend's partials buffer holds ceil(context / 256) splits: 9 for a 2192-key context.
  EXPECT_EQ(decode_attention_splits(1, 8, 2100, kKeys, kWave, 9), 9);
  EXPECT_EQ(decode_attention_splits(1, kHeads, 2100, kKeys, kWave, 9), 8);
  EXPECT_EQ(decode_attention_splits(1, kHeads, 2100, kKeys, kWave, 1), 1);
}

TEST(AttentionPlan, KeysPerSplitIsTheKnob) {
  EXPECT_EQ(decode_attention_splits(1, kHeads, 1100, 512, kWave, kMax), 4);  // 3 needed
  EXPECT_EQ(decode_attention_splits(1, kHeads, 1100, 2048, kWave, kMax), 1);
}

TEST(AttentionPlan, PrefillPassesOf32RowsOrMoreRunOnTheTensorCores) {
  EXPECT_FALSE(prefill_on_tensor_cores(2));
  EXPECT_FALSE(prefill_on_tensor_cores(16));  // pp16 at batch 1
  EXPECT_FALSE(prefill_on_tensor_cores(31));
  EXPECT_TRUE(prefill_on_tensor_cores(32));
  EXPECT_TRUE(prefill_on_tensor_cores(64));  // pp16 at batch 4, pp64 at batch 1
  EXPECT_TRUE(prefill_on_tensor_cores(512));
}

TEST(AttentionPlan, DeepRingOnlyInGridsOfAtMostOneBlockPerSm) {
  constexpr int64_t kSms = 132;
  EXPECT_TRUE(decode_attention_deep(32, kSms, 16));    // tg128 at batch 1: a block per head
  EXPECT_TRUE(decode_attention_deep(128, kSms, 16));   // batch 1, 4 splits
  EXPECT_TRUE(decode_attention_deep(132, kSms, 16));
  EXPECT_FALSE(decode_attention_deep(133, kSms, 16));
  EXPECT_FALSE(decode_attention_deep(256, kSms, 16));  // batch 2, 4 splits
  EXPECT_FALSE(decode_attention_deep(32, kSms, 4));    // other block sizes keep their own
  EXPECT_FALSE(decode_attention_deep(32, kSms, 8));
}

TEST(RopeAndCache, RefusesWhatRotaryEmbeddingsCannotRotate) {
  using sparrow::Code;
  using sparrow::DType;
  namespace gpu = sparrow::engine::gpu;
  int32_t pos = 0;
  const gpu::RowLayout one{1, 1, &pos};
  int dummy = 0;
  void* p = &dummy;
  // head_dim odd (its last element has no pair), zero; q heads not a multiple of the kv heads.
  for (const gpu::AttentionShape s : {gpu::AttentionShape{5, 5, 7, 16}, {4, 4, 0, 16},
                                      {6, 4, 8, 16}, {4, 0, 8, 16}}) {
    EXPECT_EQ(gpu::rope_and_cache(p, p, p, p, p, nullptr, one, s, DType::fp16, nullptr).code(),
              Code::invalid_argument)
        << s.heads << " / " << s.kv_heads << " heads, head_dim " << s.head_dim;
  }
}
