// scale_columns: W' = W diag(gain) on a host weight, written only when every product fits (dense:
// a checking pass, then in place; sparse formats: into a copy of the values swapped in at the
// end), so a refusal leaves W as it was. Rows are split over the host's threads: the engine folds
// every norm of a 7B model (~6.5 G elements) at load.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define SPARROW_HOST_F16C 1
#else
#define SPARROW_HOST_F16C 0
#endif

#include "core/parallel.hpp"
#include "formats/tca_bme/tile_geometry.hpp"
#include "sparrow/weight.hpp"

namespace sparrow {

namespace {

// fn(r0, r1) over [0, rows) in blocks of 64 rows, spread over the host's threads.
void for_row_blocks(int64_t rows, const std::function<void(int64_t, int64_t)>& fn) {
  constexpr int64_t kRows = 64;
  (void)parallel_for((rows + kRows - 1) / kRows, 0, [&](int64_t b) {
    fn(b * kRows, std::min(rows, (b + 1) * kRows));
    return Status::success();
  });
}

// A 16-bit element times a gain, rounded once; false when the result is not finite (all-ones
// exponent). Inline and typed at compile time: it runs once per stored element of every folded
// weight (a 7B model: ~4.5 G elements at load).
template <DType T>
inline bool scale16(uint16_t& bits, float gain) {
  static_assert(T == DType::fp16 || T == DType::bf16, "16-bit types");
  if constexpr (T == DType::fp16) {
    bits = float_to_half(half_to_float(bits) * gain);
    return (bits & 0x7C00u) != 0x7C00u;
  } else {
    bits = float_to_bf16(bf16_to_float(bits) * gain);
    return (bits & 0x7F80u) != 0x7F80u;
  }
}
inline bool scale16(uint16_t& bits, float gain, DType t) {
  return t == DType::fp16 ? scale16<DType::fp16>(bits, gain) : scale16<DType::bf16>(bits, gain);
}

Status overflow(int64_t col) {
  return invalid_argument("scale_columns: column " + std::to_string(col) +
                          " times its gain does not fit the weight's dtype; W is unchanged");
}

// The lowest column (of any row) whose product was not finite, or -1.
struct FirstBad {
  std::atomic<int64_t> col{-1};
  void note(int64_t c) {
    int64_t cur = col.load();
    while ((cur < 0 || c < cur) && !col.compare_exchange_weak(cur, c)) {
    }
  }
};

// A scaled copy of a sparse format's 16-bit values, entry by entry from the format's walk (any
// thread, each entry once), swapped in only when no product is refused: one that is not finite,
// or a non-zero that rounds to zero, which macko (a stored zero is a gap entry) and tca_bme (a set
// bit marks a non-zero) cannot store. A stored zero (macko's padding) stays zero.
struct ScaledValues {
  ScaledValues(std::vector<uint16_t> values, const std::vector<float>& g, DType dtype)
      : out(std::move(values)), gain(g), t(dtype) {}

  std::vector<uint16_t> out;
  const std::vector<float>& gain;
  DType t;
  FirstBad bad, vanished;

  void scale(size_t e, int64_t col) {
    const bool was_zero = is_zero16(out[e]);
    if (!scale16(out[e], gain[size_t(col)], t)) bad.note(col);
    if (!was_zero && is_zero16(out[e])) vanished.note(col);
  }
  Status keep(Buffer<uint16_t>& values, const char* format) {
    if (bad.col >= 0) return overflow(bad.col);
    if (vanished.col >= 0) {
      return invalid_argument("scale_columns: a stored element of column " +
                              std::to_string(vanished.col) +
                              " times its gain rounds to zero, which " + format +
                              " cannot store as a value; W is unchanged");
    }
    values = Buffer<uint16_t>(std::move(out));
    return {};
  }
};

// One row of 16-bit elements: the lowest column whose product is not finite, or -1. STORE: write
// the products back (else only check them).
template <DType T, bool STORE>
int64_t scale_row16(uint8_t* row, const float* gain, int64_t cols) {
  int64_t bad = -1;
  for (int64_t c = 0; c < cols; ++c) {
    uint16_t b;
    std::memcpy(&b, row + 2 * c, 2);
    const bool ok = scale16<T>(b, gain[c]);
    if constexpr (STORE) std::memcpy(row + 2 * c, &b, 2);
    if (!ok && bad < 0) bad = c;
  }
  return bad;
}

#if SPARROW_HOST_F16C
// The same for fp16 rows with x86's F16C conversions, 8 elements per instruction (the software
// conversions were most of a 7B fold's time). Products are rounded to nearest even like
// float_to_half, so the bits are the same (tests/cpu/weight_test.cpp compares them).
template <bool STORE>
__attribute__((target("avx,f16c"))) int64_t scale_row_f16c(uint8_t* row, const float* gain,
                                                           int64_t cols) {
  const __m128i exp_mask = _mm_set1_epi16(0x7C00);
  int64_t c = 0;
  for (; c + 8 <= cols; c += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * c));
    const __m256 p = _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_loadu_ps(gain + c));
    const __m128i r = _mm256_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    // An all-ones exponent (inf or nan) in any lane: the lowest such column.
    const int inf = _mm_movemask_epi8(_mm_cmpeq_epi16(_mm_and_si128(r, exp_mask), exp_mask));
    if (inf != 0) return c + __builtin_ctz(unsigned(inf)) / 2;
    if constexpr (STORE) _mm_storeu_si128(reinterpret_cast<__m128i*>(row + 2 * c), r);
  }
  const int64_t bad = scale_row16<DType::fp16, STORE>(row + 2 * c, gain + c, cols - c);
  return bad < 0 ? -1 : c + bad;
}

bool host_has_f16c() {
  static const bool v = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  return v;
}
#endif

// Row r of a 16-bit dense matrix; the lowest bad column, or -1 (with STORE, a row with a bad
// column may be partly written: the caller checks every row first).
template <bool STORE>
int64_t scale_dense_row16(DType t, uint8_t* row, const float* gain, int64_t cols) {
  if (t == DType::bf16) return scale_row16<DType::bf16, STORE>(row, gain, cols);
#if SPARROW_HOST_F16C
  if (host_has_f16c()) return scale_row_f16c<STORE>(row, gain, cols);
#endif
  return scale_row16<DType::fp16, STORE>(row, gain, cols);
}

template <bool STORE>
int64_t scale_dense_row32(uint8_t* row, const float* gain, int64_t cols) {
  int64_t bad = -1;
  for (int64_t c = 0; c < cols; ++c) {
    float v;
    std::memcpy(&v, row + 4 * c, 4);
    v *= gain[c];
    if constexpr (STORE) std::memcpy(row + 4 * c, &v, 4);
    if (!std::isfinite(v) && bad < 0) bad = c;
  }
  return bad;
}

// In place, after a pass that only checks every product: a scaled copy (so that a refusal leaves
// W as it was) cost a 7B model's load a third of the fold's time in page faults of the fresh
// pages, and the check is a read of what the apply pass reads anyway.
Status scale_dense(dense::Matrix& m, const std::vector<float>& gain) {
  const DType t = m.shape.dtype;
  const size_t es = dtype_size(t);
  uint8_t* values = m.values.data();
  FirstBad bad;
  auto pass = [&](auto store) {
    constexpr bool kStore = decltype(store)::value;
    for_row_blocks(m.shape.rows, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        uint8_t* row = values + size_t(r * m.ld) * es;
        const int64_t c = t == DType::fp32
                              ? scale_dense_row32<kStore>(row, gain.data(), m.shape.cols)
                              : scale_dense_row16<kStore>(t, row, gain.data(), m.shape.cols);
        if (c >= 0) bad.note(c);
      }
    });
  };
  pass(std::false_type{});
  if (bad.col >= 0) return overflow(bad.col);
  pass(std::true_type{});
  return {};
}

// Row by row, each entry's column from the deltas.
Status scale_macko(macko::Matrix& m, const std::vector<float>& gain) {
  ScaledValues v{m.values.host(), gain, m.shape.dtype};
  const uint32_t* row_ptr = m.row_ptr.data();
  const uint8_t* deltas = m.deltas.data();
  for_row_blocks(m.shape.rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      int64_t col = -1;  // col_0 = delta_0, col_j = col_{j-1} + delta_j + 1 (validated)
      for (uint64_t e = row_ptr[r]; e < row_ptr[r + 1]; ++e) {
        col += macko::delta_at(deltas, e) + 1;
        v.scale(e, col);
      }
    }
  });
  return v.keep(m.values, "macko");
}

// Each group's values follow its bitmaps in order, bits ascending: a walk of the bits finds every
// value's column.
Status scale_tca_bme(tca_bme::Matrix& m, const std::vector<float>& gain) {
  ScaledValues v{m.values.host(), gain, m.shape.dtype};
  const uint64_t* bitmaps = m.bitmaps.data();
  const uint32_t* offsets = m.group_offsets.data();
  (void)parallel_for(m.groups_m, 0, [&](int64_t gm) {
    for (int64_t gk = 0; gk < m.groups_k; ++gk) {
      const int64_t g = gm * m.groups_k + gk;
      size_t e = offsets[g];
      for (int64_t b = 0; b < tca_bme::kBitmapsPerGroup; ++b) {
        const int64_t col0 = gk * tca_bme::kGroupCols + tca_bme::bitmap_origin(b).col;
        for (uint64_t bits = bitmaps[g * tca_bme::kBitmapsPerGroup + b]; bits; bits &= bits - 1) {
          v.scale(e++, col0 + tca_bme::lowest_bit(bits) % tca_bme::kBitmapTile);
        }
      }
    }
    return Status::success();
  });
  return v.keep(m.values, "tca_bme");
}

}  // namespace

bool can_scale_columns(Format f) {
  return f == Format::dense || f == Format::macko || f == Format::tca_bme;
}

Status scale_columns(Weight& w, const std::vector<float>& gain) {
  if (!can_scale_columns(format_of(w))) {
    return unsupported(std::string("scale_columns: ") + format_name(format_of(w)) +
                       " weights (dense, macko and tca_bme only)");
  }
  if (location_of(w) != Location::host) return invalid_argument("scale_columns: host weights only");
  const Shape& s = shape_of(w);
  if (int64_t(gain.size()) != s.cols) {
    return invalid_argument("scale_columns: " + std::to_string(gain.size()) + " gains for " +
                            std::to_string(s.cols) + " columns");
  }
  for (float g : gain)
    if (!std::isfinite(g)) return invalid_argument("scale_columns: a gain is not finite");
  if (auto* d = std::get_if<dense::Matrix>(&w)) return scale_dense(*d, gain);
  // The walks below trust macko's row_ptr and deltas, tca_bme's offsets and bitmaps.
  SPARROW_RETURN_IF_ERROR(validate(w));
  if (auto* t = std::get_if<tca_bme::Matrix>(&w)) return scale_tca_bme(*t, gain);
  return scale_macko(std::get<macko::Matrix>(w), gain);
}

}  // namespace sparrow
