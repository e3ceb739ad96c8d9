// tokenizer.json reading and the encode/decode pipelines of tokenizer_json.hpp, following the
// documented behaviour of Hugging Face `tokenizers`: normalizers, then pre-tokenizers (each
// step maps every piece to pieces; empty pieces vanish), BPE per piece, the post-processor's
// template; decoding runs the decoder steps over the tokens' strings.
#include "engine/tokenizer_json.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/unicode.hpp"
#include "io/json_file.hpp"

namespace sparrow::engine {

using nlohmann::json;

namespace {

Status refuse(const std::string& what) {
  return unsupported(what +
                     " is not supported by sparrow's tokenizer.json reader; pass token "
                     "ids with --tokens 1,2,3");
}

std::string type_of(const json& j) {
  return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>()
                                                                      : std::string();
}

// A pipeline part of a type the reader does not know.
Status refuse_type(const char* part, const std::string& type) {
  return refuse(std::string(part) + " \"" + (type.empty() ? "(no type)" : type) + "\"");
}

// A "Sequence" node of a pipeline part: `read` on every entry of its `key` list.
template <class Read>
Status read_sequence(const json& j, const char* part, const char* key, Read read) {
  if (!j.contains(key) || !j[key].is_array()) {
    return corrupt_data(std::string(part) + " Sequence has no \"" + key + "\" list");
  }
  for (const json& step : j[key]) SPARROW_RETURN_IF_ERROR(read(step));
  return Status::success();
}

// A string field, or `fallback` when absent or null.
Result<std::string> get_string(const json& j, const char* key, const std::string& fallback,
                               const char* where) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_string()) {
    return corrupt_data(std::string(where) + "." + key + " is not a string");
  }
  return j[key].get<std::string>();
}

Result<bool> get_bool(const json& j, const char* key, bool fallback, const char* where) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_boolean()) {
    return corrupt_data(std::string(where) + "." + key + " is not true/false");
  }
  return j[key].get<bool>();
}

// {"String": "..."} patterns of Replace; Regex patterns are refused.
Result<std::string> string_pattern(const json& j, const char* where) {
  if (!j.contains("pattern") || !j["pattern"].is_object()) {
    return corrupt_data(std::string(where) + " has no pattern");
  }
  const json& p = j["pattern"];
  if (p.contains("String") && p["String"].is_string()) return p["String"].get<std::string>();
  if (p.contains("Regex")) return refuse(std::string(where) + " with a Regex pattern");
  return corrupt_data(std::string(where) + " pattern is neither String nor Regex");
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  std::string out;
  size_t at = 0;
  for (size_t hit; (hit = s.find(from, at)) != std::string::npos; at = hit + from.size())
    out.append(s, at, hit - at).append(to);
  out.append(s, at, std::string::npos);
  s.swap(out);
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// GPT-2's bytes_to_unicode, which the ByteLevel pre-tokenizer and decoder share: bytes that are
// printable Latin-1 characters stand for themselves, the other 68 for U+0100 onwards in order.
struct ByteChars {
  std::array<char32_t, 256> of_byte{};
  std::array<int, 512> byte_of{};  // -1: not a byte's character
  ByteChars() {
    byte_of.fill(-1);
    char32_t extra = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      of_byte[size_t(b)] = printable ? char32_t(b) : extra++;
      byte_of[size_t(of_byte[size_t(b)])] = b;
    }
  }
};
const ByteChars& byte_chars() {
  static const ByteChars table;
  return table;
}

std::string bytes_as_chars(const std::string& piece) {
  std::string out;
  for (unsigned char b : piece) unicode::append_utf8(out, byte_chars().of_byte[b]);
  return out;
}

// The pieces `p` splits `piece` into (Split with behavior Isolated: every match is a piece).
std::vector<std::string> split_piece(const std::string& piece, SplitPattern p) {
  std::u32string cps;
  unicode::decode_utf8(piece, cps);  // pieces are valid UTF-8: encode checks the prompt
  std::vector<std::string> out;
  for (const auto& [b, e] : split_matches(cps, p))
    out.push_back(unicode::to_utf8(cps.substr(b, e - b)));
  return out;
}

}  // namespace

Result<std::unique_ptr<JsonTokenizer>> JsonTokenizer::load(const std::string& path, int64_t vocab) {
  auto with_path = [&path](const Status& s) {
    return Status(s.code(), "'" + path + "': " + s.message());
  };
  SPARROW_ASSIGN_OR_RETURN(const json j, io::read_json_object(path));
  if (!j.contains("model") || !j["model"].is_object()) {
    return corrupt_data("'" + path + "' has no \"model\" object");
  }
  const std::string model_type = type_of(j["model"]);
  if (model_type != "BPE") {
    return with_path(refuse("model type \"" + (model_type.empty() ? "(none)" : model_type) +
                            "\" (only BPE is)"));
  }
  auto t = std::unique_ptr<JsonTokenizer>(new JsonTokenizer());
  auto bpe = Bpe::from_json(j["model"]);
  if (!bpe.ok()) return with_path(bpe.status());
  t->bpe_ = std::move(bpe.value());
  for (const auto& [key, read] :
       {std::pair{"normalizer", &JsonTokenizer::read_normalizer},
        std::pair{"pre_tokenizer", &JsonTokenizer::read_pre_tokenizer},
        std::pair{"decoder", &JsonTokenizer::read_decoder},
        std::pair{"added_tokens", &JsonTokenizer::read_added_tokens},
        std::pair{"post_processor", &JsonTokenizer::read_post_processor}}) {
    if (!j.contains(key) || j[key].is_null()) continue;
    const Status s = ((*t).*read)(j[key]);
    if (!s.ok()) return with_path(s);
  }
  t->has_decoder_ = j.contains("decoder") && !j["decoder"].is_null();

  // Every id the tokenizer can produce must have an embedding row.
  int64_t max_id = -1;
  for (const auto& [token, id] : t->bpe_.vocab()) max_id = std::max<int64_t>(max_id, id);
  max_id = std::max<int64_t>(max_id, int64_t(t->tokens_.size()) - 1);  // added tokens
  for (int32_t id : t->prefix_ids_) max_id = std::max<int64_t>(max_id, id);
  for (int32_t id : t->suffix_ids_) max_id = std::max<int64_t>(max_id, id);
  if (max_id + 1 > vocab) {
    return corrupt_data("'" + path + "' has token ids up to " + std::to_string(max_id) +
                        " but config.json's vocab_size is " + std::to_string(vocab));
  }
  if (t->tokens_.size() < size_t(max_id + 1)) t->tokens_.resize(size_t(max_id + 1));
  t->special_.resize(t->tokens_.size(), 0);
  for (const auto& [token, id] : t->bpe_.vocab())
    if (t->tokens_[size_t(id)].empty()) t->tokens_[size_t(id)] = token;
  return t;
}

Status JsonTokenizer::read_normalizer(const json& j) {
  const std::string type = type_of(j);
  if (type == "Sequence") {
    return read_sequence(j, "normalizer", "normalizers",
                         [this](const json& step) { return read_normalizer(step); });
  } else if (type == "Prepend") {
    SPARROW_ASSIGN_OR_RETURN(std::string s, get_string(j, "prepend", "", "normalizer Prepend"));
    normalizers_.push_back({NormalizeStep::prepend, "", s});
  } else if (type == "Replace") {
    SPARROW_ASSIGN_OR_RETURN(std::string pattern, string_pattern(j, "normalizer Replace"));
    SPARROW_ASSIGN_OR_RETURN(std::string content,
                             get_string(j, "content", "", "normalizer Replace"));
    normalizers_.push_back({NormalizeStep::replace, pattern, content});
  } else if (type == "NFC") {
    normalizers_.push_back({NormalizeStep::nfc, "", ""});
  } else {
    return refuse_type("normalizer", type);
  }
  return Status::success();
}

Status JsonTokenizer::read_pre_tokenizer(const json& j) {
  const std::string type = type_of(j);
  if (type == "Sequence") {
    return read_sequence(j, "pre_tokenizer", "pretokenizers",
                         [this](const json& step) { return read_pre_tokenizer(step); });
  } else if (type == "Metaspace") {
    PreTokenizeStep s{PreTokenizeStep::metaspace};
    SPARROW_ASSIGN_OR_RETURN(s.replacement, get_string(j, "replacement", "\u2581", "Metaspace"));
    std::u32string r;
    if (!unicode::decode_utf8(s.replacement, r) || r.size() != 1) {
      return corrupt_data("Metaspace replacement is not one character");
    }
    // Newer files say prepend_scheme; older ones add_prefix_space (true: always).
    SPARROW_ASSIGN_OR_RETURN(bool add_prefix, get_bool(j, "add_prefix_space", true, "Metaspace"));
    s.prepend = add_prefix ? Prepend::always : Prepend::never;
    SPARROW_ASSIGN_OR_RETURN(std::string scheme, get_string(j, "prepend_scheme", "", "Metaspace"));
    if (scheme == "always")
      s.prepend = Prepend::always;
    else if (scheme == "first")
      s.prepend = Prepend::first;
    else if (scheme == "never")
      s.prepend = Prepend::never;
    else if (!scheme.empty())
      return refuse("Metaspace prepend_scheme \"" + scheme + "\"");
    SPARROW_ASSIGN_OR_RETURN(s.split_words, get_bool(j, "split", true, "Metaspace"));
    pre_tokenizers_.push_back(s);
  } else if (type == "Split") {
    PreTokenizeStep s{PreTokenizeStep::split};
    if (!j.contains("pattern") || !j["pattern"].is_object() || !j["pattern"].contains("Regex") ||
        !j["pattern"]["Regex"].is_string()) {
      return refuse("a Split pre-tokenizer without a Regex pattern");
    }
    const std::string regex = j["pattern"]["Regex"].get<std::string>();
    const auto p = find_split_pattern(regex);
    if (!p) {
      return refuse("the Split pre-tokenizer regex \"" + regex +
                    "\" (sparrow knows Llama 3's, Qwen2's and GPT-2's)");
    }
    s.pattern = *p;
    SPARROW_ASSIGN_OR_RETURN(std::string behavior, get_string(j, "behavior", "", "Split"));
    SPARROW_ASSIGN_OR_RETURN(bool invert, get_bool(j, "invert", false, "Split"));
    if (behavior != "Isolated" || invert) {
      return refuse("Split behavior \"" + behavior + "\"" + (invert ? " inverted" : "") +
                    " (only Isolated is)");
    }
    pre_tokenizers_.push_back(s);
  } else if (type == "ByteLevel") {
    PreTokenizeStep s{PreTokenizeStep::byte_level};
    SPARROW_ASSIGN_OR_RETURN(s.add_prefix_space,
                             get_bool(j, "add_prefix_space", true, "ByteLevel"));
    SPARROW_ASSIGN_OR_RETURN(s.use_regex, get_bool(j, "use_regex", true, "ByteLevel"));
    s.pattern = SplitPattern::gpt2;
    pre_tokenizers_.push_back(s);
  } else {
    return refuse_type("pre_tokenizer", type);
  }
  return Status::success();
}

Status JsonTokenizer::read_post_processor(const json& j) {
  const std::string type = type_of(j);
  if (type == "Sequence") {
    return read_sequence(j, "post_processor", "processors",
                         [this](const json& step) { return read_post_processor(step); });
  }
  if (type == "ByteLevel") return Status::success();  // changes offsets only, not ids
  if (type != "TemplateProcessing") {
    return refuse_type("post_processor", type);
  }
  if (!j.contains("single") || !j["single"].is_array()) {
    return corrupt_data("TemplateProcessing has no \"single\" template");
  }
  prefix_ids_.clear();
  suffix_ids_.clear();
  bool seen_sequence = false;
  for (const json& item : j["single"]) {
    if (item.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    if (!item.contains("SpecialToken") || !item["SpecialToken"].contains("id") ||
        !item["SpecialToken"]["id"].is_string()) {
      return corrupt_data(
          "TemplateProcessing has an item that is neither "
          "Sequence nor SpecialToken");
    }
    const std::string name = item["SpecialToken"]["id"].get<std::string>();
    if (!j.contains("special_tokens") || !j["special_tokens"].contains(name) ||
        !j["special_tokens"][name].contains("ids") ||
        !j["special_tokens"][name]["ids"].is_array()) {
      return corrupt_data("TemplateProcessing uses '" + name +
                          "', which its special_tokens do not define");
    }
    for (const json& id : j["special_tokens"][name]["ids"]) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
        return corrupt_data("TemplateProcessing: '" + name + "' has a bad id");
      }
      (seen_sequence ? suffix_ids_ : prefix_ids_).push_back(id.get<int32_t>());
    }
  }
  return Status::success();
}

Status JsonTokenizer::read_decoder(const json& j) {
  const std::string type = type_of(j);
  if (type == "Sequence") {
    return read_sequence(j, "decoder", "decoders",
                         [this](const json& step) { return read_decoder(step); });
  } else if (type == "Replace") {
    DecodeStep s{DecodeStep::replace};
    SPARROW_ASSIGN_OR_RETURN(s.pattern, string_pattern(j, "decoder Replace"));
    SPARROW_ASSIGN_OR_RETURN(s.content, get_string(j, "content", "", "decoder Replace"));
    decoders_.push_back(s);
  } else if (type == "ByteFallback") {
    decoders_.emplace_back(DecodeStep::byte_fallback);
  } else if (type == "Fuse") {
    decoders_.emplace_back(DecodeStep::fuse);
  } else if (type == "Strip") {
    DecodeStep s{DecodeStep::strip};
    SPARROW_ASSIGN_OR_RETURN(s.content, get_string(j, "content", " ", "decoder Strip"));
    for (auto [key, field] : {std::pair{"start", &s.start}, std::pair{"stop", &s.stop}}) {
      if (j.contains(key) && !j[key].is_number_unsigned()) {
        return corrupt_data(std::string("decoder Strip.") + key + " is not a count");
      }
      if (j.contains(key)) *field = j[key].get<size_t>();
    }
    decoders_.push_back(s);
  } else if (type == "Metaspace") {
    DecodeStep s{DecodeStep::metaspace};
    SPARROW_ASSIGN_OR_RETURN(s.pattern, get_string(j, "replacement", "\u2581", "Metaspace"));
    SPARROW_ASSIGN_OR_RETURN(bool add_prefix, get_bool(j, "add_prefix_space", true, "Metaspace"));
    SPARROW_ASSIGN_OR_RETURN(std::string scheme, get_string(j, "prepend_scheme", "", "Metaspace"));
    s.drop_first_replacement = scheme.empty() ? add_prefix : scheme != "never";
    decoders_.push_back(s);
  } else if (type == "ByteLevel") {
    decoders_.emplace_back(DecodeStep::byte_level);
  } else {
    return refuse_type("decoder", type);
  }
  return Status::success();
}

Status JsonTokenizer::read_added_tokens(const json& j) {
  if (!j.is_array()) return corrupt_data("added_tokens is not a list");
  for (const json& a : j) {
    if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() ||
        !a.contains("content") || !a["content"].is_string() || a["id"].get<int64_t>() < 0 ||
        a["id"].get<int64_t>() > INT32_MAX) {
      return corrupt_data("has an added token without a valid id and content");
    }
    const auto id = size_t(a["id"].get<int64_t>());
    const std::string content = a["content"].get<std::string>();
    if (tokens_.size() <= id) {
      tokens_.resize(id + 1);
      special_.resize(id + 1, 0);
    }
    const std::string where = "added token \"" + content + "\"";
    SPARROW_ASSIGN_OR_RETURN(special_[id], get_bool(a, "special", false, where.c_str()));
    AddedToken t{content, int32_t(id), false, false, true};
    SPARROW_ASSIGN_OR_RETURN(t.lstrip, get_bool(a, "lstrip", false, where.c_str()));
    SPARROW_ASSIGN_OR_RETURN(t.rstrip, get_bool(a, "rstrip", false, where.c_str()));
    SPARROW_ASSIGN_OR_RETURN(t.normalized, get_bool(a, "normalized", true, where.c_str()));
    SPARROW_ASSIGN_OR_RETURN(bool single_word, get_bool(a, "single_word", false, where.c_str()));
    // single_word needs Rust's \w (word characters) at both ends, which sparrow has no table
    // for; tokenizing as if it were false would be wrong where it matters.
    if (single_word) return refuse("the added token flag single_word (on \"" + content + "\")");
    if (t.normalized) {
      // A normalized token is matched in normalized text against its own normalized content, as
      // `tokenizers` does: behind NFC that is NFC(content); Prepend and Replace would move the
      // token and its neighbours, which sparrow does not follow.
      for (const NormalizeStep& n : normalizers_) {
        if (n.kind != NormalizeStep::nfc) {
          return refuse("the added token flag normalized (on \"" + content +
                        "\") behind a Prepend or Replace normalizer");
        }
        std::u32string cps;
        if (!unicode::decode_utf8(t.content, cps))
          return corrupt_data("added token \"" + content + "\" is not valid UTF-8");
        t.content = unicode::to_utf8(unicode::nfc(cps));
      }
    }
    // Decoding gives the token's content as it is matched (`tokenizers` keeps a normalized
    // token's normalized content: "<e\u0301>" behind NFC decodes as "<\u00e9>").
    tokens_[id] = t.content;
    if (content.empty()) continue;  // `tokenizers` never matches an empty token
    added_.push_back(std::move(t));
  }
  for (auto& by_byte : added_by_byte_)
    for (auto& list : by_byte) list.clear();
  for (size_t i = 0; i < added_.size(); ++i)
    added_by_byte_[added_[i].normalized][(unsigned char)added_[i].content[0]].push_back(i);
  for (auto& by_byte : added_by_byte_)
    for (auto& list : by_byte)
      std::stable_sort(list.begin(), list.end(), [this](size_t a, size_t b) {
        return added_[a].content.size() > added_[b].content.size();
      });
  return Status::success();
}

std::vector<JsonTokenizer::Segment> JsonTokenizer::split_added(const std::string& text,
                                                               bool normalized) const {
  const auto& by_byte = added_by_byte_[normalized];
  std::vector<Segment> out;
  size_t done = 0;  // end of the last segment
  for (size_t at = 0; at < text.size();) {
    const AddedToken* hit = nullptr;
    for (size_t i : by_byte[(unsigned char)text[at]])
      if (text.compare(at, added_[i].content.size(), added_[i].content) == 0) {
        hit = &added_[i];  // the longest, as the list is longest first
        break;
      }
    if (!hit) {
      ++at;
      continue;
    }
    size_t begin = at, end = at + hit->content.size();
    if (hit->lstrip) {  // white space before it, back to the previous segment at most
      while (begin > done) {
        size_t prev = begin - 1;
        while (prev > done && (text[prev] & 0xC0) == 0x80) --prev;
        if (!unicode::is_white_space_at(text, prev, begin)) break;
        begin = prev;
      }
    }
    if (hit->rstrip) {
      while (end < text.size()) {
        size_t next = end + 1;
        while (next < text.size() && (text[next] & 0xC0) == 0x80) ++next;
        if (!unicode::is_white_space_at(text, end, next)) break;
        end = next;
      }
    }
    if (done < begin) out.push_back({done, begin, -1});
    out.push_back({begin, end, hit->id});
    done = at = end;
  }
  if (done < text.size()) out.push_back({done, text.size(), -1});
  return out;
}

Status JsonTokenizer::normalize(std::string& text) const {
  for (const NormalizeStep& n : normalizers_) {
    switch (n.kind) {
      case NormalizeStep::prepend:
        if (!text.empty()) text = n.content + text;
        break;
      case NormalizeStep::replace:
        replace_all(text, n.pattern, n.content);
        break;
      case NormalizeStep::nfc: {
        std::u32string cps;
        if (!unicode::decode_utf8(text, cps))
          return invalid_argument("the prompt is not valid UTF-8");
        text = unicode::to_utf8(unicode::nfc(cps));
        break;
      }
    }
  }
  return Status::success();
}

// `at_start`: the text begins the prompt (Metaspace's prepend_scheme "first" looks at that,
// not at whether an added token came before).
std::vector<std::string> JsonTokenizer::pre_tokenize_normalized(std::string text,
                                                                bool at_start) const {
  std::vector<std::string> pieces;
  if (!text.empty()) pieces.push_back(std::move(text));
  for (const PreTokenizeStep& p : pre_tokenizers_) {
    std::vector<std::string> next;
    for (size_t i = 0; i < pieces.size(); ++i) {
      std::string piece = pieces[i];
      std::vector<std::string> parts;
      switch (p.kind) {
        case PreTokenizeStep::metaspace: {
          replace_all(piece, " ", p.replacement);
          const bool prepend = p.prepend == Prepend::always ||
                               (p.prepend == Prepend::first && at_start && i == 0);
          if (prepend && !starts_with(piece, p.replacement)) piece = p.replacement + piece;
          if (!p.split_words) {
            parts.push_back(piece);
            break;
          }
          // Each replacement character starts a piece (split MergedWithNext).
          size_t begin = 0;
          for (size_t at = piece.find(p.replacement, 1); at != std::string::npos;
               at = piece.find(p.replacement, at + 1)) {
            parts.push_back(piece.substr(begin, at - begin));
            begin = at;
          }
          parts.push_back(piece.substr(begin));
          break;
        }
        case PreTokenizeStep::split:
          parts = split_piece(piece, p.pattern);
          break;
        case PreTokenizeStep::byte_level:
          if (p.add_prefix_space && !starts_with(piece, " ")) piece = " " + piece;
          parts = p.use_regex ? split_piece(piece, p.pattern) : std::vector<std::string>{piece};
          for (std::string& part : parts) part = bytes_as_chars(part);
          break;
      }
      for (std::string& part : parts)
        if (!part.empty()) next.push_back(std::move(part));
    }
    pieces.swap(next);
  }
  return pieces;
}

Result<std::vector<std::string>> JsonTokenizer::pre_tokenize(const std::string& text) const {
  if (!unicode::is_valid_utf8(text)) return invalid_argument("the prompt is not valid UTF-8");
  std::string normalized = text;
  SPARROW_RETURN_IF_ERROR(normalize(normalized));
  return pre_tokenize_normalized(std::move(normalized), /*at_start=*/true);
}

// As `tokenizers`: added tokens with normalized false are split out of the raw text; each
// stretch between them is normalized on its own, then split on the normalized added tokens;
// what remains is pre-tokenized and goes through BPE.
Result<std::vector<int32_t>> JsonTokenizer::encode(const std::string& text) const {
  if (!unicode::is_valid_utf8(text)) return invalid_argument("the prompt is not valid UTF-8");
  std::vector<int32_t> ids = prefix_ids_;
  for (const Segment& raw : split_added(text, /*normalized=*/false)) {
    if (raw.id >= 0) {
      ids.push_back(raw.id);
      continue;
    }
    std::string normalized = text.substr(raw.begin, raw.end - raw.begin);
    SPARROW_RETURN_IF_ERROR(normalize(normalized));
    for (const Segment& s : split_added(normalized, /*normalized=*/true)) {
      if (s.id >= 0) {
        ids.push_back(s.id);
        continue;
      }
      const bool at_start = raw.begin == 0 && s.begin == 0;
      for (const std::string& piece :
           pre_tokenize_normalized(normalized.substr(s.begin, s.end - s.begin), at_start))
        bpe_.encode_word(piece, ids);
    }
  }
  ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  return ids;
}

Status JsonTokenizer::set_add_bos(bool add, const std::string& bos_token) {
  if (!add) {
    prefix_ids_.clear();
    return Status::success();
  }
  if (bos_token.empty()) {
    if (prefix_ids_.empty()) {
      return corrupt_data("tokenizer_config.json has add_bos_token true but no bos_token");
    }
    return Status::success();
  }
  for (const AddedToken& t : added_)
    if (t.content == bos_token) {
      prefix_ids_ = {t.id};
      return Status::success();
    }
  const auto it = bpe_.vocab().find(bos_token);
  if (it == bpe_.vocab().end()) {
    return corrupt_data("tokenizer_config.json's bos_token \"" + bos_token +
                        "\" is not a token of tokenizer.json");
  }
  prefix_ids_ = {it->second};
  return Status::success();
}

std::string JsonTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::vector<std::string> tokens;
  for (int32_t id : ids) {
    // Unknown ids are skipped, special tokens (BOS, EOS, ...) dropped, as HF's
    // decode(skip_special_tokens=True).
    if (id < 0 || size_t(id) >= tokens_.size() || tokens_[size_t(id)].empty() ||
        special_[size_t(id)]) {
      continue;
    }
    tokens.push_back(tokens_[size_t(id)]);
  }
  if (!has_decoder_) {  // tokenizers joins the tokens with spaces when there is no decoder
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  for (const DecodeStep& d : decoders_) {
    switch (d.kind) {
      case DecodeStep::replace:
        for (std::string& t : tokens) replace_all(t, d.pattern, d.content);
        break;
      case DecodeStep::byte_fallback: {
        // Runs of <0xXX> tokens become their bytes when those are UTF-8, else one U+FFFD each.
        std::vector<std::string> out;
        std::string bytes;
        auto flush = [&] {
          if (bytes.empty()) return;
          if (unicode::is_valid_utf8(bytes)) {
            out.push_back(bytes);
          } else {
            for (size_t k = 0; k < bytes.size(); ++k) out.push_back("\xEF\xBF\xBD");
          }
          bytes.clear();
        };
        for (std::string& t : tokens) {
          unsigned value = 0;
          if (t.size() == 6 && starts_with(t, "<0x") && t[5] == '>' &&
              std::sscanf(t.c_str() + 3, "%2x", &value) == 1 &&
              std::isxdigit((unsigned char)t[3]) && std::isxdigit((unsigned char)t[4])) {
            bytes.push_back(char(value));
          } else {
            flush();
            out.push_back(std::move(t));
          }
        }
        flush();
        tokens.swap(out);
        break;
      }
      case DecodeStep::fuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        tokens.assign(1, all);
        break;
      }
      case DecodeStep::strip:
        for (std::string& t : tokens) {
          for (size_t k = 0; k < d.start && starts_with(t, d.content); ++k)
            t.erase(0, d.content.size());
          for (size_t k = 0;
               k < d.stop && t.size() >= d.content.size() &&
               t.compare(t.size() - d.content.size(), d.content.size(), d.content) == 0;
               ++k) {
            t.erase(t.size() - d.content.size());
          }
        }
        break;
      case DecodeStep::metaspace:
        // Replacement characters become spaces, except in the first token, where they are
        // dropped (the prepended one), unless the prepend scheme is never.
        for (size_t i = 0; i < tokens.size(); ++i)
          replace_all(tokens[i], d.pattern, i == 0 && d.drop_first_replacement ? "" : " ");
        break;
      case DecodeStep::byte_level: {
        std::string bytes;
        for (const std::string& t : tokens) {
          std::u32string cps;
          unicode::decode_utf8(t, cps);
          std::string mapped;
          bool all_mapped = true;
          for (char32_t c : cps) {
            const int b = c < 512 ? byte_chars().byte_of[c] : -1;
            if (b < 0) {
              all_mapped = false;
              break;
            }
            mapped.push_back(char(b));
          }
          bytes += all_mapped ? mapped : t;  // a token outside the byte alphabet stays as is
        }
        tokens.assign(1, unicode::lossy_utf8(bytes));
        break;
      }
    }
  }
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

}  // namespace sparrow::engine
