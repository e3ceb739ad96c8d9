// macko.swiglu_mlp vs a CPU reference in double that rounds where the engine's separate kernels
// round (g and u to the dtype after the matmul, h after silu(g) * u): odd and Llama shapes, fp16
// and bf16, with and without the folded norm, down rows that fit the shared-memory stage and rows
// that spill past it, empty rows, uneven (magnitude) rows, repeated calls (the grid barrier's
// state carries over) and graph replay. h starts poisoned with NaN.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "gpu/decode_kernel_checks.hpp"
#include "gpu/gpu_test_util.hpp"
#include "kernels/device_info.hpp"
#include "kernels/macko/swiglu_mlp.hpp"

using namespace sparrow;
namespace mlp = sparrow::kernels::macko_swiglu_mlp;

namespace {

bool have_sm90() {
  auto dev = kernels::current_device_info();
  return dev.ok() && dev.value().cc_major >= 9;
}

double round_to(DType t, double v) {
  HostMatrix tmp(t, 1, 1);
  tmp.set(0, 0, float(v));
  return tmp.at(0, 0);
}

// x + down · (silu(g) * u), [g; u] = [gate; up] · norm(input), rounded like the engine's kernels.
std::vector<double> reference(const HostMatrix& gate, const HostMatrix& up,
                              const HostMatrix& down, const HostMatrix& input,
                              const HostMatrix& x, bool input_rms, float eps) {
  const DType t = gate.dtype();
  const int64_t hidden = down.rows(), inter = down.cols();
  double scale = 1.0;
  if (input_rms) {
    double ss = 0;
    for (int64_t j = 0; j < hidden; ++j) ss += double(input.at(0, j)) * input.at(0, j);
    scale = 1.0 / std::sqrt(ss / double(hidden) + eps);
  }
  std::vector<double> h(size_t(inter));
  for (int64_t i = 0; i < inter; ++i) {
    double g = 0, u = 0;
    for (int64_t j = 0; j < hidden; ++j) {
      g += double(gate.at(i, j)) * input.at(0, j);
      u += double(up.at(i, j)) * input.at(0, j);
    }
    g = round_to(t, g * scale);
    u = round_to(t, u * scale);
    h[size_t(i)] = round_to(t, g / (1.0 + std::exp(-g)) * u);
  }
  std::vector<double> y(size_t(hidden));
  for (int64_t r = 0; r < hidden; ++r) {
    double acc = x.at(0, r);
    for (int64_t i = 0; i < inter; ++i) acc += double(down.at(r, i)) * h[size_t(i)];
    y[size_t(r)] = acc;
  }
  return y;
}

struct Case {
  int64_t hidden, inter;
  double sparsity;
  DType dtype;
  const char* pattern;
  bool input_rms;
  bool empty_rows = false;
};

std::string name_of(const Case& c) {
  return std::to_string(c.hidden) + "/" + std::to_string(c.inter) + " s=" +
         std::to_string(c.sparsity) + " " + dtype_name(c.dtype) + " " + c.pattern +
         (c.input_rms ? " rms" : "") + (c.empty_rows ? " empty rows" : "");
}

// Runs the case `calls` times (each call's x the previous call's output), plain launches or one
// graph replayed; checks each result against the reference.
void check_case(const Case& c, uint64_t seed, int calls, bool graph) {
  SCOPED_TRACE(name_of(c));
  HostMatrix gate = test::make_weight(c.dtype, c.pattern, c.inter, c.hidden, c.sparsity, seed);
  HostMatrix up = test::make_weight(c.dtype, c.pattern, c.inter, c.hidden, c.sparsity, seed + 1);
  HostMatrix down = test::make_weight(c.dtype, c.pattern, c.hidden, c.inter, c.sparsity, seed + 2);
  if (c.empty_rows) {
    for (int64_t r : {int64_t(0), c.inter / 2, c.inter - 1})
      for (int64_t j = 0; j < c.hidden; ++j) gate.set(r, j, 0.f), up.set(r, j, 0.f);
    for (int64_t r : {int64_t(1), c.hidden - 1})
      for (int64_t i = 0; i < c.inter; ++i) down.set(r, i, 0.f);
  }
  const Weight wg = test::encode_or_fail(Format::macko, gate);
  const Weight wu = test::encode_or_fail(Format::macko, up);
  auto gu_host = concat_rows({&wg, &wu});
  ASSERT_TRUE(gu_host.ok()) << gu_host.status().to_string();
  auto gu = to_device(gu_host.value());
  auto dn = to_device(test::encode_or_fail(Format::macko, down));
  ASSERT_TRUE(gu.ok() && dn.ok());

  HostMatrix x = patterns::dense_random(c.dtype, 1, c.hidden, seed + 3);
  HostMatrix other = patterns::dense_random(c.dtype, 1, c.hidden, seed + 4);
  test::DeviceMatrix dx = test::DeviceMatrix::upload(x);
  test::DeviceMatrix dother = test::DeviceMatrix::upload(other);
  test::DeviceMatrix dh = test::DeviceMatrix::alloc(c.dtype, 1, c.inter);
  dh.poison();
  uint32_t* barrier = nullptr;
  ASSERT_EQ(cudaMalloc(&barrier, mlp::kBarrierWords * 4), cudaSuccess);
  cudaMemset(barrier, 0, mlp::kBarrierWords * 4);

  mlp::Call call;
  call.gate_up = &std::get<macko::Matrix>(gu.value());
  call.down = &std::get<macko::Matrix>(dn.value());
  call.input = c.input_rms ? dx.view.data : dother.view.data;
  call.x = dx.view.data;
  call.h = dh.view.data;
  call.barrier = barrier;
  call.input_rms = c.input_rms;
  call.rms_eps = test::kRmsEps;
  call.dependent_launch = true;

  cudaStream_t s;
  cudaStreamCreate(&s);
  cudaGraphExec_t exec = nullptr;
  if (graph) {
    cudaGraph_t g;
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    const Status st = mlp::run(call, s);
    ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
    ASSERT_TRUE(st.ok()) << st.to_string();
    ASSERT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
    cudaGraphDestroy(g);
  }
  HostMatrix expect_x = x;
  for (int i = 0; i < calls; ++i) {
    const HostMatrix& input = c.input_rms ? expect_x : other;
    const std::vector<double> ref = reference(gate, up, down, input, expect_x, c.input_rms,
                                              test::kRmsEps);
    if (graph) {
      ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    } else {
      const Status st = mlp::run(call, s);
      ASSERT_TRUE(st.ok()) << st.to_string();
    }
    const cudaError_t e = cudaStreamSynchronize(s);
    ASSERT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
    expect_x = dx.download();
    const double err = reference::normalized_error(expect_x.view(), ref);
    EXPECT_LE(err, test::tolerance(c.dtype)) << "call " << i << (graph ? " (graph)" : "");
  }
  if (exec) cudaGraphExecDestroy(exec);
  cudaStreamDestroy(s);
  cudaFree(barrier);
}

}  // namespace

TEST(MackoSwigluMlp, OddShapes) {
  if (!have_sm90()) GTEST_SKIP() << "macko.swiglu_mlp needs sm_90";
  check_case({200, 333, 0.5, DType::fp16, "random", true}, 11, 2, false);
  check_case({77, 1001, 0.9, DType::bf16, "random", false}, 21, 1, false);
  check_case({1000, 2750, 0.7, DType::fp16, "random", false, true}, 31, 1, false);
  check_case({1, 1, 0.0, DType::fp16, "random", true}, 41, 1, false);
  check_case({3000, 17, 0.3, DType::bf16, "random", true, true}, 51, 1, false);
}

// Llama-2-7B's MLP: at 90 % a block's down rows fit its stage; at 50 % most spill past it.
TEST(MackoSwigluMlp, Llama7bShapes) {
  if (!have_sm90()) GTEST_SKIP() << "macko.swiglu_mlp needs sm_90";
  check_case({4096, 11008, 0.9, DType::fp16, "random", true}, 61, 3, false);
  check_case({4096, 11008, 0.5, DType::bf16, "random", true}, 71, 1, false);
  check_case({4096, 11008, 0.7, DType::fp16, "magnitude", true}, 81, 1, false);
}

TEST(MackoSwigluMlp, GraphReplay) {
  if (!have_sm90()) GTEST_SKIP() << "macko.swiglu_mlp needs sm_90";
  check_case({1024, 2816, 0.8, DType::bf16, "random", true}, 91, 3, true);
}

TEST(MackoSwigluMlp, RefusesWhatItCannotRun) {
  const Weight a = test::encode_or_fail(Format::macko, patterns::random(DType::fp16, 64, 32, 0.5, 1));
  const Weight b = test::encode_or_fail(Format::macko, patterns::random(DType::fp16, 32, 32, 0.5, 2));
  const Weight c = test::encode_or_fail(Format::macko, patterns::random(DType::bf16, 32, 32, 0.5, 3));
  const auto& ma = std::get<macko::Matrix>(a);
  const auto& mb = std::get<macko::Matrix>(b);
  const auto& mc = std::get<macko::Matrix>(c);
  EXPECT_TRUE(mlp::check(ma, mb).ok());             // gate_up (64, 32), down (32, 32)
  EXPECT_FALSE(mlp::check(mb, mb).ok());            // gate_up must have 2 x inter rows
  EXPECT_FALSE(mlp::check(ma, mc).ok());            // dtypes differ
  mlp::Call call;
  call.gate_up = &ma;
  call.down = &mb;
  EXPECT_EQ(mlp::run(call, nullptr).code(), Code::invalid_argument);  // null pointers
}
