// Row-pointer arithmetic shared by the formats that keep one (csr, macko): their derived
// longest-row fields, which host launch rules read when row_ptr itself lives on the GPU.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace sparrow {

// The longest row's entries, row_ptr[r + 1] - row_ptr[r] over all rows (0 without rows). Safe on
// a malformed row_ptr (a decreasing step counts as 0); the formats' validate reports those.
inline int64_t longest_row(const std::vector<uint32_t>& row_ptr) {
  int64_t longest = 0;
  for (size_t r = 1; r < row_ptr.size(); ++r) {
    longest = std::max<int64_t>(longest, int64_t(row_ptr[r]) - int64_t(row_ptr[r - 1]));
  }
  return longest;
}

}  // namespace sparrow
