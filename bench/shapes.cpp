// The shape tables. Sizes come from each model's config.json (hidden_size, intermediate_size,
// num_attention_heads, num_key_value_heads): q/o are hidden x hidden, k/v are
// (kv_heads * head_dim) x hidden, gate/up are intermediate x hidden, down is hidden x
// intermediate; "qkv" and "gate_up" are the fused projections engines use.
#include "bench/shapes.hpp"

#include <cstdlib>
#include <sstream>

namespace sparrow::bench {

namespace {

struct Model {
  const char* name;
  std::vector<LayerShape> layers;
};

const std::vector<Model>& models() {
  static const std::vector<Model> table = {
      // Llama-2-7B: hidden 4096, intermediate 11008, 32 heads, 32 kv heads.
      {"llama2-7b",
       {{"llama2-7b.q_k_v_o", 4096, 4096},
        {"llama2-7b.qkv", 12288, 4096},
        {"llama2-7b.gate_up", 11008, 4096},
        {"llama2-7b.gate_up_fused", 22016, 4096},
        {"llama2-7b.down", 4096, 11008}}},
      // Llama-3-8B: hidden 4096, intermediate 14336, 32 heads, 8 kv heads (head_dim 128).
      {"llama3-8b",
       {{"llama3-8b.q_o", 4096, 4096},
        {"llama3-8b.k_v", 1024, 4096},
        {"llama3-8b.qkv", 6144, 4096},
        {"llama3-8b.gate_up", 14336, 4096},
        {"llama3-8b.gate_up_fused", 28672, 4096},
        {"llama3-8b.down", 4096, 14336}}},
      // Llama-2-70B and Llama-3-70B: hidden 8192, intermediate 28672, 64 heads, 8 kv heads.
      {"llama2-70b",
       {{"llama2-70b.q_o", 8192, 8192},
        {"llama2-70b.k_v", 1024, 8192},
        {"llama2-70b.qkv", 10240, 8192},
        {"llama2-70b.gate_up", 28672, 8192},
        {"llama2-70b.gate_up_fused", 57344, 8192},
        {"llama2-70b.down", 8192, 28672}}},
      // OPT-30B: hidden 7168, ffn 28672, multi-head attention (no GQA).
      {"opt-30b",
       {{"opt-30b.q_k_v_out", 7168, 7168},
        {"opt-30b.qkv", 21504, 7168},
        {"opt-30b.fc1", 28672, 7168},
        {"opt-30b.fc2", 7168, 28672}}},
  };
  return table;
}

bool parse_mxk(const std::string& s, LayerShape& out) {
  const size_t x = s.find_first_of("xX");
  if (x == std::string::npos || x == 0 || x + 1 >= s.size()) return false;
  char* end = nullptr;
  const long long m = std::strtoll(s.c_str(), &end, 10);
  if (end != s.c_str() + x) return false;
  const long long k = std::strtoll(s.c_str() + x + 1, &end, 10);
  if (*end != '\0' || m <= 0 || k <= 0) return false;
  out = {std::to_string(m) + "x" + std::to_string(k), m, k};
  return true;
}

}  // namespace

std::vector<std::string> known_models() {
  std::vector<std::string> names;
  for (const auto& m : models()) names.push_back(m.name);
  names.push_back("llama3-70b");
  return names;
}

Result<std::vector<LayerShape>> parse_shapes(const std::string& text) {
  std::vector<LayerShape> out;
  auto add = [&out](const LayerShape& s) {
    for (const auto& o : out) {
      if (o.m == s.m && o.k == s.k) return;
    }
    out.push_back(s);
  };
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    const std::string name = item == "llama3-70b" ? "llama2-70b" : item;
    bool found = false;
    for (const auto& m : models()) {
      if (name == m.name) {
        for (const auto& l : m.layers) add(l);
        found = true;
      }
    }
    if (found) continue;
    LayerShape s;
    if (!parse_mxk(item, s)) {
      std::string known;
      for (const auto& n : known_models()) known += (known.empty() ? "" : ", ") + n;
      return invalid_argument("unknown shape '" + item + "': give MxK (e.g. 4096x11008) or a model (" +
                              known + ")");
    }
    add(s);
  }
  if (out.empty()) return invalid_argument("--shapes is empty");
  return out;
}

}  // namespace sparrow::bench
