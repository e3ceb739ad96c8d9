// Tokenizers of include/sparrow/engine/tokenizer.hpp.
#include "sparrow/engine/tokenizer.hpp"

#include <filesystem>

#include "engine/tokenizer_config.hpp"
#include "engine/tokenizer_json.hpp"

#ifdef SPARROW_HAVE_SENTENCEPIECE
#include <sentencepiece_processor.h>
#endif

namespace sparrow::engine {

namespace {

class ByteTokenizer final : public Tokenizer {
 public:
  const char* kind() const override { return "byte-level"; }
  Result<std::vector<int32_t>> encode(const std::string& text) const override {
    std::vector<int32_t> ids;
    for (unsigned char ch : text) ids.push_back(int32_t(ch));
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string text;
    for (int32_t t : ids) text.push_back(char(t));
    return text;
  }
};

#ifdef SPARROW_HAVE_SENTENCEPIECE
class SentencePieceTokenizer final : public Tokenizer {
 public:
  Status load(const std::string& path, int64_t vocab) {
    const auto st = sp_.Load(path);
    if (!st.ok()) return corrupt_data("cannot read '" + path + "': " + st.ToString());
    if (sp_.GetPieceSize() != vocab) {
      return corrupt_data("'" + path + "' has " + std::to_string(sp_.GetPieceSize()) +
                          " pieces but config.json's vocab_size is " + std::to_string(vocab));
    }
    return Status::success();
  }
  const char* kind() const override { return "sentencepiece"; }
  Result<std::vector<int32_t>> encode(const std::string& text) const override {
    std::vector<int> pieces;
    const auto st = sp_.Encode(text, &pieces);
    if (!st.ok()) return invalid_argument("cannot tokenize the prompt: " + st.ToString());
    std::vector<int32_t> ids;
    if (sp_.bos_id() >= 0) ids.push_back(int32_t(sp_.bos_id()));
    for (int p : pieces) ids.push_back(int32_t(p));
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::vector<int> pieces;
    for (int32_t t : ids)
      if (t >= 0 && t < sp_.GetPieceSize() && !sp_.IsControl(t)) pieces.push_back(int(t));
    std::string text;
    if (!sp_.Decode(pieces, &text).ok()) return {};
    return text;
  }

 private:
  sentencepiece::SentencePieceProcessor sp_;
};
#endif

}  // namespace

bool has_sentencepiece() {
#ifdef SPARROW_HAVE_SENTENCEPIECE
  return true;
#else
  return false;
#endif
}

Result<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& dir, const Model& model) {
  const std::string sp_path = dir + "/tokenizer.model";
  const std::string json_path = dir + "/tokenizer.json";
  const bool has_json = std::filesystem::exists(json_path);
  if (std::filesystem::exists(sp_path)) {
#ifdef SPARROW_HAVE_SENTENCEPIECE
    auto t = std::make_unique<SentencePieceTokenizer>();
    SPARROW_RETURN_IF_ERROR(t->load(sp_path, model.config.vocab));
    return std::unique_ptr<Tokenizer>(std::move(t));
#else
    if (!has_json) {
      return unsupported("'" + sp_path + "' is a SentencePiece model and this build of sparrow "
                         "has no libsentencepiece (run scripts/setup.sh and rebuild), or pass "
                         "--tokens 1,2,3");
    }
#endif
  }
  if (has_json) {
    SPARROW_ASSIGN_OR_RETURN(auto t, JsonTokenizer::load(json_path, model.config.vocab));
    // transformers' LlamaTokenizerFast rebuilds the template from add_bos_token; a file
    // that sets it means it.
    const std::string config_path = dir + "/tokenizer_config.json";
    if (std::filesystem::exists(config_path)) {
      SPARROW_ASSIGN_OR_RETURN(TokenizerConfig c, read_tokenizer_config(config_path));
      if (c.add_bos_token) {
        const Status s = t->set_add_bos(*c.add_bos_token, c.bos_token);
        if (!s.ok()) return Status(s.code(), "'" + dir + "': " + s.message());
      }
    }
    return std::unique_ptr<Tokenizer>(std::move(t));
  }
  if (model.byte_level) return std::unique_ptr<Tokenizer>(std::make_unique<ByteTokenizer>());
  return invalid_argument("model '" + model.name + "' has no tokenizer file (tokenizer.model or "
                          "tokenizer.json) and is not byte-level; pass token ids with "
                          "--tokens 1,2,3");
}

}  // namespace sparrow::engine
