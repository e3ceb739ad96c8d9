// The rule table: measured speedups vs cuBLAS per (format, kernel, N, sparsity, shape) cell, and
// the lookups matmul and planning use. A cell applies to a query when its N is within a factor of 2
// (log-nearest) and its sparsity is the nearest measured one, at most 0.1 away; outside measured N
// the kernel's declared N range decides, and the reason says so. Among those cells a weight near a
// benchmarked shape (rows within 2x, columns within sqrt(2)) takes the nearest such shape's cells,
// any other weight (or a query without a shape) the medians over the benchmarked shapes. Which
// kernel wins depends on the shape: at N = 32 tca_bme.wgmma beats tca_bme.mma by more than 5 %
// only on 4096 x 11008; at 50 % and N = 2..4 macko is the fastest format on 4096 x 4096 and
// tca_bme.decode on 28672 x 8192 (0.87x macko's time). With the medians the format pick was more
// than 5 % slower than the best candidate on 12 % of the decode rows (session 20,
// scripts/check_dispatch.py). Dense weights (density 1: the dense cells, at sparsity 0) on a
// plain launch take only the cells of a benchmarked shape near them (cuBLAS where dense.gemv
// measured slower: 1.02-1.06x on 4096 x 11008 and 28672 x 8192 at N = 1..8; the two are within a
// few percent either way, so the medians over shapes would decide by noise), else the registry's
// N ranges (dense.gemv up to 8 tokens); on a dependent launch (the engine's) always the registry's
// ranges: with it dense.gemv measured 0.81-0.98x cuBLAS's time on all three shapes run (session
// 18), and the table's cells are plain launches. Cells marked plain_only (tca_bme.mma at N <= 8:
// faster than tca_bme.decode alone, slower in the 7B engine, scripts/rule-table.sh) are skipped
// on a dependent launch. A caller that normalises X inside the matmul
// (MatmulOptions::input_rms, the engine's folded RMSNorm) takes the fastest kernel that honours it
// unless another measured more than kFoldedNormMargin faster: the other kernel would bring the
// norm kernel back.
#include <array>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "dispatch/choose.hpp"
#include "dispatch/rule_cells.hpp"
#include "dispatch/shipped_tables.hpp"
#include "kernels/kernel.hpp"
#include "sparrow/dispatch.hpp"

namespace sparrow {

namespace {

using Cell = RuleCell;

// How much faster (speedup ratio) a kernel without input_rms must have measured to be chosen over
// the fastest one with it when the caller folds a norm: the norm kernel it brings back costs ~2.4
// us per call in a 7B decode step (EngineOpsTiming, H100), 4-7 % of the stacked q/k/v and gate/up
// matmuls it feeds at 8 tokens, plus a launch. Not A/B-measured on its own: the engine runs that
// would test it (tca_bme.mma at batch 8, 1.07x tca_bme.decode's speed alone on 11008 x 4096) lost
// for another reason too, also on o_proj where no norm is folded (scripts/rule-table.sh).
constexpr double kFoldedNormMargin = 1.10;

// One format's cells: make_rule_table.py writes a table sorted by format, so they are one run of
// its cells, and a lookup scans that run only (the whole table cost matmul ~3 us per call on a
// 2-core host; the lookups still check each cell's format, so an unsorted table stays correct).
struct CellRun {
  const Cell* first = nullptr;
  const Cell* last = nullptr;  // one past the end
  bool any_dependent = false;  // a cell measured with dependent launches is among them
  int64_t dependent_max_n = INT64_MAX;  // they answer N up to this
  const Cell* begin() const { return first; }
  const Cell* end() const { return last; }
};
using CellRuns = std::array<CellRun, std::size(kAllFormats)>;
CellRuns runs_of(const Cell* cells, size_t count, int64_t dependent_max_n) {
  CellRuns r{};
  for (const Cell* c = cells; c != cells + count; ++c) {
    CellRun& run = r[size_t(c->format)];
    if (run.first == nullptr) run.first = c;
    run.last = c + 1;
    run.any_dependent = run.any_dependent || c->dependent;
  }
  for (CellRun& run : r) run.dependent_max_n = dependent_max_n;
  return r;
}
const CellRuns* g_test_runs = nullptr;  // ScopedRuleTable's table, while one lives
// The cells of format f in the table that answers now: a test's, else the shipped table of this
// GPU (shipped_tables.hpp). Each lookup resolves it once and passes the run down (resolving costs
// a cudaGetDevice, and matmul looks up on every launch).
const CellRun& cells_of(Format f) {
  if (g_test_runs) return (*g_test_runs)[size_t(f)];
  static const std::vector<CellRuns> shipped = [] {
    std::vector<CellRuns> r;
    for (const ShippedRuleTable& t : shipped_rule_tables())
      r.push_back(runs_of(t.cells, t.count, t.dependent_max_n));
    return r;
  }();
  return shipped[size_t(&active_rule_table() - shipped_rule_tables().data())][size_t(f)];
}

// Whether kernel k honours MatmulOptions::input_rms on weight w at N = n (no weight: whether it
// can for some weight).
bool takes_rms(const kernels::KernelInfo& k, const Weight* w, int64_t n) {
  return w != nullptr ? kernels::takes_input_rms(k, *w, n) : k.input_rms != nullptr;
}

// Whether matmul may run kernel k on weight w (null: any weight) with this much workspace: kernels
// that need a workspace are chosen only when they get enough for one pass, as measured; kernels
// for another GPU architecture (tca_bme.wgmma off Hopper) are never chosen for a weight.
bool usable(const kernels::KernelInfo& k, const Weight* w, size_t workspace_bytes) {
  if (w != nullptr && !kernels::available_here(k)) return false;
  if (k.workspace == nullptr || w == nullptr) return true;
  return workspace_bytes > 0 && kernels::workspace_need(k, *w).full <= workspace_bytes;
}

// The fastest measured cell for (format, n, sparsity, shape) among usable kernels in this build:
// the log-nearest measured N within 2x, then the nearest measured sparsity, then the nearest
// benchmarked shape that speaks for rows x cols (else, unless `shape_only`, the medians over
// shapes; also when none of that shape's kernels is usable here); with `input_rms` the fastest
// that takes it unless another is more than kFoldedNormMargin faster. Null when nothing close was
// measured. No allocation:
// matmul calls this on every launch. make_rule_table.py writes a median cell for every measured
// (format, kernel, N, sparsity), so the N and sparsity searches read only those (a fifth of the
// table; the per-shape cells made the table five times larger).
// `from_dependent`: search only the cells measured with dependent launches; else only the
// plain-launch cells (minus those left out of dependent launches when this is one).
const Cell* best_cell_of(const CellRun& run, Format f, double sparsity, int64_t n, int64_t rows,
                         int64_t cols, const Weight* w, size_t workspace_bytes, bool shape_only,
                         bool input_rms, bool dependent_launch, bool from_dependent) {
  auto seen = [&](const Cell& c) {
    return c.format == f && c.dependent == from_dependent &&
           !(dependent_launch && c.plain_only);
  };
  const double log2_n = std::log2(double(n));
  double best_dn = 1e9;
  int64_t best_n = -1;
  for (const Cell& c : run) {
    if (!seen(c) || c.rows != 0) continue;
    const double dn = std::fabs(std::log2(double(c.n)) - log2_n);
    if (dn < best_dn) best_dn = dn, best_n = c.n;
  }
  if (best_n < 0 || best_dn > 1.0) return nullptr;
  double best_ds = 1e9;
  for (const Cell& c : run) {
    if (seen(c) && c.n == best_n && c.rows == 0)
      best_ds = std::fmin(best_ds, std::fabs(c.sparsity - sparsity));
  }
  if (best_ds > kMaxSparsityDistance) return nullptr;  // never extrapolate far in sparsity
  auto here = [&](const Cell& c) {
    return seen(c) && c.n == best_n && std::fabs(c.sparsity - sparsity) == best_ds;
  };
  // The nearest benchmarked shape that speaks for this weight (0 x 0: none, the medians).
  int64_t shape_rows = 0, shape_cols = 0;
  double best_dist = 1e9;
  for (const Cell& c : run) {
    if (!here(c)) continue;
    // Negative where the cell's shape does not speak for the weight, or is the over-shapes
    // median (rows 0), or the weight's shape is unknown.
    const double d = shape_distance(rows, cols, c.rows, c.cols);
    if (d >= 0.0 && d < best_dist) best_dist = d, shape_rows = c.rows, shape_cols = c.cols;
  }
  auto fastest = [&](int64_t r, int64_t k_cols) {
    const Cell* best = nullptr;
    const Cell* best_rms = nullptr;  // the fastest that takes input_rms (asked for only)
    for (const Cell& c : run) {
      if (!here(c) || c.rows != r || c.cols != k_cols) continue;
      const kernels::KernelInfo* k = kernels::find_kernel(c.kernel);
      if (k == nullptr) continue;  // measured, not in this build
      if (!usable(*k, w, workspace_bytes)) continue;
      if (!best || c.speedup > best->speedup) best = &c;
      if (input_rms && takes_rms(*k, w, n) && (!best_rms || c.speedup > best_rms->speedup))
        best_rms = &c;
    }
    if (best_rms && best_rms->speedup * kFoldedNormMargin >= best->speedup) return best_rms;
    return best;
  };
  const Cell* best = shape_rows > 0 ? fastest(shape_rows, shape_cols) : nullptr;
  return best || shape_only ? best : fastest(0, 0);
}

// Whether a launch at N searches the format's cells measured with dependent launches first.
bool reads_dependent_cells(const CellRun& run, int64_t n, bool dependent_launch) {
  return dependent_launch && run.any_dependent && n <= run.dependent_max_n;
}

// A dependent launch reads the cells measured that way where they cover the query (an N within
// 2x, a sparsity within 0.1, the shape rules above, N up to the table's limit), else the
// plain-launch cells; a plain launch reads plain-launch cells only.
const Cell* best_cell(const CellRun& run, Format f, double sparsity, int64_t n, int64_t rows,
                      int64_t cols, const Weight* w, size_t workspace_bytes, bool shape_only,
                      bool input_rms, bool dependent_launch) {
  if (reads_dependent_cells(run, n, dependent_launch)) {  // (matmul asks on every launch)
    if (const Cell* c = best_cell_of(run, f, sparsity, n, rows, cols, w, workspace_bytes,
                                     shape_only, input_rms, true, /*from_dependent=*/true))
      return c;
  }
  return best_cell_of(run, f, sparsity, n, rows, cols, w, workspace_bytes, shape_only, input_rms,
                      dependent_launch, /*from_dependent=*/false);
}

// The cell that decides a weight's kernel (header comment): for dense weights only a nearby
// benchmarked shape's, and none on a dependent launch.
const Cell* deciding_cell(Format f, double density, int64_t n, int64_t rows, int64_t cols,
                          bool dependent_launch, bool input_rms, const Weight* w = nullptr,
                          size_t workspace_bytes = 0) {
  const bool dense = f == Format::dense;
  if (dense && dependent_launch) return nullptr;
  return best_cell(cells_of(f), f, 1.0 - density, n, rows, cols, w, workspace_bytes, dense,
                   input_rms, dependent_launch);
}

// The kernel for (format, n) when no cell applies: the first registered kernel built for this N,
// else the first registered one (every kernel is correct for any N). Null when none exists.
const kernels::KernelInfo* fallback_kernel(Format f, int64_t n, const Weight* w = nullptr,
                                           size_t workspace_bytes = 0) {
  const kernels::KernelInfo* first = nullptr;
  for (const auto& k : kernels::all_kernels()) {
    if (k.format != f || !usable(k, w, workspace_bytes)) continue;
    if (!first) first = &k;
    if (n >= k.best_min_n && n <= k.best_max_n) return &k;
  }
  return first;
}

}  // namespace

std::optional<EngineMatmul> engine_matmul_of(const std::string& name) {
  struct Suffix {
    const char* text;
    EngineMatmul m;
  };
  static const Suffix suffixes[] = {
      {".q_proj.weight", EngineMatmul::qkv},        {".k_proj.weight", EngineMatmul::qkv},
      {".v_proj.weight", EngineMatmul::qkv},        {".o_proj.weight", EngineMatmul::o},
      {".gate_proj.weight", EngineMatmul::gate_up}, {".up_proj.weight", EngineMatmul::gate_up},
      {".down_proj.weight", EngineMatmul::down}};
  for (const Suffix& s : suffixes) {
    const size_t len = std::char_traits<char>::length(s.text);
    if (name.size() > len && name.compare(name.size() - len, len, s.text) == 0) return s.m;
  }
  return std::nullopt;
}

void EngineMatmulLayers::add(int64_t layer_rows, int64_t layer_cols, double density) {
  const double e = double(layer_rows) * double(layer_cols);
  rows += layer_rows;
  cols = layer_cols;
  nonzeros += density * e;
  elements += e;
}

bool EngineMatmulLayers::normed() const {
  return matmul == EngineMatmul::qkv || matmul == EngineMatmul::gate_up;
}

double EngineMatmulLayers::density() const { return elements > 0 ? nonzeros / elements : 1.0; }

FormatPick EngineMatmulLayers::pick(int64_t n, bool allow_nm) const {
  return pick_format(density(), n, allow_nm, rows, cols, normed(), /*dependent_launch=*/true);
}

double shape_distance(int64_t rows, int64_t cols, int64_t measured_rows, int64_t measured_cols) {
  if (measured_rows <= 0 || measured_cols <= 0 || rows <= 0 || cols <= 0) return -1.0;
  const double dr = std::fabs(std::log2(double(rows) / double(measured_rows)));
  const double dc = std::fabs(std::log2(double(cols) / double(measured_cols)));
  if (dr > kMaxRowsLog2 || dc > kMaxColsLog2) return -1.0;
  return dr + dc;
}

std::string fmt(const char* f, double a) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, a);
  return buf;
}

ScopedRuleTable::ScopedRuleTable(const RuleCell* cells, size_t count, int64_t dependent_max_n) {
  g_test_runs = new CellRuns(runs_of(cells, count, dependent_max_n));
}
ScopedRuleTable::~ScopedRuleTable() {
  delete g_test_runs;
  g_test_runs = nullptr;
}

const char* rule_table_gpu() { return active_rule_table().gpu; }
const char* rule_table_date() { return active_rule_table().date; }

double density_of(const Weight& w) {
  const Shape& s = shape_of(w);
  const double total = double(s.rows) * double(s.cols);
  switch (format_of(w)) {
    case Format::dense: return 1.0;
    case Format::csr: return double(std::get<csr::Matrix>(w).nnz()) / total;
    case Format::macko: return double(std::get<macko::Matrix>(w).nnz) / total;
    case Format::tca_bme: return double(std::get<tca_bme::Matrix>(w).nnz) / total;
    case Format::tiled_csl: return double(std::get<tiled_csl::Matrix>(w).nnz()) / total;
    case Format::nm: {
      const auto& p = std::get<nm::Matrix>(w).pattern;
      return double(p.n) / double(p.m);
    }
  }
  return 1.0;
}

const kernels::KernelInfo* choose_kernel(const Weight& w, int64_t n, size_t workspace_bytes,
                                         bool dependent_launch, bool input_rms) {
  const Format f = format_of(w);
  const Shape& s = shape_of(w);
  if (const Cell* c = deciding_cell(f, density_of(w), n, s.rows, s.cols, dependent_launch,
                                    input_rms, &w, workspace_bytes))
    return kernels::find_kernel(c->kernel);
  return fallback_kernel(f, n, &w, workspace_bytes);
}

Result<KernelPick> pick_kernel(Format f, double density, int64_t n, int64_t rows, int64_t cols,
                               bool input_rms, bool dependent_launch) {
  KernelPick pick;
  if (const Cell* c = deciding_cell(f, density, n, rows, cols, dependent_launch, input_rms)) {
    pick.kernel = c->kernel;
    pick.measured_speedup = c->speedup;
    pick.reason = std::string(input_rms ? "for input_rms, the fastest measured kernel taking it "
                                          "(unless another is " +
                                              fmt("%.2fx", kFoldedNormMargin) + " faster), "
                                        : "fastest measured ") +
                  format_name(f) + " kernel near N=" +
                  std::to_string(c->n) + ", sparsity " + fmt("%.2f", c->sparsity) +
                  (c->rows > 0 ? ", on " + std::to_string(c->rows) + "x" + std::to_string(c->cols)
                               : ", median over " + std::to_string(c->shapes) + " shapes") +
                  ": " + fmt("%.2fx", c->speedup) + " cuBLAS on " + rule_table_gpu() +
                  (f == Format::dense ? " (plain launch; a dependent launch takes the registry's "
                                        "kernel for N)"
                   : dependent_launch ? " (dependent launch: kernels the engine measured slower "
                                        "that way left out)"
                                      : "");
    return pick;
  }
  const kernels::KernelInfo* k = fallback_kernel(f, n);
  if (!k) {
    return unsupported(std::string("no GPU kernel for the ") + format_name(f) +
                       " format in this build");
  }
  pick.kernel = k->name;
  const bool built_for = n >= k->best_min_n && n <= k->best_max_n;
  pick.reason = (f == Format::dense && dependent_launch
                     ? std::string("a dense weight on a dependent launch takes the registry's "
                                   "kernel for N (the table's cells are plain launches); ")
                     : "no measurement near N=" + std::to_string(n) + "; ") +
                k->name +
                (built_for ? " is built for N in [" + std::to_string(k->best_min_n) + ", " +
                                 std::to_string(k->best_max_n) + "]"
                           : " (no kernel is built for this N; all are correct for any N)");
  return pick;
}

FormatPick pick_format(double density, int64_t n, bool allow_nm, int64_t rows, int64_t cols,
                       bool input_rms, bool dependent_launch) {
  FormatPick out;
  out.kernel = "dense.cublas";
  // What a sparse format must beat: the dense kernel a dense weight of this shape would run, where
  // the table measured it faster than cuBLAS: on a dependent launch the fastest dense kernel
  // measured with dependent launches near this N and shape, when the table has such cells (a
  // dense weight there runs dense.gemv up to 8 tokens, which chains faster than cuBLAS); on a
  // plain launch the dense cell of a benchmarked shape near it, as matmul picks (dense.gemv where
  // it measured faster). Else cuBLAS (1.0). Against cuBLAS alone a sparse kernel 1.05x cuBLAS
  // was picked over a dense.gemv measured 1.10x, and a slow cuBLAS row in one run moved the picks.
  double bar = 1.0;
  std::string bar_name = "cuBLAS";
  const CellRun& dense_cells = cells_of(Format::dense);
  const bool dependent_cells = reads_dependent_cells(dense_cells, n, dependent_launch);
  const Cell* d =
      dependent_cells ? best_cell_of(dense_cells, Format::dense, 0.0, n, rows, cols, nullptr, 0,
                                     false, input_rms, true, /*from_dependent=*/true)
      : dependent_launch ? nullptr
                         : deciding_cell(Format::dense, 1.0, n, rows, cols, false, input_rms);
  if (d != nullptr && d->speedup > bar) {
    bar = d->speedup;
    bar_name = std::string(d->kernel) + " (" + fmt("%.2fx", d->speedup) + " cuBLAS, " +
               (dependent_cells ? "dependent" : "plain") + " launch)";
    out.kernel = d->kernel;
  }
  const Format sparse[] = {Format::csr, Format::macko, Format::tca_bme, Format::tiled_csl,
                           Format::nm};
  struct Candidate {
    Format f;
    std::string kernel;
    double speedup;
  };
  std::vector<Candidate> measured;
  double best = 0.0;
  std::string best_name;
  for (Format f : sparse) {
    if (f == Format::nm && !allow_nm) continue;
    auto k = pick_kernel(f, density, n, rows, cols, input_rms, dependent_launch);
    if (!k.ok() || k->measured_speedup <= 0.0) continue;
    measured.push_back({f, k->kernel, k->measured_speedup});
    if (k->measured_speedup > best) best = k->measured_speedup, best_name = k->kernel;
  }
  // Among the formats measured within kBytesTieMargin of the fastest (and faster than the bar),
  // the one expected to store the fewest bytes: kernel times that close are within the table's
  // run-to-run spread, and fewer bytes are the other half of what a sparse format is for (the 7B
  // engine at 50 % and one token ran every matmul tca_bme at 280 t/s and 0.58x the dense bytes,
  // against 264-274 t/s and 0.60-0.64x with macko on the 4096-row o_proj / down_proj, whose
  // dependent-launch cells put macko 3.0 / 3.7 % ahead: session 41).
  for (const Candidate& c : measured) {
    if (c.speedup <= bar || c.speedup * kBytesTieMargin < best) continue;
    if (out.format == Format::dense ||
        expected_d_eff(c.f, density) < expected_d_eff(out.format, density)) {
      out.format = c.f;
      out.kernel = c.kernel;
      out.measured_speedup = c.speedup;
    }
  }
  const bool tie_by_bytes = out.format != Format::dense && out.measured_speedup < best;
  if (out.format == Format::dense) {
    out.reason = best_name.empty()
                     ? "no sparse kernel measured near N=" + std::to_string(n) + ": dense"
                     : "no sparse format measured faster than " + bar_name + " at N=" +
                           std::to_string(n) +
                           ", density " + fmt("%.2f", density) + " (best: " + best_name + " " +
                           fmt("%.2fx", best) + "): dense";
  } else {
    out.reason = std::string(format_name(out.format)) + " with " + out.kernel + ": " +
                 fmt("%.2fx", out.measured_speedup) + " cuBLAS measured at N~" +
                 std::to_string(n) + ", density " + fmt("%.2f", density) + " on " +
                 rule_table_gpu() + (dependent_launch ? " (dependent launch)" : "") +
                 (tie_by_bytes ? "; within " + fmt("%.0f", (kBytesTieMargin - 1.0) * 100.0) +
                                     " % of " + best_name + " (" + fmt("%.2fx", best) +
                                     "), and fewer bytes"
                               : "");
  }
  return out;
}

}  // namespace sparrow
