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

// Rows split into pieces (a few rows: 4 warps each, csr_vector::pieces_for): rows of ~50000
// entries whose pieces start mid-row, a magnitude-pruned weight whose row lengths differ, and a
// row count that leaves a block's last row slots past M (they still reach the block's barrier).
TEST(CsrVector, PiecesOnLongAndUnevenRows) {
  const auto& k = test::kernel_named("csr.vector");
  for (DType t : {DType::fp16, DType::bf16}) {
    const Weight wide = test::encode_or_fail(Format::csr, patterns::random(t, 37, 70001, 0.3, 51));
    test::expect_all_n(k, wide, {1, 3, 9, 17}, "csr 37x70001 s=0.3", 52);
    const Weight uneven =
        test::encode_or_fail(Format::csr, patterns::magnitude(t, 301, 5003, 0.9, 53));
    test::expect_all_n(k, uneven, {1, 2, 8, 16}, "csr 301x5003 magnitude s=0.9", 54);
  }
}
