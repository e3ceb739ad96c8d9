// Text <-> token ids for `sparrow run -p`. A model directory's tokenizer is one of:
//   byte-level     vocab 256 and no tokenizer file: a token id is a byte of the UTF-8 text
//                  (tinyllama-py);
//   sentencepiece  tokenizer.model (Llama 2, Mistral), read with libsentencepiece when sparrow
//                  was built with it (scripts/setup.sh installs it; CMake finds it by
//                  pkg-config). The ids start with the model's BOS, as HF's LlamaTokenizer does.
// Anything else (tokenizer.json BPE, or tokenizer.model in a build without libsentencepiece) is
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
  // The text of generated ids (BOS/EOS and other control ids dropped).
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
};

// The tokenizer of the model in `dir` (loaded by load_model). invalid_argument when the
// directory has none sparrow can use, unsupported when the build lacks libsentencepiece,
// corrupt_data when tokenizer.model cannot be read or its size disagrees with config.json's
// vocab.
Result<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& dir, const Model& model);

// Whether this build reads SentencePiece models.
bool has_sentencepiece();

}  // namespace sparrow::engine
