// The shipped rule tables, one per GPU, and which one answers (no GPU needed).
#include <gtest/gtest.h>

#include <array>
#include <cstdlib>
#include <optional>
#include <set>
#include <string>

#include "cli_test_util.hpp"
#include "llama_layer_util.hpp"
#include "dispatch/shipped_tables.hpp"
#include "sparrow/dispatch.hpp"

using namespace sparrow;

namespace {

constexpr const char* kH100 = "NVIDIA H100 80GB HBM3";
constexpr const char* kH200 = "NVIDIA H200";

// Sets an environment variable for the object's life (the `sparrow` processes a test starts
// inherit it), then restores what was there.
struct ScopedEnv {
  std::string name;
  std::optional<std::string> old;
  ScopedEnv(const char* n, const char* value) : name(n) {
    if (const char* e = std::getenv(n)) old = e;
    ::setenv(n, value, 1);
  }
  ~ScopedEnv() {
    if (old) ::setenv(name.c_str(), old->c_str(), 1);
    else ::unsetenv(name.c_str());
  }
};

}  // namespace

// Each table says which GPU it was measured on (as cudaDeviceProp::name, which the choice
// compares), no two name one GPU, and each holds its cells in one run per format, as the lookups
// scan them (rule_table.cpp's CellRun).
TEST(ShippedTables, EachNamesItsGpuAndHoldsEachFormatsCellsInOneRun) {
  const auto& tables = shipped_rule_tables();
  ASSERT_GE(tables.size(), 2u);
  std::set<std::string> names;
  for (const ShippedRuleTable& t : tables) {
    SCOPED_TRACE(t.gpu);
    EXPECT_TRUE(names.insert(t.gpu).second) << "two tables for one GPU";
    EXPECT_STRNE(t.gpu, "unknown");
    EXPECT_GT(std::string(t.date).size(), 9u);
    ASSERT_GT(t.count, 100u);
    std::set<Format> done;
    for (size_t i = 0; i < t.count; ++i) {
      if (i > 0 && t.cells[i].format != t.cells[i - 1].format)
        EXPECT_TRUE(done.insert(t.cells[i - 1].format).second) << "format cells split";
      EXPECT_GT(t.cells[i].speedup, 0.0);
    }
  }
  EXPECT_EQ(names.count(kH100), 1u);
  EXPECT_EQ(names.count(kH200), 1u);
  EXPECT_EQ(rule_table_gpus().front(), kH100);  // the default
  EXPECT_EQ(rule_table_gpus().size(), tables.size());
}

// This binary pins the H100's table (rule_table_pin.cpp), as SPARROW_RULE_TABLE_GPU does for a
// user planning for a GPU they are not on; the reasons name it.
TEST(ShippedTables, TheVariableChoosesTheTableAndTheReasonsNameIt) {
  EXPECT_STREQ(rule_table_gpu(), kH100);
  EXPECT_TRUE(rule_table_env_status().ok());
  const auto k = pick_kernel(Format::tca_bme, 0.5, 8, 4096, 4096);
  ASSERT_TRUE(k.ok());
  EXPECT_NE(k->reason.find(kH100), std::string::npos) << k->reason;
}

// Another table answers while a test forces it: its cells, its name in the reasons, and its own
// engine cells (engine_layer.cpp), never the other GPU's: on the H200 a 7B layer at batch 1 and
// 50 % takes the assignment its engine runs measured fastest (macko, tca_bme on o_proj), at batch
// 2 / 70 % the mix session 52 measured fastest, at batch 4 and 8 / 50 % dense (no assignment beat dense there, where the H100's cells pick tca_bme), and at
// batch 32, which no H200 cell covers, the H200 table's per-matmul picks. The H100's table answers
// again afterwards.
TEST(ShippedTables, EngineCellsAnswerOnlyOnTheirGpu) {
  const auto layer = test::llama2_7b_layer(0.5);
  const auto h100 = pick_engine_layer(layer, 8);
  EXPECT_EQ(h100[0].reason.rfind("engine cell", 0), 0u) << h100[0].reason;
  EXPECT_NE(h100[0].reason.find("(H100"), std::string::npos) << h100[0].reason;
  EXPECT_EQ(h100[0].format, Format::tca_bme) << h100[0].reason;
  {
    ScopedActiveRuleTable h200(kH200);
    EXPECT_STREQ(rule_table_gpu(), kH200);
    const auto b8 = pick_engine_layer(layer, 8);
    const auto b1 = pick_engine_layer(layer, 1);
    const Format want_b1[4] = {Format::macko, Format::tca_bme, Format::macko, Format::macko};
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(b8[i].format, Format::dense) << b8[i].reason;
      EXPECT_NE(b8[i].reason.find("(H200"), std::string::npos) << b8[i].reason;
      EXPECT_EQ(b1[i].format, want_b1[i]) << b1[i].reason;
    }
    // Batch 2 / 70 % (session 52): qkv / gate_up macko with o / down tca_bme (1.231x dense) over
    // every layer macko (1.175x); batch 4 / 50 %: dense (tca_bme 0.886x at best).
    const auto b2 = pick_engine_layer(test::llama2_7b_layer(0.3), 2);  // density 0.3
    const auto b4 = pick_engine_layer(layer, 4);
    const Format want_b2[4] = {Format::macko, Format::tca_bme, Format::macko, Format::tca_bme};
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(b2[i].format, want_b2[i]) << b2[i].reason;
      EXPECT_EQ(b4[i].format, Format::dense) << b4[i].reason;
    }
    const auto b32 = pick_engine_layer(layer, 32);
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(b32[i].reason.find("engine cell"), std::string::npos) << b32[i].reason;
      const FormatPick alone = layer[i].pick(32);
      EXPECT_EQ(b32[i].format, alone.format) << i;
      EXPECT_EQ(b32[i].kernel, alone.kernel) << i;
    }
    const auto k = pick_kernel(Format::macko, 0.3, 1, 4096, 4096);
    ASSERT_TRUE(k.ok());
    EXPECT_GT(k->measured_speedup, 0.0) << k->reason;
    EXPECT_NE(k->reason.find(kH200), std::string::npos) << k->reason;
  }
  EXPECT_STREQ(rule_table_gpu(), kH100);
  EXPECT_EQ(pick_engine_layer(layer, 8)[0].reason, h100[0].reason);
}

// A name no table was measured on is an error that lists the shipped GPUs, and the CLI stops on
// it before any work (exit 2); --help still answers.
TEST(ShippedTables, AGpuWithoutATableIsAClearError) {
  ScopedEnv env("SPARROW_RULE_TABLE_GPU", "NVIDIA Z900");
  const Status s = rule_table_env_status();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::invalid_argument);
  EXPECT_NE(s.message().find("NVIDIA Z900"), std::string::npos) << s.message();
  for (const std::string& gpu : rule_table_gpus())
    EXPECT_NE(s.message().find(gpu), std::string::npos) << s.message();
  const test::CliRun r = test::run_cli("formats -M 64 -K 64 -s 0.5");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("SPARROW_RULE_TABLE_GPU"), std::string::npos) << r.out;
  EXPECT_EQ(test::run_cli("--help").code, 0);
}
