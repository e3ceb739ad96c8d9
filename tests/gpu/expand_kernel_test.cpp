// <format>.expand_cublas vs the CPU reference: the standard decode-kernel checks (which give the
// kernel its minimal workspace, so every M > 64 runs in several 64-row bands), prefill-sized N
// with one-pass and banded workspaces, the expansion itself bit for bit against the host decode,
// the missing-workspace error, and matmul's choice with and without a workspace.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "gpu/decode_kernel_checks.hpp"
#include "kernels/expand/expand.hpp"
#include "sparrow/dispatch.hpp"
#include "sparrow/matmul.hpp"

using namespace sparrow;

SPARROW_DECODE_KERNEL_TESTS(CsrExpandCublas, "csr.expand_cublas", Format::csr)
SPARROW_DECODE_KERNEL_TESTS(MackoExpandCublas, "macko.expand_cublas", Format::macko)
SPARROW_DECODE_KERNEL_TESTS(TcaBmeExpandCublas, "tca_bme.expand_cublas", Format::tca_bme)

namespace {

const std::pair<const char*, Format> kExpandKernels[] = {
    {"csr.expand_cublas", Format::csr},
    {"macko.expand_cublas", Format::macko},
    {"tca_bme.expand_cublas", Format::tca_bme}};

}  // namespace

// Prefill-sized N (the range the kernels are for), both workspace sizes, odd shapes.
TEST(ExpandCublas, PrefillSizedN) {
  uint64_t seed = 9100;
  for (auto [name, f] : kExpandKernels) {
    const auto& k = test::kernel_named(name);
    for (DType t : {DType::fp16, DType::bf16}) {
      for (auto [m, kk] : {std::pair<int64_t, int64_t>{130, 70}, {1000, 333}, {4097, 4095}}) {
        const Weight w = test::encode_or_fail(f, test::make_weight(t, "magnitude", m, kk, 0.6, seed));
        for (int n : {64, 127, 129, 255, 513}) {
          if (m > 1000 && n != 64) continue;  // the double reference costs ~0.1 s per token here
          for (bool minimal : {true, false}) {
            EXPECT_TRUE(test::kernel_ok(
                test::check_kernel(k, w, n, seed + n, false, false, /*minimal_workspace=*/minimal),
                t))
                << name << " " << dtype_name(t) << " " << m << "x" << kk << " N=" << n
                << (minimal ? " banded" : " one pass");
          }
        }
        seed += 17;
      }
    }
  }
}

// One pass over a 2100-row weight with the full workspace, as prefill runs it: bias and
// accumulate against the reference (Y poisoned first), and a captured graph of the call replays
// to the same bits. (It also covered the side-stream band overlap that session 7 measured slower
// and dropped: bench/NOTES-decode.md.)
TEST(ExpandCublas, OnePassBiasAccumulateAndGraphReplay) {
  for (auto [name, f] : kExpandKernels) {
    const auto& k = test::kernel_named(name);
    for (DType t : {DType::fp16, DType::bf16}) {
      const int64_t m = 2100, kk = 777;
      const int n = 96;
      const Weight w = test::encode_or_fail(f, test::make_weight(t, "random", m, kk, 0.7, 5150));
      for (bool accumulate : {false, true}) {
        EXPECT_TRUE(test::kernel_ok(test::check_kernel(k, w, n, 5151, /*with_bias=*/true,
                                                       accumulate, /*minimal_workspace=*/false),
                                    t))
            << name << " " << dtype_name(t) << (accumulate ? " bias+accumulate" : " bias");
      }
      auto dw = to_device(w);
      ASSERT_TRUE(dw.ok());
      test::DeviceMatrix dx = test::DeviceMatrix::upload(patterns::dense_random(t, n, kk, 5152));
      test::DeviceMatrix bias = test::DeviceMatrix::upload(patterns::dense_random(t, 1, m, 5153));
      test::DeviceMatrix y_direct = test::DeviceMatrix::alloc(t, n, m);
      test::DeviceMatrix y_graph = test::DeviceMatrix::alloc(t, n, m);
      y_direct.poison();
      y_graph.poison();
      CUDA_OK(cudaDeviceSynchronize());
      MatmulOptions opt;
      test::give_workspace(k, w, opt, /*minimal=*/false);
      opt.bias = bias.view.data;
      cudaStream_t s;
      CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      ASSERT_TRUE(k.run(kernels::Problem{dw.value(), dx.view, y_direct.view, opt}, s).ok());
      CUDA_OK(cudaStreamSynchronize(s));
      test::run_in_graph(k, kernels::Problem{dw.value(), dx.view, y_graph.view, opt}, s, 2);
      const HostMatrix a = y_direct.download(), b = y_graph.download();
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.bytes())) << name << " graph replay";
      cudaStreamDestroy(s);
    }
  }
}

// The expanded rows equal the host decode bit for bit, for a band in the middle of the matrix.
TEST(ExpandCublas, ExpandRowsMatchesHostDecode) {
  // K = 9001: macko rows span three shared windows (4096 columns each) and end off any multiple
  // of 8, so the padding columns up to ld are checked too.
  for (auto [name, f] : kExpandKernels) {
    for (DType t : {DType::fp16, DType::bf16}) {
      for (int64_t k : {int64_t(517), int64_t(9001)}) {
        for (double s : {0.0, 0.5, 0.97}) {
          const HostMatrix h = test::make_weight(t, "magnitude", 333, k, s, 4242);
          const Weight w = test::encode_or_fail(f, h);
          auto dw = to_device(w);
          ASSERT_TRUE(dw.ok());
          auto decoded = sparrow::decode(w);
          ASSERT_TRUE(decoded.ok());
          const int64_t ld = kernels::expand::expanded_ld(k);
          const int64_t r0 = 128, r1 = 333;  // two whole bands and a partial one
          const size_t es = dtype_size(t);
          void* dst = nullptr;
          CUDA_OK(cudaMalloc(&dst, size_t((r1 - r0) * ld) * es));
          CUDA_OK(cudaMemset(dst, 0xFF, size_t((r1 - r0) * ld) * es));
          ASSERT_TRUE(kernels::expand::expand_rows(dw.value(), r0, r1, dst, ld, nullptr).ok());
          std::vector<uint8_t> got(size_t((r1 - r0) * ld) * es);
          CUDA_OK(cudaMemcpy(got.data(), dst, got.size(), cudaMemcpyDeviceToHost));
          cudaFree(dst);
          bool same = true, padding_zero = true;
          for (int64_t r = r0; r < r1 && same; ++r) {
            const uint8_t* row = got.data() + size_t((r - r0) * ld) * es;
            same = std::memcmp(row,
                               static_cast<const uint8_t*>(decoded.value().data()) +
                                   size_t(r * k) * es,
                               size_t(k) * es) == 0;
            for (size_t b = size_t(k) * es; b < size_t(ld) * es; ++b) padding_zero &= row[b] == 0;
          }
          EXPECT_TRUE(same) << name << " " << dtype_name(t) << " k=" << k << " s=" << s;
          EXPECT_TRUE(padding_zero) << name << " " << dtype_name(t) << " k=" << k << " s=" << s;
        }
      }
    }
  }
}

// csr's expansion on what only csr has: fp32 values (4-byte elements: 2048-column windows) and
// 32-bit column indices (K > 65536), byte-exact against the host decode, rows of a band starting
// at 57 (row starts not multiples of 8, so steps begin before the row).
TEST(ExpandCublas, CsrWideRowsAndFp32) {
  struct Case {
    DType t;
    int64_t k;
    double s;
  };
  for (const Case c : {Case{DType::fp32, 9001, 0.5}, Case{DType::fp32, 9001, 0.97},
                       Case{DType::fp16, 70001, 0.5}, Case{DType::fp16, 70001, 0.99},
                       Case{DType::fp32, 70001, 0.9}}) {
    const std::string what =
        std::string(dtype_name(c.t)) + " k=" + std::to_string(c.k) + " s=" + std::to_string(c.s);
    const HostMatrix h = test::make_weight(c.t, "random", 150, c.k, c.s, 977);
    const Weight w = test::encode_or_fail(Format::csr, h);
    ASSERT_EQ(std::get<csr::Matrix>(w).index_bits, c.k > 65536 ? 32 : 16) << what;
    auto dw = to_device(w);
    ASSERT_TRUE(dw.ok());
    auto decoded = sparrow::decode(w);
    ASSERT_TRUE(decoded.ok());
    const int64_t ld = kernels::expand::expanded_ld(c.k), r0 = 57, r1 = 150;
    const size_t es = dtype_size(c.t), bytes = size_t((r1 - r0) * ld) * es;
    void* dst = nullptr;
    CUDA_OK(cudaMalloc(&dst, bytes));
    CUDA_OK(cudaMemset(dst, 0xFF, bytes));
    ASSERT_TRUE(kernels::expand::expand_rows(dw.value(), r0, r1, dst, ld, nullptr).ok()) << what;
    std::vector<uint8_t> got(bytes);
    CUDA_OK(cudaMemcpy(got.data(), dst, bytes, cudaMemcpyDeviceToHost));
    cudaFree(dst);
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* row = got.data() + size_t((r - r0) * ld) * es;
      ASSERT_EQ(0, std::memcmp(row,
                               static_cast<const uint8_t*>(decoded.value().data()) +
                                   size_t(r * c.k) * es,
                               size_t(c.k) * es))
          << what << " row " << r;
      for (size_t b = size_t(c.k) * es; b < size_t(ld) * es; ++b)
        ASSERT_EQ(row[b], 0) << what << " row " << r << " padding byte " << b;
    }
  }
}

TEST(ExpandCublas, RejectsMissingOrSmallWorkspace) {
  for (auto [name, f] : kExpandKernels) {
    const auto& k = test::kernel_named(name);
    const Weight hw = test::encode_or_fail(f, patterns::random(DType::fp16, 200, 96, 0.5, 5));
    auto dw = to_device(hw);
    ASSERT_TRUE(dw.ok());
    test::DeviceMatrix x = test::DeviceMatrix::upload(patterns::dense_random(DType::fp16, 70, 96, 6));
    test::DeviceMatrix y = test::DeviceMatrix::alloc(DType::fp16, 70, 200);
    MatmulOptions none;
    Status st = k.run(kernels::Problem{dw.value(), x.view, y.view, none}, nullptr);
    EXPECT_EQ(st.code(), Code::invalid_argument) << name;
    EXPECT_NE(st.message().find("workspace"), std::string::npos) << st.to_string();
    MatmulOptions small;
    test::give_workspace(k, hw, small);
    small.workspace_bytes -= 1;  // one byte short of one band
    EXPECT_EQ(k.run(kernels::Problem{dw.value(), x.view, y.view, small}, nullptr).code(),
              Code::invalid_argument)
        << name;
  }
}

// matmul never picks a kernel that needs a workspace it was not given, and gives correct results
// either way at a prefill-sized N.
TEST(ExpandCublas, MatmulWithAndWithoutWorkspace) {
  for (auto [name, f] : kExpandKernels) {
    const HostMatrix h = patterns::random(DType::fp16, 300, 256, 0.5, 11);
    const Weight hw = test::encode_or_fail(f, h);
    auto dw = to_device(hw);
    ASSERT_TRUE(dw.ok());
    const HostMatrix x = patterns::dense_random(DType::fp16, 256, 256, 12);
    test::DeviceMatrix dx = test::DeviceMatrix::upload(x);
    auto ref = reference::matmul_f64(hw, x.view());
    ASSERT_TRUE(ref.ok());
    for (bool with_ws : {false, true}) {
      test::DeviceMatrix dy = test::DeviceMatrix::alloc(DType::fp16, 256, 300);
      dy.poison();
      MatmulOptions opt;
      if (with_ws) test::give_workspace(test::kernel_named(name), hw, opt, /*minimal=*/false);
      Status st = matmul(dy.view, dw.value(), dx.view, nullptr, opt);
      ASSERT_TRUE(st.ok()) << st.to_string();
      CUDA_OK(cudaDeviceSynchronize());
      EXPECT_LE(reference::normalized_error(dy.download().view(), ref.value()),
                test::tolerance(DType::fp16))
          << name << (with_ws ? " with" : " without") << " workspace";
    }
  }
}
