// macko.warp_row vs the CPU reference (see decode_kernel_checks.hpp for what each test covers),
// plus long gaps (padding entries), K large enough that X^T is staged in token passes, and K so
// large that not even one token of X fits in shared memory (the L1 gather path).
#include "gpu/decode_kernel_checks.hpp"

using namespace sparrow;

SPARROW_DECODE_KERNEL_TESTS(MackoWarpRow, "macko.warp_row", Format::macko)

TEST(MackoWarpRow, LongGapsAndWideRows) {
  const auto& k = test::kernel_named("macko.warp_row");
  // 99.5 % sparse over 20000 columns: most gaps exceed 16 and need padding entries; at N = 16
  // X^T is 640 KB, so the tokens run in passes of 4.
  const Weight w = test::encode_or_fail(Format::macko, patterns::random(DType::fp16, 300, 20000, 0.995, 5));
  test::expect_all_n(k, w, {1, 4, 8, 16}, "macko 300x20000 s=0.995", 6);
  const Weight w2 = test::encode_or_fail(Format::macko, patterns::random(DType::bf16, 200, 70000, 0.5, 7));
  test::expect_all_n(k, w2, {1, 3, 16}, "macko 200x70000 s=0.5", 8);
  // K = 130000: 260 KB per token, more than any GPU's shared memory per block: X gathered.
  const Weight w3 = test::encode_or_fail(Format::macko, patterns::random(DType::fp16, 64, 130000, 0.99, 9));
  test::expect_all_n(k, w3, {1, 2, 8, 16, 17}, "macko 64x130000 s=0.99", 10);
}
