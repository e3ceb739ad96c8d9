// Helpers shared by the CPU tests.
#pragma once

#include <cstdint>

#include "sparrow/matrix.hpp"

namespace sparrow::test {

inline int64_t count_nonzeros(const ConstMatrixView& w) {
  int64_t n = 0;
  for (int64_t r = 0; r < w.rows; ++r)
    for (int64_t c = 0; c < w.cols; ++c) n += !w.zero_at(r, c);
  return n;
}

}  // namespace sparrow::test
