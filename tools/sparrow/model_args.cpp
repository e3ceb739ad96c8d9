#include "sparrow/model_args.hpp"

#include <cstdio>

#include "sparrow/commands.hpp"

namespace sparrow::cli {

std::shared_ptr<const engine::Model> load_model_or_report(const char* cmd, const std::string& dir) {
  auto m = engine::load_model(dir);
  if (!m.ok()) {
    std::fprintf(stderr, "sparrow %s: cannot load model '%s': %s\n", cmd, dir.c_str(),
                 m.status().to_string().c_str());
    return nullptr;
  }
  return std::make_shared<engine::Model>(std::move(m).value());
}

std::unique_ptr<engine::Tokenizer> load_tokenizer_or_report(const char* cmd, const std::string& dir,
                                                            const engine::Model& model,
                                                            int& exit_code) {
  auto t = engine::load_tokenizer(dir, model);
  if (t.ok()) return std::move(t).value();
  std::fprintf(stderr, "sparrow %s: %s\n", cmd, t.status().message().c_str());
  exit_code = t.status().code() == Code::corrupt_data ? 1 : kExitBadArgs;
  return nullptr;
}

std::optional<std::vector<int32_t>> tokenize_or_report(const char* cmd, const std::string& dir,
                                                       const engine::Model& model,
                                                       const std::string& text, int& exit_code) {
  const auto tokenizer = load_tokenizer_or_report(cmd, dir, model, exit_code);
  if (!tokenizer) return std::nullopt;
  auto ids = tokenizer->encode(text);
  if (!ids.ok()) {
    std::fprintf(stderr, "sparrow %s: %s\n", cmd, ids.status().message().c_str());
    exit_code = kExitBadArgs;
    return std::nullopt;
  }
  return std::move(ids).value();
}

std::unique_ptr<engine::Backend> make_backend_or_report(const char* cmd, const std::string& backend,
                                                        std::shared_ptr<const engine::Model> model,
                                                        const engine::BackendOptions& opt,
                                                        int& exit_code) {
  std::string which = backend;
  if (which == "auto") {
    which = engine::gpu_available() ? "gpu" : "cpu";
    if (which == "cpu")
      std::fprintf(stderr, "sparrow %s: no GPU found, using the CPU backend\n", cmd);
  }
  Result<std::unique_ptr<engine::Backend>> b =
      which == "cpu"   ? engine::make_cpu_backend(std::move(model), opt)
      : which == "gpu" ? engine::make_gpu_backend(std::move(model), opt)
                       : Result<std::unique_ptr<engine::Backend>>(invalid_argument(
                             "--backend must be gpu, cpu or auto (got '" + backend + "')"));
  if (!b.ok()) {
    std::fprintf(stderr, "sparrow %s: %s\n", cmd, b.status().to_string().c_str());
    exit_code = b.status().code() == Code::invalid_argument ? kExitBadArgs
                : b.status().code() == Code::no_device      ? kExitNoGpu
                                                            : 1;
    return nullptr;
  }
  return std::move(b).value();
}

std::string human_bytes(size_t bytes) {
  char buf[32];
  if (bytes >= (size_t(1) << 30)) {
    std::snprintf(buf, sizeof buf, "%.2f GiB", double(bytes) / double(size_t(1) << 30));
  } else {
    std::snprintf(buf, sizeof buf, "%.2f MiB", double(bytes) / double(size_t(1) << 20));
  }
  return buf;
}

}  // namespace sparrow::cli
