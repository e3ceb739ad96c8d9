// pick_engine_layer (sparrow/dispatch.hpp): a decoder layer's four engine matmuls picked together
// from whole-model engine runs where they exist, else matmul by matmul from the rule table.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <string>

#include "dispatch/rule_cells.hpp"
#include "sparrow/dispatch.hpp"

namespace sparrow {

namespace {

// One measured assignment: the format of each engine matmul (qkv, o, gate_up, down), tg32 t/s
// over the dense model's t/s in the same process (`bench-model --sparsity 0,S`), and the weights
// it held on the GPU.
struct Assignment {
  std::array<Format, 4> formats;
  double vs_dense;
  double weight_gib;
};
// The assignments measured at one sparsity and batch; entries left out are zero (vs_dense 0 never
// beats dense).
struct EngineLayerCell {
  double sparsity;
  int64_t batch;
  std::array<Assignment, 3> measured;
};
// A model's decoder layer (the stacked qkv rows, hidden and intermediate sizes) and its cells,
// measured on one GPU: they answer only where the rule table of that GPU does (shipped_tables.hpp),
// since the engine's speed against dense moves with the GPU as the kernels' does.
struct EngineModelCells {
  const char* gpu;  // cudaDeviceProp::name, as the rule tables name their GPU
  int64_t qkv_rows, hidden, intermediate;
  const char* source;
  std::array<EngineLayerCell, 12> cells;
};

constexpr Format D = Format::dense, T = Format::tca_bme, M = Format::macko;
// Every matmul dense, tca_bme or macko; and the per-matmul picks' mixes (qkv, o, gate_up, down).
constexpr std::array<Format, 4> kDense = {D, D, D, D}, kTca = {T, T, T, T}, kMacko = {M, M, M, M},
                                kTcaDenseO = {T, D, T, T}, kMackoTcaOD = {M, T, M, T},
                                kMackoTcaO = {M, T, M, M},
                                kMackoTcaODenseD = {M, T, M, D}, kTcaDenseOD = {T, D, T, D};

// Llama-2-7B (synth, random pattern, `bench-model --synth llama2-7b --sparsity 0,0.5,0.7,0.9
// -p 512 -n 32 -b B -r 2`, --format fastest and --format tca_bme), H100 80GB HBM3, session 42
// (bench/results/2026-11-27-h100-s42-logs.tar.xz): batch 2 and 4 call c7 (c7/*.log; dense t/s
// 398.3 / 789.9 in the fastest run, 397.4 / 789.5 in the tca_bme one), batch 8 and 32 call c3
// (c3/b-*.log; dense 1544.9 / 5075.1 and 1541.8 / 5077.1). The batch-4 / 50 % pick these cells
// make (every layer tca_bme, by the 5 % bytes margin) ran 828.25 against dense 788.27 t/s as
// `--format fastest` (1.051x, session 43 call c2, bench/results/2026-11-27-h100-s43-logs.tar.xz).
// Batch 8 at 50 % also holds session 43's run of o_proj dense and the rest tca_bme (call c3,
// c3/mix-b8-s0.5.log, same -p 512 -n 32 -r 2: 1559.57 against dense 1546.63 t/s in its process);
// the same mix at batch 32 ran 0.916x (50 %) and 0.953x (70 %) dense (c3/mix-b32-*.log). Every
// layer tca_bme at batch 32 and 70 / 90 % is session 43's call c7 (c7/engine-wc0.log, the same
// command, dense 5085.52 t/s), after tca_bme.mma's 2 x 2 warp tiles (session 42 c3: 4870.1 /
// 5224.8 against dense 5077.1). qkv / gate_up tca_bme with o / down dense at batch 32 (the rule
// table's per-matmul picks after session 43's tensor-core run) is session 44's call c1
// (bench/results/2026-11-28-h100-s44-logs.tar.xz, c1/mix-b32-od-dense.log, `--sparsity 0,0.7,0.9`,
// dense 5090.13 t/s), and at 70 % the mean of that run and call c2's of the same mix as `--format
// fastest` (c2/gt/extra.log, 5091.80 against dense 5099.75: 0.998x): a memory gain (0.58x the
// weights) at dense speed. Before the warp tiles the same mix ran 0.961x dense at 70 % (session 43 c4).
// Session 46 (bench/results/2026-11-28-h100-s46-logs.tar.xz), after tca_bme.decode's cluster
// epilogue by push: every layer tca_bme and every layer macko at batch 4 and 8, and o_proj dense
// with the rest tca_bme at batch 8 / 50 % (the picks then), are call c1 (c1/cells-*.log,
// `--sparsity 0,0.5,0.7,0.9 -p 512 -n 32 -b 4,8 -r 2 --format F`, each against the dense model of
// its own process); qkv / gate_up macko with o / down tca_bme is call c3 at batch 4 / 50 %
// (c3/mix-b4.log, the regenerated rule table's per-matmul picks there) and call c6 at batch
// 8 / 90 % (c6/mix-mtmt.log, `--sparsity 0,0.9 -b 4,8`). At N = 8 macko runs the tall matmuls
// faster and tca_bme.decode the 4096-row ones: in c5's per-op costs down_proj took 34.8 us a layer
// with macko in the engine, as long as dense's. The other mixes at batch 4 / 50 % and batch
// 8 / 70 % stay session 42's.
constexpr EngineModelCells kModels[] = {
    {"NVIDIA H100 80GB HBM3", 12288, 4096, 11008,
     "H100 80GB HBM3, Llama-2-7B engine runs of sessions 42 to 46",
     {{{0.5, 2, {{{kMackoTcaOD, 492.51 / 398.32, 7.83}, {kTca, 435.61 / 397.37, 7.30}}}},
       {0.7, 2, {{{kMacko, 595.26 / 398.32, 5.14}, {kTca, 503.48 / 397.37, 4.89}}}},
       {0.9, 2, {{{kMacko, 831.91 / 398.32, 2.45}, {kTca, 543.57 / 397.37, 2.48}}}},
       {0.5, 4,
        {{{kMackoTcaODenseD, 847.05 / 789.87, 9.00},
          {kTca, 871.01 / 787.14, 7.30},
          {kMackoTcaOD, 832.71 / 788.75, 7.83}}}},
       {0.7, 4, {{{kMacko, 994.80 / 787.46, 5.14}, {kTca, 967.84 / 787.14, 4.89}}}},
       {0.9, 4, {{{kMacko, 1407.66 / 787.46, 2.45}, {kTca, 1022.12 / 787.14, 2.48}}}},
       {0.5, 8,
        {{{kMacko, 1060.69 / 1548.91, 8.12},
          {kTca, 1642.38 / 1541.31, 7.30},
          {kTcaDenseO, 1617.22 / 1550.91, 7.74}}}},
       {0.7, 8,
        {{{kTcaDenseO, 1665.2 / 1544.9, 5.52},
          {kTca, 1812.75 / 1541.31, 4.89},
          {kMacko, 1410.88 / 1548.91, 5.14}}}},
       {0.9, 8,
        {{{kMacko, 1876.50 / 1548.91, 2.45},
          {kTca, 1877.54 / 1541.31, 2.48},
          {kMackoTcaOD, 1981.03 / 1549.58, 2.45}}}},
       {0.5, 32, {{{kDense, 5073.1 / 5075.1, 12.55}, {kTca, 4516.4 / 5077.1, 7.30}}}},
       {0.7, 32,
        {{{kDense, 4995.4 / 5075.1, 12.55},
          {kTca, 4948.79 / 5085.52, 4.89},
          {kTcaDenseOD, (5153.73 / 5090.13 + 5091.80 / 5099.75) / 2, 7.23}}}},
       {0.9, 32,
        {{{kDense, 4996.6 / 5075.1, 12.55},
          {kTca, 5382.57 / 5085.52, 2.48},
          {kTcaDenseOD, 5397.58 / 5090.13, 5.56}}}}}},
    },
    // Llama-2-7B on the H200, the same command as above with -b 1,2,4,8, each run against the dense
    // model of its own process. Batch 1 is session 47
    // (bench/results/2026-11-28-h200-s47-logs.tar.xz): every layer tca_bme and every layer macko
    // are call c2's engine-cells.sh runs (c2/cells/*.log); qkv / gate_up macko with o tca_bme (the
    // H200 rule table's per-matmul picks there) is c2's engine stage (c2/gt/extra.log, `--format
    // fastest`). Its ratios stay one session's: dense has been ~10 % faster since (dense.gemv's L2
    // prefetch, one-wave plans, the SwiGLU in its epilogue), which the sparse models gained less
    // of, so mixing in later runs would compare unlike baselines. Batch 2 and 4 are session 52's
    // c5 (bench/results/2026-11-29-h200-s52-logs.tar.xz, c5/cells/*.log: every layer macko, every
    // layer tca_bme, qkv / gate_up macko with o / down tca_bme), after the dense model's SwiGLU
    // moved into dense.gemv's epilogue (dense +2.0 % at batch 4). Batch 8 is session 50
    // (bench/results/2026-11-29-h200-s50-logs.tar.xz): every layer macko c1 (c1/cells/1.log),
    // every layer tca_bme and the mix c3 (c3/cells/{1,2}.log); nothing beat dense there (best: the
    // mix at 90 %, 0.977x), nor at batch 2 / 50 % (the mix 0.980x) or batch 4 / 50 % (tca_bme
    // 0.886x). Batch 32 has no cell: the H200 table's per-matmul picks are dense.
    {"NVIDIA H200", 12288, 4096, 11008, "H200, Llama-2-7B engine runs of sessions 47, 50 and 52",
     {{{0.5, 1,
        {{{kMacko, 309.06 / 250.37, 8.12},
          {kTca, 278.08 / 249.34, 7.30},
          {kMackoTcaO, 313.90 / 250.72, 8.04}}}},
       {0.7, 1,
        {{{kMacko, 410.55 / 250.37, 5.14},
          {kTca, 304.06 / 249.34, 4.89},
          {kMackoTcaO, 422.50 / 250.72, 5.11}}}},
       {0.9, 1, {{{kMacko, 576.07 / 250.37, 2.45}, {kTca, 330.03 / 249.34, 2.48}}}},
       {0.5, 2,
        {{{kMacko, 518.46 / 554.93, 8.12},
          {kTca, 482.47 / 553.78, 7.30},
          {kMackoTcaOD, 545.00 / 556.35, 7.83}}}},
       {0.7, 2,
        {{{kMacko, 652.28 / 554.93, 5.14},
          {kTca, 523.60 / 553.78, 4.89},
          {kMackoTcaOD, 684.98 / 556.35, 5.04}}}},
       {0.9, 2,
        {{{kMacko, 872.19 / 554.93, 2.45},
          {kTca, 561.16 / 553.78, 2.48},
          {kMackoTcaOD, 846.27 / 556.35, 2.45}}}},
       {0.5, 4,
        {{{kMacko, 783.82 / 1065.74, 8.12},
          {kTca, 948.33 / 1069.76, 7.30},
          {kMackoTcaOD, 863.30 / 1071.56, 7.83}}}},
       {0.7, 4,
        {{{kMacko, 1009.21 / 1065.74, 5.14},
          {kTca, 991.87 / 1069.76, 4.89},
          {kMackoTcaOD, 1096.60 / 1071.56, 5.04}}}},
       {0.9, 4,
        {{{kMacko, 1430.68 / 1065.74, 2.45},
          {kTca, 1035.67 / 1069.76, 2.48},
          {kMackoTcaOD, 1416.84 / 1071.56, 2.45}}}},
       {0.5, 8, {{{kMacko, 1063.87 / 2043.77, 8.12}, {kTca, 1761.70 / 2047.46, 7.30}}}},
       {0.7, 8,
        {{{kMacko, 1426.36 / 1920.57, 5.14},
          {kTca, 1807.29 / 2047.46, 4.89},
          {kMackoTcaOD, 1687.73 / 2031.44, 5.04}}}},
       {0.9, 8,
        {{{kMacko, 1915.44 / 2043.77, 2.45},
          {kTca, 1842.17 / 2047.46, 2.48},
          {kMackoTcaOD, 1985.09 / 2031.44, 2.45}}}}}},
    },
};

// Whether every matmul of the layer is near the model's, as a weight near a rule-table shape.
bool layer_near(const std::array<EngineMatmulLayers, 4>& l, const EngineModelCells& c) {
  const int64_t want[4][2] = {{c.qkv_rows, c.hidden},
                              {c.hidden, c.hidden},
                              {2 * c.intermediate, c.hidden},
                              {c.hidden, c.intermediate}};
  for (int i = 0; i < 4; ++i)
    if (shape_distance(l[size_t(i)].rows, l[size_t(i)].cols, want[i][0], want[i][1]) < 0)
      return false;
  return true;
}

std::string assignment_name(const std::array<Format, 4>& f) {
  if (f[0] == f[1] && f[1] == f[2] && f[2] == f[3])
    return std::string("every matmul ") + format_name(f[0]);
  return std::string("qkv ") + format_name(f[0]) + ", o " + format_name(f[1]) + ", gate_up " +
         format_name(f[2]) + ", down " + format_name(f[3]);
}

}  // namespace

std::array<FormatPick, 4> pick_engine_layer(const std::array<EngineMatmulLayers, 4>& layer,
                                            int64_t n, bool allow_nm) {
  std::array<FormatPick, 4> out;
  double nonzeros = 0, elements = 0;
  for (const auto& m : layer) nonzeros += m.nonzeros, elements += m.elements;
  // The cell of this layer's shapes and N at the nearest measured sparsity (within the margin).
  // The cells ran unstructured weights: an N:M layer takes none.
  const EngineModelCells* model = nullptr;
  const EngineLayerCell* cell = nullptr;
  if (elements > 0 && !allow_nm) {
    const double sparsity = 1.0 - nonzeros / elements;
    const char* gpu = rule_table_gpu();
    for (const auto& mc : kModels) {
      if (std::strcmp(mc.gpu, gpu) != 0 || !layer_near(layer, mc)) continue;
      for (const auto& c : mc.cells) {
        const double d = std::fabs(c.sparsity - sparsity);
        if (c.batch != n || d > kMaxSparsityDistance) continue;
        if (!cell || d < std::fabs(cell->sparsity - sparsity)) model = &mc, cell = &c;
      }
    }
  }
  if (!cell) {
    for (size_t i = 0; i < 4; ++i) out[i] = layer[i].pick(n, allow_nm);
    return out;
  }
  // Dense (1.0 by definition) unless an assignment ran faster; among those within the margin of
  // the fastest, the fewest weight bytes.
  double fastest = 1.0;
  for (const auto& a : cell->measured) fastest = std::max(fastest, a.vs_dense);
  const Assignment* best = nullptr;
  for (const auto& a : cell->measured) {
    if (a.vs_dense <= 1.0 || a.vs_dense * kBytesTieMargin < fastest) continue;
    if (!best || a.weight_gib < best->weight_gib) best = &a;
  }
  const std::string where = " at N=" + std::to_string(n) + ", sparsity " +
                            fmt("%.2f", cell->sparsity) + " (" + model->source + ")";
  for (size_t i = 0; i < 4; ++i) {
    FormatPick p;
    if (best) {
      p.format = best->formats[i];
      p.measured_speedup = best->vs_dense;
      p.reason = "engine cell: " + assignment_name(best->formats) + " ran " +
                 fmt("%.3f", best->vs_dense) + "x dense with " + fmt("%.2f", best->weight_gib) +
                 " GiB of weights" + where;
    } else {
      p.format = Format::dense;
      p.reason = "engine cell: no measured assignment beat dense" + where;
    }
    // The kernel matmul will run for that format there (as the engine calls it).
    const auto k = pick_kernel(p.format, layer[i].density(), n, layer[i].rows, layer[i].cols,
                               layer[i].normed(), /*dependent_launch=*/true);
    p.kernel = k.ok() ? k->kernel : std::string();
    out[i] = p;
  }
  return out;
}

}  // namespace sparrow
