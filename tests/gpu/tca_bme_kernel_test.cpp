// tca_bme.decode vs the CPU reference (see decode_kernel_checks.hpp for what each test covers).
#include "gpu/decode_kernel_checks.hpp"

using namespace sparrow;

SPARROW_DECODE_KERNEL_TESTS(TcaBmeDecode, "tca_bme.decode", Format::tca_bme)
