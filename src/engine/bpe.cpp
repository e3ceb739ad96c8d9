// BPE encoding of bpe.hpp. A word's symbols form a linked list over their original positions; a
// min-heap holds the candidate merges of neighbouring symbols, by rank and then position (the
// leftmost of equal ranks first). A popped candidate that no longer describes two neighbours
// (one of them merged since) is dropped. O(n log n) in the word's length, which matters for
// Llama 2's pipeline, where a whole prompt without pre-tokenizer is one word.
#include "engine/bpe.hpp"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <queue>

#include "engine/unicode.hpp"

namespace sparrow::engine {

using nlohmann::json;

namespace {

// A null, missing or (for strings) empty field: what the options sparrow refuses look like
// when unset.
bool unset(const json& obj, const char* key) {
  if (!obj.contains(key) || obj[key].is_null()) return true;
  return obj[key].is_string() && obj[key].get<std::string>().empty();
}

// As tokenizer_json.cpp words its refusals.
Status refuse(const std::string& what) {
  return unsupported(what +
                     " is not supported by sparrow's tokenizer.json reader; pass token "
                     "ids with --tokens 1,2,3");
}

Result<bool> get_flag(const json& obj, const char* key) {
  if (!obj.contains(key) || obj[key].is_null()) return false;
  if (!obj[key].is_boolean()) {
    return corrupt_data(std::string("model.") + key + " is not true/false");
  }
  return obj[key].get<bool>();
}

}  // namespace

Result<Bpe> Bpe::from_json(const json& model) {
  Bpe b;
  if (!unset(model, "dropout") && !(model["dropout"].is_number() && model["dropout"] == 0)) {
    return refuse("BPE dropout");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (!unset(model, key)) {
      return refuse(std::string("BPE ") + key);
    }
  }
  SPARROW_ASSIGN_OR_RETURN(b.fuse_unk_, get_flag(model, "fuse_unk"));
  SPARROW_ASSIGN_OR_RETURN(b.byte_fallback_, get_flag(model, "byte_fallback"));
  SPARROW_ASSIGN_OR_RETURN(b.ignore_merges_, get_flag(model, "ignore_merges"));

  if (!model.contains("vocab") || !model["vocab"].is_object()) {
    return corrupt_data("model.vocab is not an object");
  }
  b.vocab_.reserve(model["vocab"].size());
  for (const auto& [token, id] : model["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
      return corrupt_data("the id of token '" + token + "' is not a valid id");
    }
    b.vocab_[token] = id.get<int32_t>();
  }
  if (!unset(model, "unk_token")) {
    if (!model["unk_token"].is_string()) {
      return corrupt_data("model.unk_token is not a string");
    }
    const auto it = b.vocab_.find(model["unk_token"].get<std::string>());
    if (it == b.vocab_.end()) {
      return corrupt_data("the unknown token '" + model["unk_token"].get<std::string>() +
                          "' is not in the vocab");
    }
    b.unk_id_ = it->second;
  }
  for (int v = 0; v < 256; ++v) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", v);
    const auto it = b.vocab_.find(name);
    b.byte_ids_[v] = it == b.vocab_.end() ? -1 : it->second;
  }

  // Merges: "a b" strings (older files) or ["a", "b"] pairs; the rank is the position.
  if (!model.contains("merges") || !model["merges"].is_array()) {
    return corrupt_data("model.merges is not a list");
  }
  const json& merges = model["merges"];
  b.merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const json& m = merges[rank];
    std::string left, right;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        return corrupt_data("merge " + std::to_string(rank) + " ('" + s +
                            "') is not two tokens separated by a space");
      }
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      return corrupt_data("merge " + std::to_string(rank) +
                          " is neither \"a b\" nor [\"a\", \"b\"]");
    }
    const auto a = b.vocab_.find(left), c = b.vocab_.find(right),
               merged = b.vocab_.find(left + right);
    if (a == b.vocab_.end() || c == b.vocab_.end() || merged == b.vocab_.end()) {
      return corrupt_data("merge " + std::to_string(rank) + " ('" + left + "' + '" + right +
                          "') names a token that is not in the vocab");
    }
    // A repeated pair keeps its first (lowest) rank.
    b.merges_.emplace(pair_key(a->second, c->second), Merge{int32_t(rank), merged->second});
  }
  return b;
}

void Bpe::initial_symbols(const std::string& word, std::vector<int32_t>& ids) const {
  ids.clear();
  bool pending_unk = false;  // fuse_unk: a run of unknown characters becomes one unk
  for (size_t i = 0; i < word.size();) {
    const size_t len = unicode::utf8_length(static_cast<unsigned char>(word[i]));
    const auto it = vocab_.find(word.substr(i, len));
    if (it != vocab_.end()) {
      if (pending_unk) ids.push_back(unk_id_);
      pending_unk = false;
      ids.push_back(it->second);
    } else {
      bool bytes_known = byte_fallback_;
      for (size_t k = i; k < i + len && bytes_known; ++k)
        bytes_known = byte_ids_[static_cast<unsigned char>(word[k])] >= 0;
      if (bytes_known) {
        if (pending_unk) ids.push_back(unk_id_);
        pending_unk = false;
        for (size_t k = i; k < i + len; ++k)
          ids.push_back(byte_ids_[static_cast<unsigned char>(word[k])]);
      } else if (unk_id_ >= 0) {
        if (pending_unk && !fuse_unk_) ids.push_back(unk_id_);
        pending_unk = true;
      }
      // No byte token and no unknown token: the character is dropped, as in `tokenizers`.
    }
    i += len;
  }
  if (pending_unk) ids.push_back(unk_id_);
}

void Bpe::encode_word(const std::string& word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    const auto it = vocab_.find(word);
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  std::vector<int32_t> id;
  initial_symbols(word, id);
  const int n = int(id.size());
  std::vector<int> prev(static_cast<size_t>(n)), next(static_cast<size_t>(n));
  std::vector<char> alive(static_cast<size_t>(n), 1);
  for (int i = 0; i < n; ++i) {
    prev[size_t(i)] = i - 1;
    next[size_t(i)] = i + 1 < n ? i + 1 : -1;
  }

  struct Candidate {
    int32_t rank;
    int left;                   // position of the left symbol
    int32_t left_id, right_id;  // the pair when queued
    int32_t merged;             // its merged token
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto push = [&](int left) {
    if (left < 0 || next[size_t(left)] < 0) return;
    const int32_t a = id[size_t(left)], b = id[size_t(next[size_t(left)])];
    const auto it = merges_.find(pair_key(a, b));
    if (it != merges_.end()) heap.push({it->second.rank, left, a, b, it->second.id});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);

  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const int left = c.left, right = next[size_t(left)];
    // Stale: the left symbol was absorbed, or either symbol changed since it was queued.
    if (!alive[size_t(left)] || right < 0 || id[size_t(left)] != c.left_id ||
        id[size_t(right)] != c.right_id) {
      continue;
    }
    id[size_t(left)] = c.merged;
    alive[size_t(right)] = 0;
    next[size_t(left)] = next[size_t(right)];
    if (next[size_t(left)] >= 0) prev[size_t(next[size_t(left)])] = left;
    push(prev[size_t(left)]);
    push(left);
  }
  for (int i = 0; i < n; ++i)
    if (alive[size_t(i)]) out.push_back(id[size_t(i)]);
}

}  // namespace sparrow::engine
