// dense.gemv vs the CPU reference (see decode_kernel_checks.hpp for what each test covers), also
// its variants.
#include "gpu/decode_kernel_checks.hpp"
#include "kernels/dense/gemv.hpp"

using namespace sparrow;

SPARROW_DECODE_KERNEL_TESTS(DenseGemv, "dense.gemv", Format::dense)

// The same checks on run's other variants: the weight loads without the L2 prefetch size
// (SPARROW_GEMV_L2_PREFETCH=0, the A/B baseline) and the two-tile instance (9..16 tokens) in
// blocks of its largest warp count (every K split over 20 warps, the partial sums of 20 warps).
namespace {
Status run_without_l2_prefetch(const kernels::Problem& p, Stream s) {
  return kernels::dense_gemv::run_with(p, s, {/*l2_prefetch=*/false, 0});
}
Status run_widest_two_tile_blocks(const kernels::Problem& p, Stream s) {
  return kernels::dense_gemv::run_with(
      p, s, {true, kernels::dense_gemv::Config::kMaxWarpsTwoTiles});
}
const bool kVariants =
    test::register_test_variant("dense.gemv", "dense.gemv:no_l2_prefetch",
                                run_without_l2_prefetch) &&
    test::register_test_variant("dense.gemv", "dense.gemv:widest_two_tile_blocks",
                                run_widest_two_tile_blocks);
}  // namespace

SPARROW_DECODE_KERNEL_TESTS(DenseGemvNoL2Prefetch, "dense.gemv:no_l2_prefetch", Format::dense)
SPARROW_DECODE_KERNEL_TESTS(DenseGemvWidestTwoTileBlocks, "dense.gemv:widest_two_tile_blocks",
                            Format::dense)

TEST(DenseGemv, VariantsRegistered) { EXPECT_TRUE(kVariants); }

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
