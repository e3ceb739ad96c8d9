// tca_bme.decode vs the CPU reference (see decode_kernel_checks.hpp for what each test covers),
// plus the cases its two kernels split on: the streaming kernel at N = 1 (a weight with enough
// groups for every warp of a wave), a group denser than a stage (decoded from global memory),
// and few group rows split over many clusters.
#include "dispatch/choose.hpp"
#include "gpu/decode_kernel_checks.hpp"
#include "kernels/device_info.hpp"
#include "kernels/tca_bme/decode.hpp"

using namespace sparrow;

SPARROW_DECODE_KERNEL_TESTS(TcaBmeDecode, "tca_bme.decode", Format::tca_bme)

TEST(TcaBmeDecode, StreamingKernelAtOneTokenLarge) {
  const auto& k = test::kernel_named("tca_bme.decode");
  auto dev = kernels::current_device_info();
  ASSERT_TRUE(dev.ok());
  // Enough groups that N = 1 runs the streaming kernel on this GPU, not the one-token kernel.
  const int64_t groups = int64_t(kernels::tca_bme_decode::Config::kStreamMinGroupsPerWarp) *
                         kernels::tca_bme_decode::Config::warps(1) * dev.value().sm_count;
  const int64_t m = 8192 + 37, kk = ((groups + 128) / 129) * 64 - 5;  // 129 group rows
  ASSERT_FALSE(kernels::tca_bme_decode::use_one_token_kernel(((m + 63) / 64) * ((kk + 63) / 64),
                                                             dev.value().sm_count));
  const Weight w = test::encode_or_fail(Format::tca_bme, patterns::random(DType::fp16, m, kk, 0.6, 21));
  test::expect_all_n(k, w, {1, 2, 9}, "tca_bme streaming N=1", 22);
}

TEST(TcaBmeDecode, DenseGroupsAndFewGroupRows) {
  const auto& k = test::kernel_named("tca_bme.decode");
  // Sparsity 0: every group holds 4096 values, more than a one-tile stage (decoded from global
  // memory at N <= 8; two-tile stages hold a whole group).
  const Weight dense = test::encode_or_fail(Format::tca_bme, patterns::random(DType::bf16, 200, 700, 0.0, 23));
  test::expect_all_n(k, dense, {2, 8, 12}, "tca_bme 200x700 s=0", 24);
  // One group row, many groups along K: the row is split over many warps and clusters.
  const Weight wide = test::encode_or_fail(Format::tca_bme, patterns::random(DType::fp16, 40, 30000, 0.7, 25));
  test::expect_all_n(k, wide, {2, 5, 16}, "tca_bme 40x30000 s=0.7", 26);
}

// matmul's choice for tca_bme weights at N >= 2 follows the weight's size on this GPU
// (tca_bme_decode::suits): tca_bme.mma where the streaming kernel's warps would get fewer than
// kFewTokensMinGroupsPerWarp groups, tca_bme.decode from there on and at N = 1 always.
TEST(TcaBmeDecode, MatmulPassesItOverForSmallWeightsAtFewTokens) {
  auto dev = kernels::current_device_info();
  ASSERT_TRUE(dev.ok());
  const int64_t wave = int64_t(kernels::tca_bme_decode::Config::kFewTokensMinGroupsPerWarp) *
                       kernels::tca_bme_decode::Config::warps(1) * dev.value().sm_count;
  const int64_t k = 4096, small_m = 64 * std::max<int64_t>(1, wave / 64 / 2);
  const int64_t large_m = 64 * (wave / 64 + 1);
  const Weight small = test::encode_or_fail(Format::tca_bme, patterns::random(DType::fp16, small_m, k, 0.5, 31));
  const Weight large = test::encode_or_fail(Format::tca_bme, patterns::random(DType::fp16, large_m, k, 0.5, 32));
  for (int64_t n : {2, 8, 16}) {
    const kernels::KernelInfo* ks = choose_kernel(small, n, 0);
    const kernels::KernelInfo* kl = choose_kernel(large, n, 0);
    ASSERT_NE(ks, nullptr);
    ASSERT_NE(kl, nullptr);
    EXPECT_STREQ(ks->name, "tca_bme.mma") << small_m << " rows, N=" << n;
    EXPECT_STREQ(kl->name, "tca_bme.decode") << large_m << " rows, N=" << n;
  }
  EXPECT_STREQ(choose_kernel(small, 1, 0)->name, "tca_bme.decode");
}
