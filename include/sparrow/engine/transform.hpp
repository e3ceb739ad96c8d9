// Making variants of a loaded model in memory: prune its linear layers and re-encode them, or
// build a synthetic model of a known shape (bench-model --synth) without writing files.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "sparrow/engine/model.hpp"
#include "sparrow/prune.hpp"

namespace sparrow::engine {

// The format a layer of `density` gets under "auto": the smallest expected storage (DESIGN.md's
// d_eff estimates) among the sparse formats that have a GPU kernel in this build (all sparse
// formats when `need_gpu_kernel` is false); dense when none of them beats dense.
Format auto_format(double density, bool need_gpu_kernel);

// Whether `format` names a choice prune_model and synth_model take ("auto", "fastest", a format
// name, or a list "qkv=F,o=F,gate_up=F,down=F"): invalid_argument saying what is wrong
// otherwise. They check it before any work; callers that print something first (bench-model's
// table) check it themselves.
Status check_format_choice(const std::string& format);

// A copy of `m` whose decoder linear layers are pruned with `mask` (sparsity 0 keeps them as
// they are) and encoded in `format` ("auto": each layer the smallest format for its density;
// "dense", "csr", ...; "fastest": per matmul of the GPU engine (q, k, v stacked; o; gate, up
// stacked; down) the rule table's format for that matmul's shape and density at passes of
// `pick_n` tokens, the batch size in decode, judged by the kernel the engine's calls get:
// dependent launches, the norm folded into qkv and gate_up; or "qkv=F,o=F,gate_up=F,down=F":
// the named format per engine matmul, each of the four named once). lm_head and embeddings stay.
Result<Model> prune_model(const Model& m, const prune::MaskOptions& mask, const std::string& format,
                          bool need_gpu_kernel = false, int64_t pick_n = 1);

// Re-encodes every decoder linear layer of `m` in `format` without changing values.
Result<Model> reencode_model(const Model& m, Format format);

// A synthetic model from a `sparrow synth` preset ("tiny", "llama2-7b", "llama3-8b") with
// trained-like random weights, pruned by `mask` and encoded in `format` (as prune_model, with
// `pick_n`), built in memory with `threads` host threads (0: all cores). synth_parts then
// synth_model(parts, ...).
Result<Model> synth_model(const std::string& preset, const prune::MaskOptions& mask,
                          const std::string& format, bool need_gpu_kernel, int threads = 0,
                          int64_t pick_n = 1);

// What a synthetic model is built from before any format is chosen: the embeddings, lm_head and
// one pruned matrix per decoder role (q, k, v, o, gate, up, down; synth_model copies each into
// every layer). Generating them is most of a build's time, so bench-model makes them once per
// sparsity and a model per batch group's formats from them.
struct SynthParts {
  std::string name;
  LlamaConfig config;
  DType dtype = DType::fp16;
  HostMatrix embed;
  Weight lm_head;
  std::array<HostMatrix, 7> pruned;  // by role, dense with the mask's zeros
  std::array<double, 7> density{};
  prune::MaskOptions mask;
};
Result<SynthParts> synth_parts(const std::string& preset, const prune::MaskOptions& mask,
                               int threads = 0);
// The model of `parts` with its linear layers encoded in `format` (as synth_model above).
Result<Model> synth_model(const SynthParts& parts, const std::string& format, bool need_gpu_kernel,
                          int threads = 0, int64_t pick_n = 1);

// The engine's config of a synth preset (what synth_model builds).
Result<LlamaConfig> synth_config(const std::string& preset);

// What "fastest" picks for the seven linear layers of a decoder layer (q, k, v, o, gate, up,
// down) of density `density` at passes of n tokens (q, k, v alike and gate, up alike, as
// prune_model). bench-model builds one model per distinct answer over its batch sizes.
std::vector<Format> fastest_formats(const LlamaConfig& c, double density, int64_t n);

}  // namespace sparrow::engine
