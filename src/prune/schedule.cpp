// Per-layer sparsity schedules (uniform, OWL-like, JSON file) and Wanda input-norm files.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <numeric>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "sparrow/io/safetensors.hpp"
#include "sparrow/prune.hpp"

namespace sparrow::prune {

std::vector<double> owl_schedule(int64_t n, double target, double lambda) {
  std::vector<double> out(size_t(std::max<int64_t>(n, 0)), target);
  if (n < 2) return out;
  std::vector<double> u(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) u[size_t(i)] = std::fabs(2.0 * double(i) / double(n - 1) - 1.0);
  const double mean = std::accumulate(u.begin(), u.end(), 0.0) / double(n);
  // Keep every layer in [0, 0.99]: shrink lambda if the extremes would leave the range.
  double hi = 0, lo = 0;  // largest upward / downward deviation per unit lambda
  for (double x : u) {
    hi = std::max(hi, mean - x);
    lo = std::max(lo, x - mean);
  }
  if (hi > 0) lambda = std::min(lambda, (0.99 - target) / hi);
  if (lo > 0) lambda = std::min(lambda, target / lo);
  lambda = std::max(lambda, 0.0);
  for (int64_t i = 0; i < n; ++i) out[size_t(i)] = target + lambda * (mean - u[size_t(i)]);
  return out;
}

int64_t layer_index(const std::string& name) {
  static const std::regex re(R"((^|\.)layers\.(\d+)\.)");
  std::smatch m;
  if (!std::regex_search(name, m, re)) return -1;
  return std::stoll(m[2].str());
}

Schedule Schedule::uniform(double s) {
  Schedule sc;
  sc.default_ = s;
  return sc;
}

Schedule Schedule::owl(int64_t num_layers, double target) {
  Schedule sc;
  sc.kind_ = "owl";
  sc.default_ = target;
  sc.per_layer_ = owl_schedule(num_layers, target);
  return sc;
}

Result<Schedule> Schedule::from_file(const std::string& path, double default_sparsity) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return invalid_argument("cannot read schedule file " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  auto j = nlohmann::ordered_json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return invalid_argument("schedule file " + path +
                            " must be a JSON object {\"layer regex\": sparsity, ...}");
  }
  Schedule sc;
  sc.kind_ = "file:" + path;
  sc.default_ = default_sparsity;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!it.value().is_number()) {
      return invalid_argument("schedule file " + path + ": value for '" + it.key() +
                              "' is not a number");
    }
    const double s = it.value().get<double>();
    if (!(s >= 0.0 && s < 1.0)) {
      return invalid_argument("schedule file " + path + ": sparsity for '" + it.key() +
                              "' must be in [0, 1), got " + std::to_string(s));
    }
    try {
      std::regex test(it.key());
    } catch (const std::regex_error&) {
      return invalid_argument("schedule file " + path + ": '" + it.key() + "' is not a valid regex");
    }
    sc.rules_.emplace_back(it.key(), s);
  }
  return sc;
}

double Schedule::sparsity_for(const std::string& name) const {
  for (const auto& [re, s] : rules_) {
    if (std::regex_search(name, std::regex(re))) return s;
  }
  const int64_t i = layer_index(name);
  if (!per_layer_.empty() && i >= 0 && i < int64_t(per_layer_.size())) return per_layer_[size_t(i)];
  return default_;
}

std::string Schedule::describe() const { return kind_; }

Result<std::map<std::string, std::vector<float>>> load_input_norms(const std::string& path) {
  std::map<std::string, std::vector<float>> out;
  const bool st = path.size() > 12 && path.compare(path.size() - 12, 12, ".safetensors") == 0;
  if (st) {
    SPARROW_ASSIGN_OR_RETURN(io::SafetensorsFile f, io::SafetensorsFile::open(path));
    for (const io::TensorInfo& t : f.tensors()) {
      if (t.dtype != io::TensorDType::F32 || t.shape.size() != 1) {
        return corrupt_data("calibration file " + path + ": '" + t.name +
                            "' must be a 1-D F32 tensor of input-channel norms");
      }
      std::vector<float> v(size_t(t.shape[0]));
      std::memcpy(v.data(), f.data(t), t.bytes());
      out[t.name] = std::move(v);
    }
    return out;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return invalid_argument("cannot read calibration file " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  auto j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return corrupt_data("calibration file " + path +
                        " must be a JSON object {\"<weight name>\": [norm per input channel]}");
  }
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!it.value().is_array()) return corrupt_data("calibration file " + path + ": '" + it.key() + "' is not an array");
    std::vector<float> v;
    for (const auto& x : it.value()) {
      if (!x.is_number() || !(x.get<double>() >= 0) || !std::isfinite(x.get<double>())) {
        return corrupt_data("calibration file " + path + ": '" + it.key() +
                            "' holds a value that is not a finite non-negative number");
      }
      v.push_back(x.get<float>());
    }
    out[it.key()] = std::move(v);
  }
  return out;
}

}  // namespace sparrow::prune
