#include "bench/report.hpp"

#include <cmath>
#include <cstdio>

namespace sparrow::bench {

void print_table_header() {
  std::printf("%-22s %6s %6s %3s %5s %-9s %-18s %10s %8s %7s %7s %9s  %-6s %s\n", "shape", "M", "K",
              "N", "spars", "pattern", "kernel", "us", "GB/s", "%floor", "xcuBLAS", "error",
              "status", "note");
}

void print_row(const Row& r) {
  char us[32], gbps[32], pct[32], speed[32], err[32];
  if (r.us >= 0) {
    std::snprintf(us, sizeof(us), "%.2f", r.us);
    std::snprintf(gbps, sizeof(gbps), "%.0f", r.gbps);
    std::snprintf(pct, sizeof(pct), "%.1f", r.pct_floor);
    std::snprintf(speed, sizeof(speed), r.speedup > 0 ? "%.2f" : "-", r.speedup);
  } else {
    std::snprintf(us, sizeof(us), "-");
    std::snprintf(gbps, sizeof(gbps), "-");
    std::snprintf(pct, sizeof(pct), "-");
    std::snprintf(speed, sizeof(speed), "-");
  }
  if (r.error >= 0) {
    std::snprintf(err, sizeof(err), "%.2e", r.error);
  } else {
    std::snprintf(err, sizeof(err), "-");
  }
  std::string kernel = (r.best ? "*" : " ") + r.kernel;
  std::printf("%-22s %6lld %6lld %3lld %5.3f %-9s %-18s %10s %8s %7s %7s %9s  %-6s %s\n",
              r.shape.c_str(), (long long)r.m, (long long)r.k, (long long)r.n, r.sparsity,
              r.pattern.c_str(), kernel.c_str(), us, gbps, pct, speed, err, r.status.c_str(),
              r.note.c_str());
  std::fflush(stdout);
}

nlohmann::json row_json(const Row& r) {
  nlohmann::json j = {{"shape", r.shape},       {"format", r.format},
                      {"kernel", r.kernel},     {"M", r.m},
                      {"K", r.k},               {"N", r.n},
                      {"sparsity", r.sparsity}, {"pattern", r.pattern},
                      {"dtype", r.dtype},       {"weight_bytes", r.weight_bytes},
                      {"bytes", r.bytes},       {"status", r.status},
                      {"best", r.best},         {"graph", r.graph},
                      {"copies", r.copies},     {"calls_per_replay", r.calls_per_replay}};
  if (r.us >= 0) {
    j["us"] = r.us;
    j["p10_us"] = r.p10_us;
    j["p90_us"] = r.p90_us;
    j["gbps"] = r.gbps;
    j["floor_us"] = r.floor_us;
    j["pct_floor"] = r.pct_floor;
    if (r.speedup > 0) j["speedup_vs_cublas"] = r.speedup;
  }
  if (r.error >= 0) {
    j["error"] = std::isfinite(r.error) ? nlohmann::json(r.error) : nlohmann::json("inf");
    j["error_scope"] = r.error_scope;
  }
  if (!r.note.empty()) j["note"] = r.note;
  return j;
}

static std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

// The CSV is written as rows are measured, so a run cut short by a time limit still leaves
// every finished row behind.
void write_csv_header(std::ofstream& f, const std::vector<std::string>& header) {
  for (const auto& h : header) f << "# " << h << "\n";
  f << "shape,format,kernel,M,K,N,sparsity,pattern,dtype,weight_bytes,bytes,us,p10_us,p90_us,"
       "gbps,floor_us,pct_floor,speedup_vs_cublas,error,error_scope,status,best,graph,copies,"
       "calls_per_replay,note\n";
  f.flush();
}

void write_csv_row(std::ofstream& f, const Row& r) {
  if (!f.is_open()) return;
  auto num = [](double v, bool have) {
    if (!have) return std::string();
    char b[32];
    std::snprintf(b, sizeof(b), "%.6g", v);
    return std::string(b);
  };
  const bool t = r.us >= 0;
  f << csv_field(r.shape) << "," << r.format << "," << csv_field(r.kernel) << "," << r.m << ","
    << r.k << "," << r.n << "," << r.sparsity << "," << r.pattern << "," << r.dtype << ","
    << r.weight_bytes << "," << r.bytes << "," << num(r.us, t) << "," << num(r.p10_us, t) << ","
    << num(r.p90_us, t) << "," << num(r.gbps, t) << "," << num(r.floor_us, t) << ","
    << num(r.pct_floor, t) << "," << num(r.speedup, t && r.speedup > 0) << ","
    << num(r.error, r.error >= 0) << "," << csv_field(r.error_scope) << "," << r.status << ","
    << (r.best ? 1 : 0) << "," << (r.graph ? 1 : 0) << "," << r.copies << ","
    << r.calls_per_replay << "," << csv_field(r.note) << "\n";
  f.flush();
}

}  // namespace sparrow::bench
