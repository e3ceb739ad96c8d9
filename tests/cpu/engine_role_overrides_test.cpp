// The GPU engine's experiment knobs SPARROW_ENGINE_KERNELS / SPARROW_ENGINE_SKIP
// (src/engine/role_overrides.hpp): what they accept and what they refuse, on the host.
#include <gtest/gtest.h>

#include <string>

#include "engine/role_overrides.hpp"

using namespace sparrow;
using namespace sparrow::engine;

TEST(EngineRoleOverrides, EmptyMeansNone) {
  auto o = parse_role_overrides("", "");
  ASSERT_TRUE(o.ok());
  EXPECT_FALSE(o->any());
  EXPECT_FALSE(o->skips());
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
  EXPECT_TRUE(o->skips());
  EXPECT_EQ(o->describe(), "o=tca_bme.mma, down=tca_bme.decode; skip gate_up, lm_head");
  EXPECT_STREQ(role_name(LayerRole::gate_up), "gate_up");
  auto ops = parse_role_overrides("", "swiglu, o, attention");
  ASSERT_TRUE(ops.ok()) << ops.status().to_string();
  EXPECT_TRUE(ops->skip_attention);
  EXPECT_TRUE(ops->skip_swiglu);
  EXPECT_TRUE(ops->skip[int(LayerRole::o)]);
  EXPECT_TRUE(ops->skips());
  EXPECT_EQ(ops->describe(), "skip o, attention, swiglu");
  auto one_op = parse_role_overrides("", "swiglu");
  ASSERT_TRUE(one_op.ok());
  EXPECT_TRUE(one_op->skips());
  EXPECT_FALSE(one_op->skip_attention);
  auto forced_only = parse_role_overrides("o=tca_bme.mma", "");
  ASSERT_TRUE(forced_only.ok());
  EXPECT_TRUE(forced_only->any());
  EXPECT_FALSE(forced_only->skips());
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
}
