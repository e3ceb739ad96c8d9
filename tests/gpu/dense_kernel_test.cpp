// dense.gemv vs the CPU reference (see decode_kernel_checks.hpp for what each test covers).
#include "gpu/decode_kernel_checks.hpp"

using namespace sparrow;

SPARROW_DECODE_KERNEL_TESTS(DenseGemv, "dense.gemv", Format::dense)

TEST(DenseGemv, RejectsFp32WithAStatus) {
  const auto& k = test::kernel_named("dense.gemv");
  const Weight hw = test::encode_or_fail(Format::dense, patterns::random(DType::fp32, 8, 8, 0.5, 1));
  auto dw = to_device(hw);
  ASSERT_TRUE(dw.ok());
  test::DeviceMatrix x = test::DeviceMatrix::alloc(DType::fp32, 1, 8);
  test::DeviceMatrix y = test::DeviceMatrix::alloc(DType::fp32, 1, 8);
  EXPECT_FALSE(k.run(kernels::Problem{dw.value(), x.view, y.view, {}}, nullptr).ok());
}
