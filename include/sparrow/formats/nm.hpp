// nm: vector-wise N:M sparsity along K (NM-SpMM). Rows are taken in blocks of L; along K each
// block is cut into groups of M columns; in every group N column-vectors (L elements tall) are
// kept, the same N columns for all L rows of the block. L = 1 is element-wise N:M (2:4, ...).
//
//   Mp = round_up(rows, L), G = ceil(cols / M), Kc = G * N, b = index_bits = max(1, ceil(log2 M))
//   values   (Mp, Kc) row-major: values[r][g*N + j] = W[r][g*M + idx(r/L, g, j)]
//   indices  per row block, G*N indices of b bits packed LSB-first into uint32 words; each row
//            block starts a new word (words_per_block = ceil(G*N*b / 32)). Index j of group g is
//            at bit (g*N + j) * b. Indices in a group are strictly increasing. A group with fewer
//            than N non-zero vectors is filled with zero vectors; in a last partial group an index
//            may point past K, and its values are then zero.
#pragma once

#include "sparrow/formats/common.hpp"

namespace sparrow::nm {

struct Pattern {
  int n = 2;  // kept per group
  int m = 4;  // group size along K
  int l = 1;  // vector length (rows per block)
};
// "2:4" or "2:4:8" (N:M[:L]); nullopt for anything else or an impossible combination.
std::optional<Pattern> parse_pattern(std::string_view text);
Status check_pattern(const Pattern& p);  // 1 <= N < M <= 256, 1 <= L <= 256

struct Matrix {
  Shape shape;
  Pattern pattern;
  int index_bits = 2;
  int64_t groups = 0;           // G = ceil(cols / M)
  int64_t padded_rows = 0;      // Mp
  int64_t words_per_block = 0;
  Buffer<uint16_t> values;      // (Mp * G * N)
  Buffer<uint32_t> indices;     // (Mp / L * words_per_block)

  int64_t kept_cols() const { return groups * pattern.n; }
  size_t storage_bytes() const { return values.bytes() + indices.bytes(); }
};

// Fails with invalid_argument naming the first violating group (row block, columns, count) when
// `w` is not N:M with this pattern.
Result<Matrix> encode(const ConstMatrixView& w, const Pattern& p);  // fp16 or bf16
Result<HostMatrix> decode(const Matrix& m);
Status validate(const Matrix& m);

}  // namespace sparrow::nm
