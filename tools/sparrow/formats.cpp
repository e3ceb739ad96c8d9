// sparrow formats: encode one generated matrix in every format and report bytes, d_eff, encode
// time and whether the round trip is exact.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sparrow/commands.hpp"
#include "sparrow/patterns.hpp"
#include "sparrow/weight.hpp"

namespace sparrow::cli {

namespace {

struct FormatsArgs {
  int64_t rows = 0, cols = 0;
  double sparsity = -1;
  std::string pattern = "random";
  std::string dtype = "fp16";
  uint64_t seed = 1;
  bool json = false;
};

struct Row {
  std::string format, variant;
  size_t bytes = 0;
  double d_eff = 0, encode_ms = 0;
  bool roundtrip = false;
  std::string error;
};

int run_formats(const FormatsArgs& a) {
  auto fail_args = [](const std::string& msg) {
    std::fprintf(stderr, "sparrow formats: %s\n", msg.c_str());
    return kExitBadArgs;
  };
  if (a.rows <= 0 || a.cols <= 0) {
    return fail_args("--rows and --cols must be positive (got " + std::to_string(a.rows) + " x " +
                     std::to_string(a.cols) + ")");
  }
  if (!(a.sparsity >= 0.0 && a.sparsity < 1.0)) {
    return fail_args("--sparsity must be in [0, 1), got " + std::to_string(a.sparsity));
  }
  auto dtype = parse_dtype(a.dtype);
  if (!dtype || *dtype == DType::fp32) return fail_args("--dtype must be fp16 or bf16");
  auto spec = patterns::parse(a.pattern);
  if (!spec.ok()) return fail_args(spec.status().message());

  auto w = patterns::generate(spec.value(), *dtype, a.rows, a.cols, a.sparsity, a.seed);
  if (!w.ok()) return fail_args(w.status().message());
  const ConstMatrixView wv = w.value().view();

  struct Candidate {
    Format format;
    std::string variant;
    EncodeOptions opt;
  };
  std::vector<Candidate> candidates;
  candidates.push_back({Format::dense, "", {}});
  if (a.cols <= 65536) {
    EncodeOptions o;
    o.csr_index = csr::IndexWidth::bits16;
    candidates.push_back({Format::csr, "idx16", o});
  }
  {
    EncodeOptions o;
    o.csr_index = csr::IndexWidth::bits32;
    candidates.push_back({Format::csr, "idx32", o});
  }
  candidates.push_back({Format::macko, "", {}});
  candidates.push_back({Format::tca_bme, "", {}});
  candidates.push_back({Format::tiled_csl, "reordered", {}});
  if (spec->kind == patterns::Kind::nm) {
    EncodeOptions o;
    o.nm_pattern = spec->nm;
    candidates.push_back({Format::nm, patterns::to_string(spec.value()).substr(3), o});
  } else {
    std::fprintf(stderr, "sparrow formats: nm skipped: the matrix is not N:M "
                         "(use --pattern nm:N:M[:L] to include it)\n");
  }

  std::vector<Row> rows;
  bool all_ok = true;
  for (const auto& c : candidates) {
    Row row;
    row.format = format_name(c.format);
    row.variant = c.variant;
    const auto t0 = std::chrono::steady_clock::now();
    auto enc = encode(c.format, wv, c.opt);
    const auto t1 = std::chrono::steady_clock::now();
    row.encode_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    if (!enc.ok()) {
      row.error = enc.status().to_string();
    } else {
      row.bytes = storage_bytes(enc.value());
      row.d_eff = d_eff(enc.value());
      auto dec = decode(enc.value());
      row.roundtrip = dec.ok() && same_values(dec.value().view(), wv);
      if (!dec.ok()) row.error = dec.status().to_string();
    }
    all_ok = all_ok && row.roundtrip;
    rows.push_back(row);
  }

  if (a.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& r : rows) {
      nlohmann::json o = {{"format", r.format}, {"bytes", r.bytes},          {"d_eff", r.d_eff},
                          {"encode_ms", r.encode_ms}, {"roundtrip", r.roundtrip}};
      if (!r.variant.empty()) o["variant"] = r.variant;
      if (!r.error.empty()) o["error"] = r.error;
      out.push_back(o);
    }
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("%lld x %lld, %s, sparsity %.4g, pattern %s, seed %llu\n", (long long)a.rows,
                (long long)a.cols, dtype_name(*dtype), a.sparsity, a.pattern.c_str(),
                (unsigned long long)a.seed);
    std::printf("%-10s %-10s %14s %8s %11s  %s\n", "format", "variant", "bytes", "d_eff",
                "encode ms", "round trip");
    for (const auto& r : rows) {
      std::printf("%-10s %-10s %14zu %8.4f %11.1f  %s%s%s\n", r.format.c_str(),
                  r.variant.c_str(), r.bytes, r.d_eff, r.encode_ms, r.roundtrip ? "ok" : "FAIL",
                  r.error.empty() ? "" : "  ", r.error.c_str());
    }
  }
  return all_ok ? 0 : 1;
}

}  // namespace

void register_formats(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<FormatsArgs>();
  CLI::App* cmd = app.add_subcommand(
      "formats", "Encode a generated M x K matrix in every format: bytes, d_eff, encode time, "
                 "exact round trip");
  cmd->add_option("--rows,-M", args->rows, "M, output features")->required();
  cmd->add_option("--cols,-K", args->cols, "K, input features")->required();
  cmd->add_option("--sparsity,-s", args->sparsity, "fraction of zeros, in [0, 1)")->required();
  cmd->add_option("--pattern", args->pattern, "random | magnitude | block:BxB | nm:N:M[:L]")
      ->capture_default_str();
  cmd->add_option("--dtype", args->dtype, "fp16 | bf16")->capture_default_str();
  cmd->add_option("--seed", args->seed, "generator seed")
      ->check(seed_validator())
      ->capture_default_str();
  cmd->add_flag("--json", args->json, "print a JSON array instead of a table");
  cmd->callback([args, &exit_code] { exit_code = run_formats(*args); });
}

}  // namespace sparrow::cli
