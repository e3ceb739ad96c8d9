// `sparrow bench-model` from the outside on the CPU backend (CI has no GPU): the llama-bench-style
// table has a pp and a tg row per (sparsity, batch) with positive rates, the memory line names what
// the backend holds, the JSON rows match the table, and bad arguments exit non-zero with a message.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli_test_util.hpp"
#include "sparrow/engine/transform.hpp"

namespace {

// The table's data rows: "| model | size | sparsity | backend | batch | test | t/s |".
std::vector<std::vector<std::string>> table_rows(const std::string& out) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("| tiny", 0) != 0) continue;
    std::vector<std::string> cells;
    std::istringstream cols(line.substr(1));
    for (std::string c; std::getline(cols, c, '|');) {
      const size_t b = c.find_first_not_of(' '), e = c.find_last_not_of(' ');
      if (b != std::string::npos) cells.push_back(c.substr(b, e - b + 1));
    }
    rows.push_back(cells);
  }
  return rows;
}

}  // namespace

TEST(BenchModelCli, TableHasPromptAndGenerationRowsPerSparsityAndBatch) {
  int code = 0;
  const std::string out = sparrow::test::run_cli(
      "bench-model --synth tiny --sparsity 0,0.5 -p 16 -n 4 -b 1,2 -r 1 --backend cpu "
      "--prefill-chunk 8",
      code);
  ASSERT_EQ(code, 0) << out;
  const auto rows = table_rows(out);
  ASSERT_EQ(rows.size(), 8u) << out;  // 2 sparsities x 2 batches x (pp16, tg4)
  int i = 0;
  for (const char* sparsity : {"0.00", "0.50"}) {
    for (const char* batch : {"1", "2"}) {
      for (const char* test : {"pp16", "tg4"}) {
        const auto& r = rows[size_t(i++)];
        ASSERT_EQ(r.size(), 7u) << out;
        EXPECT_EQ(r[2], sparsity);
        EXPECT_EQ(r[3], "cpu");
        EXPECT_EQ(r[4], batch);
        EXPECT_EQ(r[5], test);
        EXPECT_GT(std::stod(r[6]), 0.0) << r[6];  // "mean ± std"
      }
    }
  }
  // The pruned model is smaller than the dense one, and the memory line says the CPU backend
  // holds fp32 dense panels whatever the stored format.
  EXPECT_NE(rows[0][1], rows[4][1]) << out;
  EXPECT_NE(out.find("held by the cpu backend as fp32 dense"), std::string::npos) << out;
  EXPECT_EQ(out.find("peak device memory"), std::string::npos) << "the CPU backend has none";
}

// -d (llama-bench's --n-depth): each test also runs after that many cached tokens, in a row
// named "tg4 @ d40"; the JSON rows carry the depth. A depth the tiny preset's context (512)
// cannot take with the tests after it is an error, not a short run.
TEST(BenchModelCli, DepthRowsRunAfterCachedTokens) {
  int code = 0;
  const std::string out = sparrow::test::run_cli(
      "bench-model --synth tiny -p 16 -n 4 -b 1 -r 1 -d 0,40 --backend cpu --json", code);
  ASSERT_EQ(code, 0) << out;
  const auto rows = table_rows(out);
  ASSERT_EQ(rows.size(), 4u) << out;
  const char* tests[] = {"pp16", "tg4", "pp16 @ d40", "tg4 @ d40"};
  for (size_t i = 0; i < 4; ++i) {
    ASSERT_EQ(rows[i].size(), 7u) << out;
    EXPECT_EQ(rows[i][5], tests[i]);
    EXPECT_GT(std::stod(rows[i][6]), 0.0) << rows[i][6];
  }
  const nlohmann::json doc = nlohmann::json::parse(out.substr(out.find("\n{") + 1));
  EXPECT_EQ(doc["rows"][0]["depth"], 0);
  EXPECT_EQ(doc["rows"][3]["depth"], 40);
  const std::string deep =
      sparrow::test::run_cli("bench-model --synth tiny -p 16 -n 4 -r 1 -d 500 --backend cpu", code);
  EXPECT_NE(code, 0) << deep;
  EXPECT_NE(deep.find("exceed the context"), std::string::npos) << deep;
}

TEST(BenchModelCli, JsonRowsMatchTheTable) {
  int code = 0;
  const std::string out = sparrow::test::run_cli(
      "bench-model --synth tiny --sparsity 0.5 -p 8 -n 2 -b 1 -r 2 --backend cpu --json", code);
  ASSERT_EQ(code, 0) << out;
  const size_t at = out.find("\n{");
  ASSERT_NE(at, std::string::npos) << out;
  const nlohmann::json doc = nlohmann::json::parse(out.substr(at + 1));
  EXPECT_NE(doc["command"].get<std::string>().find("bench-model"), std::string::npos);
  const nlohmann::json& rows = doc["rows"];
  ASSERT_EQ(rows.size(), 2u) << out;
  EXPECT_EQ(rows[0]["test"], "pp8");
  EXPECT_EQ(rows[1]["test"], "tg2");
  for (const auto& r : rows) {
    EXPECT_EQ(r["batch"], 1);
    EXPECT_EQ(r["backend"], "cpu");
    EXPECT_DOUBLE_EQ(r["sparsity"].get<double>(), 0.5);
    EXPECT_EQ(r["runs"].size(), 2u);  // -r 2 timed runs (the warm-up is not kept)
    EXPECT_LT(r["weight_bytes"].get<double>(), r["dense_weight_bytes"].get<double>());
  }
}

TEST(BenchModelCli, BadArgumentsAreClearErrors) {
  struct Case {
    const char* args;
    const char* says;
  };
  const Case cases[] = {
      {"bench-model --synth tiny --prefill-chunk 0 --backend cpu", "--prefill-chunk"},
      {"bench-model --backend cpu", "exactly one of -m or --synth"},
      {"bench-model --synth tiny --sparsity 1.5 --backend cpu", "[0, 1)"},
      {"bench-model --synth tiny -b 1,x --backend cpu", "bad value 'x'"},
      {"bench-model --synth tiny -b 1,,8 --backend cpu", "-b: empty value in '1,,8'"},
      {"bench-model --synth tiny -d 0,-5 --backend cpu", "-d values must be >= 0"},
      {"bench-model --synth tiny --sparsity 0.5, --backend cpu", "--sparsity: empty value"},
      {"bench-model -m /nonexistent/model --backend cpu", "cannot load model"},
      {"bench-model --synth foo --backend cpu", "unknown preset 'foo'"},
      {"bench-model --synth tiny --sparsity 0.5 --format bogus --backend cpu",
       "unknown format 'bogus'"},
  };
  for (const Case& c : cases) {
    int code = 0;
    const std::string out = sparrow::test::run_cli(c.args, code);
    EXPECT_NE(code, 0) << c.args << "\n" << out;
    EXPECT_NE(out.find(c.says), std::string::npos) << c.args << "\n" << out;
    EXPECT_EQ(out.find("| tiny"), std::string::npos) << c.args << ": no table rows on failure";
    EXPECT_EQ(out.find("| model |"), std::string::npos) << c.args << ": no table header either";
  }
}

// --format fastest picks each layer's format for the batch size's tokens (the rule table at
// N = batch): a batch size whose picks differ from the previous one's runs on a model of its
// own, and each JSON row says which N its formats were picked for.
TEST(BenchModelCli, FastestPicksFormatsPerBatchSize) {
  auto c = sparrow::engine::synth_config("tiny");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const std::vector<int> batches = {1, 8, 32};
  // A batch size with the previous one's picks shares its model (and its pick N).
  size_t models = 0;
  std::vector<int> picked_for;
  for (size_t i = 0; i < batches.size(); ++i) {
    const bool same = i > 0 && sparrow::engine::fastest_formats(c.value(), 0.5, batches[i]) ==
                                   sparrow::engine::fastest_formats(c.value(), 0.5, batches[i - 1]);
    if (!same) ++models;
    picked_for.push_back(same ? picked_for.back() : batches[i]);
  }
  int code = 0;
  const std::string out = sparrow::test::run_cli(
      "bench-model --synth tiny --sparsity 0.5 -p 4 -n 2 -b 1,8,32 -r 1 --backend cpu --json",
      code);
  ASSERT_EQ(code, 0) << out;
  size_t ready = 0;
  for (size_t at = out.find("ready in"); at != std::string::npos; at = out.find("ready in", at + 1))
    ++ready;
  EXPECT_EQ(ready, models) << out;
  const size_t json_at = out.find("\n{");
  ASSERT_NE(json_at, std::string::npos) << out;
  const nlohmann::json doc = nlohmann::json::parse(out.substr(json_at + 1));
  ASSERT_EQ(doc["rows"].size(), 6u) << out;  // 3 batches x (pp4, tg2), in -b's order
  for (size_t i = 0; i < doc["rows"].size(); ++i) {
    const auto& row = doc["rows"][i];
    EXPECT_EQ(row["batch"].get<int>(), batches[i / 2]);
    EXPECT_EQ(row["formats_picked_for_n"].get<int>(), picked_for[i / 2]) << row.dump();
    // A model whose every layer was picked dense weighs what the dense model does.
    const auto& key = sparrow::engine::fastest_formats(c.value(), 0.5, batches[i / 2]);
    bool all_dense = true;
    for (sparrow::Format f : key) all_dense = all_dense && f == sparrow::Format::dense;
    if (all_dense) {
      EXPECT_EQ(row["weight_bytes"], row["dense_weight_bytes"]) << row.dump();
      EXPECT_EQ(row["formats"], "dense " + std::to_string(7 * c.value().layers)) << row.dump();
    } else {
      EXPECT_LT(row["weight_bytes"].get<int64_t>(), row["dense_weight_bytes"].get<int64_t>());
      EXPECT_NE(row["formats"], "dense " + std::to_string(7 * c.value().layers)) << row.dump();
    }
  }
}
