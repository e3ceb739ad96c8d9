// Synthetic Hugging Face model directories (`sparrow synth`): config.json + safetensors with
// weights whose statistics resemble trained ones (per-row and per-input-channel scale spread,
// outlier input channels; see patterns::trained_like), so magnitude pruning leaves uneven rows as
// in real models. Written tensor by tensor: memory is about one tensor, whatever the model size.
#pragma once

#include <csignal>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "sparrow/io/config.hpp"

namespace sparrow::io {

struct SynthOptions {
  ModelConfig config;        // family llama only (for now)
  DType dtype = DType::fp16;
  uint64_t seed = 1;
  uint64_t max_shard_bytes = 0;  // 0: one model.safetensors; else shards + index
  int threads = 0;               // 0: hardware concurrency
  // Checked between tensors; non-zero stops the run (temporary directory removed).
  const volatile std::sig_atomic_t* interrupted = nullptr;
};

// "tiny" (2 layers, hidden 256, ~3.4 MB), "llama2-7b", "llama3-8b". Error lists the presets.
Result<SynthOptions> synth_preset(const std::string& name);
std::vector<std::string> synth_presets();

// Writes the directory `out` (must not exist unless `force`); atomically, via a temporary sibling.
// `progress(bytes_done, bytes_total, tensor)` after each tensor.
Status write_synthetic_model(const SynthOptions& opt, const std::string& out, bool force,
                             const std::function<void(uint64_t, uint64_t, const std::string&)>&
                                 progress = nullptr);

// config.json text for a llama-family config (as HF writes it).
std::string config_to_json(const ModelConfig& c, DType dtype);

}  // namespace sparrow::io
