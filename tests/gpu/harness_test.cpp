// Checks of the GPU test harness itself, so a kernel test cannot pass by accident.
#include "gpu/gpu_test_util.hpp"

using namespace sparrow;

TEST(GpuHarness, PoisonIsNaNAndIsCaught) {
  test::DeviceMatrix d = test::DeviceMatrix::alloc(DType::fp16, 3, 5);
  d.poison();
  HostMatrix h = d.download();
  EXPECT_TRUE(std::isnan(h.at(2, 4)));
  std::vector<double> ref(15, 1.0);
  EXPECT_FALSE(reference::normalized_error(h.view(), ref) < 1.0);
}

TEST(GpuHarness, MatmulRejectsHostWeight) {
  auto w = encode(Format::dense, patterns::random(DType::fp16, 8, 8, 0.5, 1).view());
  ASSERT_TRUE(w.ok());
  test::DeviceMatrix x = test::DeviceMatrix::alloc(DType::fp16, 2, 8);
  test::DeviceMatrix y = test::DeviceMatrix::alloc(DType::fp16, 2, 8);
  Status s = matmul(y.view, w.value(), x.view, nullptr);
  EXPECT_FALSE(s.ok());
}
