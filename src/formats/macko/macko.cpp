// macko: host encode / decode / validate. The layout is documented in
// include/sparrow/formats/macko.hpp and docs/formats/macko.md.
#include "sparrow/formats/macko.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "formats/row_ptr.hpp"

namespace sparrow::macko {

namespace {

constexpr uint64_t kMaxEntries = std::numeric_limits<uint32_t>::max();

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

std::string str(uint64_t v) { return std::to_string(v); }

// row_order of include/sparrow/formats/macko.hpp: records (row, start, end, 0), longest first.
std::vector<uint32_t> build_row_order(const std::vector<uint32_t>& rp) {
  if (rp.size() < 2) return {};
  std::vector<uint32_t> rows(rp.size() - 1);
  for (size_t r = 0; r < rows.size(); ++r) rows[r] = uint32_t(r);
  auto len = [&](uint32_t r) { return int64_t(rp[r + 1]) - int64_t(rp[r]); };
  std::stable_sort(rows.begin(), rows.end(),
                   [&](uint32_t a, uint32_t b) { return len(a) > len(b); });
  std::vector<uint32_t> order(4 * rows.size(), 0);
  for (size_t i = 0; i < rows.size(); ++i) {
    order[4 * i] = rows[i];
    order[4 * i + 1] = rp[rows[i]];
    order[4 * i + 2] = rp[rows[i] + 1];
  }
  return order;
}

// Sum of the 4-bit deltas of entries [a, b): 16 at a time from 8-byte words.
uint64_t delta_sum(const uint8_t* dl, uint64_t a, uint64_t b) {
  uint64_t s = 0;
  if (a < b && (a & 1)) s += delta_at(dl, a++);
  if (a < b && (b & 1)) s += delta_at(dl, --b);
  uint64_t i = a / 2;
  const uint64_t end = b / 2;
  for (; i < end && (i & 7); ++i) s += (dl[i] & 0xFu) + (dl[i] >> 4);
  for (; i + 8 <= end; i += 8) {
    uint64_t w;
    std::memcpy(&w, dl + i, 8);
    const uint64_t pairs = (w & 0x0F0F0F0F0F0F0F0Full) + ((w >> 4) & 0x0F0F0F0F0F0F0F0Full);
    s += (pairs * 0x0101010101010101ull) >> 56;  // 8 bytes of <= 30: no carry out of the top
  }
  for (; i < end; ++i) s += (dl[i] & 0xFu) + (dl[i] >> 4);
  return s;
}

// step_rows of include/sparrow/formats/macko.hpp; empty for a malformed row_ptr (validate says
// why). Each row's deltas are summed once: the running sum follows the steps through the row.
std::vector<uint32_t> build_step_rows(const std::vector<uint32_t>& rp, const uint8_t* dl,
                                      uint64_t n_entries) {
  if (rp.size() < 2 || rp[0] != 0) return {};
  for (size_t r = 1; r < rp.size(); ++r) {
    if (rp[r] < rp[r - 1]) return {};
  }
  const uint64_t rows = rp.size() - 1;
  const uint64_t used = rp[rows];
  if (used > n_entries) return {};
  const uint64_t steps = (used + kStepEntries - 1) / kStepEntries;
  std::vector<uint32_t> out(4 * (steps + 1), 0);
  uint64_t r = 0;
  uint64_t sum_row = rows, sum_at = 0, sum = 0;  // sum of (delta + 1) over [rp[sum_row], sum_at)
  for (uint64_t s = 0; s < steps; ++s) {
    const uint64_t base = s * uint64_t(kStepEntries);
    while (r < rows && rp[r + 1] <= base && rp[r] < base) ++r;
    uint64_t carry = 0;
    if (r < rows && rp[r] < base) {
      if (sum_row != r) sum_row = r, sum_at = rp[r], sum = 0;
      sum += (base - sum_at) + delta_sum(dl, sum_at, base);
      sum_at = base;
      carry = sum;
    }
    const uint64_t next = carry > 0 ? r + 1 : r;  // the first row starting at or after base
    out[4 * s] = uint32_t(r);
    out[4 * s + 1] = uint32_t(carry);
    out[4 * s + 2] = uint32_t(next);
    out[4 * s + 3] = rp[next];
  }
  out[4 * steps] = uint32_t(rows);
  out[4 * steps + 2] = uint32_t(rows);
  out[4 * steps + 3] = uint32_t(used);
  return out;
}

// Entries needed for one row: every non-zero, plus one padding entry per 16 columns of a gap
// that a 4-bit delta cannot span. With prev = -1 before the first entry, a non-zero at column c
// needs delta = c - prev - 1; each padding entry (delta 15) advances prev by 16.
// Written with arithmetic instead of a branch on the element (nz is 0 or 1): at density ~0.5
// that branch is a coin flip, and its mispredictions made this loop 3x slower. gcc keeps a
// branch for `nz ? a : b` here, hence the multiplications.
uint64_t count_row_entries(const uint16_t* row, int64_t cols) {
  uint64_t n = 0;
  int64_t prev = -1;
  for (int64_t c = 0; c < cols; ++c) {
    const int64_t nz = !is_zero16(row[c]);
    n += uint64_t(nz * (1 + (c - prev - 1) / 16));
    prev += nz * (c - prev);
  }
  return n;
}

}  // namespace

Result<Matrix> encode(const ConstMatrixView& w) {
  SPARROW_RETURN_IF_ERROR(check_encode_input(w, /*allow_fp32=*/false, "macko"));
  const int64_t M = w.rows, K = w.cols;
  const uint16_t* base = static_cast<const uint16_t*>(w.data);

  // Pass 1: entries per row, so every array is allocated exactly once.
  std::vector<uint32_t> row_ptr(size_t(M) + 1, 0);
  uint64_t total = 0;
  for (int64_t r = 0; r < M; ++r) {
    total += count_row_entries(base + r * w.ld, K);
    // The padded total must fit too: kernels index entries with 32-bit row pointers.
    if (uint64_t(round_up(int64_t(total), kPad)) > kMaxEntries) {
      return unsupported("macko: the matrix needs more than 2^32 - 1 entries (non-zeros plus gap "
                         "padding; passed at row " + str(uint64_t(r)) + " of " + str(uint64_t(M)) +
                         "), which 32-bit row pointers cannot address; split the matrix");
    }
    row_ptr[size_t(r) + 1] = uint32_t(total);
  }
  const size_t n_entries = size_t(round_up(int64_t(total), kPad));

  // Pass 2: fill. The tail past row_ptr[M] stays zero (value 0, delta 0).
  // Branch-free over the elements, as in pass 1: every element writes its value and delta
  // (masked to 0 for a zero element) at the next free entry and only non-zeros advance it, so a
  // later non-zero or the zero tail overwrites what a zero wrote. One spare entry at the end
  // takes the writes of zeros after the last entry when the entries fill n_entries exactly.
  std::vector<uint16_t> values(n_entries + 1, 0);
  std::vector<uint8_t> deltas(n_entries / 2 + 1, 0);
  uint64_t e = 0;
  for (int64_t r = 0; r < M; ++r) {
    const uint16_t* row = base + r * w.ld;
    int64_t prev = -1;
    for (int64_t c = 0; c < K; ++c) {
      const int64_t nz = !is_zero16(row[c]);
      int64_t delta = nz * (c - prev - 1);
      if (delta > kMaxDelta) {  // a non-zero after a long gap: rare at densities that matter
        for (; delta > kMaxDelta; delta -= 16, ++e) {
          deltas[e >> 1] |= uint8_t(kMaxDelta << ((e & 1) * 4));  // padding: value stays 0
        }
      }
      values[e] = uint16_t(row[c] & -nz);
      deltas[e >> 1] |= uint8_t(delta << ((e & 1) * 4));
      e += uint64_t(nz);
      prev += nz * (c - prev);
    }
  }
  values.resize(n_entries);  // drop the spare entries (shrinking keeps the allocation)
  deltas.resize(n_entries / 2);
  int64_t nnz = 0;
  for (uint16_t v : values) nnz += !is_zero16(v);  // padding entries are the only stored zeros

  Matrix m;
  m.shape = {M, K, w.dtype};
  m.nnz = nnz;
  m.row_ptr = Buffer<uint32_t>(std::move(row_ptr));
  m.values = Buffer<uint16_t>(std::move(values));
  m.deltas = Buffer<uint8_t>(std::move(deltas));
  derive(m);
  return m;
}

Status validate(const Matrix& m) {
  const Shape& s = m.shape;
  if (m.row_ptr.on_device() || m.values.on_device() || m.deltas.on_device() ||
      m.row_order.on_device() || m.step_rows.on_device()) {
    return invalid_argument("macko: validate needs host buffers; call to_host() first");
  }
  if (s.rows <= 0 || s.cols <= 0) {
    return corrupt_data("macko: non-positive shape " + std::to_string(s.rows) + " x " +
                        std::to_string(s.cols));
  }
  if (s.dtype != DType::fp16 && s.dtype != DType::bf16) {
    return corrupt_data("macko: dtype must be fp16 or bf16");
  }
  if (m.row_ptr.size() != uint64_t(s.rows) + 1) {
    return corrupt_data("macko: row_ptr has " + str(m.row_ptr.size()) +
                        " entries, expected rows + 1 = " + str(uint64_t(s.rows) + 1));
  }
  const uint64_t n_entries = m.values.size();
  if (n_entries % kPad != 0) {
    return corrupt_data("macko: values has " + str(n_entries) + " entries, not a multiple of " +
                        std::to_string(kPad));
  }
  if (n_entries > kMaxEntries) {
    return corrupt_data("macko: " + str(n_entries) + " entries exceed 32-bit row pointers");
  }
  if (m.deltas.size() != n_entries / 2) {
    return corrupt_data("macko: deltas has " + str(m.deltas.size()) + " bytes, expected " +
                        str(n_entries / 2) + " (two 4-bit deltas per byte)");
  }
  const uint32_t* rp = m.row_ptr.data();
  if (rp[0] != 0) return corrupt_data("macko: row_ptr[0] is " + str(rp[0]) + ", not 0");
  const uint64_t used = rp[s.rows];
  if (used > n_entries) {
    return corrupt_data("macko: row_ptr[rows] = " + str(used) + " is past the " +
                        str(n_entries) + " stored entries");
  }
  if (uint64_t(round_up(int64_t(used), kPad)) != n_entries) {
    return corrupt_data("macko: " + str(n_entries) + " stored entries for " + str(used) +
                        " used; the tail must pad to the next multiple of " +
                        std::to_string(kPad) + " only");
  }
  for (int64_t r = 0; r < s.rows; ++r) {
    if (rp[r + 1] < rp[r]) {
      return corrupt_data("macko: row_ptr decreases at row " + std::to_string(r) + " (" +
                          str(rp[r]) + " -> " + str(rp[r + 1]) + ")");
    }
  }
  // Every entry: its column stays inside the row, and a zero-valued entry is a gap bridge
  // (delta 15) -- the only zero the encoder writes.
  const uint16_t* vals = m.values.data();
  const uint8_t* dl = m.deltas.data();
  int64_t nnz = 0;
  for (int64_t r = 0; r < s.rows; ++r) {
    int64_t col = -1;
    for (uint64_t e = rp[r]; e < rp[r + 1]; ++e) {
      const int d = delta_at(dl, e);
      col += d + 1;
      if (col >= s.cols) {
        return corrupt_data("macko: row " + std::to_string(r) + " entry " + str(e - rp[r]) +
                            " lands on column " + std::to_string(col) + " >= K = " +
                            std::to_string(s.cols));
      }
      if (is_zero16(vals[e])) {
        if (d != kMaxDelta) {
          return corrupt_data("macko: row " + std::to_string(r) + " entry " + str(e - rp[r]) +
                              " is zero with delta " + std::to_string(d) +
                              "; padding entries must have delta 15");
        }
      } else {
        ++nnz;
      }
    }
  }
  for (uint64_t e = used; e < n_entries; ++e) {
    if (vals[e] != 0 || delta_at(dl, e) != 0) {
      return corrupt_data("macko: tail entry " + str(e) + " past row_ptr[rows] is not zero");
    }
  }
  if (m.nnz != nnz) {
    return corrupt_data("macko: nnz field is " + std::to_string(m.nnz) + " but the entries hold " +
                        std::to_string(nnz) + " non-zeros");
  }
  const int64_t longest = longest_row(m.row_ptr.host());
  if (m.max_row_entries != longest) {
    return corrupt_data("macko: max_row_entries is " + std::to_string(m.max_row_entries) +
                        " but the longest row has " + std::to_string(longest) + " entries");
  }
  if (m.row_order.host() != build_row_order(m.row_ptr.host())) {
    return corrupt_data("macko: row_order does not match row_ptr (call derive())");
  }
  if (m.step_rows.host() != build_step_rows(m.row_ptr.host(), dl, n_entries)) {
    return corrupt_data("macko: step_rows does not match row_ptr and deltas (call derive())");
  }
  return Status::success();
}

void derive(Matrix& m) {
  if (m.row_ptr.on_device()) return;
  m.max_row_entries = longest_row(m.row_ptr.host());
  m.row_order = Buffer<uint32_t>(build_row_order(m.row_ptr.host()));
  m.step_rows =
      Buffer<uint32_t>(build_step_rows(m.row_ptr.host(), m.deltas.data(), m.deltas.size() * 2));
}

Result<HostMatrix> decode(const Matrix& m) {
  SPARROW_RETURN_IF_ERROR(validate(m));
  const int64_t K = m.shape.cols;
  HostMatrix out(m.shape.dtype, m.shape.rows, K);
  uint16_t* o = static_cast<uint16_t*>(out.data());
  const uint32_t* rp = m.row_ptr.data();
  const uint16_t* vals = m.values.data();
  const uint8_t* dl = m.deltas.data();
  for (int64_t r = 0; r < m.shape.rows; ++r) {
    int64_t col = -1;
    for (uint64_t e = rp[r]; e < rp[r + 1]; ++e) {
      col += delta_at(dl, e) + 1;
      o[r * K + col] = vals[e];  // padding entries write the 0 that is already there
    }
  }
  return out;
}

}  // namespace sparrow::macko
