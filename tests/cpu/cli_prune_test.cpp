// `sparrow synth` and `sparrow prune` as a user runs them: exit codes (0 ok, 2 bad arguments,
// 1 bad data), one clear message, and nothing written on failure.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_test_util.hpp"
#include "sparrow/engine/transform.hpp"

namespace fs = std::filesystem;
using sparrow::test::CliRun;
using sparrow::test::run_cli;

namespace {

class CliPrune : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("sparrow_cli_prune_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    const CliRun r = run_cli("synth --preset tiny --out " + (root_ / "tiny").string());
    ASSERT_EQ(r.code, 0) << r.out;
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }

  // A writable copy of the tiny model.
  static fs::path copy_model(const std::string& name) {
    const fs::path d = root_ / name;
    fs::remove_all(d);
    fs::copy(root_ / "tiny", d);
    return d;
  }
  // Runs prune into root_/<out>; checks the failure contract when `code` != 0.
  static CliRun prune(const std::string& args, const std::string& out, int code,
                         const std::string& message) {
    const fs::path o = root_ / out;
    const bool existed = fs::exists(o);
    CliRun r = run_cli("prune --quiet " + args + " --out " + o.string());
    EXPECT_EQ(r.code, code) << args << "\n" << r.out;
    EXPECT_NE(r.out.find(message), std::string::npos) << args << "\n" << r.out;
    if (code != 0) {
      if (!existed) EXPECT_FALSE(fs::exists(o)) << args;
      // One line of message; no temporary directory left behind.
      EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
      for (const auto& e : fs::directory_iterator(root_))
        EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
    }
    return r;
  }
  static std::string model() { return "--model " + (root_ / "tiny").string(); }
  // The format column of tensor `name`'s row in prune's table ("" when it has none), and the row.
  static std::string format_in_table(const std::string& out, const std::string& name,
                                     std::string* row = nullptr) {
    std::istringstream lines(out);
    std::string line, format;
    while (std::getline(lines, line)) {
      if (line.rfind(name + " ", 0) != 0) continue;
      std::istringstream fields(line);
      std::string f[5];
      for (auto& x : f) fields >> x;  // name shape target sparsity format
      format = f[4];
      if (row) *row = line;
    }
    return format;
  }
  static fs::path root_;
};
fs::path CliPrune::root_;

}  // namespace

TEST_F(CliPrune, PrunesAndPrintsTheTable) {
  const CliRun r = run_cli("prune " + model() + " --sparsity 0.5 --format tca_bme --out " +
                                  (root_ / "ok").string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("model.layers.1.mlp.down_proj.weight"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("pruned layers: 14"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(root_ / "ok" / "model.safetensors"));
  // An existing output is refused without --force, replaced with it.
  prune(model(), "ok", 2, "already exists (use --force");
  prune(model() + " --force", "ok", 0, "pruned layers");
}

TEST_F(CliPrune, BadArgumentsExitTwo) {
  prune(model() + " --sparsity 1.0", "b1", 2, "--sparsity must be in [0, 1)");
  prune(model() + " --sparsity -0.1", "b2", 2, "--sparsity must be in [0, 1)");
  prune(model() + " --structure 3:7", "b3", 2, "M = 7 does not divide K = ");
  prune(model() + " --structure 2:3:0", "b4", 2, "unknown structure");
  prune(model() + " --structure 2:4 --sparsity 1.5", "b4b", 2, "--sparsity must be in [0, 1)");
  prune(model() + " --method snip", "b5", 2, "--method must be");
  prune(model() + " --method wanda", "b6", 2, "needs --calibration");
  prune(model() + " --format nm", "b7", 2, "--format nm needs an N:M --structure");
  prune(model() + " --format zip", "b8", 2, "unknown --format");
  prune(model() + " --ignore '('", "b9", 2, "not a valid regular expression");
}

TEST_F(CliPrune, BadDataExitsOne) {
  {  // truncated shard
    const fs::path d = copy_model("trunc");
    fs::resize_file(d / "model.safetensors", fs::file_size(d / "model.safetensors") - 100);
    prune("--model " + d.string(), "o1", 1, "truncated");
  }
  {  // corrupted header
    const fs::path d = copy_model("corrupt");
    std::fstream f(d / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8);
    f.put('[');
    f.close();
    prune("--model " + d.string(), "o2", 1, "header");
  }
  {  // config that does not match the tensors
    const fs::path d = copy_model("mismatch");
    std::ifstream in(d / "config.json");
    auto j = nlohmann::json::parse(in);
    in.close();
    j["intermediate_size"] = 700;
    std::ofstream(d / "config.json") << j.dump();
    prune("--model " + d.string(), "o3", 1, "config.json does not match the checkpoint");
  }
  {  // unsupported architecture
    const fs::path d = copy_model("gpt2");
    std::ifstream in(d / "config.json");
    auto j = nlohmann::json::parse(in);
    in.close();
    j["model_type"] = "gpt2";
    std::ofstream(d / "config.json") << j.dump();
    prune("--model " + d.string(), "o4", 1, "supported: llama, mistral, qwen2, opt");
  }
  {  // missing shard
    const fs::path d = root_ / "sharded";
    const CliRun s = run_cli("synth --preset tiny --shard-mb 1 --out " + d.string());
    ASSERT_EQ(s.code, 0) << s.out;
    ASSERT_TRUE(fs::exists(d / "model.safetensors.index.json"));
    ASSERT_TRUE(fs::exists(d / "model-00002-of-00004.safetensors"));
    fs::remove(d / "model-00002-of-00004.safetensors");
    prune("--model " + d.string(), "o5", 1, "missing shard model-00002-of-00004.safetensors");
  }
  prune("--model " + (root_ / "nonexistent").string(), "o6", 1, "cannot read");
}

TEST_F(CliPrune, WandaOwlAndFileSchedules) {
  // Norms for every linear layer (1.0 everywhere except a hot first channel).
  nlohmann::json norms;
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* n : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                          "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj"}) {
      std::vector<float> v(256, 1.0f);
      v[0] = 100.0f;
      norms[p + n] = v;
    }
    norms[p + "mlp.down_proj.weight"] = std::vector<float>(688, 1.0f);
  }
  const fs::path cal = root_ / "norms.json";
  std::ofstream(cal) << norms.dump();
  prune(model() + " --method wanda --calibration " + cal.string(), "w", 0, "pruned layers: 14");
  prune(model() + " --schedule owl", "owl", 0, "pruned layers: 14");
  std::ifstream in(root_ / "owl" / "config.json");
  auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["sparsity_config"]["sparrow"]["schedule"], "owl");
  const fs::path sched = root_ / "sched.json";
  std::ofstream(sched) << R"({"mlp\\.down_proj": 0.8})";
  const CliRun r = run_cli("prune " + model() + " --schedule " + sched.string() + " --out " +
                                  (root_ / "file").string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("80.0%"), std::string::npos) << r.out;
  std::ofstream(sched) << R"({"mlp": 1.5})";
  prune(model() + " --schedule " + sched.string(), "file2", 2, "must be in [0, 1)");
}

// --format fastest: per engine matmul, the format the GPU engine decodes fastest at --batch
// tokens; the same picks bench-model builds its models from (engine::fastest_formats), so a
// pruned checkpoint runs what bench-model measured. The note says which kernel and batch.
TEST_F(CliPrune, FastestPicksWhatTheEngineDecodesFastest) {
  auto cfg = sparrow::engine::synth_config("tiny");
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  const char* roles[7] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                          "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                          "mlp.down_proj"};
  for (int batch : {1, 8}) {
    const std::string out = "fastest" + std::to_string(batch);
    const CliRun r = run_cli("prune " + model() + " --sparsity 0.7 --format fastest --batch " +
                             std::to_string(batch) + " --out " + (root_ / out).string());
    ASSERT_EQ(r.code, 0) << r.out;
    const std::vector<sparrow::Format> want = sparrow::engine::fastest_formats(cfg.value(), 0.3,
                                                                               batch);
    ASSERT_EQ(want.size(), 7u);
    for (int64_t layer = 0; layer < cfg.value().layers; ++layer) {
      for (int i = 0; i < 7; ++i) {
        const std::string name = "model.layers." + std::to_string(layer) + "." + roles[i] +
                                 ".weight";
        std::string line;
        const std::string format = format_in_table(r.out, name, &line);
        EXPECT_NE(line.find("fastest at batch " + std::to_string(batch)), std::string::npos)
            << name << ": " << line;
        EXPECT_EQ(format, sparrow::format_name(want[size_t(i)])) << name << " batch " << batch
                                                                 << "\n" << r.out;
      }
    }
  }
  prune(model() + " --format fastest --batch 0", "fb0", 2, "--batch must be at least 1");
  prune(model() + " --format macko --batch 8", "fb1", 2, "--batch applies to --format fastest");
}

// --format qkv=F,o=F,gate_up=F,down=F: every tensor of an engine matmul in that matmul's format
// (q, k, v alike; gate, up alike), as bench-model builds its models; the checkpoint then runs.
TEST_F(CliPrune, FormatPerEngineMatmul) {
  auto cfg = sparrow::engine::synth_config("tiny");
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  const std::string out = (root_ / "per-matmul").string();
  const CliRun r = run_cli("prune " + model() +
                           " --sparsity 0.7 --format qkv=macko,o=dense,gate_up=tca_bme,down=csr"
                           " --out " + out);
  ASSERT_EQ(r.code, 0) << r.out;
  const std::pair<const char*, const char*> want[7] = {
      {"self_attn.q_proj", "macko"},  {"self_attn.k_proj", "macko"}, {"self_attn.v_proj", "macko"},
      {"self_attn.o_proj", "dense"},  {"mlp.gate_proj", "tca_bme"},  {"mlp.up_proj", "tca_bme"},
      {"mlp.down_proj", "csr"}};
  for (int64_t layer = 0; layer < cfg.value().layers; ++layer) {
    for (const auto& [role, format] : want) {
      const std::string name = "model.layers." + std::to_string(layer) + "." + role + ".weight";
      EXPECT_EQ(format_in_table(r.out, name), format) << name << "\n" << r.out;
    }
  }
  const CliRun run = run_cli("run -m " + out + " --tokens 1,2,3 -n 4 --backend cpu");
  EXPECT_EQ(run.code, 0) << run.out;
  EXPECT_NE(run.out.find("tokens: "), std::string::npos) << run.out;
  prune(model() + " --format qkv=macko,o=dense", "pl1", 2, "'gate_up' missing");
  prune(model() + " --format qkv=zip,o=dense,gate_up=dense,down=dense", "pl2", 2,
        "unknown format 'zip'");
  prune(model() + " --format qkv=nm,o=dense,gate_up=dense,down=dense", "pl3", 2,
        "--format nm needs an N:M --structure");
}

TEST_F(CliPrune, SynthRefusesBadArguments) {
  CliRun r = run_cli("synth --preset huge --out " + (root_ / "s1").string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("presets: tiny, llama2-7b, llama3-8b"), std::string::npos) << r.out;
  r = run_cli("synth --preset custom --hidden 96 --heads 5 --out " + (root_ / "s2").string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_FALSE(fs::exists(root_ / "s2"));
  r = run_cli("synth --preset custom --hidden 128 --heads 4 --kv-heads 2 --layers 1 "
                  "--intermediate 320 --vocab 300 --out " + (root_ / "s3").string());
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(fs::exists(root_ / "s3" / "model.safetensors"));
}
