// safetensors reader/writer, sharded checkpoints and config.json parsing.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "sparrow/io/checkpoint.hpp"
#include "sparrow/io/config.hpp"
#include "sparrow/io/safetensors.hpp"

namespace fs = std::filesystem;
using namespace sparrow;
using namespace sparrow::io;

namespace {

std::string shared_models() { return std::string(SPARROW_SOURCE_DIR) + "/../shared/models"; }

fs::path temp_dir(const std::string& tag) {
  fs::path p = fs::temp_directory_path() / ("sparrow_io_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// Builds a safetensors image by hand from a header text and a data section.
std::string image(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = char((n >> (8 * i)) & 0xFF);
  return out + header + data;
}

Status open_image(const std::string& img) {
  return SafetensorsFile::from_bytes(img.data(), img.size()).status();
}

}  // namespace

TEST(IoSafetensors, WriterOutputReadsBackExactly) {
  fs::path dir = temp_dir("rw");
  const std::string path = (dir / "a.safetensors").string();
  auto w = SafetensorsWriter::create(path);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  std::vector<uint16_t> a = {1, 2, 3, 4, 5, 6};
  std::vector<uint8_t> b = {7, 8, 9};
  std::vector<uint64_t> c = {0xFFFFFFFFFFFFull};
  ASSERT_TRUE(w->add("a", TensorDType::F16, {2, 3}, a.data(), 12).ok());
  ASSERT_TRUE(w->add("b", TensorDType::U8, {3}, b.data(), 3).ok());
  ASSERT_TRUE(w->add("c", TensorDType::U64, {1}, c.data(), 8).ok());
  EXPECT_FALSE(w->add("a", TensorDType::U8, {1}, b.data(), 1).ok());  // duplicate
  EXPECT_FALSE(w->add("d", TensorDType::U8, {5}, b.data(), 3).ok());  // size mismatch
  ASSERT_TRUE(w->finish({{"format", "pt"}, {"k", "v"}}).ok());
  EXPECT_FALSE(fs::exists(path + ".data.tmp"));

  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  ASSERT_EQ(f->tensors().size(), 3u);
  EXPECT_EQ(f->metadata().at("k"), "v");
  const TensorInfo* ta = f->find("a");
  ASSERT_NE(ta, nullptr);
  EXPECT_EQ(ta->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp(f->data(*ta), a.data(), 12), 0);
  EXPECT_EQ(std::memcmp(f->data(*f->find("c")), c.data(), 8), 0);
  // The data section starts 8-byte aligned.
  std::ifstream in(path, std::ios::binary);
  uint64_t hlen = 0;
  in.read(reinterpret_cast<char*>(&hlen), 8);
  EXPECT_EQ((8 + hlen) % 8, 0u);
  auto m = f->tensor("a")->matrix();
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->rows, 2);
  fs::remove_all(dir);
}

TEST(IoSafetensors, RejectsCorruptHeaders) {
  const std::string ok_header = R"({"x":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})";
  EXPECT_TRUE(open_image(image(ok_header, "ab")).ok());
  struct Case {
    const char* what;
    std::string img;
  };
  std::string huge(8, '\0');
  huge[4] = 0x10;  // header length 2^36
  const Case cases[] = {
      {"too short", "abc"},
      {"header > 100MB", huge},
      {"header past end", image(ok_header, "ab").substr(0, 20)},
      {"truncated data", image(ok_header, "a")},
      {"not json", image("{not json", "")},
      {"not object", image("[1,2]", "")},
      {"unknown dtype", image(R"({"x":{"dtype":"Q7","shape":[2],"data_offsets":[0,2]}})", "ab")},
      {"size mismatch", image(R"({"x":{"dtype":"F16","shape":[2],"data_offsets":[0,2]}})", "ab")},
      {"end < begin", image(R"({"x":{"dtype":"U8","shape":[0],"data_offsets":[2,0]}})", "ab")},
      {"out of file", image(R"({"x":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", "ab")},
      {"overlap", image(R"({"x":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                        R"("y":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}})", "abc")},
      {"gap", image(R"({"x":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})", "ab")},
      {"trailing bytes", image(ok_header, "abc")},
      {"duplicate", image(R"({"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                          R"("x":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})", "ab")},
      {"negative dim", image(R"({"x":{"dtype":"U8","shape":[-2],"data_offsets":[0,2]}})", "ab")},
      {"overflow", image(R"({"x":{"dtype":"U64","shape":[4611686018427387904,4],"data_offsets":[0,2]}})", "ab")},
      {"metadata not strings", image(R"({"__metadata__":{"a":1}})", "")},
      {"missing offsets", image(R"({"x":{"dtype":"U8","shape":[2]}})", "ab")},
  };
  for (const Case& c : cases) {
    Status s = open_image(c.img);
    EXPECT_FALSE(s.ok()) << c.what;
    EXPECT_EQ(s.code(), Code::corrupt_data) << c.what << ": " << s.to_string();
  }
}

TEST(IoConfig, ParsesLlamaFamilyAndOpt) {
  auto c = parse_config(R"({"model_type":"llama","architectures":["LlamaForCausalLM"],
    "hidden_size":4096,"num_hidden_layers":32,"num_attention_heads":32,"num_key_value_heads":8,
    "intermediate_size":14336,"vocab_size":128256,"max_position_embeddings":8192,
    "rope_theta":500000.0,"rms_norm_eps":1e-5,"torch_dtype":"bfloat16",
    "rope_scaling":{"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,
                    "high_freq_factor":4.0,"original_max_position_embeddings":8192}})");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->num_kv_heads, 8);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->rope_theta, 500000.0);
  EXPECT_EQ(c->rope_scaling.type, "llama3");
  EXPECT_EQ(c->rope_scaling.factor, 8.0);
  EXPECT_EQ(c->dtype, DType::bf16);
  EXPECT_FALSE(c->tie_word_embeddings);

  // transformers >= 5: rope_theta inside rope_parameters.
  auto n = parse_config(R"({"model_type":"qwen2","hidden_size":896,"num_hidden_layers":2,
    "num_attention_heads":14,"num_key_value_heads":2,"intermediate_size":4864,"vocab_size":1000,
    "tie_word_embeddings":true,"rope_parameters":{"rope_theta":1000000.0,"rope_type":"default"}})");
  ASSERT_TRUE(n.ok()) << n.status().to_string();
  EXPECT_EQ(n->rope_theta, 1000000.0);
  EXPECT_TRUE(n->attention_bias);
  EXPECT_TRUE(n->tie_word_embeddings);
  EXPECT_EQ(n->head_dim, 64);

  auto o = parse_config(R"({"model_type":"opt","hidden_size":768,"num_hidden_layers":12,
    "num_attention_heads":12,"ffn_dim":3072,"vocab_size":50272,"max_position_embeddings":2048})");
  ASSERT_TRUE(o.ok()) << o.status().to_string();
  EXPECT_EQ(o->family, Family::opt);
  EXPECT_EQ(o->intermediate_size, 3072);
  EXPECT_TRUE(o->tie_word_embeddings);

  auto bad = parse_config(R"({"model_type":"gpt2","hidden_size":768})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("llama, mistral, qwen2, opt"), std::string::npos);
  EXPECT_FALSE(parse_config(R"({"model_type":"llama","hidden_size":512})").ok());
  EXPECT_FALSE(parse_config(R"({"model_type":"llama","hidden_size":512,"num_hidden_layers":1,
    "num_attention_heads":8,"num_key_value_heads":3,"intermediate_size":8,"vocab_size":8})").ok());
}

TEST(IoCheckpoint, LoadsTrainedTinyLlama) {
  const std::string dir = shared_models() + "/tinyllama-py";
  if (!fs::exists(dir)) GTEST_SKIP() << "no " << dir << " (shared models absent)";
  auto cfg = load_config(dir);
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  EXPECT_EQ(cfg->hidden_size, 512);
  EXPECT_EQ(cfg->num_layers, 8);
  EXPECT_EQ(cfg->num_kv_heads, 4);
  EXPECT_EQ(cfg->rope_theta, 10000.0);
  auto ck = Checkpoint::open(dir);
  ASSERT_TRUE(ck.ok()) << ck.status().to_string();
  EXPECT_TRUE(ck->sharded());
  EXPECT_EQ(ck->shards().size(), 4u);
  int64_t params = 0;
  for (const auto& n : ck->tensor_names()) params += ck->find(n)->numel();
  EXPECT_EQ(params, 23863808);
  for (const ExpectedTensor& e : expected_matrices(cfg.value())) {
    const TensorInfo* t = ck->find(e.name);
    ASSERT_NE(t, nullptr) << e.name;
    EXPECT_EQ(t->shape, (std::vector<int64_t>{e.rows, e.cols})) << e.name;
    EXPECT_EQ(t->dtype, TensorDType::F16);
  }
  // Trained weights: no zeros, a plausible spread.
  auto v = ck->tensor("model.layers.0.mlp.up_proj.weight");
  ASSERT_TRUE(v.ok());
  auto m = v->matrix();
  ASSERT_TRUE(m.ok());
  double sum2 = 0;
  for (int64_t c = 0; c < m->cols; ++c) sum2 += double(m->at(0, c)) * m->at(0, c);
  EXPECT_GT(sum2, 0.0);
}

TEST(IoCheckpoint, MissingShardIsAClearError) {
  const std::string src = shared_models() + "/tinyllama-py";
  if (!fs::exists(src)) GTEST_SKIP() << "no " << src;
  fs::path dir = temp_dir("missing");
  fs::copy_file(src + "/model.safetensors.index.json", dir / "model.safetensors.index.json");
  fs::copy_file(src + "/model-00001-of-00004.safetensors", dir / "model-00001-of-00004.safetensors");
  auto ck = Checkpoint::open(dir.string());
  ASSERT_FALSE(ck.ok());
  EXPECT_NE(ck.status().message().find("missing shard model-00002-of-00004.safetensors"),
            std::string::npos)
      << ck.status().message();
  fs::remove_all(dir);
}
