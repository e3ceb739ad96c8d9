// Stopping at EOS: config.json's eos_token_id (an id, a list, or null) joined by
// generation_config.json's, engine::generate stopping a sequence at it (and the others of a
// batch going on), and `sparrow run --ignore-eos`.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli_test_util.hpp"
#include "engine_test_util.hpp"
#include "sparrow/engine/backend.hpp"
#include "sparrow/engine/generate.hpp"
#include "sparrow/engine/model.hpp"
#include "sparrow/io/config.hpp"

namespace sparrow {
namespace {

namespace fs = std::filesystem;
using sparrow::test::run_cli;
using sparrow::test::TempDir;
using sparrow::test::tokens_line;

std::shared_ptr<const engine::Model> make_model(const engine::LlamaConfig& c, uint64_t seed) {
  return std::make_shared<engine::Model>(
      engine::build_model(c, test::random_source(c, seed)).value());
}

// The first index of `seq` whose id has not appeared before it, from `from` on (-1: none).
int first_new_id(const std::vector<int32_t>& seq, size_t from) {
  for (size_t i = from; i < seq.size(); ++i)
    if (std::find(seq.begin(), seq.begin() + long(i), seq[i]) == seq.begin() + long(i))
      return int(i);
  return -1;
}

std::string config_text(const char* eos) {
  return std::string(R"({"model_type":"llama","hidden_size":64,"num_hidden_layers":1,
    "num_attention_heads":4,"intermediate_size":128,"vocab_size":100,"eos_token_id":)") +
         eos + "}";
}

}  // namespace

TEST(IoConfig, EosTokenIdIsAnIdAListOrNull) {
  auto one = io::parse_config(config_text("2"));
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  EXPECT_EQ(one->eos_token_ids, (std::vector<int64_t>{2}));
  auto list = io::parse_config(config_text("[128001, 128008, 128009]"));
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
  auto none = io::parse_config(config_text("null"));
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->eos_token_ids.empty());
  auto bad = io::parse_config(config_text("\"</s>\""));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("eos_token_id"), std::string::npos);
}

// A random model's greedy continuation, then the same with one of its ids as EOS: it stops
// right after producing it; without stop_at_eos, or with no EOS, it runs all n tokens.
TEST(EngineEos, GenerationStopsAtEos) {
  engine::LlamaConfig c = test::tiny_config();
  const std::vector<int32_t> prompt = {4, 5, 6};
  const int64_t n = 16;
  auto free_run = engine::generate(*engine::make_cpu_backend(make_model(c, 21)).value(),
                                   {prompt}, n, {});
  ASSERT_TRUE(free_run.ok());
  const std::vector<int32_t> all = free_run->tokens[0];
  ASSERT_EQ(int64_t(all.size()), n);
  EXPECT_FALSE(free_run->stopped_at_eos[0]);
  const int at = first_new_id(all, 3);
  ASSERT_GE(at, 3) << "the continuation repeats itself from the start; pick another seed";

  c.eos_ids = {int32_t(c.vocab + 5), all[size_t(at)]};  // a list; the first is never produced
  auto model = make_model(c, 21);
  auto b = engine::make_cpu_backend(model).value();
  auto stopped = engine::generate(*b, {prompt}, n, {});
  ASSERT_TRUE(stopped.ok());
  EXPECT_EQ(stopped->tokens[0], std::vector<int32_t>(all.begin(), all.begin() + at + 1));
  EXPECT_TRUE(stopped->stopped_at_eos[0]);
  EXPECT_EQ(stopped->steps, at + 1);

  auto ignored = engine::generate(*b, {prompt}, n, {}, /*stop_at_eos=*/false);
  ASSERT_TRUE(ignored.ok());
  EXPECT_EQ(ignored->tokens[0], all);
  EXPECT_FALSE(ignored->stopped_at_eos[0]);
}

// In a batch, a sequence that reaches EOS stops there and the others go on exactly as alone.
TEST(EngineEos, BatchSequencesStopOnTheirOwn) {
  engine::LlamaConfig c = test::tiny_config();
  const std::vector<int32_t> a = {4, 5, 6}, b = {7, 8, 9};
  const int64_t n = 14;
  auto base = make_model(c, 5);
  auto alone_a = engine::generate(*engine::make_cpu_backend(base).value(), {a}, n, {}).value();
  auto alone_b = engine::generate(*engine::make_cpu_backend(base).value(), {b}, n, {}).value();
  // An id that a's continuation produces early and b's never does.
  int at = -1;
  for (size_t i = 1; i < alone_a.tokens[0].size() && at < 0; ++i) {
    const int32_t id = alone_a.tokens[0][i];
    const auto& ta = alone_a.tokens[0];
    const auto& tb = alone_b.tokens[0];
    if (std::find(ta.begin(), ta.begin() + long(i), id) == ta.begin() + long(i) &&
        std::find(tb.begin(), tb.end(), id) == tb.end()) {
      at = int(i);
    }
  }
  ASSERT_GE(at, 1) << "no id to stop sequence a alone; pick another seed";
  c.eos_ids = {alone_a.tokens[0][size_t(at)]};
  engine::BackendOptions opt;
  opt.max_batch = 2;
  auto batch = engine::generate(*engine::make_cpu_backend(make_model(c, 5), opt).value(), {a, b},
                                n, {});
  ASSERT_TRUE(batch.ok());
  EXPECT_EQ(batch->tokens[0],
            std::vector<int32_t>(alone_a.tokens[0].begin(), alone_a.tokens[0].begin() + at + 1));
  EXPECT_TRUE(batch->stopped_at_eos[0]);
  EXPECT_EQ(batch->tokens[1], alone_b.tokens[0]);
  EXPECT_FALSE(batch->stopped_at_eos[1]);
  EXPECT_EQ(batch->steps, n);
}

namespace {


void set_eos(const fs::path& model, const nlohmann::json& eos) {
  nlohmann::json cfg;
  {
    std::ifstream in(model / "config.json");
    in >> cfg;
  }
  cfg["eos_token_id"] = eos;
  std::ofstream(model / "config.json") << cfg.dump(1);
}

}  // namespace

// Writes a one-layer random model with a 64-token vocabulary to tmp/model and returns its path;
// empty (the CLI's output in `log`) when `sparrow synth` failed.
fs::path synth_tiny(const TempDir& tmp, std::string& log) {
  const fs::path dir = tmp.path / "model";
  int code = -1;
  log = run_cli("synth --preset custom --hidden 64 --layers 1 --heads 4 --intermediate 128 "
                "--vocab 64 --max-positions 64 --out " + dir.string(), code);
  return code == 0 ? dir : fs::path();
}

// The CLI tests below each get a fresh tiny model from `sparrow synth` in a temporary folder.
class EngineEosCli : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string log;
    dir = synth_tiny(tmp, log);
    ASSERT_FALSE(dir.empty()) << log;
    run = "run -m " + dir.string() + " --tokens 3,1,4,1,5 -n 12 --backend cpu";
  }
  // `sparrow run` with no EOS: its 12 greedy ids in `all` and in `at` the index of the first id
  // not produced before (made the EOS, it stops the run right there).
  void run_without_eos() {
    set_eos(dir, nullptr);
    int code = -1;
    const std::string out = run_cli(run, code);
    ASSERT_EQ(code, 0) << out;
    all = tokens_line(out);
    ASSERT_EQ(all.size(), 12u) << out;
    at = first_new_id(all, 2);
    ASSERT_GE(at, 2) << out;
  }
  TempDir tmp{"eos"};
  fs::path dir;
  std::string run;  // set once the model exists
  std::vector<int32_t> all;
  int at = -1;
};

// `sparrow run` on a synthetic model: the tokens: line ends at the EOS id (included) and
// --ignore-eos (or a null eos_token_id) gives all -n tokens.
TEST_F(EngineEosCli, RunStopsAtEosUnlessIgnored) {
  ASSERT_NO_FATAL_FAILURE(run_without_eos());
  int code = -1;
  set_eos(dir, {999, all[size_t(at)]});
  std::string out = run_cli(run, code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_EQ(tokens_line(out), std::vector<int32_t>(all.begin(), all.begin() + at + 1)) << out;
  EXPECT_NE(out.find("stopped at EOS"), std::string::npos) << out;

  out = run_cli(run + " --ignore-eos", code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_EQ(tokens_line(out), all) << out;
}

// generation_config.json's eos_token_id (an id or a list) joins config.json's; a bad file is
// corrupt_data naming it.
TEST_F(EngineEosCli, GenerationConfigAddsEosIds) {
  int code = -1;
  set_eos(dir, 2);
  auto eos_of = [&](const char* generation_config) -> Result<std::vector<int32_t>> {
    if (generation_config) {
      std::ofstream(dir / "generation_config.json") << generation_config;
    } else {
      fs::remove(dir / "generation_config.json");
    }
    SPARROW_ASSIGN_OR_RETURN(engine::Model m, engine::load_model(dir.string()));
    return m.config.eos_ids;
  };
  auto none = eos_of(nullptr);
  ASSERT_TRUE(none.ok()) << none.status().to_string();
  EXPECT_EQ(none.value(), (std::vector<int32_t>{2}));
  auto one = eos_of(R"({"bos_token_id": 1, "eos_token_id": 7})");
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  EXPECT_EQ(one.value(), (std::vector<int32_t>{2, 7}));
  // Ids already there are not repeated; ids past the vocab can never be generated.
  auto list = eos_of(R"({"eos_token_id": [2, 9, 5, 999]})");
  ASSERT_TRUE(list.ok()) << list.status().to_string();
  EXPECT_EQ(list.value(), (std::vector<int32_t>{2, 9, 5}));
  auto null_eos = eos_of(R"({"eos_token_id": null, "do_sample": true})");
  ASSERT_TRUE(null_eos.ok());
  EXPECT_EQ(null_eos.value(), (std::vector<int32_t>{2}));
  for (const char* bad : {"{ not json", "[1, 2]", R"({"eos_token_id": "</s>"})",
                          R"({"eos_token_id": [2, -1]})", R"({"eos_token_id": [2.5]})"}) {
    auto r = eos_of(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::corrupt_data) << bad;
    EXPECT_NE(r.status().message().find("generation_config.json"), std::string::npos)
        << r.status().message();
  }

  // `sparrow run` stops at an id that only generation_config.json names.
  fs::remove(dir / "generation_config.json");
  ASSERT_NO_FATAL_FAILURE(run_without_eos());
  std::ofstream(dir / "generation_config.json")
      << "{\"eos_token_id\": [" << all[size_t(at)] << "]}";
  const std::string out = run_cli(run, code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_EQ(tokens_line(out), std::vector<int32_t>(all.begin(), all.begin() + at + 1)) << out;
}

}  // namespace sparrow
