// Tokenizers (include/sparrow/engine/tokenizer.hpp): byte-level ids, a SentencePiece model trained
// here on a small text (Llama's conventions: unk 0, BOS 1, EOS 2), refusals with messages, and
// `sparrow run -p` end to end on a synthetic model whose vocab matches that tokenizer.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#ifdef SPARROW_HAVE_SENTENCEPIECE
#include <sentencepiece_trainer.h>
#endif

#include "cli_test_util.hpp"
#include "sparrow/engine/tokenizer.hpp"

using namespace sparrow;
namespace fs = std::filesystem;
using sparrow::test::run_cli;
using sparrow::test::TempDir;

namespace {

engine::Model stub_model(int64_t vocab, bool byte_level) {
  engine::Model m;
  m.name = "stub";
  m.config.vocab = vocab;
  m.byte_level = byte_level;
  return m;
}


}  // namespace

TEST(Tokenizer, ByteLevelIdsAreTheBytes) {
  TempDir d("bytes");
  auto t = engine::load_tokenizer(d.path.string(), stub_model(256, true));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_STREQ(t.value()->kind(), "byte-level");
  const std::string text = "def f(x):\n  return \xc3\xa9";  // UTF-8 bytes, one id each
  auto ids = t.value()->encode(text);
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->size(), text.size());
  EXPECT_EQ(ids.value()[0], int32_t('d'));
  EXPECT_EQ(ids.value().back(), 0xa9);
  EXPECT_EQ(t.value()->decode(ids.value()), text);
}

TEST(Tokenizer, RefusesWhatItCannotRead) {
  TempDir d("none");
  auto t = engine::load_tokenizer(d.path.string(), stub_model(32000, false));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Code::invalid_argument);
  EXPECT_NE(t.status().message().find("--tokens"), std::string::npos) << t.status().message();
  // tokenizer.json is read (tokenizer_json_test.cpp); one without a model is bad data.
  std::ofstream(d.path / "tokenizer.json") << "{}";
  t = engine::load_tokenizer(d.path.string(), stub_model(32000, false));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Code::corrupt_data);
  EXPECT_NE(t.status().message().find("tokenizer.json"), std::string::npos);
  // tokenizer.model comes first when this build reads it; otherwise tokenizer.json is used.
  std::ofstream(d.path / "tokenizer.model") << "not a sentencepiece model";
  t = engine::load_tokenizer(d.path.string(), stub_model(32000, false));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Code::corrupt_data) << t.status().to_string();
  EXPECT_NE(t.status().message().find(engine::has_sentencepiece() ? "tokenizer.model"
                                                                  : "tokenizer.json"),
            std::string::npos)
      << t.status().message();
  // tokenizer.model alone, in a build without libsentencepiece, says what is missing.
  fs::remove(d.path / "tokenizer.json");
  t = engine::load_tokenizer(d.path.string(), stub_model(32000, false));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(),
            engine::has_sentencepiece() ? Code::corrupt_data : Code::unsupported)
      << t.status().to_string();
}

namespace {

constexpr int kVocab = 48;  // what this corpus supports (the trainer refuses more than ~55)

// A small unigram model with Llama's special ids, trained on a generated text. Tests that need it
// skip (saying why) in a build without libsentencepiece.
void train_tokenizer(const fs::path& dir) {
#ifdef SPARROW_HAVE_SENTENCEPIECE
  const fs::path corpus = dir / "corpus.txt";
  {
    std::ofstream out(corpus);
    const char* words[] = {"the", "sparse", "model", "runs", "fast", "on", "a", "gpu", "with",
                           "fewer", "bytes", "per", "token", "and", "kernels", "weights"};
    for (int i = 0; i < 3000; ++i) {
      out << words[(i * 7) % 16] << ' ' << words[(i * 3 + 1) % 16] << ' '
          << words[(i * 5 + 2) % 16] << (i % 5 == 4 ? ".\n" : " ");
    }
  }
  const auto st = sentencepiece::SentencePieceTrainer::Train(
      "--input=" + corpus.string() + " --model_prefix=" + (dir / "tokenizer").string() +
      " --vocab_size=" + std::to_string(kVocab) +
      " --model_type=unigram --unk_id=0 --bos_id=1 --eos_id=2 --pad_id=-1"
      " --minloglevel=2 --num_threads=1");
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_TRUE(fs::exists(dir / "tokenizer.model"));
#else
  FAIL() << "train_tokenizer needs libsentencepiece (" << dir << ")";
#endif
}

#define SKIP_WITHOUT_SENTENCEPIECE()                                                        \
  if (!engine::has_sentencepiece())                                                         \
  GTEST_SKIP() << "this build has no libsentencepiece (scripts/setup.sh installs Debian's " \
                  "libsentencepiece-dev)"

}  // namespace

TEST(Tokenizer, SentencePieceRoundTripWithBos) {
  SKIP_WITHOUT_SENTENCEPIECE();
  TempDir d("sp");
  train_tokenizer(d.path);
  auto t = engine::load_tokenizer(d.path.string(), stub_model(kVocab, false));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_STREQ(t.value()->kind(), "sentencepiece");
  const std::string text = "the sparse model runs fast on a gpu";
  auto ids = t.value()->encode(text);
  ASSERT_TRUE(ids.ok());
  ASSERT_GE(ids->size(), 2u);
  EXPECT_EQ(ids.value()[0], 1);  // BOS first, as HF's LlamaTokenizer
  for (int32_t id : ids.value()) EXPECT_LT(id, kVocab);
  EXPECT_LT(ids->size(), text.size());  // pieces, not bytes
  EXPECT_EQ(t.value()->decode(ids.value()), text);  // control ids (BOS) dropped
  // A vocab that disagrees with config.json is refused.
  auto wrong = engine::load_tokenizer(d.path.string(), stub_model(kVocab + 1, false));
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), Code::corrupt_data);
  EXPECT_NE(wrong.status().message().find("vocab"), std::string::npos);
}

// `sparrow run -p` on a synthetic model with that tokenizer, CPU backend: the output starts with
// the prompt (decoded with the continuation), and the same run with --tokens (the prompt's ids)
// generates the same ids.
TEST(Tokenizer, RunTakesATextPromptThroughSentencePiece) {
  SKIP_WITHOUT_SENTENCEPIECE();
  TempDir d("run");
  const fs::path model = d.path / "model";
  int code = -1;
  const std::string synth =
      run_cli("synth --preset custom --hidden 64 --layers 1 --heads 4 --intermediate 128 --vocab " +
                  std::to_string(kVocab) + " --max-positions 64 --out " + model.string(),
              code);
  ASSERT_EQ(code, 0) << synth;
  train_tokenizer(model);
  const std::string prompt = "the sparse model";
  const std::string out =
      run_cli("run -m " + model.string() + " -p '" + prompt + "' -n 5 --backend cpu", code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_EQ(out.find(prompt), out.find_first_not_of(" \n")) << out;
  // The same prompt as ids: BOS + pieces.
  auto t = engine::load_tokenizer(model.string(), stub_model(kVocab, false));
  ASSERT_TRUE(t.ok());
  auto ids = t.value()->encode(prompt);
  ASSERT_TRUE(ids.ok());
  std::string list;
  for (int32_t id : ids.value()) list += (list.empty() ? "" : ",") + std::to_string(id);
  const std::string by_ids =
      run_cli("run -m " + model.string() + " --tokens " + list + " -n 5 --backend cpu", code);
  ASSERT_EQ(code, 0) << by_ids;
  std::vector<int32_t> all = ids.value();
  for (int32_t id : sparrow::test::tokens_line(by_ids)) all.push_back(id);
  ASSERT_EQ(all.size(), ids->size() + 5) << by_ids;
  // Greedy both times: the text run printed exactly the prompt and these 5 ids, decoded.
  EXPECT_NE(out.find(t.value()->decode(all) + "\n"), std::string::npos)
      << "text run:\n" << out << "ids run:\n" << by_ids;
}
