// dense.gemv vs the CPU reference (see decode_kernel_checks.hpp for what each test covers).
#include "gpu/decode_kernel_checks.hpp"
#include "kernels/dense/gemv.hpp"

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

// The same checks with the kernel's steps forced into one piece, two halves or the shared-memory
// ring, so each is covered whatever choose_steps picks (halves and the ring only on rows of 8192
// columns or more, which the standard shapes do not have).
namespace {
using kernels::dense_gemv::Steps;
Status run_one_piece(const kernels::Problem& p, Stream s) {
  return kernels::dense_gemv::run_with(p, s, Steps::one_piece);
}
Status run_halves(const kernels::Problem& p, Stream s) {
  return kernels::dense_gemv::run_with(p, s, Steps::halves);
}
Status run_ring(const kernels::Problem& p, Stream s) {
  return kernels::dense_gemv::run_with(p, s, Steps::ring);
}
const bool kForcedSteps = [] {
  const auto* base = kernels::find_kernel("dense.gemv");
  if (base == nullptr) return false;
  kernels::KernelInfo one_piece = *base, halves = *base, ring = *base;
  one_piece.name = "dense.gemv:one_piece";
  one_piece.run = run_one_piece;
  halves.name = "dense.gemv:halves";
  halves.run = run_halves;
  ring.name = "dense.gemv:ring";
  ring.run = run_ring;
  test::test_kernels().push_back(one_piece);
  test::test_kernels().push_back(halves);
  test::test_kernels().push_back(ring);
  return true;
}();
}  // namespace

SPARROW_DECODE_KERNEL_TESTS(DenseGemvOnePiece, "dense.gemv:one_piece", Format::dense)
SPARROW_DECODE_KERNEL_TESTS(DenseGemvHalves, "dense.gemv:halves", Format::dense)
SPARROW_DECODE_KERNEL_TESTS(DenseGemvRing, "dense.gemv:ring", Format::dense)

TEST(DenseGemv, LongRows) {
  ASSERT_TRUE(kForcedSteps);
  // Rows past kHalvesMinK (the rule's ring at N = 1, halves at 2..8, one piece at 9..16), with a
  // K that is a multiple of nothing, both dtypes, with and without input_rms; the forced ring on
  // the same rows at every N (several iterations per warp, so its slots are refilled).
  for (const char* name : {"dense.gemv", "dense.gemv:ring"}) {
    const auto& k = test::kernel_named(name);
    for (DType t : {DType::fp16, DType::bf16}) {
      const Weight w = test::encode_or_fail(Format::dense, patterns::random(t, 333, 8203, 0.0, 17));
      for (int n : {1, 5, 8, 9, 16}) {
        EXPECT_TRUE(test::kernel_ok(test::check_kernel(k, w, n, 18 + n), t))
            << name << " " << dtype_name(t) << " 333x8203 N=" << n;
        EXPECT_TRUE(test::kernel_ok(test::check_kernel(k, w, n, 40 + n, true, true, true, true), t))
            << name << " " << dtype_name(t) << " 333x8203 input_rms+bias+accumulate N=" << n;
      }
    }
  }
}
