// `sparrow formats` as a user runs it: exit codes, table and JSON output.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "cli_test_util.hpp"

using sparrow::test::CliRun;
using sparrow::test::run_cli;

TEST(CliFormats, TableHasEveryFormatAndSucceeds) {
  CliRun r = run_cli("formats --rows 130 --cols 70 --sparsity 0.5 --seed 3");
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* f : {"dense", "csr", "macko", "tca_bme", "tiled_csl"}) {
    EXPECT_NE(r.out.find(f), std::string::npos) << f << "\n" << r.out;
  }
  EXPECT_EQ(r.out.find("FAIL"), std::string::npos) << r.out;
}

TEST(CliFormats, JsonHasTheDocumentedKeys) {
  int code = -1;
  const std::string out = run_cli("formats -M 64 -K 96 -s 0.7 --pattern nm:2:4 --json", code,
                                  sparrow::test::Stderr::drop);
  ASSERT_EQ(code, 0) << out;
  auto j = nlohmann::json::parse(out);
  ASSERT_TRUE(j.is_array());
  bool saw_nm = false;
  for (const auto& row : j) {
    for (const char* key : {"format", "bytes", "d_eff", "encode_ms", "roundtrip"}) {
      EXPECT_TRUE(row.contains(key)) << key;
    }
    EXPECT_TRUE(row["roundtrip"].get<bool>()) << row.dump();
    saw_nm = saw_nm || row["format"] == "nm";
  }
  EXPECT_TRUE(saw_nm);
}

TEST(CliFormats, BadArgumentsExitTwoWithOneLine) {
  for (const char* args : {"formats --rows 0 --cols 8 --sparsity 0.5",
                           "formats --rows 8 --cols -3 --sparsity 0.5",
                           "formats --rows 8 --cols 8 --sparsity 1.0",
                           "formats --rows 8 --cols 8 --sparsity -0.1",
                           "formats --rows 8 --cols 8 --sparsity 0.5 --pattern zigzag",
                           "formats --rows 8 --cols 8 --sparsity 0.5 --pattern nm:3:2",
                           "formats --rows 8 --cols 8 --sparsity 0.5 --dtype int8",
                           "formats --rows 8 --cols 8", "frobnicate"}) {
    CliRun r = run_cli(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
    EXPECT_FALSE(r.out.empty()) << args;
  }
}

TEST(CliFormats, NegativeSeedsAreRefusedEverywhere) {
  // CLI11 alone reads "-1" into a uint64_t as 2^64 - 1; every --seed refuses it.
  for (const char* args :
       {"formats --rows 8 --cols 8 --sparsity 0.5 --seed -1", "synth --preset tiny --out x --seed -2",
        "prune --model x --out y --sparsity 0.5 --seed -1", "run -m x --tokens 1 --seed -5"}) {
    CliRun r = run_cli(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
    EXPECT_NE(r.out.find("non-negative"), std::string::npos) << args << "\n" << r.out;
  }
  // The largest seed still parses.
  CliRun r = run_cli("formats --rows 8 --cols 8 --sparsity 0.5 --seed 18446744073709551615");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("seed 18446744073709551615"), std::string::npos) << r.out;
}

TEST(CliFormats, HelpAndVersion) {
  EXPECT_EQ(run_cli("--help").code, 0);
  CliRun v = run_cli("--version");
  EXPECT_EQ(v.code, 0);
  EXPECT_NE(v.out.find("sparrow"), std::string::npos);
  EXPECT_EQ(run_cli("formats --help").code, 0);
}
