// What `run`, `perplexity`, `calibrate` and `bench-model` share: loading a model directory, its
// tokenizer and the backend the user asked for, with errors printed the same way.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sparrow/engine/backend.hpp"
#include "sparrow/engine/tokenizer.hpp"

namespace sparrow::cli {

// Loads `dir`; on failure prints "sparrow <cmd>: <message>" and returns null.
std::shared_ptr<const engine::Model> load_model_or_report(const char* cmd, const std::string& dir);

// `backend` is "cpu", "gpu" or "auto" (the GPU when one is present). On failure prints the
// reason and sets `exit_code` (bad argument 2, no GPU 3, anything else 1).
std::unique_ptr<engine::Backend> make_backend_or_report(const char* cmd, const std::string& backend,
                                                        std::shared_ptr<const engine::Model> model,
                                                        const engine::BackendOptions& opt,
                                                        int& exit_code);

// The model directory's tokenizer (engine::load_tokenizer); on failure prints the reason and sets
// `exit_code` (no usable tokenizer 2, an unreadable tokenizer.model 1) and returns null.
std::unique_ptr<engine::Tokenizer> load_tokenizer_or_report(const char* cmd, const std::string& dir,
                                                            const engine::Model& model,
                                                            int& exit_code);

// `text` as the model's token ids (load_tokenizer_or_report, then encode); on failure prints the
// reason, sets `exit_code` and returns nothing.
std::optional<std::vector<int32_t>> tokenize_or_report(const char* cmd, const std::string& dir,
                                                       const engine::Model& model,
                                                       const std::string& text, int& exit_code);

// "1.2 MB", "3.4 GB".
std::string human_bytes(size_t bytes);

}  // namespace sparrow::cli
