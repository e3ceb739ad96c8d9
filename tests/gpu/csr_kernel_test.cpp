// csr.vector vs the CPU reference (see decode_kernel_checks.hpp for what each test covers), plus
// fp32 values and both index widths.
#include "gpu/decode_kernel_checks.hpp"

using namespace sparrow;

SPARROW_DECODE_KERNEL_TESTS(CsrVector, "csr.vector", Format::csr)

TEST(CsrVector, Fp32Values) { test::check_small_sweep("csr.vector", Format::csr, DType::fp32); }

TEST(CsrVector, ThirtyTwoBitIndices) {
  EncodeOptions eo;
  eo.csr_index = csr::IndexWidth::bits32;
  test::check_small_sweep("csr.vector", Format::csr, DType::fp16, eo);
  test::check_large("csr.vector", Format::csr, DType::bf16, eo);
}
