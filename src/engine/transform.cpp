// In-memory model variants: pruned / re-encoded copies and synthetic models for bench-model.
#include "sparrow/engine/transform.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
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

// Prunes one dense host matrix and encodes it.
Result<Weight> prune_and_encode(const ConstMatrixView& w, const prune::MaskOptions& mask,
                                const std::string& format, bool need_gpu_kernel, int64_t pick_n) {
  HostMatrix pruned;
  if (mask.sparsity > 0 || mask.structure.kind != prune::Structure::Kind::unstructured) {
    SPARROW_ASSIGN_OR_RETURN(std::vector<uint8_t> keep, prune::compute_mask(w, mask));
    SPARROW_ASSIGN_OR_RETURN(pruned, prune::apply_mask(w, keep));
  } else {
    pruned = HostMatrix(w.dtype, w.rows, w.cols);
    const size_t row_bytes = size_t(w.cols) * dtype_size(w.dtype);
    for (int64_t r = 0; r < w.rows; ++r)
      std::memcpy(static_cast<uint8_t*>(pruned.data()) + size_t(r) * row_bytes,
                  static_cast<const uint8_t*>(w.data) + size_t(r * w.ld) * dtype_size(w.dtype),
                  row_bytes);
  }
  Format f;
  if (format == "auto") {
    f = auto_format(1.0 - prune::zero_fraction(pruned.view()), need_gpu_kernel);
  } else if (format == "fastest") {
    // The rule table's choice for passes of pick_n tokens at this layer's shape: dense wherever
    // no sparse kernel measured faster.
    f = pick_format(1.0 - prune::zero_fraction(pruned.view()), pick_n, false, pruned.rows(),
                    pruned.cols())
            .format;
  } else {
    SPARROW_RETURN_IF_ERROR(check_format_choice(format));
    f = *parse_format(format);
  }
  EncodeOptions eo;
  eo.nm_pattern = mask.structure.nm;
  auto enc = encode(f, pruned.view(), eo);
  if (!enc.ok()) {
    return Status(enc.status().code(), std::string("cannot encode as ") + format_name(f) + ": " +
                                           enc.status().message());
  }
  return enc;
}

// (rows, cols) of role `which` (q, k, v, o, gate, up, down: layer_weight's order).
std::pair<int64_t, int64_t> role_shape(const LlamaConfig& c, int which) {
  const int64_t shapes[7][2] = {{c.q_dim(), c.hidden},      {c.kv_dim(), c.hidden},
                                {c.kv_dim(), c.hidden},     {c.hidden, c.q_dim()},
                                {c.intermediate, c.hidden}, {c.intermediate, c.hidden},
                                {c.hidden, c.intermediate}};
  return {shapes[which][0], shapes[which][1]};
}

Weight* layer_weight(Layer& l, int which) {
  Weight* ws[7] = {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down};
  return ws[which];
}

}  // namespace

Format auto_format(double density, bool need_gpu_kernel) {
  struct Estimate {
    Format f;
    double d_eff;
  };
  // DESIGN.md's expected storage per dense byte at density d (fp16).
  const Estimate est[] = {
      {Format::macko, 1.25 * density + (density < 0.2 ? 0.05 : 0.0)},
      {Format::tca_bme, density + 1.0 / 16},
      {Format::csr, 2.0 * density},
      {Format::tiled_csl, 2.0 * density},
  };
  Format best = Format::dense;
  double best_d = 1.0;
  for (const Estimate& e : est) {
    if (need_gpu_kernel && !has_gpu_kernel(e.f)) continue;
    if (e.d_eff < best_d) {
      best = e.f;
      best_d = e.d_eff;
    }
  }
  return best;
}

Status check_format_choice(const std::string& format) {
  if (format == "auto" || format == "fastest" || parse_format(format)) return {};
  return invalid_argument("unknown format '" + format +
                          "' (auto, fastest, dense, csr, macko, tca_bme, tiled_csl, nm)");
}

Result<Model> prune_model(const Model& m, const prune::MaskOptions& mask, const std::string& format,
                          bool need_gpu_kernel, int64_t pick_n) {
  SPARROW_RETURN_IF_ERROR(check_format_choice(format));
  Model out = m;
  for (Layer& l : out.layers) {
    for (int i = 0; i < 7; ++i) {
      Weight* w = layer_weight(l, i);
      SPARROW_ASSIGN_OR_RETURN(HostMatrix d, decode(*w));
      SPARROW_ASSIGN_OR_RETURN(*w,
                               prune_and_encode(d.view(), mask, format, need_gpu_kernel, pick_n));
    }
  }
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
  std::vector<Format> out;
  for (int which = 0; which < 7; ++which) {
    const auto [rows, cols] = role_shape(c, which);
    out.push_back(pick_format(density, n, false, rows, cols).format);
  }
  return out;
}

Result<LlamaConfig> synth_config(const std::string& preset) {
  SPARROW_ASSIGN_OR_RETURN(const io::SynthOptions so, io::synth_preset(preset));
  return llama_config(so.config);
}

Result<Model> synth_model(const std::string& preset, const prune::MaskOptions& mask,
                          const std::string& format, bool need_gpu_kernel, int threads,
                          int64_t pick_n) {
  SPARROW_RETURN_IF_ERROR(check_format_choice(format));
  SPARROW_ASSIGN_OR_RETURN(const io::SynthOptions so, io::synth_preset(preset));
  SPARROW_ASSIGN_OR_RETURN(const LlamaConfig c, llama_config(so.config));

  Model m;
  m.name = preset + " (synth)";
  m.config = c;
  m.dtype = so.dtype;
  m.embed = patterns::trained_like(m.dtype, c.vocab, c.hidden, so.seed);
  m.final_norm.assign(size_t(c.hidden), 1.0f);
  if (c.tied_embeddings) {
    SPARROW_ASSIGN_OR_RETURN(m.lm_head, encode(Format::dense, m.embed.view()));
  } else {
    SPARROW_ASSIGN_OR_RETURN(
        m.lm_head, encode(Format::dense,
                          patterns::trained_like(m.dtype, c.vocab, c.hidden, so.seed + 1).view()));
  }
  m.layers.resize(size_t(c.layers));
  // One trained-like matrix per role (q, k, v, o, gate, up, down), pruned and encoded once and
  // copied into every layer: generating 7B weights element by element takes minutes of host
  // time, and the values do not change what a kernel reads (each layer still has its own copy
  // in device memory, so nothing is shared in caches).
  std::vector<Weight> roles(7);
  SPARROW_RETURN_IF_ERROR(parallel_for(7, threads, [&](int64_t which) -> Status {
    const auto [rows, cols] = role_shape(c, int(which));
    const HostMatrix w =
        patterns::trained_like(m.dtype, rows, cols, so.seed + 100 + uint64_t(which));
    SPARROW_ASSIGN_OR_RETURN(roles[size_t(which)],
                             prune_and_encode(w.view(), mask, format, need_gpu_kernel, pick_n));
    return {};
  }));
  for (Layer& l : m.layers)
    for (int which = 0; which < 7; ++which) *layer_weight(l, which) = roles[size_t(which)];
  for (Layer& l : m.layers) {
    l.attn_norm.assign(size_t(c.hidden), 1.0f);
    l.mlp_norm.assign(size_t(c.hidden), 1.0f);
  }
  return m;
}

}  // namespace sparrow::engine
