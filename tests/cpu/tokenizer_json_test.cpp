// tokenizer.json (src/engine/tokenizer_json.hpp) against Hugging Face `tokenizers`: the fixtures
// in tests/data/tokenizers/ (written by scripts/make_tokenizer_fixtures.py) hold tiny trained
// tokenizers in the pipelines of Llama 2, Llama 3, Qwen2 and GPT-2 with the ids, pre-tokens and
// decoded text the reference gave for each test string (including strings holding added tokens
// such as <s> and <|eot_id|>); sparrow must give exactly those. Then the refusals,
// tokenizer_config.json's add_bos_token, and `sparrow run -p` through a tokenizer.json.
#include "engine/tokenizer_json.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli_test_util.hpp"
#include "sparrow/engine/tokenizer.hpp"

using namespace sparrow;
namespace fs = std::filesystem;
using sparrow::test::run_cli;
using sparrow::test::TempDir;
using nlohmann::json;

namespace {

const fs::path kFixtures = fs::path(SPARROW_SOURCE_DIR) / "tests" / "data" / "tokenizers";
constexpr int64_t kVocab = 600;  // above every fixture's ids (501 and 527 tokens)

engine::Model stub_model(int64_t vocab) {
  engine::Model m;
  m.name = "stub";
  m.config.vocab = vocab;
  return m;
}

json read_json(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return json::parse(s.str());
}

void write_json(const fs::path& p, const json& j) { std::ofstream(p) << j.dump(); }


std::string ids_text(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += (s.empty() ? "" : ",") + std::to_string(id);
  return s;
}

std::unique_ptr<engine::JsonTokenizer> load_fixture(const fs::path& dir) {
  auto t = engine::JsonTokenizer::load((dir / "tokenizer.json").string(), kVocab);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? std::move(t.value()) : nullptr;
}

// Every case of `dir`'s expected.json: ids, pre-tokens and decoded text as the reference.
void check_cases(const engine::JsonTokenizer& t, const fs::path& dir) {
  const json expected = read_json(dir / "expected.json");
  ASSERT_GT(expected["cases"].size(), 20u);
  for (const json& c : expected["cases"]) {
    const std::string text = c["text"].get<std::string>();
    SCOPED_TRACE("text: \"" + text + "\"");
    auto ids = t.encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status().to_string();
    EXPECT_EQ(ids.value(), c["ids"].get<std::vector<int32_t>>());
    EXPECT_EQ(t.decode(ids.value()), c["decoded"].get<std::string>());
    if (c.contains("pre_tokens")) {
      auto pieces = t.pre_tokenize(text);
      ASSERT_TRUE(pieces.ok());
      EXPECT_EQ(pieces.value(), c["pre_tokens"].get<std::vector<std::string>>());
    }
  }
}

class TokenizerJsonFixture : public testing::TestWithParam<const char*> {};

}  // namespace

TEST_P(TokenizerJsonFixture, MatchesHuggingFaceTokenizers) {
  const fs::path dir = kFixtures / GetParam();
  auto t = load_fixture(dir);
  ASSERT_TRUE(t);
  check_cases(*t, dir);
}

INSTANTIATE_TEST_SUITE_P(Pipelines, TokenizerJsonFixture,
                         testing::Values("llama2", "llama2-metaspace", "llama2-metaspace-split",
                                         "llama3", "qwen2", "gpt2"),
                         [](const testing::TestParamInfo<const char*>& p) {
                           std::string name = p.param;
                           for (char& ch : name)
                             if (ch == '-') ch = '_';
                           return name;
                         });

TEST(TokenizerJson, LoadTokenizerPicksTokenizerJson) {
  TempDir d("pick");
  fs::copy_file(kFixtures / "llama3" / "tokenizer.json", d.path / "tokenizer.json");
  auto t = engine::load_tokenizer(d.path.string(), stub_model(kVocab));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_STREQ(t.value()->kind(), "tokenizer.json BPE");
  auto ids = t.value()->encode("Hello world");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids.value(), (std::vector<int32_t>{520, 39, 294, 78, 269, 275, 75, 67}));
}

namespace {

// `fixture`'s tokenizer.json changed by `edit` must still give the fixture's expected ids.
template <class Edit>
void check_edited_fixture(const char* fixture, const char* tag, Edit edit) {
  TempDir d(tag);
  json j = read_json(kFixtures / fixture / "tokenizer.json");
  edit(j);
  write_json(d.path / "tokenizer.json", j);
  fs::copy_file(kFixtures / fixture / "expected.json", d.path / "expected.json");
  auto t = load_fixture(d.path);
  ASSERT_TRUE(t);
  check_cases(*t, d.path);
}

}  // namespace

// Llama 2's own tokenizer.json writes merges as "a b" strings rather than pairs.
TEST(TokenizerJson, MergesAsStrings) {
  check_edited_fixture("llama2", "strings", [](json& j) {
    for (json& m : j["model"]["merges"]) {
      m = m[0].get<std::string>() + " " + m[1].get<std::string>();
    }
  });
}

// The older Metaspace form (add_prefix_space instead of prepend_scheme) means "always".
TEST(TokenizerJson, MetaspaceAddPrefixSpace) {
  check_edited_fixture("llama2-metaspace-split", "addprefix", [](json& j) {
    j["pre_tokenizer"].erase("prepend_scheme");
    j["pre_tokenizer"]["add_prefix_space"] = true;
  });
}

// Prompts of 50 KB: Llama 2's pipeline has no pre-tokenizer, so the whole prompt is one BPE
// word of 50 000 symbols; the byte-level pipelines split it into ~10 000 words.
TEST(TokenizerJson, LongPromptIsFast) {
  std::string text;
  const std::string line =
      "The sparse model runs on the GPU with fewer bytes per token; Café 東京 "
      "1234567 🙂\n";
  while (text.size() < 50000) text += line;
  for (const char* name : {"llama2", "llama3"}) {
    auto t = load_fixture(kFixtures / name);
    ASSERT_TRUE(t);
    const auto t0 = std::chrono::steady_clock::now();
    auto ids = t->encode(text);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_TRUE(ids.ok());
    EXPECT_LT(s, 1.0) << name << ": " << text.size() << " bytes in " << s << " s";
    EXPECT_LT(ids->size(), text.size()) << name;
    EXPECT_EQ(t->decode(ids.value()), text) << name;
    std::printf("%s: %zu bytes -> %zu ids in %.3f s\n", name, text.size(), ids->size(), s);
  }
}

TEST(TokenizerJson, PromptMustBeUtf8) {
  auto t = load_fixture(kFixtures / "llama3");
  ASSERT_TRUE(t);
  auto ids = t->encode("bad \xff byte");
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), Code::invalid_argument);
  EXPECT_NE(ids.status().message().find("UTF-8"), std::string::npos);
}

// Qwen2 normalizes to NFC: a decomposed é encodes as the precomposed one (the fixture's cases,
// from `tokenizers`, have more), and a normalized added token written decomposed still matches.
TEST(TokenizerJson, NfcNormalizerComposes) {
  auto t = load_fixture(kFixtures / "qwen2");
  ASSERT_TRUE(t);
  auto composed = t->encode("caf\xc3\xa9");     // precomposed é
  auto decomposed = t->encode("cafe\xcc\x81");  // e + U+0301 combining acute
  ASSERT_TRUE(composed.ok() && decomposed.ok()) << decomposed.status().to_string();
  EXPECT_EQ(composed.value(), decomposed.value());
  auto llama3 = load_fixture(kFixtures / "llama3");  // no normalizer: they differ
  ASSERT_TRUE(llama3);
  EXPECT_NE(llama3->encode("caf\xc3\xa9").value(), llama3->encode("cafe\xcc\x81").value());
}

namespace {

// Loads `j` written as dir/tokenizer.json through load_tokenizer.
Status load_status(const json& j, int64_t vocab = kVocab) {
  TempDir d("refuse");
  write_json(d.path / "tokenizer.json", j);
  auto t = engine::load_tokenizer(d.path.string(), stub_model(vocab));
  return t.ok() ? Status::success() : t.status();
}

void expect_refused(const Status& s, Code code, const std::string& says) {
  EXPECT_EQ(s.code(), code) << s.to_string();
  EXPECT_NE(s.message().find(says), std::string::npos) << s.message();
  if (code == Code::unsupported) {
    EXPECT_NE(s.message().find("--tokens"), std::string::npos) << s.message();
  }
}

}  // namespace

TEST(TokenizerJson, RefusesWhatItDoesNotImplement) {
  const json llama2 = read_json(kFixtures / "llama2" / "tokenizer.json");
  const json llama3 = read_json(kFixtures / "llama3" / "tokenizer.json");
  for (const char* type : {"WordPiece", "Unigram", "WordLevel"}) {
    json j = llama2;
    j["model"]["type"] = type;
    expect_refused(load_status(j), Code::unsupported, type);
  }
  // One field changed in a fixture: (fixture, JSON pointer, new value, code, what the message
  // names).
  struct Case {
    const json* base;
    const char* pointer;
    json value;
    Code code;
    const char* says;
  };
  const Case cases[] = {
      // a Split regex that is not Llama 3's, Qwen2's or GPT-2's
      {&llama3, "/pre_tokenizer/pretokenizers/0/pattern/Regex", "\\p{N}{1,4}|\\s+",
       Code::unsupported, "\\p{N}{1,4}|\\s+"},
      {&llama3, "/pre_tokenizer/pretokenizers/0/behavior", "Removed", Code::unsupported,
       "Removed"},
      {&llama2, "/normalizer", {{"type", "NFKC"}}, Code::unsupported, "NFKC"},
      {&llama2, "/pre_tokenizer", {{"type", "Whitespace"}}, Code::unsupported, "Whitespace"},
      {&llama2, "/decoder", {{"type", "WordPiece"}}, Code::unsupported, "WordPiece"},
      {&llama2, "/post_processor", {{"type", "BertProcessing"}}, Code::unsupported,
       "BertProcessing"},
      {&llama2, "/model/dropout", 0.1, Code::unsupported, "dropout"},
      // an added token flag sparrow does not implement
      {&llama3, "/added_tokens/2/single_word", true, Code::unsupported, "single_word"},
      // a normalized added token behind Llama 2's Prepend + Replace normalizer
      {&llama2, "/added_tokens/1/normalized", true, Code::unsupported, "normalized"},
      {&llama3, "/added_tokens/0/lstrip", "yes", Code::corrupt_data, "lstrip"},
  };
  for (const Case& c : cases) {
    json j = *c.base;
    j[json::json_pointer(c.pointer)] = c.value;
    SCOPED_TRACE(c.pointer);
    expect_refused(load_status(j), c.code, c.says);
  }
}

// Added tokens of both styles are found in the prompt (the fixtures hold many more cases).
TEST(TokenizerJson, SpecialTokensInThePrompt) {
  auto llama2 = load_fixture(kFixtures / "llama2");
  auto llama3 = load_fixture(kFixtures / "llama3");
  ASSERT_TRUE(llama2 && llama3);
  auto a = llama2->encode("<s>x</s>");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->front(), 1);
  EXPECT_EQ(a.value()[1], 1);
  EXPECT_EQ(a->back(), 2);
  auto b = llama3->encode("<|begin_of_text|>x<|eot_id|>");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b.value(), (std::vector<int32_t>{520, 520, 87, 522}));
  auto partial = llama3->encode("<|begin_of");
  ASSERT_TRUE(partial.ok());
  EXPECT_EQ(std::count(partial->begin(), partial->end(), 520), 1);  // only the template's
}

namespace {

// The ids of "Hello world" through `fixture`'s tokenizer.json beside a tokenizer_config.json of
// `config` (none when null).
Result<std::vector<int32_t>> ids_with_config(const char* fixture, const char* config) {
  TempDir d("tokcfg");
  fs::copy_file(kFixtures / fixture / "tokenizer.json", d.path / "tokenizer.json");
  if (config) std::ofstream(d.path / "tokenizer_config.json") << config;
  SPARROW_ASSIGN_OR_RETURN(auto t, engine::load_tokenizer(d.path.string(), stub_model(kVocab)));
  return t->encode("Hello world");
}

}  // namespace

// tokenizer_config.json's add_bos_token decides whether the template's BOS comes first.
TEST(TokenizerJson, TokenizerConfigAddBosToken) {
  const auto plain = ids_with_config("llama3", nullptr);
  ASSERT_TRUE(plain.ok());
  ASSERT_EQ(plain->front(), 520);
  const std::vector<int32_t> text(plain->begin() + 1, plain->end());
  auto with = [](std::vector<int32_t> prefix, const std::vector<int32_t>& rest) {
    prefix.insert(prefix.end(), rest.begin(), rest.end());
    return prefix;
  };
  for (const auto& [config, want] : std::vector<std::pair<const char*, std::vector<int32_t>>>{
           {R"({"add_bos_token": false, "bos_token": "<|begin_of_text|>"})", text},
           {R"({"add_bos_token": true})", plain.value()},
           {R"({"add_bos_token": null})", plain.value()},
           {R"({"tokenizer_class": "PreTrainedTokenizerFast"})", plain.value()},
           {R"({"add_bos_token": true, "bos_token": "<|end_of_text|>"})", with({521}, text)},
       }) {
    auto ids = ids_with_config("llama3", config);
    ASSERT_TRUE(ids.ok()) << config << ": " << ids.status().to_string();
    EXPECT_EQ(ids.value(), want) << config;
  }
  // qwen2's template adds nothing: add_bos_token true needs a bos_token, here an AddedToken.
  auto qwen = ids_with_config(
      "qwen2", R"({"add_bos_token": true, "bos_token": {"content": "<|begin_of_text|>",
                  "lstrip": false}})");
  ASSERT_TRUE(qwen.ok()) << qwen.status().to_string();
  EXPECT_EQ(qwen.value(), with({520}, text));
  // The Llama 2 pipeline, and a BOS that is a vocab token rather than an added one.
  auto llama2 = ids_with_config("llama2", R"({"add_bos_token": false})");
  ASSERT_TRUE(llama2.ok());
  EXPECT_NE(llama2->front(), 1);
  auto vocab_bos = ids_with_config("llama2", R"({"add_bos_token": true, "bos_token": "<0x41>"})");
  ASSERT_TRUE(vocab_bos.ok());
  EXPECT_EQ(vocab_bos->front(), 3 + 0x41);
  for (const auto& [fixture, config, says] : std::vector<std::array<const char*, 3>>{
           {"qwen2", R"({"add_bos_token": true})", "no bos_token"},
           {"llama3", R"({"add_bos_token": true, "bos_token": "<nope>"})", "<nope>"},
           {"llama3", R"({"add_bos_token": "false"})", "add_bos_token"},
           {"llama3", R"({"add_bos_token": true, "bos_token": 1})", "bos_token"},
           {"llama3", "{ not json", "tokenizer_config.json"},
       }) {
    auto ids = ids_with_config(fixture, config);
    ASSERT_FALSE(ids.ok()) << config;
    expect_refused(ids.status(), Code::corrupt_data, says);
  }
}

TEST(TokenizerJson, RefusesBadFiles) {
  const json llama3 = read_json(kFixtures / "llama3" / "tokenizer.json");
  // Ids up to 526 (the last added token) need a vocab of 527.
  EXPECT_TRUE(load_status(llama3, 527).ok());
  expect_refused(load_status(llama3, 526), Code::corrupt_data, "vocab_size is 526");
  {
    json j = llama3;
    j["model"]["merges"].push_back(json::array({"no such", "token"}));
    expect_refused(load_status(j), Code::corrupt_data, "not in the vocab");
  }
  {
    json j = llama3;
    j.erase("model");
    expect_refused(load_status(j), Code::corrupt_data, "model");
  }
  TempDir d("notjson");
  std::ofstream(d.path / "tokenizer.json") << "{ not json";
  auto t = engine::load_tokenizer(d.path.string(), stub_model(kVocab));
  ASSERT_FALSE(t.ok());
  expect_refused(t.status(), Code::corrupt_data, "tokenizer.json");
}

// `sparrow run -p` on a synthetic model with a tokenizer.json (CPU backend): the prompt comes
// back decoded with its continuation, and the same prompt given as ids continues the same way.
TEST(TokenizerJson, RunTakesATextPrompt) {
  TempDir d("run");
  const fs::path model = d.path / "model";
  int code = -1;
  const std::string synth = run_cli(
      "synth --preset custom --hidden 64 --layers 1 --heads 4 --intermediate 128 --vocab 527 "
      "--max-positions 64 --out " +
          model.string(),
      code);
  ASSERT_EQ(code, 0) << synth;
  fs::copy_file(kFixtures / "llama3" / "tokenizer.json", model / "tokenizer.json");
  const std::string prompt = "The sparse model";
  const std::string out =
      run_cli("run -m " + model.string() + " -p '" + prompt + "' -n 5 --backend cpu", code);
  ASSERT_EQ(code, 0) << out;
  auto t = engine::load_tokenizer(model.string(), stub_model(527));
  ASSERT_TRUE(t.ok());
  auto ids = t.value()->encode(prompt);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids.value()[0], 520);  // <|begin_of_text|>
  const std::string by_ids = run_cli(
      "run -m " + model.string() + " --tokens " + ids_text(ids.value()) + " -n 5 --backend cpu",
      code);
  ASSERT_EQ(code, 0) << by_ids;
  std::vector<int32_t> all = ids.value();
  for (int32_t id : sparrow::test::tokens_line(by_ids)) all.push_back(id);
  ASSERT_EQ(all.size(), ids->size() + 5) << by_ids;
  EXPECT_EQ(out.find(prompt), out.find_first_not_of(" \n")) << out;
  EXPECT_NE(out.find(t.value()->decode(all) + "\n"), std::string::npos) << "text run:\n"
                                                                        << out << "ids run:\n"
                                                                        << by_ids;
}
