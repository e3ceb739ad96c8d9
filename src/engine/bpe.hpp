// The BPE model of a tokenizer.json ("model": {"type": "BPE", ...}): a pre-token's characters
// become vocab ids (or <0xXX> byte tokens with byte_fallback, or the unknown token), then the
// merges are applied by rank, lowest first, until none applies, as Hugging Face `tokenizers`
// does. dropout, continuing_subword_prefix and end_of_word_suffix are refused when set.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "sparrow/status.hpp"

namespace sparrow::engine {

class Bpe {
 public:
  // Reads the "model" object. unsupported for options sparrow does not implement, corrupt_data
  // for merges that name tokens missing from the vocab.
  static Result<Bpe> from_json(const nlohmann::json& model);

  // Appends the ids of one pre-token (UTF-8) to `out`.
  void encode_word(const std::string& word, std::vector<int32_t>& out) const;

  const std::unordered_map<std::string, int32_t>& vocab() const { return vocab_; }

 private:
  struct Merge {
    int32_t rank = 0;
    int32_t id = 0;  // of the merged token
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
  }
  // The ids of `word`'s characters before any merge.
  void initial_symbols(const std::string& word, std::vector<int32_t>& ids) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<uint64_t, Merge> merges_;
  int32_t unk_id_ = -1;  // none
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  int32_t byte_ids_[256];  // <0x00>..<0xFF> with byte_fallback, -1 where missing
};

}  // namespace sparrow::engine
