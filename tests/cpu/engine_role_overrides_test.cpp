// The GPU engine's experiment knobs SPARROW_ENGINE_KERNELS / SPARROW_ENGINE_SKIP /
// SPARROW_ENGINE_READ_ONLY (src/engine/role_overrides.hpp): what they accept and what they
// refuse, on the host.
#include <gtest/gtest.h>

#include <string>

#include "engine/role_overrides.hpp"

using namespace sparrow;
using namespace sparrow::engine;

TEST(EngineRoleOverrides, EmptyMeansNone) {
  auto o = parse_role_overrides("", "");
  ASSERT_TRUE(o.ok());
  EXPECT_FALSE(o->any());
  EXPECT_FALSE(o->outputs_meaningless());
  EXPECT_EQ(o->describe(), "");
}

TEST(EngineRoleOverrides, ForcesKernelsAndSkipsRoles) {
  auto o = parse_role_overrides("o=tca_bme.mma, down = tca_bme.decode", "gate_up,lm_head");
  ASSERT_TRUE(o.ok()) << o.status().to_string();
  ASSERT_NE(o->kernel[int(LayerRole::o)], nullptr);
  EXPECT_STREQ(o->kernel[int(LayerRole::o)]->name, "tca_bme.mma");
  ASSERT_NE(o->kernel[int(LayerRole::down)], nullptr);
  EXPECT_STREQ(o->kernel[int(LayerRole::down)]->name, "tca_bme.decode");
  EXPECT_EQ(o->kernel[int(LayerRole::qkv)], nullptr);
  EXPECT_TRUE(o->skip[int(LayerRole::gate_up)]);
  EXPECT_TRUE(o->skip[int(LayerRole::lm_head)]);
  EXPECT_FALSE(o->skip[int(LayerRole::o)]);
  EXPECT_TRUE(o->any());
  EXPECT_TRUE(o->outputs_meaningless());
  EXPECT_EQ(o->describe(), "o=tca_bme.mma, down=tca_bme.decode; skip gate_up, lm_head");
  EXPECT_STREQ(role_name(LayerRole::gate_up), "gate_up");
  auto ops = parse_role_overrides("", "swiglu, o, attention");
  ASSERT_TRUE(ops.ok()) << ops.status().to_string();
  EXPECT_TRUE(ops->skip_attention);
  EXPECT_TRUE(ops->skip_swiglu);
  EXPECT_TRUE(ops->skip[int(LayerRole::o)]);
  EXPECT_TRUE(ops->outputs_meaningless());
  EXPECT_EQ(ops->describe(), "skip o, attention, swiglu");
  auto one_op = parse_role_overrides("", "swiglu");
  ASSERT_TRUE(one_op.ok());
  EXPECT_TRUE(one_op->outputs_meaningless());
  EXPECT_FALSE(one_op->skip_attention);
  auto forced_only = parse_role_overrides("o=tca_bme.mma", "");
  ASSERT_TRUE(forced_only.ok());
  EXPECT_TRUE(forced_only->any());
  EXPECT_FALSE(forced_only->outputs_meaningless());
}

TEST(EngineRoleOverrides, ReadOnlyRoles) {
  auto o = parse_role_overrides("o=tca_bme.mma", "down", " qkv, gate_up ,lm_head");
  ASSERT_TRUE(o.ok()) << o.status().to_string();
  EXPECT_TRUE(o->read_only[int(LayerRole::qkv)]);
  EXPECT_TRUE(o->read_only[int(LayerRole::gate_up)]);
  EXPECT_TRUE(o->read_only[int(LayerRole::lm_head)]);
  EXPECT_FALSE(o->read_only[int(LayerRole::o)]);
  EXPECT_FALSE(o->read_only[int(LayerRole::down)]);
  EXPECT_TRUE(o->any());
  EXPECT_TRUE(o->outputs_meaningless());
  EXPECT_EQ(o->describe(),
            "o=tca_bme.mma; skip down; read only qkv, gate_up, lm_head (8 blocks per SM, every "
            "byte before the wait)");
  auto only = parse_role_overrides("", "", "o");
  ASSERT_TRUE(only.ok());
  EXPECT_TRUE(only->outputs_meaningless());
  EXPECT_EQ(only->describe(), "read only o (8 blocks per SM, every byte before the wait)");

  auto expect_bad = [](const char* kernels, const char* skip, const char* read, const char* says) {
    auto b = parse_role_overrides(kernels, skip, read);
    ASSERT_FALSE(b.ok()) << read;
    EXPECT_EQ(b.status().code(), Code::invalid_argument);
    EXPECT_NE(b.status().to_string().find(says), std::string::npos) << b.status().to_string();
  };
  expect_bad("", "", "o,o", "role o is named twice");
  expect_bad("", "o", "o", "also forced or skipped");
  expect_bad("o=tca_bme.mma", "", "o", "also forced or skipped");
  expect_bad("", "", "attention", "SPARROW_ENGINE_READ_ONLY: unknown layer role 'attention'");
}

TEST(EngineRoleOverrides, ReadPlan) {
  auto o = parse_role_overrides("", "", "down");
  ASSERT_TRUE(o.ok());
  RoleOverrides plain = o.value();
  ASSERT_TRUE(parse_read_plan("", plain).ok());  // the defaults
  EXPECT_EQ(plain.read_blocks_per_sm, 8);
  EXPECT_EQ(plain.read_early_kib_per_sm, -1);
  EXPECT_FALSE(plain.read_stage_shared);

  RoleOverrides p = o.value();
  const Status s = parse_read_plan(" blocks_per_sm=1, early_kib = 96 ,stage=shared", p);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(p.read_blocks_per_sm, 1);
  EXPECT_EQ(p.read_early_kib_per_sm, 96);
  EXPECT_TRUE(p.read_stage_shared);
  EXPECT_EQ(p.describe(),
            "read only down (1 blocks per SM, 96 KiB per SM before the wait, staged in shared "
            "memory)");
  ASSERT_TRUE(parse_read_plan("early_kib=all,stage=registers", p).ok());
  EXPECT_EQ(p.read_early_kib_per_sm, -1);
  EXPECT_FALSE(p.read_stage_shared);

  auto expect_bad = [&](const char* plan, const char* says) {
    RoleOverrides q = o.value();
    const Status b = parse_read_plan(plan, q);
    ASSERT_FALSE(b.ok()) << plan;
    EXPECT_EQ(b.code(), Code::invalid_argument);
    EXPECT_NE(b.to_string().find(says), std::string::npos) << b.to_string();
  };
  expect_bad("blocks_per_sm=0", "blocks_per_sm is 1..8");
  expect_bad("blocks_per_sm=9", "blocks_per_sm is 1..8");
  expect_bad("blocks_per_sm=two", "blocks_per_sm is 1..8");
  expect_bad("early_kib=-5", "early_kib is a number");
  expect_bad("early_kib=", "early_kib is a number");
  expect_bad("stage=l2", "stage is registers or shared");
  expect_bad("stage=shared", "stage=shared needs early_kib");
  expect_bad("warps=4", "keys: blocks_per_sm, early_kib, stage");
  RoleOverrides none;  // no read-only role: a plan would do nothing
  const Status n = parse_read_plan("blocks_per_sm=1", none);
  EXPECT_EQ(n.code(), Code::invalid_argument);
  EXPECT_NE(n.message().find("none is named"), std::string::npos) << n.to_string();
}

TEST(EngineRoleOverrides, RefusesWhatItCannotDo) {
  auto expect_bad = [](const char* kernels, const char* skip, const char* says) {
    auto o = parse_role_overrides(kernels, skip);
    ASSERT_FALSE(o.ok()) << kernels << " / " << skip;
    EXPECT_EQ(o.status().code(), Code::invalid_argument);
    EXPECT_NE(o.status().to_string().find(says), std::string::npos) << o.status().to_string();
  };
  expect_bad("o_proj=tca_bme.mma", "", "unknown layer role 'o_proj'");
  expect_bad("o=tca_bme.fastest", "", "no kernel named 'tca_bme.fastest'");
  expect_bad("o", "", "is not role=kernel");
  expect_bad("=tca_bme.mma", "", "is not role=kernel");
  expect_bad("o=", "", "is not role=kernel");
  expect_bad("o=tca_bme.mma,o=tca_bme.decode", "", "named twice");
  // attention and swiglu are ops SKIP may name, not layer roles a kernel can be forced for.
  expect_bad("attention=tca_bme.mma", "", "unknown layer role 'attention'");
  expect_bad("", "attention,attention", "attention is named twice");
  expect_bad("", "rope", "ops: attention, swiglu");
  expect_bad("o=tca_bme.mma", "o", "also forced");
  // An empty field is refused, not skipped: it is more likely a lost value.
  expect_bad("o=tca_bme.mma,", "", "'' is not role=kernel");
  expect_bad("", "o,,down", "unknown layer role ''");
}
