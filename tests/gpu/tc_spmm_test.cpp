// Tensor-core SpMM kernels (tca_bme.mma, tca_bme.wgmma, tca_bme.wgmma_smem, tiled_csl.mma) vs
// the CPU reference in double: fp16 and bf16 (tolerances in gpu_test_util.hpp: 1e-3 and 8e-3
// normalised), odd shapes, every N from 1 to 70 plus the bucket edges, sparsity from fully dense
// tiles to nearly empty, groups of very different sizes, bias / accumulate, CUDA-graph replay
// and run-to-run determinism (split-K reduces in a fixed order).
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "gpu/gpu_test_util.hpp"

using namespace sparrow;

namespace {

struct TcKernel {
  const char* name;
  Format format;
};
// tca_bme.wgmma and tca_bme.wgmma_smem run on compute capability 9.0 only: elsewhere their cases
// print a note and pass.
constexpr TcKernel kTcKernels[] = {{"tca_bme.mma", Format::tca_bme},
                                   {"tca_bme.wgmma", Format::tca_bme},
                                   {"tca_bme.wgmma_smem", Format::tca_bme},
                                   {"tiled_csl.mma", Format::tiled_csl}};
constexpr DType kTypes[] = {DType::fp16, DType::bf16};

// The encoded weight, or nullopt (with a printed note) while the format is not implemented.
std::optional<Weight> encoded(Format f, const HostMatrix& w) {
  auto e = encode(f, w.view());
  if (!e.ok()) {
    ADD_FAILURE() << format_name(f) << " encode failed: " << e.status().to_string();
    return std::nullopt;
  }
  return std::move(e).value();
}

const kernels::KernelInfo& kernel(const TcKernel& k) {
  const kernels::KernelInfo* info = kernels::find_kernel(k.name);
  EXPECT_NE(info, nullptr) << k.name << " is not registered";
  return *info;
}

// Whether the kernel runs on this GPU; prints a note once per kernel when it does not.
bool runs_here(const TcKernel& k) {
  if (kernels::available_here(kernel(k))) return true;
  static std::set<std::string> noted;
  if (noted.insert(k.name).second) {
    std::printf("[note] %s does not run on this GPU: its cases are skipped\n", k.name);
  }
  return false;
}

// Checks one (kernel, W, N list) combination; the seed changes per N so X is always fresh.
void check_all_n(const TcKernel& k, const HostMatrix& w, const std::vector<int64_t>& ns,
                 uint64_t seed, bool bias = false, bool accumulate = false) {
  if (!runs_here(k)) return;
  auto weight = encoded(k.format, w);
  if (!weight) return;
  for (int64_t n : ns) {
    EXPECT_TRUE(test::kernel_ok(
        test::check_kernel(kernel(k), *weight, n, seed + uint64_t(n), bias, accumulate),
        w.dtype()))
        << k.name << " " << dtype_name(w.dtype()) << " M=" << w.rows() << " K=" << w.cols()
        << " N=" << n << (bias ? " bias" : "") << (accumulate ? " accumulate" : "");
  }
}

std::vector<int64_t> range(int64_t lo, int64_t hi) {
  std::vector<int64_t> v;
  for (int64_t i = lo; i <= hi; ++i) v.push_back(i);
  return v;
}

}  // namespace

TEST(TcSpmm, EveryNFrom1To70AndBucketEdges) {
  std::vector<int64_t> ns = range(1, 70);
  for (int64_t n : {127, 128, 129, 255, 256, 513}) ns.push_back(n);
  for (const auto& k : kTcKernels) {
    for (DType t : kTypes) check_all_n(k, patterns::random(t, 130, 70, 0.5, 11), ns, 100);
  }
}

TEST(TcSpmm, OddShapes) {
  struct S { int64_t m, k; };
  for (DType t : kTypes) {
    const HostMatrix large = patterns::random(t, 4097, 4095, 0.5, 22);  // once for all kernels
    for (const auto& k : kTcKernels) {
      for (S s : {S{1, 1}, S{7, 13}, S{130, 70}, S{200, 1000}, S{64, 64}, S{128, 64}, S{65, 129}}) {
        check_all_n(k, patterns::random(t, s.m, s.k, 0.5, 21 + s.m), {1, 2, 8, 9, 17, 33, 64, 65},
                    200);
      }
      check_all_n(k, large, {1, 8, 17, 64, 129}, 300);
    }
  }
}

TEST(TcSpmm, SparsityFromDenseTilesToNearlyEmpty) {
  for (const auto& k : kTcKernels) {
    for (DType t : kTypes) {
      // 0: every tile fully dense (8192 tiled_csl entries per tile, 4096 tca_bme values per
      // group); 0.999: most tiles empty.
      for (double sp : {0.0, 0.3, 0.5, 0.7, 0.9, 0.999}) {
        check_all_n(k, patterns::random(t, 300, 1000, sp, 31), {8, 33, 128}, 400);
      }
      check_all_n(k, patterns::magnitude(t, 512, 768, 0.6, 32), {8, 40, 200}, 500);
      check_all_n(k, patterns::block(t, 256, 512, 16, 16, 0.5, 33), {16, 64}, 510);
    }
  }
}

// tca_bme.mma runs 17..32 columns of weights below density 0.34 with 2 x 2 warp tiles (the warps
// sum their partial tiles at the end) and denser ones with a tile row per warp: both sides of the
// rule at every N of that bucket, odd shapes, with bias and accumulate.
TEST(TcSpmm, WarpColumnsAtLowDensity) {
  const auto ns = range(17, 32);
  for (const auto& k : kTcKernels) {
    for (DType t : kTypes) {
      for (double sp : {0.7, 0.9, 0.6}) {
        check_all_n(k, patterns::random(t, 300, 1000, sp, 41), ns, 540);
        check_all_n(k, patterns::random(t, 65, 129, sp, 42), {17, 24, 32}, 550, true, true);
      }
      check_all_n(k, patterns::magnitude(t, 257, 515, 0.8, 43), {20, 32}, 560);
    }
  }
}

// tca_bme.mma sizes its value stages by the weight's largest group (max_group_values): one dense
// group among groups at 10 % must be copied whole, and an all-zero weight has no values at all.
HostMatrix one_dense_group(DType t, uint64_t seed) {
  HostMatrix w = patterns::random(t, 200, 300, 0.9, seed);
  const HostMatrix d = patterns::dense_random(t, 64, 64, seed + 1);
  for (int64_t r = 0; r < 64; ++r)
    for (int64_t c = 0; c < 64; ++c) w.set(64 + r, 128 + c, d.at(r, c));
  return w;
}

TEST(TcSpmm, GroupsOfVeryDifferentSizes) {
  for (const auto& k : kTcKernels) {
    for (DType t : kTypes) {
      check_all_n(k, one_dense_group(t, 35), {1, 8, 16, 32, 64, 65, 129}, 520);
      check_all_n(k, HostMatrix(t, 130, 200), {8, 33}, 530);
    }
  }
}

// A tca_bme weight whose max_group_values was never derived (0 with non-zeros) or is out of range
// is refused: its stages would be too small for its groups.
TEST(TcSpmm, TcaBmeRefusesUnderivedMaxGroupValues) {
  auto e = encode(Format::tca_bme, patterns::random(DType::fp16, 100, 150, 0.5, 36).view());
  ASSERT_TRUE(e.ok());
  test::DeviceMatrix x = test::DeviceMatrix::alloc(DType::fp16, 16, 150);
  test::DeviceMatrix y = test::DeviceMatrix::alloc(DType::fp16, 16, 100);
  for (int64_t wrong : {int64_t(0), int64_t(-8), int64_t(4104)}) {
    Weight w = e.value();
    std::get<tca_bme::Matrix>(w).max_group_values = wrong;
    auto dw = to_device(w);
    ASSERT_TRUE(dw.ok());
    for (const char* name : {"tca_bme.mma", "tca_bme.wgmma", "tca_bme.wgmma_smem"}) {
      Status s = kernels::find_kernel(name)->run({dw.value(), x.view, y.view, {}}, nullptr);
      EXPECT_EQ(s.code(), Code::invalid_argument) << name << " " << wrong << ": " << s.to_string();
      EXPECT_NE(s.message().find("max_group_values"), std::string::npos) << s.message();
    }
  }
}

TEST(TcSpmm, BiasAndAccumulate) {
  for (const auto& k : kTcKernels) {
    for (DType t : kTypes) {
      HostMatrix w = patterns::random(t, 200, 1000, 0.7, 41);
      check_all_n(k, w, {3, 8, 64, 100}, 600, /*bias=*/true, /*accumulate=*/false);
      check_all_n(k, w, {3, 8, 64, 100}, 700, /*bias=*/false, /*accumulate=*/true);
      check_all_n(k, w, {5, 32}, 800, /*bias=*/true, /*accumulate=*/true);
    }
  }
}

TEST(TcSpmm, LlamaShape) {
  // Generated once for all kernels: the magnitude pattern takes seconds of host time at this size.
  const HostMatrix magnitude = patterns::magnitude(DType::fp16, 11008, 4096, 0.5, 51);
  const HostMatrix random = patterns::random(DType::bf16, 11008, 4096, 0.7, 52);
  for (const auto& k : kTcKernels) {
    check_all_n(k, magnitude, {16, 128}, 900);
    check_all_n(k, random, {32}, 950);
  }
}

// A strided, odd-aligned X (ld not a multiple of 8) takes the non-cp.async X path.
TEST(TcSpmm, StridedInputs) {
  for (const auto& k : kTcKernels) {
    if (!runs_here(k)) continue;
    HostMatrix wh = patterns::random(DType::fp16, 150, 256, 0.5, 61);
    auto w = encoded(k.format, wh);
    if (!w) continue;
    auto dw = to_device(*w);
    ASSERT_TRUE(dw.ok());
    const int64_t n = 19;
    HostMatrix x = patterns::dense_random(DType::fp16, n, 256, 62);
    test::DeviceMatrix dx = test::DeviceMatrix::upload(x, 259);
    test::DeviceMatrix dy = test::DeviceMatrix::alloc(DType::fp16, n, 150, 153);
    dy.poison();
    ASSERT_TRUE(kernel(k).run(kernels::Problem{dw.value(), dx.view, dy.view, {}}, nullptr).ok());
    CUDA_OK(cudaDeviceSynchronize());
    auto ref = reference::matmul_f64(*w, x.view());
    ASSERT_TRUE(ref.ok());
    HostMatrix y = dy.download();
    EXPECT_LE(reference::normalized_error(y.view(), ref.value()), test::tolerance(DType::fp16))
        << k.name;
  }
}

// Graph replay gives the same bits as a direct launch, and two direct launches agree bit for bit
// (the split-K reduction order is fixed).
TEST(TcSpmm, GraphReplayAndDeterminism) {
  for (const auto& k : kTcKernels) {
    if (!runs_here(k)) continue;
    for (int64_t n : {8, 64, 200}) {
      HostMatrix wh = patterns::random(DType::fp16, 1000, 4096, 0.5, 71);
      auto w = encoded(k.format, wh);
      if (!w) continue;
      auto dw = to_device(*w);
      ASSERT_TRUE(dw.ok());
      HostMatrix x = patterns::dense_random(DType::fp16, n, 4096, 72);
      test::DeviceMatrix dx = test::DeviceMatrix::upload(x);
      test::DeviceMatrix y1 = test::DeviceMatrix::alloc(DType::fp16, n, 1000);
      test::DeviceMatrix y2 = test::DeviceMatrix::alloc(DType::fp16, n, 1000);
      test::DeviceMatrix y3 = test::DeviceMatrix::alloc(DType::fp16, n, 1000);
      cudaStream_t s;
      CUDA_OK(cudaStreamCreate(&s));
      y1.poison();
      y2.poison();
      y3.poison();
      ASSERT_TRUE(kernel(k).run({dw.value(), dx.view, y1.view, {}}, s).ok());
      ASSERT_TRUE(kernel(k).run({dw.value(), dx.view, y2.view, {}}, s).ok());
      cudaGraph_t g;
      CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
      Status st = kernel(k).run({dw.value(), dx.view, y3.view, {}}, s);
      CUDA_OK(cudaStreamEndCapture(s, &g));
      ASSERT_TRUE(st.ok()) << st.to_string();
      cudaGraphExec_t ge;
      CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
      CUDA_OK(cudaGraphLaunch(ge, s));
      CUDA_OK(cudaGraphLaunch(ge, s));
      CUDA_OK(cudaStreamSynchronize(s));
      HostMatrix h1 = y1.download(), h2 = y2.download(), h3 = y3.download();
      EXPECT_EQ(std::memcmp(h1.data(), h2.data(), h1.bytes()), 0) << k.name << " N=" << n;
      EXPECT_EQ(std::memcmp(h1.data(), h3.data(), h1.bytes()), 0) << k.name << " N=" << n;
      auto ref = reference::matmul_f64(*w, x.view());
      ASSERT_TRUE(ref.ok());
      EXPECT_LE(reference::normalized_error(h3.view(), ref.value()), 1e-3) << k.name;
      cudaGraphExecDestroy(ge);
      cudaGraphDestroy(g);
      cudaStreamDestroy(s);
    }
  }
}

TEST(TcSpmm, RejectsWrongFormatAndDtype) {
  auto dense = encode(Format::dense, patterns::random(DType::fp16, 64, 64, 0.5, 81).view());
  ASSERT_TRUE(dense.ok());
  auto dw = to_device(dense.value());
  ASSERT_TRUE(dw.ok());
  test::DeviceMatrix x = test::DeviceMatrix::alloc(DType::fp16, 4, 64);
  test::DeviceMatrix y = test::DeviceMatrix::alloc(DType::fp16, 4, 64);
  for (const auto& k : kTcKernels) {
    Status s = kernel(k).run({dw.value(), x.view, y.view, {}}, nullptr);
    EXPECT_EQ(s.code(), Code::invalid_argument) << k.name;
  }
}

// Small and quick, for compute-sanitizer (memcheck, racecheck): every config (N buckets), split-K
// (K = 1000: 16 k steps; K = 2100: eight splits), residues in M, N and K.
TEST(TcSpmmSanitizer, Subset) {
  for (const auto& k : kTcKernels) {
    for (DType t : kTypes) {
      check_all_n(k, patterns::random(t, 130, 1000, 0.5, 91), {5, 16, 30, 64, 130}, 1000);
      check_all_n(k, patterns::random(t, 70, 61, 0.0, 92), {9}, 1100);
      check_all_n(k, one_dense_group(t, 93), {8, 32}, 1200);
      // Eight splits of a one-row tile (K = 2100: 33 k steps, 2 group rows): tca_bme.mma's
      // pushed reduction leaves blocks 4..7 without quads of their own.
      check_all_n(k, patterns::random(t, 70, 2100, 0.5, 94), {1, 3}, 1300);
    }
  }
}
