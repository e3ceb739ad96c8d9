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

// The same checks with each pipeline forced (the bulk-copy one falls back to the register kernel
// below sm_90), so both are covered whatever the rule picks on a device.
namespace {
using kernels::dense_gemv::Pipeline;
Status run_registers(const kernels::Problem& p, Stream s) {
  return kernels::dense_gemv::run_with(p, s, Pipeline::registers);
}
Status run_bulk(const kernels::Problem& p, Stream s) {
  return kernels::dense_gemv::run_with(p, s, Pipeline::bulk);
}
const bool kForcedPipelines = [] {
  const auto* base = kernels::find_kernel("dense.gemv");
  if (base == nullptr) return false;
  kernels::KernelInfo registers = *base, bulk = *base;
  registers.name = "dense.gemv:registers";
  registers.run = run_registers;
  bulk.name = "dense.gemv:bulk";
  bulk.run = run_bulk;
  test::test_kernels().push_back(registers);
  test::test_kernels().push_back(bulk);
  return true;
}();
}  // namespace

SPARROW_DECODE_KERNEL_TESTS(DenseGemvRegisters, "dense.gemv:registers", Format::dense)
SPARROW_DECODE_KERNEL_TESTS(DenseGemvBulk, "dense.gemv:bulk", Format::dense)

TEST(DenseGemvBulk, TallAndLongWeightsLoopOverTiles) {
  ASSERT_TRUE(kForcedPipelines);
  // More tiles than one wave holds (blocks loop over tiles, stages carried across them), a K of
  // many stages with a partial last one (4100 = 16 x 256 + 4), and a K of less than one stage.
  const auto& k = test::kernel_named("dense.gemv:bulk");
  for (DType t : {DType::fp16, DType::bf16}) {
    for (auto [m, kk] : {std::pair<int64_t, int64_t>{40000, 200}, {3001, 4100}, {257, 9}}) {
      const Weight w = test::encode_or_fail(Format::dense, patterns::random(t, m, kk, 0.3, 17));
      for (int n : {1, 8, 16}) {
        EXPECT_TRUE(test::kernel_ok(test::check_kernel(k, w, n, 18 + n), t))
            << dtype_name(t) << " " << m << "x" << kk << " N=" << n;
      }
    }
  }
}
