// `sparrow bench` from the outside, on any machine: bad arguments exit 2 with a message, and a
// machine without a GPU gets a clear message and exit 3 (CI has no GPU; on a GPU it benchmarks).
#include <gtest/gtest.h>

#include <string>

#include "cli_test_util.hpp"

using sparrow::test::CliRun;
using sparrow::test::run_cli;

TEST(BenchCli, UnknownShapeIsABadArgument) {
  CliRun r = run_cli("bench --shapes llama9-1b");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("unknown shape 'llama9-1b'"), std::string::npos) << r.out;
}

TEST(BenchCli, BadListsAreBadArguments) {
  EXPECT_EQ(run_cli("bench --shapes 64x64 --n 0").code, 2);
  EXPECT_EQ(run_cli("bench --shapes 64x64 --n 1,x").code, 2);
  // An empty field of a list is refused (commands.hpp split_cli_list), not skipped.
  const CliRun empty = run_cli("bench --shapes 64x64 --n 1,,2");
  EXPECT_EQ(empty.code, 2);
  EXPECT_NE(empty.out.find("--n: empty value in '1,,2'"), std::string::npos) << empty.out;
  EXPECT_EQ(run_cli("bench --shapes 64x64 --sparsity 1.0").code, 2);
  EXPECT_EQ(run_cli("bench --shapes 64x0").code, 2);
  EXPECT_EQ(run_cli("bench --shapes 64x64 --dtype fp32").code, 2);
  EXPECT_EQ(run_cli("bench --shapes 64x64 --pattern zigzag").code, 2);
  CliRun r = run_cli("bench --shapes 64x64 --formats nosuch");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("nosuch"), std::string::npos) << r.out;
}

TEST(BenchCli, RunsOrSaysThereIsNoGpu) {
  CliRun r = run_cli("bench --shapes 64x64 --n 1 --sparsity 0.5 --formats dense --reps 3");
  if (r.code == 3) {
    EXPECT_NE(r.out.find("no usable CUDA GPU"), std::string::npos) << r.out;
  } else {
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("dense.cublas"), std::string::npos) << r.out;
  }
}

// --dependent-launch: on a GPU the header says so and the rows still pass the reference check;
// without one the flag is accepted and the run ends with exit 3 like any other.
TEST(BenchCli, DependentLaunchIsSaidInTheHeader) {
  CliRun r = run_cli(
      "bench --shapes 64x64 --n 1 --sparsity 0.5 --formats dense,macko --reps 3 --dependent-launch");
  if (r.code == 3) {
    EXPECT_NE(r.out.find("no usable CUDA GPU"), std::string::npos) << r.out;
  } else {
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("# dependent launch: on"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("macko.warp_row"), std::string::npos) << r.out;
  }
}
