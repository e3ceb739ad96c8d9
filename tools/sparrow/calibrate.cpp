// sparrow calibrate: Wanda input-channel norms of a model over a calibration text (tokenized as
// `run -p` does), written as the JSON `sparrow prune --method wanda --calibration FILE` reads.
#include "sparrow/engine/calibrate.hpp"

#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sparrow/commands.hpp"
#include "sparrow/model_args.hpp"

namespace sparrow::cli {

namespace {

struct CalibrateArgs {
  std::string model_dir, text_file, out;
  int64_t ctx = 512;
};

int run_calibrate(const CalibrateArgs& a) {
  auto fail_args = [](const std::string& msg) {
    std::fprintf(stderr, "sparrow calibrate: %s\n", msg.c_str());
    return kExitBadArgs;
  };
  std::ifstream in(a.text_file, std::ios::binary);
  if (!in) return fail_args("cannot read --text '" + a.text_file + "'");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.empty()) return fail_args("--text is empty");
  auto model = load_model_or_report("calibrate", a.model_dir);
  if (!model) return 1;
  int exit_code = 0;
  const auto tokens = tokenize_or_report("calibrate", a.model_dir, *model, text, exit_code);
  if (!tokens) return exit_code;
  const std::vector<int32_t>& ids = *tokens;
  auto norms = engine::input_channel_norms(model, ids, a.ctx);
  if (!norms.ok()) {
    std::fprintf(stderr, "sparrow calibrate: %s\n", norms.status().to_string().c_str());
    return norms.status().code() == Code::invalid_argument ? kExitBadArgs : 1;
  }
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, v] : norms.value()) j[name] = v;
  const std::string tmp = a.out + ".tmp";
  {
    std::ofstream out(tmp);
    out << j.dump();
    if (!out) {
      std::fprintf(stderr, "sparrow calibrate: cannot write '%s'\n", tmp.c_str());
      return 1;
    }
  }
  if (std::rename(tmp.c_str(), a.out.c_str()) != 0) {
    std::fprintf(stderr, "sparrow calibrate: cannot write '%s'\n", a.out.c_str());
    return 1;
  }
  std::fprintf(stderr, "sparrow calibrate: %zu layers, %zu tokens -> %s\n", norms->size(),
               ids.size(), a.out.c_str());
  return 0;
}

}  // namespace

void register_calibrate(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<CalibrateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "calibrate",
      "Wanda input-channel norms of a model over a text (CPU backend; tokenized as run -p does), "
      "for sparrow prune --method wanda --calibration FILE");
  cmd->add_option("-m,--model", args->model_dir, "model directory")->required();
  cmd->add_option("--text", args->text_file, "calibration text file")->required();
  cmd->add_option("-o,--out", args->out, "output JSON file")->required();
  cmd->add_option("--ctx", args->ctx, "window length in tokens")->capture_default_str();
  cmd->callback([args, &exit_code] { exit_code = run_calibrate(*args); });
}

}  // namespace sparrow::cli
