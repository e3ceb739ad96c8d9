// In-memory model variants: pruned / re-encoded copies and synthetic models for bench-model.
#include "sparrow/engine/transform.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "core/parallel.hpp"
#include "kernels/kernel.hpp"
#include "sparrow/dispatch.hpp"
#include "sparrow/io/synth.hpp"
#include "sparrow/patterns.hpp"

namespace sparrow::engine {

namespace {

bool has_gpu_kernel(Format f) {
  for (const auto& k : kernels::all_kernels())
    if (k.format == f) return true;
  return false;
}

// One dense host matrix pruned by `mask` (a plain copy when the mask prunes nothing).
Result<HostMatrix> prune_matrix(const ConstMatrixView& w, const prune::MaskOptions& mask) {
  if (mask.sparsity > 0 || mask.structure.kind != prune::Structure::Kind::unstructured) {
    SPARROW_ASSIGN_OR_RETURN(std::vector<uint8_t> keep, prune::compute_mask(w, mask));
    return prune::apply_mask(w, keep);
  }
  HostMatrix copy(w.dtype, w.rows, w.cols);
  const size_t row_bytes = size_t(w.cols) * dtype_size(w.dtype);
  for (int64_t r = 0; r < w.rows; ++r)
    std::memcpy(static_cast<uint8_t*>(copy.data()) + size_t(r) * row_bytes,
                static_cast<const uint8_t*>(w.data) + size_t(r * w.ld) * dtype_size(w.dtype),
                row_bytes);
  return copy;
}

Result<Weight> encode_pruned(Format f, const HostMatrix& pruned, const prune::MaskOptions& mask) {
  EncodeOptions eo;
  eo.nm_pattern = mask.structure.nm;
  auto enc = encode(f, pruned.view(), eo);
  if (!enc.ok()) {
    return Status(enc.status().code(), std::string("cannot encode as ") + format_name(f) + ": " +
                                           enc.status().message());
  }
  return enc;
}

// The engine matmul (sparrow/dispatch.hpp's EngineMatmul) of each of a decoder layer's seven
// linear layers (q, k, v, o, gate, up, down).
constexpr EngineMatmul kMatmulOf[7] = {EngineMatmul::qkv,     EngineMatmul::qkv,
                                       EngineMatmul::qkv,     EngineMatmul::o,
                                       EngineMatmul::gate_up, EngineMatmul::gate_up,
                                       EngineMatmul::down};

// (rows, cols) of role `which` (q, k, v, o, gate, up, down: layer_weight's order).
std::pair<int64_t, int64_t> role_shape(const LlamaConfig& c, int which) {
  const int64_t shapes[7][2] = {{c.q_dim(), c.hidden},      {c.kv_dim(), c.hidden},
                                {c.kv_dim(), c.hidden},     {c.hidden, c.q_dim()},
                                {c.intermediate, c.hidden}, {c.intermediate, c.hidden},
                                {c.hidden, c.intermediate}};
  return {shapes[which][0], shapes[which][1]};
}

// Formats for a decoder layer's seven matrices of these densities (non-zeros / elements). "auto":
// each its own; "fastest": one per engine matmul (all of q, k, v alike, and gate, up alike, so the
// engine can still stack them), the rule table's pick for that matmul's stacked shape and the
// group's density at passes of pick_n tokens, as the engine calls it (dependent launch, the norm
// folded into qkv and gate_up): the format whose kernel *there* measured fastest, dense where none
// beat cuBLAS; where whole-model engine runs of near shapes exist for pick_n, the four together
// (pick_engine_layer). Any other choice names one format for all.
Result<std::array<Format, 7>> layer_formats(const LlamaConfig& c,
                                            const std::array<double, 7>& density,
                                            const std::string& format, bool need_gpu_kernel,
                                            int64_t pick_n) {
  std::array<Format, 7> out{};
  if (format == "auto") {
    for (int i = 0; i < 7; ++i) out[size_t(i)] = auto_format(density[size_t(i)], need_gpu_kernel);
    return out;
  }
  if (format == "fastest") {
    std::array<EngineMatmulLayers, 4> groups;
    for (int i = 0; i < 7; ++i) {
      const auto [r, k] = role_shape(c, i);
      EngineMatmulLayers& g = groups[size_t(kMatmulOf[i])];
      g.matmul = kMatmulOf[i];
      g.add(r, k, density[size_t(i)]);
    }
    const std::array<FormatPick, 4> picks = pick_engine_layer(groups, pick_n);
    for (int i = 0; i < 7; ++i) out[size_t(i)] = picks[size_t(kMatmulOf[i])].format;
    return out;
  }
  if (auto list = matmul_format_list(format)) {
    SPARROW_RETURN_IF_ERROR(list->status());
    for (int i = 0; i < 7; ++i) {
      const Format f = list->value()[size_t(int(kMatmulOf[i]))];
      if (need_gpu_kernel && f != Format::dense && !has_gpu_kernel(f))
        return invalid_argument("format list '" + format + "': " + format_name(f) +
                                " has no GPU kernel in this build");
      out[size_t(i)] = f;
    }
    return out;
  }
  SPARROW_RETURN_IF_ERROR(check_format_choice(format));
  out.fill(*parse_format(format));
  return out;
}

double density_of_matrix(const HostMatrix& m) {
  return 1.0 - prune::zero_fraction(m.view());
}

Weight* layer_weight(Layer& l, int which) {
  Weight* ws[7] = {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down};
  return ws[which];
}

}  // namespace

Format auto_format(double density, bool need_gpu_kernel) {
  // The smallest by DESIGN.md's expected storage per dense byte (expected_d_eff), in this order on
  // ties; dense unless one stores less.
  const Format candidates[] = {Format::macko, Format::tca_bme, Format::csr, Format::tiled_csl};
  Format best = Format::dense;
  double best_d = 1.0;
  for (Format f : candidates) {
    if (need_gpu_kernel && !has_gpu_kernel(f)) continue;
    if (const double d = expected_d_eff(f, density); d < best_d) {
      best = f;
      best_d = d;
    }
  }
  return best;
}

Status check_format_choice(const std::string& format) {
  if (format == "auto" || format == "fastest" || parse_format(format)) return {};
  if (auto list = matmul_format_list(format)) return list->status();
  return invalid_argument("unknown format '" + format +
                          "' (auto, fastest, dense, csr, macko, tca_bme, tiled_csl, nm, or "
                          "qkv=F,o=F,gate_up=F,down=F)");
}

Result<Model> prune_model(const Model& m, const prune::MaskOptions& mask, const std::string& format,
                          bool need_gpu_kernel, int64_t pick_n) {
  SPARROW_RETURN_IF_ERROR(check_format_choice(format));
  Model out = m;
  // Layers in parallel (each is pruned per matrix, so the result does not depend on the order).
  SPARROW_RETURN_IF_ERROR(parallel_for(int64_t(out.layers.size()), 0, [&](int64_t li) -> Status {
    Layer& l = out.layers[size_t(li)];
    std::array<HostMatrix, 7> pruned;
    std::array<double, 7> density{};
    for (int i = 0; i < 7; ++i) {
      SPARROW_ASSIGN_OR_RETURN(HostMatrix d, decode(*layer_weight(l, i)));
      SPARROW_ASSIGN_OR_RETURN(pruned[size_t(i)], prune_matrix(d.view(), mask));
      density[size_t(i)] = density_of_matrix(pruned[size_t(i)]);
    }
    SPARROW_ASSIGN_OR_RETURN(const auto formats,
                             layer_formats(m.config, density, format, need_gpu_kernel, pick_n));
    for (int i = 0; i < 7; ++i) {
      SPARROW_ASSIGN_OR_RETURN(*layer_weight(l, i),
                               encode_pruned(formats[size_t(i)], pruned[size_t(i)], mask));
    }
    return {};
  }));
  return out;
}

Result<Model> reencode_model(const Model& m, Format format) {
  Model out = m;
  for (Layer& l : out.layers) {
    for (int i = 0; i < 7; ++i) {
      Weight* w = layer_weight(l, i);
      SPARROW_ASSIGN_OR_RETURN(HostMatrix d, decode(*w));
      SPARROW_ASSIGN_OR_RETURN(*w, encode(format, d.view()));
    }
  }
  return out;
}

std::vector<Format> fastest_formats(const LlamaConfig& c, double density, int64_t n) {
  std::array<double, 7> d;
  d.fill(density);
  auto f = layer_formats(c, d, "fastest", true, n);
  return f.ok() ? std::vector<Format>(f->begin(), f->end()) : std::vector<Format>{};
}

Result<LlamaConfig> synth_config(const std::string& preset) {
  SPARROW_ASSIGN_OR_RETURN(const io::SynthOptions so, io::synth_preset(preset));
  return llama_config(so.config);
}

Result<SynthParts> synth_parts(const std::string& preset, const prune::MaskOptions& mask,
                               int threads) {
  SPARROW_ASSIGN_OR_RETURN(const io::SynthOptions so, io::synth_preset(preset));
  SPARROW_ASSIGN_OR_RETURN(const LlamaConfig c, llama_config(so.config));
  SynthParts p;
  p.name = preset + " (synth)";
  p.config = c;
  p.dtype = so.dtype;
  p.mask = mask;
  // The embeddings and lm_head (32000 x 4096 on the 7B): patterns::trained_like fills each on
  // all cores itself.
  p.embed = patterns::trained_like(p.dtype, c.vocab, c.hidden, so.seed);
  SPARROW_ASSIGN_OR_RETURN(
      p.lm_head,
      encode(Format::dense,
             c.tied_embeddings
                 ? p.embed.view()
                 : patterns::trained_like(p.dtype, c.vocab, c.hidden, so.seed + 1).view()));
  // One trained-like matrix per role (q, k, v, o, gate, up, down), pruned once; synth_model
  // copies it into every layer: generating 7B weights element by element takes minutes of host
  // time, and the values do not change what a kernel reads (each layer still has its own copy
  // in device memory, so nothing is shared in caches). The roles in parallel too: pruning a
  // matrix (its magnitude threshold) runs on one core.
  SPARROW_RETURN_IF_ERROR(parallel_for(7, threads, [&](int64_t which) -> Status {
    const auto [rows, cols] = role_shape(c, int(which));
    const HostMatrix w =
        patterns::trained_like(p.dtype, rows, cols, so.seed + 100 + uint64_t(which));
    SPARROW_ASSIGN_OR_RETURN(p.pruned[size_t(which)], prune_matrix(w.view(), mask));
    p.density[size_t(which)] = density_of_matrix(p.pruned[size_t(which)]);
    return {};
  }));
  return p;
}

Result<Model> synth_model(const SynthParts& parts, const std::string& format, bool need_gpu_kernel,
                          int threads, int64_t pick_n) {
  SPARROW_RETURN_IF_ERROR(check_format_choice(format));
  const LlamaConfig& c = parts.config;
  SPARROW_ASSIGN_OR_RETURN(const auto formats,
                           layer_formats(c, parts.density, format, need_gpu_kernel, pick_n));
  std::vector<Weight> roles(7);
  SPARROW_RETURN_IF_ERROR(parallel_for(7, threads, [&](int64_t which) -> Status {
    SPARROW_ASSIGN_OR_RETURN(
        roles[size_t(which)],
        encode_pruned(formats[size_t(which)], parts.pruned[size_t(which)], parts.mask));
    return {};
  }));
  Model m;
  m.name = parts.name;
  m.config = c;
  m.dtype = parts.dtype;
  m.embed = parts.embed;
  m.final_norm.assign(size_t(c.hidden), 1.0f);
  m.lm_head = parts.lm_head;
  // The layers' copies in parallel: a dense 7B is 12.5 GB of fresh pages to fill.
  m.layers.resize(size_t(c.layers));
  SPARROW_RETURN_IF_ERROR(parallel_for(c.layers, threads, [&](int64_t i) -> Status {
    Layer& l = m.layers[size_t(i)];
    for (int which = 0; which < 7; ++which) *layer_weight(l, which) = roles[size_t(which)];
    l.attn_norm.assign(size_t(c.hidden), 1.0f);
    l.mlp_norm.assign(size_t(c.hidden), 1.0f);
    return {};
  }));
  return m;
}

Result<Model> synth_model(const std::string& preset, const prune::MaskOptions& mask,
                          const std::string& format, bool need_gpu_kernel, int threads,
                          int64_t pick_n) {
  SPARROW_RETURN_IF_ERROR(check_format_choice(format));
  SPARROW_ASSIGN_OR_RETURN(const SynthParts parts, synth_parts(preset, mask, threads));
  return synth_model(parts, format, need_gpu_kernel, threads, pick_n);
}

}  // namespace sparrow::engine
