// A Hugging Face tokenizer.json with a BPE model, in the two pipelines LLMs use:
//   Llama 2 / Mistral / TinyLlama: normalizer Prepend("▁") + Replace(" ", "▁") or a Metaspace
//     pre-tokenizer, <0xXX> byte fallback, decoder Replace / ByteFallback / Fuse / Strip or
//     Metaspace;
//   byte-level BPE (Llama 3, Qwen2, GPT-2): a Split pre-tokenizer with one of the regexes of
//     engine/split_patterns.hpp and/or ByteLevel, an NFC normalizer (Qwen2), ByteLevel decoder.
// The post-processor's TemplateProcessing adds its special tokens (BOS) around the prompt.
// Added tokens (special or not) are found in the prompt text first, as `tokenizers` does by
// default: "<s>" or "<|eot_id|>" in a prompt becomes that token's id (leftmost-longest match;
// lstrip / rstrip take the white space beside it) and only the text between them goes through
// the pipeline. They decode, and special ones are dropped from decoded text.
// Everything else is refused with unsupported, naming the part sparrow does not implement.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "engine/bpe.hpp"
#include "engine/split_patterns.hpp"
#include "sparrow/engine/tokenizer.hpp"

namespace sparrow::engine {

class JsonTokenizer final : public Tokenizer {
 public:
  // Reads `path`. `vocab` is config.json's vocab_size: every id of the file must be below it
  // (corrupt_data otherwise; the embedding may have more rows than the tokenizer has tokens).
  static Result<std::unique_ptr<JsonTokenizer>> load(const std::string& path, int64_t vocab);

  const char* kind() const override { return "tokenizer.json BPE"; }
  // invalid_argument for text that is not UTF-8.
  Result<std::vector<int32_t>> encode(const std::string& text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;

  // The pieces BPE sees (after the normalizers and pre-tokenizers) for text without added
  // tokens; for tests.
  Result<std::vector<std::string>> pre_tokenize(const std::string& text) const;

  // tokenizer_config.json's add_bos_token (transformers' LlamaTokenizerFast honours it): false
  // drops the template's tokens before the text; true makes them `bos_token` (corrupt_data when
  // that is not a token of the file), or keeps them when `bos_token` is empty (corrupt_data if
  // there are none).
  Status set_add_bos(bool add, const std::string& bos_token);

 private:
  enum class Prepend { always, first, never };
  struct NormalizeStep {
    enum Kind { prepend, replace, nfc } kind;
    std::string pattern, content;  // prepend: content; replace: pattern -> content
  };
  struct PreTokenizeStep {
    enum Kind { metaspace, split, byte_level } kind;
    explicit PreTokenizeStep(Kind k) : kind(k) {}
    std::string replacement;                    // metaspace
    Prepend prepend = Prepend::always;          // metaspace
    bool split_words = true;                    // metaspace: a piece per replacement character
    SplitPattern pattern = SplitPattern::gpt2;  // split; byte_level with use_regex
    bool use_regex = false;                     // byte_level
    bool add_prefix_space = false;              // byte_level
  };
  struct DecodeStep {
    enum Kind { replace, byte_fallback, fuse, strip, metaspace, byte_level } kind;
    explicit DecodeStep(Kind k) : kind(k) {}
    std::string pattern, content;  // replace; strip: content; metaspace: pattern = replacement
    size_t start = 0, stop = 0;    // strip
    bool drop_first_replacement = true;  // metaspace (prepend scheme other than never)
  };

  Status read_normalizer(const nlohmann::json& j);
  Status read_pre_tokenizer(const nlohmann::json& j);
  Status read_post_processor(const nlohmann::json& j);
  Status read_decoder(const nlohmann::json& j);
  Status read_added_tokens(const nlohmann::json& j);

  struct AddedToken {
    std::string content;
    int32_t id;
    bool lstrip, rstrip, normalized;
  };
  // A stretch of text [begin, end) of the string it was found in; id -1: plain text, else an
  // added token (the stretch includes the white space its lstrip / rstrip took).
  struct Segment {
    size_t begin, end;
    int32_t id;
  };
  std::vector<Segment> split_added(const std::string& text, bool normalized) const;
  Status normalize(std::string& text) const;
  std::vector<std::string> pre_tokenize_normalized(std::string text, bool at_start) const;

  Bpe bpe_;
  std::vector<NormalizeStep> normalizers_;
  std::vector<PreTokenizeStep> pre_tokenizers_;
  std::vector<DecodeStep> decoders_;
  bool has_decoder_ = false;
  std::vector<int32_t> prefix_ids_, suffix_ids_;  // TemplateProcessing's single template
  std::vector<std::string> tokens_;               // by id ("" for unused ids)
  std::vector<char> special_;                     // by id: a special added token
  std::vector<AddedToken> added_;
  // Indices into added_ by first byte of the content, longest content first; [0]: tokens
  // matched in the raw text, [1]: normalized ones, matched in the normalized text.
  std::vector<size_t> added_by_byte_[2][256];
};

}  // namespace sparrow::engine
