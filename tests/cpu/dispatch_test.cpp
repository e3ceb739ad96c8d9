// The rule table and the choices made from it (no GPU needed).
#include <gtest/gtest.h>

#include <string>

#include "dispatch/choose.hpp"
#include "dispatch/rule_cells.hpp"
#include "kernels/device_info.hpp"
#include "kernels/kernel.hpp"
#include "kernels/macko/warp_row.hpp"
#include "llama_layer_util.hpp"
#include "sparrow/dispatch.hpp"
#include "sparrow/matmul.hpp"
#include "sparrow/patterns.hpp"

using namespace sparrow;

TEST(Dispatch, EveryFormatWithKernelsGetsARegisteredKernelForAnyN) {
  for (Format f : {Format::dense, Format::csr, Format::macko, Format::tca_bme, Format::tiled_csl}) {
    for (int64_t n : {1, 2, 3, 8, 17, 64, 129, 512, 4096}) {
      for (double d : {1.0, 0.5, 0.3, 0.1, 0.001}) {
        auto k = pick_kernel(f, d, n);
        ASSERT_TRUE(k.ok()) << format_name(f) << " N=" << n << ": " << k.status().to_string();
        const kernels::KernelInfo* info = kernels::find_kernel(k->kernel.c_str());
        ASSERT_NE(info, nullptr) << k->kernel;
        EXPECT_EQ(info->format, f) << k->kernel;
        EXPECT_FALSE(k->reason.empty());
      }
    }
  }
}

TEST(Dispatch, FormatWithoutKernelIsUnsupportedWithAMessage) {
  auto k = pick_kernel(Format::nm, 0.5, 1);
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().code(), Code::unsupported);
  EXPECT_NE(k.status().message().find("nm"), std::string::npos);
}

TEST(Dispatch, MeasuredCellsDriveTheKernelChoice) {
  // The table holds N = 1 measurements for macko: the pick cites them.
  auto k = pick_kernel(Format::macko, 0.3, 1);
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(k->kernel, "macko.warp_row");
  EXPECT_GT(k->measured_speedup, 0.0);
  EXPECT_NE(k->reason.find("measured"), std::string::npos) << k->reason;
}

TEST(Dispatch, FallsBackToDenseWhereNothingSparseWasMeasuredFaster) {
  // Prefill-sized N: nothing measured near, so dense.
  FormatPick p = pick_format(0.5, 4096);
  EXPECT_EQ(p.format, Format::dense);
  EXPECT_EQ(p.kernel, "dense.cublas");
  EXPECT_FALSE(p.reason.empty());
  // Dense weights (density 1) never go sparse.
  EXPECT_EQ(pick_format(1.0, 1).format, Format::dense);
}

TEST(Dispatch, PicksASparseFormatWhereTheTableSaysItWins) {
  // At 90 % sparsity and N = 1 every table generated so far has a sparse kernel >= 2x cuBLAS.
  FormatPick p = pick_format(0.1, 1);
  EXPECT_NE(p.format, Format::dense) << p.reason;
  EXPECT_GT(p.measured_speedup, 1.0);
  EXPECT_NE(p.reason.find(rule_table_gpu()), std::string::npos) << p.reason;
}

// A weight at or near a benchmarked shape (rows within 2x, columns within sqrt(2)) takes that
// shape's cells; any other weight, or a query without a shape, the medians over shapes. The
// reason names which. The shipped table was benchmarked on 4096x4096, 11008x4096, 4096x11008 and
// 28672x8192. (Dense weights take only a nearby shape's cells, never the medians: the dense test
// below.)
TEST(Dispatch, ABenchmarkedShapeTakesItsOwnCells) {
  auto reason = [](int64_t rows, int64_t cols) {
    auto k = pick_kernel(Format::tca_bme, 0.5, 32, rows, cols);
    EXPECT_TRUE(k.ok());
    return k.ok() ? k->reason : std::string();
  };
  EXPECT_NE(reason(4096, 4096).find("on 4096x4096"), std::string::npos) << reason(4096, 4096);
  EXPECT_NE(reason(28672, 8192).find("on 28672x8192"), std::string::npos);
  // The 7B's fused q/k/v (12288 rows) and gate/up (22016 rows) take 11008x4096's cells.
  EXPECT_NE(reason(12288, 4096).find("on 11008x4096"), std::string::npos) << reason(12288, 4096);
  EXPECT_NE(reason(22016, 4096).find("on 11008x4096"), std::string::npos) << reason(22016, 4096);
  // Too far from every benchmarked shape (the lm_head's 32000x4096: 2.9x 11008's rows, half
  // 28672x8192's columns), no shape, or a small weight: the medians.
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{32000, 4096}, {0, 0}, {300, 200}}) {
    EXPECT_NE(reason(rows, cols).find("median over"), std::string::npos)
        << rows << "x" << cols << ": " << reason(rows, cols);
  }
  // pick_kernel without a shape is the medians' pick.
  auto any = pick_kernel(Format::macko, 0.3, 1);
  ASSERT_TRUE(any.ok());
  EXPECT_NE(any->reason.find("median over"), std::string::npos) << any->reason;
}

// matmul's own choice uses the weight's shape: a weight near a benchmarked shape runs the kernel
// pick_kernel names for that shape.
TEST(Dispatch, MatmulChoosesByTheWeightsShape) {
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{2048, 2900}, {150, 90}}) {
    const HostMatrix h = patterns::random(DType::fp16, rows, cols, 0.5, 7);
    auto w = encode(Format::tca_bme, h.view());
    ASSERT_TRUE(w.ok());
    for (int64_t n : {1, 4, 16, 32, 64, 128}) {
      auto pick = pick_kernel(Format::tca_bme, density_of(w.value()), n, rows, cols);
      ASSERT_TRUE(pick.ok());
      const kernels::KernelInfo* k = choose_kernel(w.value(), n, 0);
      ASSERT_NE(k, nullptr);
      // pick_kernel names the measured kernel whatever the GPU; matmul runs it where it can
      // (tca_bme.wgmma needs compute capability 9.0: without a GPU it takes the next one).
      const kernels::KernelInfo* picked = kernels::find_kernel(pick->kernel.c_str());
      ASSERT_NE(picked, nullptr) << pick->kernel;
      if (kernels::available_here(*picked)) {
        EXPECT_EQ(std::string(k->name), pick->kernel) << rows << "x" << cols << " N=" << n;
      }
    }
  }
  // 2048x2900 lies within 2x rows and sqrt(2) columns of 4096x4096.
  auto near = pick_kernel(Format::tca_bme, 0.5, 32, 2048, 2900);
  ASSERT_TRUE(near.ok());
  EXPECT_NE(near->reason.find("on 4096x4096"), std::string::npos) << near->reason;
}

// A dense weight takes cuBLAS on a plain launch where dense.gemv measured slower on a nearby
// benchmarked shape (4096x11008 and 28672x8192 at N = 1..8: 1.02-1.06x cuBLAS's time in the
// table's run), dense.gemv where it measured faster (4096x4096, 11008x4096) and where no
// benchmarked shape is near (the registry's N range); a dependent launch (the engine's) always
// runs dense.gemv up to 8 tokens, as measured with dependent launch.
TEST(Dispatch, DenseWeightsTakeCublasWhereGemvMeasuredSlower) {
  for (int64_t n : {1, 2, 4, 8}) {
    auto big = pick_kernel(Format::dense, 1.0, n, 28672, 8192);
    ASSERT_TRUE(big.ok());
    EXPECT_EQ(big->kernel, "dense.cublas") << "N=" << n << ": " << big->reason;
    EXPECT_NE(big->reason.find("on 28672x8192"), std::string::npos) << big->reason;
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{4096, 4096}, {11008, 4096}, {300, 200}}) {
      auto p = pick_kernel(Format::dense, 1.0, n, rows, cols);
      ASSERT_TRUE(p.ok());
      EXPECT_EQ(p->kernel, "dense.gemv") << rows << "x" << cols << " N=" << n << ": " << p->reason;
    }
  }
  // A real weight near 4096x11008 (rows within 2x, columns within sqrt(2); 32 MB of fp16 zeros).
  const HostMatrix h(DType::fp16, 2100, 8000);
  auto w = encode(Format::dense, h.view());
  ASSERT_TRUE(w.ok());
  for (int64_t n : {1, 8}) {
    const kernels::KernelInfo* plain = choose_kernel(w.value(), n, 0, false);
    const kernels::KernelInfo* dependent = choose_kernel(w.value(), n, 0, true);
    ASSERT_NE(plain, nullptr);
    ASSERT_NE(dependent, nullptr);
    EXPECT_STREQ(plain->name, "dense.cublas") << "N=" << n;
    EXPECT_STREQ(dependent->name, "dense.gemv") << "N=" << n;
  }
  // A caller that folds a norm gets dense.gemv on either launch: cuBLAS measured faster by less
  // than the norm kernel it would bring back (rule_table.cpp's kFoldedNormMargin).
  MatmulOptions opt;
  EXPECT_STREQ(choose_kernel(w.value(), 1, 0, false, true)->name, "dense.gemv");
  EXPECT_TRUE(matmul_takes_input_rms(w.value(), 1, opt));
  opt.dependent_launch = true;
  EXPECT_TRUE(matmul_takes_input_rms(w.value(), 1, opt));
  auto dep = pick_kernel(Format::dense, 1.0, 1, 28672, 8192, false, /*dependent_launch=*/true);
  ASSERT_TRUE(dep.ok());
  EXPECT_EQ(dep->kernel, "dense.gemv");
  EXPECT_NE(dep->reason.find("dependent launch"), std::string::npos) << dep->reason;
  // Beyond dense.gemv's N range both launches run cuBLAS.
  EXPECT_STREQ(choose_kernel(w.value(), 16, 0, true)->name, "dense.cublas");
}

TEST(Dispatch, DensityOfEachFormat) {
  HostMatrix w = patterns::nm_pattern(DType::fp16, 64, 64, {2, 4, 1}, 0.0, 1);
  for (Format f : kAllFormats) {
    EncodeOptions o;
    o.nm_pattern = {2, 4, 1};
    auto e = encode(f, w.view(), o);
    ASSERT_TRUE(e.ok());
    EXPECT_NEAR(density_of(e.value()), f == Format::dense ? 1.0 : 0.5, 1e-12) << format_name(f);
  }
}

// matmul's own choice: a kernel that needs a workspace (expand_cublas) only when the call gives
// it one large enough for a whole pass; otherwise a kernel of the same format that needs none.
TEST(Dispatch, WorkspaceKernelsOnlyWithEnoughWorkspace) {
  const HostMatrix h = patterns::random(DType::fp16, 300, 200, 0.5, 3);
  for (Format f : {Format::csr, Format::macko, Format::tca_bme}) {
    auto w = encode(f, h.view());
    ASSERT_TRUE(w.ok());
    const kernels::KernelInfo* expand = nullptr;
    for (const auto& k : kernels::all_kernels())
      if (k.format == f && k.workspace) expand = &k;
    ASSERT_NE(expand, nullptr) << format_name(f) << " has no expand_cublas kernel";
    const size_t full = kernels::workspace_need(*expand, w.value()).full;
    EXPECT_EQ(full, size_t(300) * 200 * 2);  // 300 x round_up(200, 8) fp16 elements
    bool picked_expand = false;
    for (int64_t n : {1, 8, 64, 256, 512, 4096}) {
      for (size_t ws : {size_t(0), full - 1}) {
        const kernels::KernelInfo* k = choose_kernel(w.value(), n, ws);
        ASSERT_NE(k, nullptr);
        EXPECT_EQ(k->workspace, nullptr) << k->name << " chosen with " << ws << " bytes, N=" << n;
        EXPECT_EQ(k->format, f);
      }
      const kernels::KernelInfo* k = choose_kernel(w.value(), n, full);
      ASSERT_NE(k, nullptr);
      picked_expand |= k == expand;
    }
    // Beyond every measured N the kernel built for it (expand_cublas up to 2^20) is the fallback.
    EXPECT_TRUE(picked_expand) << format_name(f);
  }
}

// matmul_takes_input_rms answers for the kernel matmul would run when asked for input_rms (no GPU
// needed): dense.gemv and tca_bme.decode everywhere they are chosen, macko.warp_row where it runs
// its row kernels (N = 1..4 on K <= 8192, and N = 5..8 for weights with >= 64 rows per SM: without
// a GPU the rule counts one SM), nothing else.
TEST(Dispatch, InputRmsOnlyWhereTheChosenKernelTakesIt) {
  const HostMatrix h = patterns::random(DType::fp16, 300, 200, 0.5, 4);
  const auto dev = kernels::current_device_info();
  const int sm_count = dev.ok() ? dev.value().sm_count : 1;
  for (Format f : {Format::dense, Format::csr, Format::macko, Format::tca_bme, Format::tiled_csl}) {
    auto w = encode(f, h.view());
    ASSERT_TRUE(w.ok());
    for (int64_t n : {1, 2, 4, 5, 8, 16, 64, 512}) {
      const kernels::KernelInfo* k = choose_kernel(w.value(), n, 0, false, /*input_rms=*/true);
      ASSERT_NE(k, nullptr);
      const std::string name = k->name;
      const bool expected =
          name == "dense.gemv" || name == "tca_bme.decode" ||
          (name == "macko.warp_row" &&
           kernels::macko_warp_row::row_kernel_tokens(n, h.rows(), h.cols(),
                                                      std::get<macko::Matrix>(w.value()).entries(),
                                                      sm_count, -1) > 0);
      EXPECT_EQ(matmul_takes_input_rms(w.value(), n), expected)
          << format_name(f) << " N=" << n << " (" << name << ")";
    }
  }
  // dense.gemv is the dense pick at N = 1 in every table so far; macko at N = 1 is the row kernel.
  auto d = encode(Format::dense, h.view());
  auto m = encode(Format::macko, h.view());
  ASSERT_TRUE(d.ok() && m.ok());
  EXPECT_TRUE(matmul_takes_input_rms(d.value(), 1));
  EXPECT_TRUE(matmul_takes_input_rms(m.value(), 1));
  // The persistent macko kernel (N > 8 here) does not take it.
  EXPECT_FALSE(matmul_takes_input_rms(m.value(), 16));
}

// matmul_takes_output_swiglu answers for the kernel matmul would run with these options (no GPU
// needed): dense.gemv on a weight of an even row count, nothing else. On a dependent launch (the
// engine's) a dense weight runs dense.gemv up to 8 tokens, cuBLAS beyond.
TEST(Dispatch, OutputSwigluOnlyWhereTheChosenKernelTakesIt) {
  MatmulOptions dependent;
  dependent.dependent_launch = true;
  for (int64_t rows : {int64_t(2 * 1408), int64_t(300)}) {
    const HostMatrix h = patterns::random(DType::fp16, rows, 512, 0.5, 5);
    for (Format f : {Format::dense, Format::csr, Format::macko, Format::tca_bme}) {
      auto w = encode(f, h.view());
      ASSERT_TRUE(w.ok());
      for (int64_t n : {1, 2, 4, 8, 9, 16, 64}) {
        const kernels::KernelInfo* k = choose_kernel(w.value(), n, 0, true);
        ASSERT_NE(k, nullptr);
        EXPECT_EQ(matmul_takes_output_swiglu(w.value(), n, dependent),
                  std::string(k->name) == "dense.gemv")
            << format_name(f) << " " << rows << " rows N=" << n << " (" << k->name << ")";
        if (f == Format::dense) {
          EXPECT_EQ(matmul_takes_output_swiglu(w.value(), n, dependent), n <= 8) << "N=" << n;
        }
      }
    }
  }
  const HostMatrix odd = patterns::random(DType::fp16, 301, 64, 0.0, 6);
  auto w = encode(Format::dense, odd.view());
  ASSERT_TRUE(w.ok());
  EXPECT_FALSE(matmul_takes_output_swiglu(w.value(), 1, dependent)) << "301 rows";
}

// What the 7B engine's tca_bme layers run (scripts/rule-table.sh, rule_table.cpp). The engine
// launches every matmul as a dependent launch, and there tca_bme.mma is left out up to 8 tokens
// (the engine at batch 8 ran slower with it than with tca_bme.decode on every layer, on the
// 4096- and 11008-row layers and on o_proj alone: sessions 13, 21, 22), so every layer runs
// tca_bme.decode, with or without input_rms; a plain launch of o_proj (4096 x 4096) takes
// tca_bme.mma at 8 tokens, 1.3x faster alone, and tca_bme.decode at 2..4. tca_bme.mma at 16 and 32 everywhere: tca_bme.wgmma is left out
// at N <= 32 (the engine at batch 32 ran slower with it on o_proj / down_proj, session 21). A
// regenerated table or a rule that changes these fails here. (No weight is passed, so a
// Hopper-only kernel counts as usable even on a machine without a GPU.)
TEST(Dispatch, TcaBmeEngineRunsDecodeUpToEightTokensAndMmaAtThirtyTwo) {
  const int64_t layers[][2] = {{0, 0}, {12288, 4096}, {4096, 4096}, {22016, 4096}, {4096, 11008}};
  auto at = [](double d, const int64_t* l, int64_t n, bool rms) {
    return "density " + std::to_string(d) + " " + std::to_string(l[0]) + "x" +
           std::to_string(l[1]) + " N=" + std::to_string(n) + (rms ? " input_rms" : "");
  };
  for (double d : {0.5, 0.3, 0.1}) {
    for (const auto& l : layers) {
      for (bool rms : {false, true}) {
        for (int64_t n : {1, 2, 3, 4, 5, 8}) {
          auto k = pick_kernel(Format::tca_bme, d, n, l[0], l[1], rms, /*dependent_launch=*/true);
          ASSERT_TRUE(k.ok()) << at(d, l, n, rms);
          EXPECT_EQ(k->kernel.rfind("tca_bme.decode", 0), 0u) << at(d, l, n, rms) << ": "
                                                              << k->reason;
        }
        for (int64_t n : {16, 32}) {
          // At 16 tokens session 46's decode run measured tca_bme.decode within 0.1 % of
          // tca_bme.mma on 4096 x 11008 (39.63 against 39.62 us at 50 %), so there, and in the
          // medians over shapes, the cell may name either; down_proj (4096 x 11008) takes no
          // input_rms in the engine, and the engine's shapes below keep tca_bme.mma.
          if (n == 16 && rms && (l[0] == 0 || l[1] == 11008)) continue;
          for (bool dependent : {false, true}) {
            auto k = pick_kernel(Format::tca_bme, d, n, l[0], l[1], rms, dependent);
            ASSERT_TRUE(k.ok()) << at(d, l, n, rms);
            EXPECT_EQ(k->kernel, "tca_bme.mma") << at(d, l, n, rms) << ": " << k->reason;
          }
        }
      }
    }
    const int64_t o_proj[2] = {4096, 4096};
    auto o = pick_kernel(Format::tca_bme, d, 8, o_proj[0], o_proj[1]);
    ASSERT_TRUE(o.ok());
    EXPECT_EQ(o->kernel, "tca_bme.mma") << at(d, o_proj, 8, false) << ": " << o->reason;
    // At 2..4 tokens tca_bme.decode runs its few-token CUDA-core kernel there (session 23):
    // 1.07-1.41x cuBLAS against tca_bme.mma's 0.91-1.10x, so plain launches take it too.
    for (int64_t n : {2, 3, 4}) {
      auto f = pick_kernel(Format::tca_bme, d, n, o_proj[0], o_proj[1]);
      ASSERT_TRUE(f.ok());
      EXPECT_EQ(f->kernel, "tca_bme.decode") << at(d, o_proj, n, false) << ": " << f->reason;
    }
  }
}

// pick_format judges each format by the kernel matmul would run for the call described: with
// dependent_launch and input_rms (the engine's calls) a sparse pick names exactly the kernel and
// speedup pick_kernel gives for that call, so a kernel left out of dependent launches never makes
// a format win. The 7B's gate_up (22016 x 4096, the 11008 x 4096 cells) at 50 % and 8 tokens is
// the case that mattered: tca_bme.mma (plain launches only) measured 1.03x cuBLAS there, which
// picked tca_bme, while the engine runs tca_bme.decode (0.96x) and its batch-8 decode ran 0.86x
// dense with those picks (session 29); judged by tca_bme.decode the pick was dense. Since
// tca_bme.decode's cluster epilogue by push (session 45) tca_bme.decode itself measures 1.09x
// there (session 46's decode run), and the engine ran qkv / gate_up / down tca_bme with o_proj
// dense at batch 8 1.043x dense (session 46 c1): the pick is tca_bme, by the kernel the engine
// runs.
TEST(Dispatch, FormatPickJudgesTheKernelTheCallGets) {
  const int64_t shapes[][2] = {{0, 0},      {4096, 4096},  {12288, 4096},
                               {22016, 4096}, {4096, 11008}, {1024, 4096}};
  int differs = 0;
  for (double d : {0.5, 0.3, 0.1}) {
    for (const auto& s : shapes) {
      for (int64_t n : {1, 2, 4, 8, 16, 32}) {
        for (bool rms : {false, true}) {
          const std::string at = "density " + std::to_string(d) + " " + std::to_string(s[0]) +
                                 "x" + std::to_string(s[1]) + " N=" + std::to_string(n) +
                                 (rms ? " input_rms" : "");
          const FormatPick dep = pick_format(d, n, false, s[0], s[1], rms, true);
          const FormatPick plain = pick_format(d, n, false, s[0], s[1], rms, false);
          if (dep.format != plain.format || dep.kernel != plain.kernel) ++differs;
          if (dep.format == Format::dense) continue;
          auto k = pick_kernel(dep.format, d, n, s[0], s[1], rms, true);
          ASSERT_TRUE(k.ok()) << at;
          EXPECT_EQ(dep.kernel, k->kernel) << at << ": " << dep.reason;
          EXPECT_DOUBLE_EQ(dep.measured_speedup, k->measured_speedup) << at;
          EXPECT_GT(dep.measured_speedup, 1.0) << at;
          EXPECT_NE(dep.reason.find("dependent launch"), std::string::npos) << dep.reason;
        }
      }
    }
  }
  EXPECT_GT(differs, 0) << "the table leaves kernels out of dependent launches, so some pick must "
                           "change with the launch";
  const FormatPick gate_up = pick_format(0.5, 8, false, 22016, 4096, true, true);
  EXPECT_EQ(gate_up.format, Format::tca_bme) << gate_up.reason;
  EXPECT_EQ(gate_up.kernel, "tca_bme.decode") << gate_up.reason;
}

// The engine's matmuls from tensor names (Llama, Mistral, Qwen2 naming), and their pick: qkv and
// gate_up as calls that normalise X (input_rms), o and down as plain ones, all dependent launches.
TEST(Dispatch, EngineMatmulOfTensorNamesAndItsPick) {
  EXPECT_EQ(engine_matmul_of("model.layers.3.self_attn.q_proj.weight"), EngineMatmul::qkv);
  EXPECT_EQ(engine_matmul_of("model.layers.3.self_attn.k_proj.weight"), EngineMatmul::qkv);
  EXPECT_EQ(engine_matmul_of("model.layers.3.self_attn.v_proj.weight"), EngineMatmul::qkv);
  EXPECT_EQ(engine_matmul_of("model.layers.3.self_attn.o_proj.weight"), EngineMatmul::o);
  EXPECT_EQ(engine_matmul_of("model.layers.0.mlp.gate_proj.weight"), EngineMatmul::gate_up);
  EXPECT_EQ(engine_matmul_of("model.layers.0.mlp.up_proj.weight"), EngineMatmul::gate_up);
  EXPECT_EQ(engine_matmul_of("model.layers.0.mlp.down_proj.weight"), EngineMatmul::down);
  EXPECT_FALSE(engine_matmul_of("lm_head.weight"));
  EXPECT_FALSE(engine_matmul_of("model.layers.0.self_attn.q_proj.bias"));
  EXPECT_FALSE(engine_matmul_of("model.decoder.layers.0.fc1.weight"));
  for (double d : {0.5, 0.3, 0.1}) {
    for (int64_t n : {1, 8}) {
      const struct {
        EngineMatmul m;
        int64_t rows, cols;
        bool normed;
      } cases[] = {{EngineMatmul::qkv, 12288, 4096, true},
                   {EngineMatmul::o, 4096, 4096, false},
                   {EngineMatmul::gate_up, 22016, 4096, true},
                   {EngineMatmul::down, 4096, 11008, false}};
      for (const auto& c : cases) {
        // The stacked layers in two parts (a quarter and three quarters of the rows).
        EngineMatmulLayers layers;
        layers.matmul = c.m;
        layers.add(c.rows / 4, c.cols, d);
        layers.add(c.rows - c.rows / 4, c.cols, d);
        EXPECT_EQ(layers.rows, c.rows);
        const FormatPick got = layers.pick(n);
        const FormatPick want = pick_format(d, n, false, c.rows, c.cols, c.normed, true);
        EXPECT_EQ(got.format, want.format);
        EXPECT_EQ(got.kernel, want.kernel);
      }
    }
  }
  // Densities weigh by size: 4096 rows at 0.1 and 12288 at 0.5 stack to 0.4.
  EngineMatmulLayers qkv;
  qkv.matmul = EngineMatmul::qkv;
  qkv.add(4096, 4096, 0.1);
  qkv.add(12288, 4096, 0.5);
  EXPECT_EQ(qkv.rows, 16384);
  EXPECT_EQ(qkv.cols, 4096);
  EXPECT_DOUBLE_EQ(qkv.nonzeros / qkv.elements, 0.4);
  EXPECT_EQ(qkv.pick(8).kernel, pick_format(0.4, 8, false, 16384, 4096, true, true).kernel);
}

// The shipped table's picks for Llama-2-7B's four engine matmuls are the ones the engine table in
// bench/RESULTS.md ran (`bench-model --synth llama2-7b`, the formats in its brackets). The engine
// has disagreed with kernel-bench picks more than once: session 34's regenerated table moved qkv and
// gate_up at 70 % and batch 8 from tca_bme to macko (faster alone) and the engine ran 8 % slower.
// A table that changes one of these must be measured in the engine before this test changes.
// At batch 2 to 32 the engine cells decide the 7B's layers instead (pick_engine_layer,
// Dispatch.EngineCellsPickWholeLayers); these per-matmul picks still serve other shapes there.
TEST(Dispatch, ShippedTableKeepsTheEngineMeasuredPicks) {
  struct Want {
    int percent;  // sparsity
    int64_t n;
    const char* qkv;
    const char* o;
    const char* gate_up;
    const char* down;
  };
  const Want wants[] = {
      // Session 41 (tca_bme's one-token bulk copies): every matmul tca_bme at 50 % ran 280 t/s
      // against 264 with macko on qkv / gate_up / down; o_proj and down_proj take it by the
      // bytes tie (macko's cells 3.0 / 3.7 % ahead there).
      {50, 1, "tca_bme", "tca_bme", "tca_bme", "tca_bme"},
      // Session 41 measured tca_bme on gate_up at batch 2 / 4 and on qkv / gate_up at batch 8
      // (a table with the streaming kernel's bulk copies picked them) 8-9 % slower than these.
      {50, 2, "macko", "tca_bme", "macko", "tca_bme"},
      // Session 46 (the table with its decode run, tca_bme.decode's push): down_proj at batch 4
      // and qkv / gate_up / down at batch 8 moved from dense to tca_bme. The engine ran the
      // batch-8 mix 1.043x dense (c1, 1617.22 against 1550.91 t/s) and the batch-4 one 1.056x
      // (c3, 832.71 against 788.75); every layer tca_bme ran faster at both (1.066x, 1.107x),
      // and the engine cells decide the 7B's layers there.
      {50, 4, "macko", "tca_bme", "macko", "tca_bme"},
      {50, 8, "tca_bme", "dense", "tca_bme", "tca_bme"},
      {50, 32, "dense", "dense", "dense", "dense"},
      {70, 1, "macko", "tca_bme", "macko", "macko"},
      {70, 2, "macko", "macko", "macko", "macko"},
      {70, 4, "macko", "macko", "macko", "macko"},
      {70, 8, "tca_bme", "dense", "tca_bme", "tca_bme"},
      // Session 44 (the table with session 43's tensor-core run, tca_bme.mma's warp tiles at
      // N = 32): qkv / gate_up tca_bme, o / down dense ran 5153.7 / 5397.6 t/s against dense
      // 5090.1 at 70 / 90 % (c1), and 5091.8 against 5099.8 at 70 % (c2); the same mix ran
      // 0.961x dense at 70 % before the warp tiles.
      {70, 32, "tca_bme", "dense", "tca_bme", "dense"},
      {90, 1, "macko", "macko", "macko", "macko"},
      {90, 2, "macko", "macko", "macko", "macko"},
      {90, 4, "macko", "macko", "macko", "macko"},
      {90, 8, "macko", "macko", "macko", "macko"},
      {90, 32, "tca_bme", "dense", "tca_bme", "dense"},
  };
  for (const Want& w : wants) {
    const char* want[] = {w.qkv, w.o, w.gate_up, w.down};
    const auto layer = test::llama2_7b_layer(1.0 - w.percent / 100.0);
    for (size_t i = 0; i < 4; ++i) {
      const FormatPick got = layer[i].pick(w.n);
      EXPECT_STREQ(format_name(got.format), want[i])
          << w.percent << " %, N = " << w.n << ", matmul " << i << ": " << got.reason;
    }
  }
}

// A layer's four matmuls picked together from the engine cells (whole-model runs of the 7B at
// batch 2, 4, 8 and 32, sessions 42 to 44): the fastest measured assignment that beat dense, the
// fewest weight bytes within 5 % of it; dense where none beat dense; the per-matmul picks where no cell
// covers the layer (another N, shapes far from the 7B's, N:M, a sparsity more than 0.1 from a
// cell's, a matmul missing).
TEST(Dispatch, EngineCellsPickWholeLayers) {
  using test::llama_layer;
  auto formats = [](const std::array<FormatPick, 4>& p) {
    std::string s;
    for (const auto& f : p) s += std::string(format_name(f.format)) + " ";
    return s;
  };
  const struct {
    double sparsity;
    int64_t n;
    const char* want;
  } cases[] = {
      // Batch 2: the per-matmul picks (macko, with tca_bme on o / down at 50 %) ran fastest.
      {0.5, 2, "macko tca_bme macko tca_bme "},
      {0.7, 2, "macko macko macko macko "},
      {0.9, 2, "macko macko macko macko "},
      // Batch 4 (session 46): at 50 % every layer tca_bme (1.107x dense, 7.30 GiB) over the
      // picks' mix with down_proj dense (1.072x, 9.00 GiB); at 70 % every layer tca_bme (1.230x,
      // 4.89 GiB) within 5 % of macko (1.263x, 5.14 GiB): fewer bytes; at 90 % macko (1.788x).
      {0.5, 4, "tca_bme tca_bme tca_bme tca_bme "},
      {0.7, 4, "tca_bme tca_bme tca_bme tca_bme "},
      {0.9, 4, "macko macko macko macko "},
      // Batch 8 (session 46): at 50 % every layer tca_bme (1.066x, 7.30 GiB) over o_proj dense
      // and the rest tca_bme (1.043x, 7.74 GiB); at 70 % every layer tca_bme (1.176x); at 90 %
      // qkv / gate_up macko with o / down tca_bme (1.278x, 2.45 GiB) over every layer macko
      // (1.211x) and, within 5 % of it, every layer tca_bme (1.218x, 2.48 GiB): fewer bytes.
      {0.5, 8, "tca_bme tca_bme tca_bme tca_bme "},
      {0.7, 8, "tca_bme tca_bme tca_bme tca_bme "},
      {0.75, 8, "tca_bme tca_bme tca_bme tca_bme "},
      {0.9, 8, "macko tca_bme macko tca_bme "},
      // Batch 32: dense at 50 %; at 70 % qkv / gate_up tca_bme with o / down dense (1.012x and
      // 0.998x in two runs, 7.23 GiB; every layer tca_bme 0.973x); at 90 % every layer tca_bme
      // (1.058x, 2.48 GiB) within 5 % of that mix (1.060x, 5.56 GiB).
      {0.5, 32, "dense dense dense dense "},
      {0.7, 32, "tca_bme dense tca_bme dense "},
      {0.9, 32, "tca_bme tca_bme tca_bme tca_bme "},
      {0.85, 32, "tca_bme tca_bme tca_bme tca_bme "},
  };
  for (const auto& c : cases) {
    const auto picks = pick_engine_layer(llama_layer(4096, 12288, 11008, 1.0 - c.sparsity), c.n);
    EXPECT_EQ(formats(picks), c.want) << c.sparsity << " N=" << c.n << ": " << picks[0].reason;
    for (const auto& p : picks) {
      EXPECT_EQ(p.reason.rfind("engine cell", 0), 0u) << p.reason;
      EXPECT_FALSE(p.kernel.empty()) << p.reason;
    }
  }
  // No cell: the per-matmul picks, unchanged.
  auto unchanged = [&](const std::array<EngineMatmulLayers, 4>& l, int64_t n, bool nm,
                       const char* what) {
    const auto picks = pick_engine_layer(l, n, nm);
    for (size_t m = 0; m < 4; ++m) {
      const FormatPick alone = l[m].pick(n, nm);
      EXPECT_EQ(picks[m].format, alone.format) << what << " matmul " << m;
      EXPECT_EQ(picks[m].kernel, alone.kernel) << what << " matmul " << m;
      EXPECT_EQ(picks[m].reason, alone.reason) << what << " matmul " << m;
    }
  };
  unchanged(llama_layer(4096, 12288, 11008, 0.1), 1, false, "N = 1");
  unchanged(llama_layer(4096, 12288, 11008, 0.1), 16, false, "N = 16");
  unchanged(llama_layer(4096, 12288, 11008, 0.5), 8, true, "N:M");
  unchanged(llama_layer(8192, 10240, 28672, 0.1), 32, false, "70B shapes");
  unchanged(llama_layer(4096, 12288, 11008, 0.75), 32, false, "0.25 sparsity (0.25 from a cell)");
  // A layer without one of its matmuls (sparrow prune leaving o_proj out): no cell either.
  auto no_o = llama_layer(4096, 12288, 11008, 0.1);
  no_o[size_t(EngineMatmul::o)] = EngineMatmulLayers{};
  no_o[size_t(EngineMatmul::o)].matmul = EngineMatmul::o;
  unchanged(no_o, 32, false, "no o_proj");
}

// Cells measured with dependent launches (make_rule_table.py: a `sparrow bench --dependent-launch`
// file) answer dependent launches where they cover the query, plain cells answer the rest and
// every plain launch; on a dependent launch a sparse format must beat the dense kernel measured
// that way. A table of the test's own (ScopedRuleTable), since the shipped one has no such cells.
// pick_format: formats measured within 5 % of the fastest count as equally fast and the one
// expected to store fewer bytes wins (expected_d_eff: at density 0.5 tca_bme 0.5625, macko 0.625,
// csr 1.0); further apart the faster wins; one that does not beat cuBLAS never does.
TEST(Dispatch, FormatsWithinTheMarginTakeTheFewestBytes) {
  EXPECT_DOUBLE_EQ(expected_d_eff(Format::tca_bme, 0.5), 0.5625);
  EXPECT_DOUBLE_EQ(expected_d_eff(Format::macko, 0.5), 0.625);
  EXPECT_DOUBLE_EQ(expected_d_eff(Format::macko, 0.1), 0.175);
  EXPECT_DOUBLE_EQ(expected_d_eff(Format::dense, 0.5), 1.0);
  struct Case {
    double macko, tca_bme, csr;
    Format want;
  };
  const Case cases[] = {
      {1.60, 1.55, 1.00, Format::tca_bme},  // 3.2 % apart: fewer bytes
      {1.60, 1.52, 1.00, Format::macko},    // 5.3 % (1.52 x 1.05 = 1.596 < 1.60): the faster
      {1.50, 1.60, 1.58, Format::tca_bme},  // tca_bme fastest and smallest
      {1.60, 0.98, 1.59, Format::macko},    // csr within 1 % but larger; tca_bme below cuBLAS
  };
  for (const Case& c : cases) {
    const RuleCell cells[] = {
        {Format::macko, "macko.warp_row", 1, 0.5, 0, 0, c.macko, 4},
        {Format::tca_bme, "tca_bme.decode", 1, 0.5, 0, 0, c.tca_bme, 4},
        {Format::csr, "csr.vector", 1, 0.5, 0, 0, c.csr, 4},
    };
    ScopedRuleTable table(cells, std::size(cells));
    const FormatPick p = pick_format(0.5, 1);
    EXPECT_EQ(p.format, c.want) << c.macko << " / " << c.tca_bme << " / " << c.csr << ": "
                              << p.reason;
    if (p.format == Format::tca_bme && c.tca_bme < c.macko) {
      EXPECT_NE(p.reason.find("fewer bytes"), std::string::npos) << p.reason;
    }
  }
}

TEST(Dispatch, DependentLaunchCellsAnswerDependentLaunches) {
  const RuleCell cells[] = {
      // dense: cuBLAS by definition 1.0, dense.gemv chained dependently 1.05 or 1.15.
      {Format::dense, "dense.gemv", 8, 0.0, 0, 0, 1.05, 4, false, true},
      {Format::dense, "dense.gemv", 8, 0.0, 4096, 4096, 1.15, 1, false, true},
      // tca_bme: plain launches measured mma ahead, dependent launches decode.
      {Format::tca_bme, "tca_bme.decode", 8, 0.5, 0, 0, 1.00, 4},
      {Format::tca_bme, "tca_bme.mma", 8, 0.5, 0, 0, 1.20, 4},
      {Format::tca_bme, "tca_bme.mma", 64, 0.5, 0, 0, 1.30, 4},
      {Format::tca_bme, "tca_bme.decode", 8, 0.5, 0, 0, 1.10, 4, false, true},
      {Format::tca_bme, "tca_bme.mma", 8, 0.5, 0, 0, 0.90, 4, false, true},
  };
  ScopedRuleTable table(cells, std::size(cells));
  auto plain = pick_kernel(Format::tca_bme, 0.5, 8);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->kernel, "tca_bme.mma");
  EXPECT_DOUBLE_EQ(plain->measured_speedup, 1.20);
  for (int64_t n : {8, 16, 5}) {  // within 2x of the dependent cells' N = 8
    auto dep = pick_kernel(Format::tca_bme, 0.5, n, 0, 0, false, /*dependent_launch=*/true);
    ASSERT_TRUE(dep.ok());
    EXPECT_EQ(dep->kernel, "tca_bme.decode") << "N=" << n;
    EXPECT_DOUBLE_EQ(dep->measured_speedup, 1.10) << "N=" << n;
  }
  // N = 64: no dependent cell within 2x, so the plain cells answer.
  auto far = pick_kernel(Format::tca_bme, 0.5, 64, 0, 0, false, true);
  ASSERT_TRUE(far.ok());
  EXPECT_EQ(far->kernel, "tca_bme.mma");
  EXPECT_DOUBLE_EQ(far->measured_speedup, 1.30);
  // Formats: on a plain launch tca_bme beats cuBLAS (1.20 > 1); on a dependent launch its 1.10
  // beats the median dense.gemv (1.05) but not dense.gemv on 4096 x 4096 (1.15).
  EXPECT_EQ(pick_format(0.5, 8).format, Format::tca_bme);
  const FormatPick dep_any = pick_format(0.5, 8, false, 0, 0, false, true);
  EXPECT_EQ(dep_any.format, Format::tca_bme) << dep_any.reason;
  EXPECT_EQ(dep_any.kernel, "tca_bme.decode");
  const FormatPick dep_o = pick_format(0.5, 8, false, 4096, 4096, false, true);
  EXPECT_EQ(dep_o.format, Format::dense) << dep_o.reason;
  EXPECT_EQ(dep_o.kernel, "dense.gemv");
  EXPECT_NE(dep_o.reason.find("dense.gemv (1.15x cuBLAS, dependent launch)"), std::string::npos)
      << dep_o.reason;
}

// A table's dependent-launch cells answer dependent launches of N up to its limit only
// (make_rule_table.py --dependent-up-to): above it the plain-launch cells answer, even where a
// dependent cell lies within 2x of the query's N.
TEST(Dispatch, DependentCellsAnswerUpToTheTablesLimit) {
  const RuleCell cells[] = {
      {Format::tca_bme, "tca_bme.decode", 4, 0.5, 0, 0, 1.00, 4},
      {Format::tca_bme, "tca_bme.mma", 4, 0.5, 0, 0, 1.20, 4},
      {Format::tca_bme, "tca_bme.decode", 4, 0.5, 0, 0, 1.10, 4, false, true},
      {Format::tca_bme, "tca_bme.mma", 4, 0.5, 0, 0, 0.90, 4, false, true},
  };
  {
    ScopedRuleTable table(cells, std::size(cells), /*dependent_max_n=*/4);
    for (int64_t n : {2, 3, 4}) {
      auto dep = pick_kernel(Format::tca_bme, 0.5, n, 0, 0, false, /*dependent_launch=*/true);
      ASSERT_TRUE(dep.ok());
      EXPECT_EQ(dep->kernel, "tca_bme.decode") << "N=" << n;
    }
    for (int64_t n : {5, 8}) {  // within 2x of the dependent cells, but above the limit
      auto dep = pick_kernel(Format::tca_bme, 0.5, n, 0, 0, false, true);
      ASSERT_TRUE(dep.ok());
      EXPECT_EQ(dep->kernel, "tca_bme.mma") << "N=" << n;
      EXPECT_DOUBLE_EQ(dep->measured_speedup, 1.20) << "N=" << n;
    }
  }
  {
    ScopedRuleTable table(cells, std::size(cells));  // no limit: N = 8 reads the N = 4 cells
    auto dep = pick_kernel(Format::tca_bme, 0.5, 8, 0, 0, false, true);
    ASSERT_TRUE(dep.ok());
    EXPECT_EQ(dep->kernel, "tca_bme.decode");
  }
  // The shipped table (scripts/rule-table.sh): dependent cells up to 2 tokens, where the 7B engine
  // agreed with them (session 30). o_proj (4096 x 4096) at 50 % and one token: tca_bme.decode,
  // measured within 5 % of macko's row kernel (10.2 vs 9.9 us, session 41) and ahead of dense.gemv
  // (12.5) with dependent launches, and storing fewer bytes (pick_format's tie), while plain
  // launches keep macko's row kernel.
  const FormatPick o_dep = pick_format(0.5, 1, false, 4096, 4096, false, true);
  EXPECT_EQ(o_dep.format, Format::tca_bme) << o_dep.reason;
  EXPECT_EQ(o_dep.kernel, "tca_bme.decode") << o_dep.reason;
  EXPECT_EQ(pick_format(0.5, 1, false, 4096, 4096, false, false).kernel, "macko.warp_row");
  // 32 tokens at 90 % on qkv (12288 x 4096): above the limit a dependent launch reads the plain
  // cells, not the dependent bench's (which put tca_bme.mma 1.12x ahead of cuBLAS when the engine
  // ran it slower than dense, session 30): since session 43's tensor-core run (tca_bme.mma's warp
  // tiles) they say tca_bme.mma too, which the engine ran 1.06x dense there (session 44).
  const FormatPick qkv32 = pick_format(0.1, 32, false, 12288, 4096, true, true);
  EXPECT_EQ(qkv32.format, Format::tca_bme) << qkv32.reason;
  EXPECT_EQ(qkv32.kernel, "tca_bme.mma") << qkv32.reason;
}

// A caller that folds a norm keeps a kernel that takes input_rms unless another measured more
// than 1.1x faster; without input_rms the fastest runs. Cells where tca_bme.mma (no input_rms,
// plain launches only) measured 1.06x tca_bme.decode's speedup at 8 tokens: within the margin;
// matmul and matmul_takes_input_rms agree with the choice.
TEST(Dispatch, FoldedNormKeepsAnInputRmsKernelWithinTheMargin) {
  const RuleCell cells[] = {
      {Format::tca_bme, "tca_bme.decode", 8, 0.5, 0, 0, 1.00, 4},
      {Format::tca_bme, "tca_bme.mma", 8, 0.5, 0, 0, 1.06, 4, /*plain_only=*/true},
  };
  ScopedRuleTable table(cells, std::size(cells));
  auto w = encode(Format::tca_bme, patterns::random(DType::fp16, 300, 200, 0.5, 8).view());
  ASSERT_TRUE(w.ok());
  const kernels::KernelInfo* plain = choose_kernel(w.value(), 8, 0, false, false);
  const kernels::KernelInfo* folded = choose_kernel(w.value(), 8, 0, false, true);
  ASSERT_NE(plain, nullptr);
  ASSERT_NE(folded, nullptr);
  EXPECT_STREQ(plain->name, "tca_bme.mma");
  EXPECT_STREQ(folded->name, "tca_bme.decode");
  // A dependent launch (the engine's) leaves tca_bme.mma out up to 8 tokens either way.
  EXPECT_STREQ(choose_kernel(w.value(), 8, 0, true, false)->name, "tca_bme.decode");
  EXPECT_TRUE(matmul_takes_input_rms(w.value(), 8));
  auto p = pick_kernel(Format::tca_bme, 0.5, 8);
  auto r = pick_kernel(Format::tca_bme, 0.5, 8, 0, 0, true);
  ASSERT_TRUE(p.ok() && r.ok());
  EXPECT_LT(p->measured_speedup, r->measured_speedup * 1.1);  // inside the margin
  EXPECT_GT(p->measured_speedup, r->measured_speedup);        // but faster alone
  EXPECT_NE(r->reason.find("input_rms"), std::string::npos) << r->reason;
}

// A kernel for another GPU architecture (tca_bme.wgmma: compute capability 9.0 only) is never
// what matmul runs where it is not available, whatever the table measured; on a machine without
// a GPU no such kernel is available.
TEST(Dispatch, KernelsForAnotherGpuAreNeverChosenWhereTheyCannotRun) {
  const kernels::KernelInfo* wgmma = kernels::find_kernel("tca_bme.wgmma");
  ASSERT_NE(wgmma, nullptr);
  ASSERT_NE(wgmma->available, nullptr);
  for (double sp : {0.5, 0.7, 0.9}) {
    auto w = encode(Format::tca_bme, patterns::random(DType::fp16, 300, 200, sp, 6).view());
    ASSERT_TRUE(w.ok());
    for (int64_t n : {1, 8, 16, 32, 64, 128, 256, 512, 4096}) {
      for (size_t ws : {size_t(0), size_t(1) << 30}) {
        const kernels::KernelInfo* k = choose_kernel(w.value(), n, ws);
        ASSERT_NE(k, nullptr);
        EXPECT_TRUE(kernels::available_here(*k)) << k->name << " chosen at N=" << n;
      }
    }
  }
}
