// Text <-> token ids for `sparrow run -p`, perplexity and calibrate. A model directory's
// tokenizer is, in this order:
//   sentencepiece  tokenizer.model (Llama 2, Mistral), read with libsentencepiece when sparrow
//                  was built with it (scripts/setup.sh installs it; CMake finds it by
//                  pkg-config). The ids start with the model's BOS, as HF's LlamaTokenizer does.
//   tokenizer.json a Hugging Face `tokenizers` file with a BPE model (src/engine/
//                  tokenizer_json.hpp): the Llama 2 / Mistral pipeline (▁ for spaces, <0xXX>
//                  byte fallback) and byte-level BPE (Llama 3, Qwen2, GPT-2 pre-tokenizer
//                  regexes). BOS (or whatever its TemplateProcessing adds) comes first, unless
//                  tokenizer_config.json's add_bos_token says otherwise. Added tokens such as
//                  "<s>" or "<|eot_id|>" in the prompt text become their ids.
//   byte-level     vocab 256 and no tokenizer file: a token id is a byte of the UTF-8 text
//                  (tinyllama-py).
// Anything else (WordPiece or Unigram tokenizer.json, unknown normalizers, pre-tokenizers or
// regexes, tokenizer.model without tokenizer.json in a build without libsentencepiece) is
// refused with a message saying what is missing; --tokens always works.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sparrow/engine/model.hpp"
#include "sparrow/status.hpp"

namespace sparrow::engine {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual const char* kind() const = 0;
  // The prompt's ids (with BOS where the tokenizer has one); every id < the model's vocab.
  virtual Result<std::vector<int32_t>> encode(const std::string& text) const = 0;
  // The text of generated ids (BOS/EOS and other control / special ids dropped).
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
};

// The tokenizer of the model in `dir` (loaded by load_model). invalid_argument when the
// directory has none, unsupported when the build lacks libsentencepiece or tokenizer.json uses
// something sparrow does not implement (the message names it), corrupt_data when the file
// cannot be read, tokenizer.model's size differs from config.json's vocab_size, or
// tokenizer.json has ids at or above it, or tokenizer_config.json (read beside a tokenizer.json)
// is malformed.
Result<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& dir, const Model& model);

// Whether this build reads SentencePiece models.
bool has_sentencepiece();

}  // namespace sparrow::engine
