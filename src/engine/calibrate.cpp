// Wanda input-channel norms from a calibration run of the CPU backend.
#include "sparrow/engine/calibrate.hpp"

#include <algorithm>
#include <cmath>

#include "engine/cpu_backend.hpp"

namespace sparrow::engine {

Result<std::map<std::string, std::vector<float>>> input_channel_norms(
    std::shared_ptr<const Model> model, const std::vector<int32_t>& ids, int64_t ctx) {
  if (!model) return invalid_argument("input_channel_norms: no model");
  if (ids.empty()) return invalid_argument("the calibration text is empty");
  if (ctx < 1) return invalid_argument("--ctx must be >= 1");
  const auto names = model->linear_layers();  // layer-major, 7 per layer, in `which` order
  std::vector<std::vector<double>> sums(names.size());
  for (size_t i = 0; i < names.size(); ++i)
    sums[i].assign(size_t(shape_of(*names[i].second).cols), 0.0);
  LinearInputObserver observer = [&](size_t layer, int which, const float* x, int64_t T,
                                     int64_t K) {
    std::vector<double>& s = sums[layer * 7 + size_t(which)];
    for (int64_t t = 0; t < T; ++t)
      for (int64_t k = 0; k < K; ++k) s[size_t(k)] += double(x[t * K + k]) * x[t * K + k];
  };
  BackendOptions opt;
  opt.context = std::min(ctx, model->config.context);
  SPARROW_ASSIGN_OR_RETURN(std::unique_ptr<Backend> b,
                           make_observed_cpu_backend(model, opt, observer));
  std::vector<float> logits;
  for (size_t start = 0; start < ids.size(); start += size_t(opt.context)) {
    const int64_t len = std::min<int64_t>(opt.context, int64_t(ids.size() - start));
    b->reset();
    SPARROW_RETURN_IF_ERROR(b->forward(&ids[start], 1, len, false, logits));
  }
  std::map<std::string, std::vector<float>> out;
  for (size_t i = 0; i < names.size(); ++i) {
    std::vector<float> n(sums[i].size());
    for (size_t k = 0; k < n.size(); ++k) n[k] = float(std::sqrt(sums[i][k]));
    out[names[i].first] = std::move(n);
  }
  return out;
}

}  // namespace sparrow::engine
