// The checks every decode kernel (dense.gemv, csr.vector, macko.warp_row, tca_bme.decode) goes
// through; each <fmt>_kernel_test.cpp calls them with its kernel name and format. All compare
// with the CPU reference in double (tolerances in gpu_test_util.hpp: fp16 1e-3, bf16 8e-3, fp32
// 1e-3 normalised) on fresh random inputs, outputs poisoned with NaN first.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "gpu/gpu_test_util.hpp"

namespace sparrow::test {

// Kernels only the tests know: a registered kernel with one of its internal choices forced (e.g.
// tca_bme_kernel_test.cpp's tca_bme.decode with its CUDA-core strip kernels always / never), so
// the standard checks cover every path whatever the automatic choice takes on a shape.
inline std::vector<kernels::KernelInfo>& test_kernels() {
  static std::vector<kernels::KernelInfo> v;
  return v;
}

// Adds `name` to test_kernels(): registered kernel `base` with its run replaced by `run` (one of
// its internal choices forced). False when `base` is not registered (kernel_named(name) then fails
// the tests that ask for it).
inline bool register_test_variant(const char* base, const char* name, kernels::RunFn run) {
  const kernels::KernelInfo* k = kernels::find_kernel(base);
  if (k == nullptr) return false;
  kernels::KernelInfo v = *k;
  v.name = name;
  v.run = run;
  test_kernels().push_back(v);
  return true;
}

inline const kernels::KernelInfo& kernel_named(const char* name) {
  const kernels::KernelInfo* k = kernels::find_kernel(name);
  for (const auto& t : test_kernels()) {
    if (k == nullptr && std::strcmp(t.name, name) == 0) k = &t;
  }
  if (k == nullptr) ADD_FAILURE() << "kernel " << name << " is not registered";
  static const kernels::KernelInfo none{"none", Format::dense, 1, 1, nullptr};
  return k ? *k : none;
}

inline Weight encode_or_fail(Format f, const HostMatrix& w, const EncodeOptions& eo = {}) {
  auto r = encode(f, w.view(), eo);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? std::move(r).value() : Weight{};
}

inline HostMatrix make_weight(DType t, const char* pattern, int64_t m, int64_t k, double s,
                              uint64_t seed) {
  if (std::string(pattern) == "magnitude") return patterns::magnitude(t, m, k, s, seed);
  return patterns::random(t, m, k, s, seed);
}

// Every N in `ns` on one encoded weight: plain, then with bias, then accumulating.
inline void expect_all_n(const kernels::KernelInfo& k, const Weight& w, const std::vector<int>& ns,
                         const std::string& what, uint64_t seed) {
  const DType t = shape_of(w).dtype;
  for (int n : ns) {
    EXPECT_TRUE(kernel_ok(check_kernel(k, w, n, seed + n), t)) << what << " N=" << n;
  }
  EXPECT_TRUE(kernel_ok(check_kernel(k, w, ns.back(), seed + 101, /*bias=*/true), t))
      << what << " bias N=" << ns.back();
  EXPECT_TRUE(kernel_ok(check_kernel(k, w, ns.front(), seed + 102, true, /*accumulate=*/true), t))
      << what << " bias+accumulate N=" << ns.front();
}

inline std::vector<int> n_1_to_17_and_33() {
  std::vector<int> ns;
  for (int n = 1; n <= 17; ++n) ns.push_back(n);
  ns.push_back(33);
  return ns;
}

// Small shapes x sparsities x patterns, every N.
inline void check_small_sweep(const char* name, Format f, DType t, const EncodeOptions& eo = {}) {
  const auto& k = kernel_named(name);
  if (!k.run) return;
  const std::pair<int64_t, int64_t> shapes[] = {{1, 1}, {7, 13}, {130, 70}};
  uint64_t seed = 1000;
  for (auto [m, kk] : shapes)
    for (double s : {0.0, 0.5, 0.9, 0.999})
      for (const char* pat : {"random", "magnitude"}) {
        const Weight w = encode_or_fail(f, make_weight(t, pat, m, kk, s, seed), eo);
        const std::string what = std::string(name) + " " + dtype_name(t) + " " + pat + " " +
                                 std::to_string(m) + "x" + std::to_string(kk) + " s=" +
                                 std::to_string(s);
        expect_all_n(k, w, n_1_to_17_and_33(), what, seed);
        seed += 200;
      }
}

// 4097 x 4095 (nothing a multiple of anything) at a few N and sparsities.
inline void check_large(const char* name, Format f, DType t, const EncodeOptions& eo = {}) {
  const auto& k = kernel_named(name);
  if (!k.run) return;
  uint64_t seed = 5000;
  // The reference for 4097 x 4095 costs ~0.1 s per token, so the dtypes share the sparsities.
  const std::vector<double> sparsities =
      t == DType::fp16 ? std::vector<double>{0.0, 0.5, 0.999} : std::vector<double>{0.5, 0.9};
  for (double s : sparsities) {
    const char* pat = s == 0.9 ? "magnitude" : "random";
    const Weight w = encode_or_fail(f, make_weight(t, pat, 4097, 4095, s, seed), eo);
    expect_all_n(k, w, {1, 8, 17}, std::string(name) + " 4097x4095 s=" + std::to_string(s),
                 seed);
    seed += 300;
  }
}

// A Llama-2-7B MLP shape (11008 x 4096) at N = 1 and 8, 50 % sparse.
inline void check_llama(const char* name, Format f, DType t) {
  const auto& k = kernel_named(name);
  if (!k.run) return;
  const Weight w = encode_or_fail(f, patterns::random(t, 11008, 4096, 0.5, 77));
  for (int n : {1, 8}) {
    EXPECT_TRUE(kernel_ok(check_kernel(k, w, n, 78 + n), t)) << name << " 11008x4096 N=" << n;
  }
}

// Weights with all-zero rows (first, last, a run in the middle) and all-zero columns.
inline void check_empty_rows(const char* name, Format f, DType t) {
  const auto& k = kernel_named(name);
  if (!k.run) return;
  HostMatrix h = patterns::random(t, 77, 150, 0.3, 91);
  for (int64_t r : {int64_t(0), int64_t(76), int64_t(30), int64_t(31), int64_t(32), int64_t(33)})
    for (int64_t c = 0; c < h.cols(); ++c) h.set(r, c, 0.f);
  for (int64_t r = 0; r < h.rows(); ++r) h.set(r, 64, 0.f);
  const Weight w = encode_or_fail(f, h);
  expect_all_n(k, w, {1, 3, 8, 16, 17}, std::string(name) + " empty rows", 92);
  // The all-zero matrix: Y = bias (or 0).
  HostMatrix z(t, 40, 24);
  const Weight wz = encode_or_fail(f, z);
  expect_all_n(k, wz, {1, 9}, std::string(name) + " all zero", 93);
}

// X and Y as strided views (ld > cols): odd ld (scalar X path) and ld % 8 == 0 with ld > cols.
inline void check_strided(const char* name, Format f, DType t) {
  const auto& k = kernel_named(name);
  if (!k.run) return;
  const int64_t m = 133, kk = 77;
  const Weight hw = encode_or_fail(f, patterns::random(t, m, kk, 0.5, 61));
  auto dw = to_device(hw);
  ASSERT_TRUE(dw.ok()) << dw.status().to_string();
  for (int n : {1, 5, 16, 19}) {
    for (auto [ldx, ldy] : {std::pair<int64_t, int64_t>{kk + 3, m + 5}, {88, m + 1}}) {
      const HostMatrix x = patterns::dense_random(t, n, kk, 62 + n);
      // X's padding is NaN: a kernel that reads past K would poison its output.
      DeviceMatrix dx = DeviceMatrix::alloc(t, n, kk, ldx);
      dx.poison();
      const size_t es = dtype_size(t);
      CUDA_OK(cudaMemcpy2D(dx.view.data, ldx * es, x.data(), kk * es, kk * es, n,
                           cudaMemcpyHostToDevice));
      const ConstMatrixView xv = dx.view;
      DeviceMatrix dy = DeviceMatrix::alloc(t, n, m, ldy);
      dy.poison();
      MatmulOptions opt;
      give_workspace(k, hw, opt);
      Status st = k.run(kernels::Problem{dw.value(), xv, dy.view, opt}, nullptr);
      ASSERT_TRUE(st.ok()) << st.to_string();
      CUDA_OK(cudaDeviceSynchronize());
      auto ref = reference::matmul_f64(hw, x.view());
      ASSERT_TRUE(ref.ok());
      const HostMatrix y = dy.download();
      const double err = reference::normalized_error(y.view(), ref.value());
      EXPECT_LE(err, tolerance(t)) << name << " strided N=" << n << " ldx=" << ldx
                                   << " ldy=" << ldy;
      // The gaps between Y's rows are not written.
      std::vector<uint16_t> raw(size_t(n * ldy) * es / 2);
      CUDA_OK(cudaMemcpy(raw.data(), dy.view.data, raw.size() * 2, cudaMemcpyDeviceToHost));
      bool gaps_untouched = true;
      for (int64_t r = 0; r < n; ++r)
        for (int64_t c = m * int64_t(es) / 2; c < ldy * int64_t(es) / 2; ++c)
          gaps_untouched &= raw[size_t(r * ldy * int64_t(es) / 2 + c)] == 0xFFFF;
      EXPECT_TRUE(gaps_untouched) << name << " wrote between Y rows (ldy=" << ldy << ")";
    }
  }
}

// Captures k.run(p) on stream s into a CUDA graph, replays it `reps` times and waits for it.
inline void run_in_graph(const kernels::KernelInfo& k, const kernels::Problem& p, cudaStream_t s,
                         int reps) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  const Status st = k.run(p, s);
  CUDA_OK(cudaStreamEndCapture(s, &graph));
  ASSERT_TRUE(st.ok()) << st.to_string();
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int rep = 0; rep < reps; ++rep) CUDA_OK(cudaGraphLaunch(exec, s));
  CUDA_OK(cudaStreamSynchronize(s));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// Capturing the call in a CUDA graph and replaying it gives the same bits as a direct call.
inline void check_graph_replay(const char* name, Format f, DType t) {
  const auto& k = kernel_named(name);
  if (!k.run) return;
  const int64_t m = 300, kk = 260;
  const Weight hw = encode_or_fail(f, patterns::random(t, m, kk, 0.6, 71));
  auto dw = to_device(hw);
  ASSERT_TRUE(dw.ok());
  for (int n : {1, 8, 16, 20}) {
    DeviceMatrix dx = DeviceMatrix::upload(patterns::dense_random(t, n, kk, 72 + n));
    DeviceMatrix y_direct = DeviceMatrix::alloc(t, n, m), y_graph = DeviceMatrix::alloc(t, n, m);
    DeviceMatrix bias = DeviceMatrix::upload(patterns::dense_random(t, 1, m, 73));
    MatmulOptions opt;
    opt.bias = bias.view.data;
    give_workspace(k, hw, opt);
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    y_direct.poison();
    y_graph.poison();
    // poison() runs on the legacy stream, which a non-blocking stream does not wait for.
    CUDA_OK(cudaDeviceSynchronize());
    ASSERT_TRUE(k.run(kernels::Problem{dw.value(), dx.view, y_direct.view, opt}, s).ok());
    CUDA_OK(cudaStreamSynchronize(s));
    run_in_graph(k, kernels::Problem{dw.value(), dx.view, y_graph.view, opt}, s, 3);
    const HostMatrix a = y_direct.download(), b = y_graph.download();
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.bytes())) << name << " graph replay N=" << n;
    cudaStreamDestroy(s);
  }
}

// Whether every element of y still holds the NaN poison (nothing was written).
inline bool still_poisoned(const DeviceMatrix& y) {
  const cudaError_t e = cudaDeviceSynchronize();
  EXPECT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
  if (e != cudaSuccess) return false;
  const HostMatrix after = y.download();
  for (int64_t r = 0; r < after.rows(); ++r)
    for (int64_t c = 0; c < after.cols(); ++c)
      if (!std::isnan(after.at(r, c))) return false;
  return true;
}

// Bad arguments come back as invalid_argument and launch nothing (Y stays poisoned).
inline void check_rejects_bad_arguments(const char* name, Format f, DType t) {
  const auto& k = kernel_named(name);
  if (!k.run) return;
  const Weight hw = encode_or_fail(f, patterns::random(t, 16, 24, 0.5, 81));
  auto dw = to_device(hw);
  ASSERT_TRUE(dw.ok());
  DeviceMatrix x = DeviceMatrix::upload(patterns::dense_random(t, 2, 24, 82));
  DeviceMatrix y = DeviceMatrix::alloc(t, 2, 16);
  y.poison();
  MatmulOptions ws;
  give_workspace(k, hw, ws);
  auto expect_rejected = [&](kernels::Problem p, const char* what) {
    p.opt.workspace = ws.workspace;  // so only the flaw under test can be the reason
    p.opt.workspace_bytes = ws.workspace_bytes;
    const Status st = k.run(p, nullptr);
    EXPECT_EQ(st.code(), Code::invalid_argument) << name << ": " << what << ": " << st.to_string();
  };
  MatrixView yv = y.view;
  ConstMatrixView xv = x.view;
  ConstMatrixView x_null = xv;
  x_null.data = nullptr;
  expect_rejected({dw.value(), x_null, yv, {}}, "null X");
  MatrixView y_null = yv;
  y_null.data = nullptr;
  expect_rejected({dw.value(), xv, y_null, {}}, "null Y");
  ConstMatrixView x_wrong_k = xv;
  x_wrong_k.cols = 23;
  expect_rejected({dw.value(), x_wrong_k, yv, {}}, "X with K-1 columns");
  MatrixView y_wrong_m = yv;
  y_wrong_m.cols = 15;
  expect_rejected({dw.value(), xv, y_wrong_m, {}}, "Y with M-1 columns");
  MatrixView y_wrong_n = yv;
  y_wrong_n.rows = 1;
  expect_rejected({dw.value(), xv, y_wrong_n, {}}, "Y with N-1 rows");
  ConstMatrixView x_misaligned = xv;
  x_misaligned.data = static_cast<const char*>(xv.data) + 1;
  expect_rejected({dw.value(), x_misaligned, yv, {}}, "X misaligned by one byte");
  MatmulOptions bad_bias;
  bad_bias.bias = static_cast<const char*>(xv.data) + 1;
  expect_rejected({dw.value(), xv, yv, bad_bias}, "bias misaligned by one byte");
  ConstMatrixView x_other_dtype = xv;
  x_other_dtype.dtype = t == DType::fp16 ? DType::bf16 : DType::fp16;
  expect_rejected({dw.value(), x_other_dtype, yv, {}}, "X of another dtype");
  expect_rejected({hw, xv, yv, {}}, "host weight");
  EXPECT_TRUE(still_poisoned(y)) << name << " wrote Y although every call was rejected";
}

// Kernel k on w at N = n with `opt` (an option it does not take) into a poisoned Y of n x y_cols:
// the call returns unsupported and Y stays unwritten.
inline void expect_unsupported_unwritten(const kernels::KernelInfo& k, const Weight& w, int n,
                                         int64_t y_cols, MatmulOptions opt, uint64_t seed,
                                         const std::string& what) {
  const Shape& s = shape_of(w);
  auto dw = to_device(w);
  ASSERT_TRUE(dw.ok());
  DeviceMatrix x = DeviceMatrix::upload(patterns::dense_random(s.dtype, n, s.cols, seed));
  DeviceMatrix y = DeviceMatrix::alloc(s.dtype, n, y_cols);
  y.poison();
  give_workspace(k, w, opt);
  const Status st = k.run(kernels::Problem{dw.value(), x.view, y.view, opt}, nullptr);
  EXPECT_EQ(st.code(), Code::unsupported) << what << ": " << st.to_string();
  EXPECT_TRUE(still_poisoned(y)) << what << " wrote Y";
}

// MatmulOptions::input_rms (the RMSNorm folded into the matmul): where the kernel takes it
// (kernels::takes_input_rms), every N and shape against the reference with the norm, plain, with
// bias and accumulating; where it does not, the call returns unsupported and Y stays poisoned.
// Shapes cover each of macko's row-kernel instances: half-warp rows (130 x 70, 520 x 2048 at
// 90 %), a warp per row (7000 x 1024), row pieces (300 x 4095 at 50 %: few long rows), X through
// L1 (64 x 17000 at 50 %: K too long for the shared copy at that density) and through shared
// memory.
inline void check_input_rms(const char* name, Format f, DType t) {
  const auto& k = kernel_named(name);
  if (!k.run) return;
  struct Case {
    int64_t m, k;
    double s;
  };
  const Case cases[] = {{1, 1, 0.0},     {7, 13, 0.5},     {130, 70, 0.5},  {130, 70, 0.999},
                        {300, 4095, 0.5}, {64, 17000, 0.5}, {520, 2048, 0.9}, {7000, 1024, 0.5}};
  uint64_t seed = 7000;
  int taken = 0;
  for (const Case& c : cases) {
    const Weight w = encode_or_fail(f, make_weight(t, "random", c.m, c.k, c.s, seed));
    const std::string what = std::string(name) + " input_rms " + dtype_name(t) + " " +
                             std::to_string(c.m) + "x" + std::to_string(c.k) +
                             " s=" + std::to_string(c.s);
    for (int n : {1, 2, 3, 4, 5, 8, 9, 16, 17, 33}) {
      if (kernels::takes_input_rms(k, w, n)) {
        ++taken;
        EXPECT_TRUE(kernel_ok(check_kernel(k, w, n, seed + n, false, false, true, true), t))
            << what << " N=" << n;
        EXPECT_TRUE(kernel_ok(check_kernel(k, w, n, seed + 50 + n, true, true, true, true), t))
            << what << " bias+accumulate N=" << n;
        continue;
      }
      MatmulOptions opt;
      opt.input_rms = true;
      expect_unsupported_unwritten(k, w, n, c.m, opt, seed, what + " N=" + std::to_string(n));
    }
    seed += 100;
  }
  // dense.gemv and tca_bme.decode take it everywhere, macko.warp_row at N = 1..4; no other
  // decode kernel.
  const std::string kn = name;
  if (kn.rfind("dense.gemv", 0) == 0 || kn.rfind("macko.warp_row", 0) == 0 ||
      kn.rfind("tca_bme.decode", 0) == 0) {
    EXPECT_GT(taken, 0) << name << " never took input_rms";
  } else {
    EXPECT_EQ(taken, 0) << name << " claims input_rms";
  }
}

// One call of kernel k with MatmulOptions::output_swiglu on a stacked [gate; up] weight of 2F
// rows (Y N x F, poisoned first) against the reference: the full product's gate and up halves
// (with the norm when input_rms), each rounded to the dtype as a stored gate_up output would be,
// then silu(gate) * up in double.
inline KernelCheck check_swiglu_kernel(const kernels::KernelInfo& k, const Weight& host_w,
                                       int64_t n, uint64_t seed, bool input_rms) {
  KernelCheck out;
  const Shape& s = shape_of(host_w);
  const int64_t half = s.rows / 2;
  HostMatrix x = patterns::dense_random(s.dtype, n, s.cols, seed);
  auto dw = to_device(host_w);
  if (!dw.ok()) {
    out.failure = dw.status().to_string();
    return out;
  }
  DeviceMatrix dx = DeviceMatrix::upload(x);
  DeviceMatrix dy = DeviceMatrix::alloc(s.dtype, n, half);
  dy.poison();
  MatmulOptions opt;
  opt.output_swiglu = true;
  opt.input_rms = input_rms;
  opt.rms_eps = kRmsEps;
  give_workspace(k, host_w, opt);
  const Status st = k.run(kernels::Problem{dw.value(), dx.view, dy.view, opt}, nullptr);
  const cudaError_t e = cudaDeviceSynchronize();
  if (!st.ok() || e != cudaSuccess) {
    out.failure =
        !st.ok() ? st.to_string() : std::string("kernel failed: ") + cudaGetErrorString(e);
    return out;
  }
  reference::Options ro;
  ro.input_rms = input_rms;
  ro.rms_eps = kRmsEps;
  auto full = reference::matmul_f64(host_w, x.view(), ro);
  if (!full.ok()) {
    out.failure = full.status().to_string();
    return out;
  }
  std::vector<double> ref(size_t(n * half));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t o = 0; o < half; ++o) {
      const double g = round_to_dtype(float(full.value()[size_t(t * s.rows + o)]), s.dtype);
      const double u = round_to_dtype(float(full.value()[size_t(t * s.rows + half + o)]), s.dtype);
      ref[size_t(t * half + o)] = g / (1.0 + std::exp(-g)) * u;
    }
  out.error = reference::normalized_error(dy.download().view(), ref);
  return out;
}

// MatmulOptions::output_swiglu: where the kernel takes it (kernels::takes_output_swiglu), every
// N (two passes of 16 tokens at 33) on stacked weights whose gate count is a multiple of nothing
// (a block's last tile half-empty), with and without input_rms, against check_swiglu_kernel's
// reference. Where it does not, the call returns unsupported and Y stays poisoned. Either way
// bias, accumulate, an odd row count or a Y of N x M are refused.
inline void check_output_swiglu(const char* name, Format f, DType t) {
  const auto& k = kernel_named(name);
  if (!k.run) return;
  struct Case {
    int64_t m, k;
    double s;
    std::vector<int> ns;
  };
  const std::vector<int> every_n = {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17, 33};
  const Case cases[] = {{2, 1, 0.0, every_n},
                        {14, 13, 0.5, every_n},
                        {130, 70, 0.5, every_n},
                        {4098, 4095, 0.5, {1, 8, 9, 16, 17}}};
  uint64_t seed = 9000;
  int taken = 0;
  for (const Case& c : cases) {
    const Weight w = encode_or_fail(f, make_weight(t, "random", c.m, c.k, c.s, seed));
    const std::string what = std::string(name) + " output_swiglu " + dtype_name(t) + " " +
                             std::to_string(c.m) + "x" + std::to_string(c.k);
    for (int n : c.ns) {
      if (kernels::takes_output_swiglu(k, w, n)) {
        ++taken;
        EXPECT_TRUE(kernel_ok(check_swiglu_kernel(k, w, n, seed + n, false), t))
            << what << " N=" << n;
        if (kernels::takes_input_rms(k, w, n)) {
          EXPECT_TRUE(kernel_ok(check_swiglu_kernel(k, w, n, seed + 50 + n, true), t))
              << what << " input_rms N=" << n;
        }
        continue;
      }
      MatmulOptions opt;
      opt.output_swiglu = true;
      expect_unsupported_unwritten(k, w, n, c.m / 2, opt, seed, what + " N=" + std::to_string(n));
    }
    seed += 100;
  }
  // Refused arguments, whether or not the kernel takes output_swiglu at all.
  const Weight odd = encode_or_fail(f, make_weight(t, "random", 13, 24, 0.5, seed));
  const Weight even = encode_or_fail(f, make_weight(t, "random", 14, 24, 0.5, seed + 1));
  auto d_odd = to_device(odd), d_even = to_device(even);
  ASSERT_TRUE(d_odd.ok() && d_even.ok());
  DeviceMatrix x = DeviceMatrix::upload(patterns::dense_random(t, 2, 24, seed + 2));
  DeviceMatrix y = DeviceMatrix::alloc(t, 2, 14);
  y.poison();
  const bool takes = kernels::takes_output_swiglu(k, even, 2);
  auto expect_refused = [&](const Weight& dw, int64_t y_cols, MatmulOptions opt, const char* why) {
    opt.output_swiglu = true;
    give_workspace(k, dw, opt);
    MatrixView yv = y.view;
    yv.cols = y_cols;
    const Status st = k.run(kernels::Problem{dw, x.view, yv, opt}, nullptr);
    EXPECT_EQ(st.code(), takes ? Code::invalid_argument : Code::unsupported)
        << name << " output_swiglu " << why << ": " << st.to_string();
  };
  MatmulOptions with_bias, accumulating;
  with_bias.bias = x.view.data;
  accumulating.accumulate = true;
  expect_refused(d_even.value(), 7, with_bias, "with bias");
  expect_refused(d_even.value(), 7, accumulating, "accumulating");
  expect_refused(d_even.value(), 14, {}, "Y of N x M");
  if (takes) expect_refused(d_odd.value(), 6, {}, "13 rows");
  EXPECT_TRUE(still_poisoned(y)) << name << " wrote Y although every call was refused";
  // dense.gemv takes it; no other decode kernel.
  if (std::string(name).rfind("dense.gemv", 0) == 0) {
    EXPECT_GT(taken, 0) << name << " never took output_swiglu";
  } else {
    EXPECT_EQ(taken, 0) << name << " claims output_swiglu";
  }
}

// The standard set of tests for one decode kernel.
#define SPARROW_DECODE_KERNEL_TESTS(Suite, kname, fmt)                                       \
  TEST(Suite, SmallShapesFp16) { test::check_small_sweep(kname, fmt, DType::fp16); }        \
  TEST(Suite, SmallShapesBf16) { test::check_small_sweep(kname, fmt, DType::bf16); }        \
  TEST(Suite, Large4097x4095Fp16) { test::check_large(kname, fmt, DType::fp16); }           \
  TEST(Suite, Large4097x4095Bf16) { test::check_large(kname, fmt, DType::bf16); }           \
  TEST(Suite, Llama11008x4096) {                                                             \
    test::check_llama(kname, fmt, DType::fp16);                                              \
    test::check_llama(kname, fmt, DType::bf16);                                              \
  }                                                                                          \
  TEST(Suite, EmptyRowsAndZeroMatrix) {                                                      \
    test::check_empty_rows(kname, fmt, DType::fp16);                                         \
    test::check_empty_rows(kname, fmt, DType::bf16);                                         \
  }                                                                                          \
  TEST(Suite, StridedXAndY) {                                                                \
    test::check_strided(kname, fmt, DType::fp16);                                            \
    test::check_strided(kname, fmt, DType::bf16);                                            \
  }                                                                                          \
  TEST(Suite, GraphReplayMatchesDirectCall) {                                                \
    test::check_graph_replay(kname, fmt, DType::fp16);                                       \
    test::check_graph_replay(kname, fmt, DType::bf16);                                       \
  }                                                                                          \
  TEST(Suite, RejectsBadArguments) {                                                         \
    test::check_rejects_bad_arguments(kname, fmt, DType::fp16);                              \
  }                                                                                          \
  TEST(Suite, InputRms) {                                                                    \
    test::check_input_rms(kname, fmt, DType::fp16);                                          \
    test::check_input_rms(kname, fmt, DType::bf16);                                          \
  }                                                                                          \
  TEST(Suite, OutputSwiglu) {                                                                \
    test::check_output_swiglu(kname, fmt, DType::fp16);                                      \
    test::check_output_swiglu(kname, fmt, DType::bf16);                                      \
  }

}  // namespace sparrow::test
