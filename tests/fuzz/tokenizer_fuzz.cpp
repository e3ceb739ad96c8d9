// libFuzzer target for the tokenizer.json pipelines (normalizers incl. NFC, pre-tokenizers, BPE,
// added tokens, decoders) on arbitrary prompt bytes: the first byte picks one of the fixtures of
// tests/data/tokenizers (or $SPARROW_TOKENIZER_FIXTURES), the rest is the prompt. Valid UTF-8
// must encode to ids inside the vocabulary and decode without a sanitizer report; anything else
// must be invalid_argument. NFC is checked on the way: idempotent, and it keeps text valid.
// Built by scripts/fuzz.sh only (not part of the CMake build).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "engine/tokenizer_json.hpp"
#include "engine/unicode.hpp"

namespace {

constexpr int64_t kVocab = 600;  // above every fixture's ids
const char* const kFixtures[] = {"llama2", "llama2-metaspace", "llama2-metaspace-split",
                                 "llama3", "qwen2", "gpt2"};

std::vector<std::unique_ptr<sparrow::engine::JsonTokenizer>>& tokenizers() {
  static std::vector<std::unique_ptr<sparrow::engine::JsonTokenizer>> all = [] {
    const char* env = std::getenv("SPARROW_TOKENIZER_FIXTURES");
    const std::string dir = env ? env : "tests/data/tokenizers";
    std::vector<std::unique_ptr<sparrow::engine::JsonTokenizer>> v;
    for (const char* f : kFixtures) {
      auto t = sparrow::engine::JsonTokenizer::load(dir + "/" + f + "/tokenizer.json", kVocab);
      if (!t.ok()) std::abort();  // run from the repository root, or set the variable
      v.push_back(std::move(t).value());
    }
    return v;
  }();
  return all;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sparrow::engine;
  if (size == 0) return 0;
  auto& all = tokenizers();
  const JsonTokenizer& t = *all[data[0] % all.size()];
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  const bool valid = unicode::is_valid_utf8(text);
  auto ids = t.encode(text);
  if (valid != ids.ok()) std::abort();
  if (!ids.ok()) {
    if (ids.status().code() != sparrow::Code::invalid_argument) std::abort();
    return 0;
  }
  for (int32_t id : ids.value())
    if (id < 0 || id >= kVocab) std::abort();
  const std::string back = t.decode(ids.value());
  if (!unicode::is_valid_utf8(back)) std::abort();
  std::u32string cps;
  if (!unicode::decode_utf8(text, cps)) std::abort();
  const std::u32string once = unicode::nfc(cps);
  if (unicode::nfc(once) != once) std::abort();
  if (!unicode::is_valid_utf8(unicode::to_utf8(once))) std::abort();
  return 0;
}
