// tca_bme.decode vs the CPU reference (see decode_kernel_checks.hpp for what each test covers),
// plus the cases its two kernels split on: the streaming kernel at N = 1 (a weight with enough
// groups for every warp of a wave), a group denser than a stage (decoded from global memory),
// and few group rows split over many clusters.
#include "gpu/decode_kernel_checks.hpp"
#include "kernels/device_info.hpp"
#include "kernels/tca_bme/decode.hpp"

using namespace sparrow;

SPARROW_DECODE_KERNEL_TESTS(TcaBmeDecode, "tca_bme.decode", Format::tca_bme)

// The same checks with the pass kernel forced: up to 4 tokens always on the CUDA-core strip
// kernels (one_token, few_tokens), the one-token kernel copying with registers or with bulk copies
// (sm_90; registers below it), or never (the streaming tensor-core kernel, its stages filled by
// bulk copies on sm_90 or forced to cp.async), so each is covered on every shape whatever
// use_one_token_kernel / use_few_tokens_kernel / use_bulk_copy choose there.
namespace {
using kernels::tca_bme_decode::StageCopy;
using kernels::tca_bme_decode::StripKernel;
Status run_strip(const kernels::Problem& p, Stream s) {
  return kernels::tca_bme_decode::run_with(p, s, StripKernel::always, StageCopy::per_lane);
}
Status run_strip_bulk(const kernels::Problem& p, Stream s) {
  return kernels::tca_bme_decode::run_with(p, s, StripKernel::always, StageCopy::bulk);
}
Status run_streaming(const kernels::Problem& p, Stream s) {
  return kernels::tca_bme_decode::run_with(p, s, StripKernel::never);
}
Status run_streaming_cp_async(const kernels::Problem& p, Stream s) {
  return kernels::tca_bme_decode::run_with(p, s, StripKernel::never, StageCopy::per_lane);
}
const bool kForcedKernels =
    test::register_test_variant("tca_bme.decode", "tca_bme.decode:strip", run_strip) &&
    test::register_test_variant("tca_bme.decode", "tca_bme.decode:strip_bulk", run_strip_bulk) &&
    test::register_test_variant("tca_bme.decode", "tca_bme.decode:streaming", run_streaming) &&
    test::register_test_variant("tca_bme.decode", "tca_bme.decode:streaming_cp_async",
                                run_streaming_cp_async);
}  // namespace

SPARROW_DECODE_KERNEL_TESTS(TcaBmeDecodeStrip, "tca_bme.decode:strip", Format::tca_bme)
SPARROW_DECODE_KERNEL_TESTS(TcaBmeDecodeStripBulk, "tca_bme.decode:strip_bulk", Format::tca_bme)
SPARROW_DECODE_KERNEL_TESTS(TcaBmeDecodeStreaming, "tca_bme.decode:streaming", Format::tca_bme)
SPARROW_DECODE_KERNEL_TESTS(TcaBmeDecodeStreamingCpAsync, "tca_bme.decode:streaming_cp_async",
                            Format::tca_bme)

TEST(TcaBmeDecodeStrip, FewTokensEveryNWithNorm) {
  ASSERT_TRUE(kForcedKernels);
  const auto& k = test::kernel_named("tca_bme.decode:strip");
  // Odd shapes, a K that leaves a partial group and an odd count of 8-column octets, every
  // N of the few-token instances (2, 4 and 3, which rounds up to 4), norm included; N = 5 is
  // past them (the streaming kernel).
  for (DType t : {DType::fp16, DType::bf16}) {
    const Weight w =
        test::encode_or_fail(Format::tca_bme, patterns::random(t, 517, 1003, 0.6, 31));
    for (int n = 2; n <= 5; ++n) {
      EXPECT_TRUE(test::kernel_ok(test::check_kernel(k, w, n, 32 + n), t)) << "N=" << n;
      EXPECT_TRUE(test::kernel_ok(test::check_kernel(k, w, n, 42 + n, true, true, true, true), t))
          << "input_rms bias+accumulate N=" << n;
    }
  }
}

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

// Group rows one group long and ~4 per warp of the streaming kernel's wave: a warp covers whole
// rows in between its first and last and stores them itself (store_direct), with input_rms too
// (where the warp sums x^2 alone). *Large: 540 K rows, kept out of the memcheck stage.
TEST(TcaBmeDecode, WarpsThatCoverWholeRowsLarge) {
  const auto& k = test::kernel_named("tca_bme.decode");
  auto dev = kernels::current_device_info();
  ASSERT_TRUE(dev.ok());
  const int warps = std::max(kernels::tca_bme_decode::Config::warps(1),
                             kernels::tca_bme_decode::Config::warps(2));
  const int64_t m = int64_t(4) * warps * dev.value().sm_count * 64 - 29, kk = 45;
  for (DType t : {DType::fp16, DType::bf16}) {
    const Weight w = test::encode_or_fail(Format::tca_bme, patterns::random(t, m, kk, 0.5, 27));
    for (int n : {2, 9}) {
      EXPECT_TRUE(test::kernel_ok(test::check_kernel(k, w, n, 28 + n, true, true), t))
          << "tca_bme " << m << "x" << kk << " bias+accumulate N=" << n;
      EXPECT_TRUE(test::kernel_ok(test::check_kernel(k, w, n, 38 + n, false, false, true, true), t))
          << "tca_bme " << m << "x" << kk << " input_rms N=" << n;
    }
  }
}

// A weight without its derived strip_starts (derive() never ran) is refused before anything
// launches, with one token (strip kernel) and with 18 (a streaming pass, then a 2-token pass that
// would take the strip kernel): Y stays poisoned, not half written.
TEST(TcaBmeDecodeStrip, RejectsWeightWithoutStripStarts) {
  ASSERT_TRUE(kForcedKernels);
  const auto& k = test::kernel_named("tca_bme.decode:strip");
  if (!k.run) return;
  const DType t = DType::fp16;
  const Weight hw = test::encode_or_fail(Format::tca_bme, patterns::random(t, 130, 70, 0.5, 91));
  auto dw = to_device(hw);
  ASSERT_TRUE(dw.ok());
  std::get<tca_bme::Matrix>(dw.value()).strip_starts = Buffer<uint16_t>();
  for (int n : {1, 18}) {
    test::DeviceMatrix x = test::DeviceMatrix::upload(patterns::dense_random(t, n, 70, 92));
    test::DeviceMatrix y = test::DeviceMatrix::alloc(t, n, 130);
    y.poison();
    const Status st = k.run(kernels::Problem{dw.value(), x.view, y.view, {}}, nullptr);
    EXPECT_EQ(st.code(), Code::invalid_argument) << "N=" << n << ": " << st.to_string();
    EXPECT_NE(st.to_string().find("strip_starts"), std::string::npos) << st.to_string();
    EXPECT_TRUE(test::still_poisoned(y)) << "N=" << n << " wrote Y";
  }
}

// The bulk-copy stages are sized by the weight's fullest strip (max_strip_values): a weight whose
// strips are mostly sparse but with a few dense ones (a group's last strip, which carries the
// group's padding, and strips that start mid-chunk) must still copy and walk those whole. Checked
// against the reference with the bulk copies forced, fp16 and bf16, with bias, accumulate and
// input_rms.
TEST(TcaBmeDecodeStripBulk, StagesHoldTheFullestStrip) {
  ASSERT_TRUE(kForcedKernels);
  const auto& k = test::kernel_named("tca_bme.decode:strip_bulk");
  for (DType t : {DType::fp16, DType::bf16}) {
    HostMatrix h = patterns::random(t, 301, 1000, 0.93, 51);
    uint16_t* d = static_cast<uint16_t*>(h.data());
    // Rows 48..63 (strip 3 of group row 0) over columns 64..127 (group 1): dense; rows 16..31
    // over columns 128..191 dense but one element, so the strips after it start mid-chunk.
    const uint16_t one = t == DType::fp16 ? uint16_t(0x3C00) : uint16_t(0x3F80);
    for (int64_t r = 48; r < 64; ++r) {
      for (int64_t c = 64; c < 128; ++c) d[r * 1000 + c] = one;
    }
    for (int64_t r = 16; r < 32; ++r) {
      for (int64_t c = 128; c < 192; ++c) d[r * 1000 + c] = (r == 17 && c == 130) ? 0 : one;
    }
    const Weight w = test::encode_or_fail(Format::tca_bme, h);
    ASSERT_EQ(std::get<tca_bme::Matrix>(w).max_strip_values, 1024);
    EXPECT_TRUE(test::kernel_ok(test::check_kernel(k, w, 1, 52), t)) << "N=1";
    EXPECT_TRUE(test::kernel_ok(test::check_kernel(k, w, 1, 53, true, true, true, true), t))
        << "input_rms bias+accumulate N=1";
  }
}

// A weight whose max_strip_values was never derived (0 with non-zeros) or is out of range is
// refused before anything launches: a stage sized from it could not hold the strips.
TEST(TcaBmeDecodeStripBulk, RefusesUnderivedMaxStripValues) {
  ASSERT_TRUE(kForcedKernels);
  const auto& k = test::kernel_named("tca_bme.decode:strip_bulk");
  const DType t = DType::fp16;
  const Weight hw = test::encode_or_fail(Format::tca_bme, patterns::random(t, 130, 70, 0.5, 93));
  for (int64_t wrong : {int64_t(0), int64_t(-1), int64_t(1025)}) {
    auto dw = to_device(hw);
    ASSERT_TRUE(dw.ok());
    std::get<tca_bme::Matrix>(dw.value()).max_strip_values = wrong;
    test::DeviceMatrix x = test::DeviceMatrix::upload(patterns::dense_random(t, 1, 70, 94));
    test::DeviceMatrix y = test::DeviceMatrix::alloc(t, 1, 130);
    y.poison();
    const Status st = k.run(kernels::Problem{dw.value(), x.view, y.view, {}}, nullptr);
    EXPECT_EQ(st.code(), Code::invalid_argument) << wrong << ": " << st.to_string();
    EXPECT_NE(st.to_string().find("max_strip_values"), std::string::npos) << st.to_string();
    EXPECT_TRUE(test::still_poisoned(y)) << wrong << " wrote Y";
  }
}
