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

TEST(DenseGemv, LongRows) {
  // Long rows (each warp runs several iterations of its steps) with a K that is a multiple of
  // nothing, one and two M tiles, both dtypes, with and without input_rms.
  const auto& k = test::kernel_named("dense.gemv");
  for (DType t : {DType::fp16, DType::bf16}) {
    const Weight w = test::encode_or_fail(Format::dense, patterns::random(t, 333, 8203, 0.0, 17));
    for (int n : {1, 5, 8, 9, 16}) {
      EXPECT_TRUE(test::kernel_ok(test::check_kernel(k, w, n, 18 + n), t))
          << dtype_name(t) << " 333x8203 N=" << n;
      EXPECT_TRUE(test::kernel_ok(test::check_kernel(k, w, n, 40 + n, true, true, true, true), t))
          << dtype_name(t) << " 333x8203 input_rms+bias+accumulate N=" << n;
    }
  }
}
