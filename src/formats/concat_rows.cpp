// concat_rows: stacks encoded weights of one format along M without decoding them, so the engine
// can run q/k/v (or gate/up) as one matmul over a taller matrix. Formats whose layout is rows
// end to end (dense, csr, macko) are joined array by array. tca_bme stores 64-row group rows one
// after another, so parts whose rows are multiples of 64 (all but the last) are joined the same
// way; other row counts are decoded, stacked and encoded again (exact, slower). tiled_csl and nm
// return `unsupported` and callers keep the parts separate.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "sparrow/weight.hpp"

namespace sparrow {

namespace {

template <class M>
std::vector<const M*> typed(const std::vector<const Weight*>& parts) {
  std::vector<const M*> out;
  for (const Weight* w : parts) out.push_back(&std::get<M>(*w));
  return out;
}

template <class T>
void append(std::vector<T>& dst, const Buffer<T>& src) {
  dst.insert(dst.end(), src.host().begin(), src.host().end());
}

Result<Weight> concat_dense(const std::vector<const dense::Matrix*>& ms, const Shape& shape) {
  dense::Matrix out;
  out.shape = shape;
  out.ld = ms[0]->ld;
  std::vector<uint8_t> values;
  size_t total = 0;  // reserved up front: growing a multi-GB copy would copy it again
  for (const auto* m : ms) total += m->values.size();
  values.reserve(total);
  for (const auto* m : ms) {
    if (m->ld != out.ld) return unsupported("concat_rows: dense parts have different row strides");
    append(values, m->values);
  }
  out.values = Buffer<uint8_t>(std::move(values));
  return Weight(std::move(out));
}

Result<Weight> concat_csr(const std::vector<const csr::Matrix*>& ms, const Shape& shape) {
  csr::Matrix out;
  out.shape = shape;
  out.index_bits = ms[0]->index_bits;
  std::vector<uint32_t> row_ptr{0};
  std::vector<uint16_t> col16;
  std::vector<uint32_t> col32;
  std::vector<uint8_t> values;
  for (const auto* m : ms) {
    if (m->index_bits != out.index_bits) {
      return unsupported("concat_rows: csr parts have different column index widths");
    }
    const uint64_t base = row_ptr.back();
    if (base + uint64_t(m->nnz()) > UINT32_MAX) {
      return unsupported("concat_rows: more than 2^32 - 1 non-zeros in one csr matrix");
    }
    for (size_t r = 1; r < m->row_ptr.size(); ++r) row_ptr.push_back(uint32_t(base + m->row_ptr.host()[r]));
    append(col16, m->col16);
    append(col32, m->col32);
    append(values, m->values);
  }
  out.row_ptr = Buffer<uint32_t>(std::move(row_ptr));
  out.col16 = Buffer<uint16_t>(std::move(col16));
  out.col32 = Buffer<uint32_t>(std::move(col32));
  out.values = Buffer<uint8_t>(std::move(values));
  csr::derive(out);
  return Weight(std::move(out));
}

// Entry e of a macko matrix keeps its delta in the low nibble of byte e/2 when e is even. A part
// appended after an even number of entries copies its delta bytes; after an odd number every delta
// moves up one nibble.
Result<Weight> concat_macko(const std::vector<const macko::Matrix*>& ms, const Shape& shape) {
  macko::Matrix out;
  out.shape = shape;
  std::vector<uint32_t> row_ptr{0};
  std::vector<uint16_t> values;
  std::vector<uint8_t> deltas;  // (entries + 1) / 2 bytes while joining
  uint64_t n = 0;               // entries joined so far
  size_t total = 0, rows = 1;   // reserved up front (as concat_dense)
  for (const auto* m : ms) total += m->values.size(), rows += m->row_ptr.size();
  values.reserve(total + macko::kPad);
  deltas.reserve(total / 2 + macko::kPad);
  row_ptr.reserve(rows);
  for (const auto* m : ms) {
    const uint32_t used = m->row_ptr.host().back();  // entries before the part's zero tail
    if (n + used > uint64_t(UINT32_MAX) - uint64_t(macko::kPad)) {
      return unsupported("concat_rows: more than 2^32 - 1 entries in one macko matrix");
    }
    for (size_t r = 1; r < m->row_ptr.size(); ++r) row_ptr.push_back(uint32_t(n + m->row_ptr.host()[r]));
    values.insert(values.end(), m->values.host().begin(), m->values.host().begin() + used);
    const uint8_t* src = m->deltas.host().data();
    const size_t bytes = (size_t(used) + 1) / 2;  // the last one's high nibble is a tail entry: 0
    if (n % 2 == 0) {
      deltas.insert(deltas.end(), src, src + bytes);
    } else {
      for (size_t i = 0; i < bytes; ++i) {
        deltas.back() |= uint8_t((src[i] & 0xF) << 4);
        deltas.push_back(uint8_t(src[i] >> 4));
      }
    }
    n += used;
    deltas.resize(size_t((n + 1) / 2));
    out.nnz += m->nnz;
  }
  const size_t n_entries = (values.size() + macko::kPad - 1) / macko::kPad * macko::kPad;
  values.resize(n_entries, 0);
  deltas.resize(n_entries / 2, 0);
  out.row_ptr = Buffer<uint32_t>(std::move(row_ptr));
  out.values = Buffer<uint16_t>(std::move(values));
  out.deltas = Buffer<uint8_t>(std::move(deltas));
  macko::derive(out);
  return Weight(std::move(out));
}

// tca_bme: group rows in order, each part's group offsets shifted by the values before it. A
// part's padding rows (beyond its M) would land inside the stack unless its rows are a multiple
// of 64, so then the parts are decoded and the stack encoded afresh.
Result<Weight> concat_tca_bme(const std::vector<const tca_bme::Matrix*>& ms, const Shape& shape) {
  bool aligned = true;
  for (size_t i = 0; i + 1 < ms.size(); ++i) aligned = aligned && ms[i]->shape.rows % 64 == 0;
  if (!aligned) {
    HostMatrix dense(shape.dtype, shape.rows, shape.cols);
    const size_t row_bytes = size_t(shape.cols) * dtype_size(shape.dtype);
    int64_t row = 0;
    for (const auto* m : ms) {
      SPARROW_ASSIGN_OR_RETURN(HostMatrix part, tca_bme::decode(*m));
      std::memcpy(static_cast<uint8_t*>(dense.data()) + size_t(row) * row_bytes, part.data(),
                  size_t(part.rows()) * row_bytes);
      row += part.rows();
    }
    SPARROW_ASSIGN_OR_RETURN(tca_bme::Matrix out, tca_bme::encode(dense.view()));
    return Weight(std::move(out));
  }
  tca_bme::Matrix out;
  out.shape = shape;
  out.groups_k = ms[0]->groups_k;
  std::vector<uint64_t> bitmaps;
  std::vector<uint32_t> offsets{0};
  std::vector<uint16_t> values;
  size_t total = 0;  // reserved up front (as concat_dense)
  for (const auto* m : ms) total += m->values.size();
  values.reserve(total);
  for (const auto* m : ms) {
    const uint64_t base = offsets.back();
    if (base + m->values.size() > UINT32_MAX) {
      return unsupported("concat_rows: more than 2^32 - 1 values in one tca_bme matrix");
    }
    out.groups_m += m->groups_m;
    out.nnz += m->nnz;
    append(bitmaps, m->bitmaps);
    for (size_t g = 1; g < m->group_offsets.size(); ++g) {
      offsets.push_back(uint32_t(base + m->group_offsets.host()[g]));
    }
    append(values, m->values);
  }
  out.bitmaps = Buffer<uint64_t>(std::move(bitmaps));
  out.group_offsets = Buffer<uint32_t>(std::move(offsets));
  out.values = Buffer<uint16_t>(std::move(values));
  tca_bme::derive(out);
  return Weight(std::move(out));
}

}  // namespace

bool can_concat_rows(Format f) {
  return f == Format::dense || f == Format::csr || f == Format::macko || f == Format::tca_bme;
}

Result<Weight> concat_rows(const std::vector<const Weight*>& parts) {
  if (parts.empty()) return invalid_argument("concat_rows: no parts");
  const Format f = format_of(*parts[0]);
  const Shape& first = shape_of(*parts[0]);
  Shape shape{0, first.cols, first.dtype};
  for (const Weight* w : parts) {
    if (location_of(*w) != Location::host) {
      return invalid_argument("concat_rows needs host weights; call to_host() first");
    }
    if (format_of(*w) != f) return invalid_argument("concat_rows: the parts have different formats");
    const Shape& s = shape_of(*w);
    if (s.cols != first.cols || s.dtype != first.dtype) {
      return invalid_argument("concat_rows: the parts differ in columns or dtype (" +
                              std::to_string(s.cols) + " vs " + std::to_string(first.cols) + ")");
    }
    shape.rows += s.rows;
  }
  switch (f) {
    case Format::dense: return concat_dense(typed<dense::Matrix>(parts), shape);
    case Format::csr: return concat_csr(typed<csr::Matrix>(parts), shape);
    case Format::macko: return concat_macko(typed<macko::Matrix>(parts), shape);
    case Format::tca_bme: return concat_tca_bme(typed<tca_bme::Matrix>(parts), shape);
    default:
      return unsupported(std::string("concat_rows: ") + format_name(f) +
                         " weights are stored in tiles and cannot be stacked without re-encoding");
  }
}

}  // namespace sparrow
