// macko.warp_row vs the CPU reference (see decode_kernel_checks.hpp for what each test covers),
// plus long gaps (padding entries) and K large enough that X no longer fits in shared memory.
#include "gpu/decode_kernel_checks.hpp"

using namespace sparrow;

SPARROW_DECODE_KERNEL_TESTS(MackoWarpRow, "macko.warp_row", Format::macko)

TEST(MackoWarpRow, LongGapsAndWideRows) {
  const auto& k = test::kernel_named("macko.warp_row");
  // 99.5 % sparse over 20000 columns: most gaps exceed 16 and need padding entries; at N = 16
  // X^T is 640 KB, past any shared-memory budget, so the L1 gather path runs too.
  const Weight w = test::encode_or_fail(Format::macko, patterns::random(DType::fp16, 300, 20000, 0.995, 5));
  test::expect_all_n(k, w, {1, 4, 8, 16}, "macko 300x20000 s=0.995", 6);
  const Weight w2 = test::encode_or_fail(Format::macko, patterns::random(DType::bf16, 200, 70000, 0.5, 7));
  test::expect_all_n(k, w2, {1, 3, 16}, "macko 200x70000 s=0.5", 8);
}
