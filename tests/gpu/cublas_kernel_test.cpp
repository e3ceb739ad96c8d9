// dense.cublas against the CPU reference: odd shapes, N = 1..17, fp16 and bf16, bias and
// accumulate, strided X/Y views, and CUDA-graph capture (the benchmark times it that way).
#include <cuda_runtime.h>

#include "gpu/gpu_test_util.hpp"
#include "kernels/dense/cublas.hpp"

using namespace sparrow;

namespace {

const kernels::KernelInfo& cublas_kernel() {
  const kernels::KernelInfo* k = kernels::find_kernel("dense.cublas");
  EXPECT_NE(k, nullptr) << "dense.cublas is not registered";
  return *k;
}

Weight dense_weight(DType t, int64_t m, int64_t k, double sparsity, uint64_t seed) {
  auto w = encode(Format::dense, patterns::random(t, m, k, sparsity, seed).view());
  EXPECT_TRUE(w.ok()) << w.status().to_string();
  return std::move(w).value();
}

struct ShapeCase {
  int64_t m, k;
};

}  // namespace

TEST(CublasKernel, OddShapesAllSmallN) {
  const ShapeCase shapes[] = {{1, 1}, {7, 13}, {130, 70}, {257, 1031}};
  for (DType t : {DType::fp16, DType::bf16}) {
    for (const auto& s : shapes) {
      for (double sparsity : {0.0, 0.5, 0.9}) {
        Weight w = dense_weight(t, s.m, s.k, sparsity, 11 + uint64_t(s.m));
        for (int64_t n = 1; n <= 17; ++n) {
          EXPECT_TRUE(test::kernel_ok(test::check_kernel(cublas_kernel(), w, n, 100 + uint64_t(n)), t))
              << dtype_name(t) << " " << s.m << "x" << s.k << " sparsity " << sparsity
              << " N=" << n;
        }
      }
    }
  }
}

TEST(CublasKernel, LargeOddShape) {
  for (DType t : {DType::fp16, DType::bf16}) {
    Weight w = dense_weight(t, 4097, 4095, 0.5, 3);
    for (int64_t n : {1, 8, 33}) {
      EXPECT_TRUE(test::kernel_ok(test::check_kernel(cublas_kernel(), w, n, 7), t))
          << dtype_name(t) << " N=" << n;
    }
  }
}

TEST(CublasKernel, BiasAndAccumulate) {
  for (DType t : {DType::fp16, DType::bf16}) {
    Weight w = dense_weight(t, 131, 77, 0.3, 5);
    for (int64_t n : {1, 5, 17}) {
      for (bool bias : {false, true}) {
        for (bool acc : {false, true}) {
          EXPECT_TRUE(test::kernel_ok(test::check_kernel(cublas_kernel(), w, n, 9, bias, acc), t))
              << dtype_name(t) << " N=" << n << " bias=" << bias << " accumulate=" << acc;
        }
      }
    }
  }
}

// X and Y with leading dimensions larger than their widths.
TEST(CublasKernel, StridedViews) {
  const DType t = DType::fp16;
  const int64_t m = 67, k = 45, n = 9;
  Weight host_w = dense_weight(t, m, k, 0.5, 21);
  HostMatrix x = patterns::dense_random(t, n, k, 22);
  auto dw = to_device(host_w);
  ASSERT_TRUE(dw.ok());
  test::DeviceMatrix dx = test::DeviceMatrix::upload(x, k + 5);
  test::DeviceMatrix dy = test::DeviceMatrix::alloc(t, n, m, m + 3);
  dy.poison();
  ASSERT_TRUE(kernels::dense_cublas({dw.value(), dx.view, dy.view, {}}, nullptr).ok());
  CUDA_OK(cudaDeviceSynchronize());
  auto ref = reference::matmul_f64(host_w, x.view());
  ASSERT_TRUE(ref.ok());
  HostMatrix y = dy.download();
  EXPECT_LE(reference::normalized_error(y.view(), ref.value()), test::tolerance(t));
}

// Captured once into a graph and replayed: the same result as a direct call, and no error from
// the capture (a cuBLAS allocation during capture would fail it).
TEST(CublasKernel, GraphCaptureAndReplay) {
  for (DType t : {DType::fp16, DType::bf16}) {
    const int64_t m = 513, k = 300, n = 8;
    Weight host_w = dense_weight(t, m, k, 0.7, 31);
    HostMatrix x = patterns::dense_random(t, n, k, 32);
    HostMatrix bias = patterns::dense_random(t, 1, m, 33);
    auto dw = to_device(host_w);
    ASSERT_TRUE(dw.ok());
    test::DeviceMatrix dx = test::DeviceMatrix::upload(x);
    test::DeviceMatrix db = test::DeviceMatrix::upload(bias);
    test::DeviceMatrix dy = test::DeviceMatrix::alloc(t, n, m);
    ASSERT_TRUE(kernels::dense_cublas_prepare().ok());

    cudaStream_t stream;
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    MatmulOptions opt;
    opt.bias = db.view.data;
    cudaGraph_t graph;
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    const Status st = kernels::dense_cublas({dw.value(), dx.view, dy.view, opt}, stream);
    CUDA_OK(cudaStreamEndCapture(stream, &graph));
    ASSERT_TRUE(st.ok()) << st.to_string();
    cudaGraphExec_t exec;
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));

    reference::Options ro;
    ro.bias = bias.data();
    ro.bias_dtype = t;
    auto ref = reference::matmul_f64(host_w, x.view(), ro);
    ASSERT_TRUE(ref.ok());
    for (int replay = 0; replay < 3; ++replay) {
      dy.poison();
      CUDA_OK(cudaDeviceSynchronize());
      CUDA_OK(cudaGraphLaunch(exec, stream));
      CUDA_OK(cudaStreamSynchronize(stream));
      HostMatrix y = dy.download();
      EXPECT_LE(reference::normalized_error(y.view(), ref.value()), test::tolerance(t))
          << dtype_name(t) << " replay " << replay;
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  }
}

TEST(CublasKernel, RejectsWrongFormatAndShape) {
  const DType t = DType::fp16;
  auto csr_w = encode(Format::csr, patterns::random(t, 8, 8, 0.5, 1).view());
  ASSERT_TRUE(csr_w.ok());
  auto dcsr = to_device(csr_w.value());
  ASSERT_TRUE(dcsr.ok());
  test::DeviceMatrix x = test::DeviceMatrix::alloc(t, 2, 8);
  test::DeviceMatrix y = test::DeviceMatrix::alloc(t, 2, 8);
  EXPECT_FALSE(kernels::dense_cublas({dcsr.value(), x.view, y.view, {}}, nullptr).ok());

  auto dw = to_device(dense_weight(t, 8, 8, 0.5, 2));
  ASSERT_TRUE(dw.ok());
  test::DeviceMatrix bad_x = test::DeviceMatrix::alloc(t, 2, 9);
  const Status s = kernels::dense_cublas({dw.value(), bad_x.view, y.view, {}}, nullptr);
  EXPECT_EQ(s.code(), Code::invalid_argument) << s.to_string();
}
