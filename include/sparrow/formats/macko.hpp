// macko (MACKO, decode SpMV): CSR whose column indices are 4-bit deltas.
//
// Each row is a run of entries. Entry j of a row sits at column
//     col_0 = delta_0,   col_j = col_{j-1} + delta_j + 1      (delta in 0..15, so gaps of 1..16)
// A gap larger than 16 is bridged with zero-valued padding entries (delta 15, value 0), which is
// why d_eff grows past 1.25 d below d ~ 0.2. Rows are not padded: the value array as a whole is
// padded to a multiple of kPad entries, so a kernel can read any row with aligned 16-byte loads
// and mask off the entries that belong to the neighbouring rows.
//
//   row_ptr  (rows + 1)      entry index where each row starts (padding entries included)
//   values   (n_entries)     16-bit elements, n_entries a multiple of kPad, tail zero
//   deltas   (n_entries / 2) 4-bit deltas, entry e in byte e/2, low nibble for even e
#pragma once

#include <vector>

#include "sparrow/formats/common.hpp"

namespace sparrow::macko {

// 32 entries = 64 bytes of fp16 values and 16 bytes of deltas: one 16-byte delta load covers the
// values of four lanes' 16-byte value loads.
constexpr int64_t kPad = 32;
constexpr int kMaxDelta = 15;
// Entries per step of the entry-split kernel's records (step_rows): one warp load of 8 entries
// per lane.
constexpr int64_t kStepEntries = 256;

// The 4-bit delta of entry e: the low nibble of byte e / 2 for even e, the high one for odd e.
inline int delta_at(const uint8_t* deltas, uint64_t e) {
  return (deltas[e >> 1] >> ((e & 1) * 4)) & 0xF;
}

struct Matrix {
  Shape shape;
  int64_t nnz = 0;           // true non-zeros (excludes padding entries)
  Buffer<uint32_t> row_ptr;  // (rows + 1)
  Buffer<uint16_t> values;   // (n_entries)
  Buffer<uint8_t> deltas;    // (n_entries / 2)
  // Derived when the matrix is built (encode, checkpoint load, concat_rows) by derive(), not
  // stored in files:
  //   max_row_entries  the longest row's entries, which the host-side launch rules read (row_ptr
  //                    may be on the GPU);
  //   row_order        (4 * rows) the rows by entry count, longest first (ties: lower row
  //                    first), as records (row, row_ptr[row], row_ptr[row + 1], 0): a kernel
  //                    that hands rows out in this order starts the long rows of uneven
  //                    (magnitude-pruned) weights first, and reads a row's extent in one 16-byte
  //                    load. It travels with the matrix to the GPU: 16 bytes per row, counted in
  //                    derived_bytes(), not storage_bytes().
  //   step_rows        (4 * (steps + 1), steps = ceil(row_ptr[rows] / kStepEntries)) for each
  //                    step s (entries from kStepEntries * s), the record (row, carry, next,
  //                    next_start): `row` the first row that is not wholly before the step's first
  //                    entry (the row holding it, or an empty row starting there), `carry` that
  //                    row's column count (sum of delta + 1) over its entries before the step (0
  //                    when it starts at or after it), `next` the first row starting at or after
  //                    the step's first entry and `next_start` its row_ptr; record `steps` is
  //                    (rows, 0, rows, row_ptr[rows]). macko.warp_row's one-token entry split
  //                    (entries dealt to warps by count) starts a block at a row start and a warp
  //                    mid-row from these, without walking the row's earlier deltas. 16 bytes per
  //                    256 entries (2.5 % of the entries' bytes), counted in derived_bytes().
  int64_t max_row_entries = 0;
  Buffer<uint32_t> row_order;
  Buffer<uint32_t> step_rows;

  int64_t entries() const { return int64_t(values.size()); }
  size_t storage_bytes() const { return row_ptr.bytes() + values.bytes() + deltas.bytes(); }
  size_t derived_bytes() const { return row_order.bytes() + step_rows.bytes(); }
};

Result<Matrix> encode(const ConstMatrixView& w);  // fp16 or bf16
Result<HostMatrix> decode(const Matrix& m);
Status validate(const Matrix& m);
// Fills max_row_entries, row_order and step_rows from the host row_ptr and deltas (nothing for a
// device matrix). Safe on a malformed row_ptr; validate reports it.
void derive(Matrix& m);

}  // namespace sparrow::macko
