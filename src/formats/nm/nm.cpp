// nm: host encode / decode / validate and pattern parsing. The layout is specified in
// include/sparrow/formats/nm.hpp; the GPU kernels read exactly that.
#include "sparrow/formats/nm.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "formats/nm/nm_bits.hpp"

namespace sparrow::nm {

namespace {

constexpr int kMaxM = 256;
constexpr int kMaxL = 256;

int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); }  // a >= 0, no overflow

std::string pattern_text(const Pattern& p) {
  return std::to_string(p.n) + ":" + std::to_string(p.m) +
         (p.l > 1 ? ":" + std::to_string(p.l) : "");
}

// "row 12" or "rows 12..15".
std::string span_text(const char* what, int64_t first, int64_t last) {
  return first == last ? std::string(what) + " " + std::to_string(first)
                       : std::string(what) + "s " + std::to_string(first) + ".." +
                             std::to_string(last);
}

// Bit count without relying on -mpopcnt (a libgcc call otherwise).
int popcount64(uint64_t x) {
  x = x - ((x >> 1) & 0x5555555555555555ull);
  x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
  x = (x + (x >> 4)) & 0x0F0F0F0F0F0F0F0Full;
  return int((x * 0x0101010101010101ull) >> 56);
}

Status check_host(const Matrix& m) {
  if (m.values.on_device() || m.indices.on_device()) {
    return invalid_argument("nm: the weight is on the device; copy it to the host first");
  }
  return Status::success();
}

// a * b when it fits in int64 (both >= 0), else -1.
int64_t checked_mul(int64_t a, int64_t b) {
  if (a != 0 && b > std::numeric_limits<int64_t>::max() / a) return -1;
  return a * b;
}

}  // namespace

std::optional<Pattern> parse_pattern(std::string_view text) {
  int fields[3] = {0, 0, 1};
  int count = 0;
  size_t i = 0;
  while (true) {
    if (count == 3) return std::nullopt;
    int64_t v = 0;
    const size_t digits_begin = i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
      v = v * 10 + (text[i] - '0');
      if (v > 100000) return std::nullopt;  // far beyond any allowed value; stops overflow
      ++i;
    }
    if (i == digits_begin) return std::nullopt;  // empty field, sign, space, ...
    fields[count++] = int(v);
    if (i == text.size()) break;
    if (text[i] != ':') return std::nullopt;
    ++i;
  }
  if (count < 2) return std::nullopt;
  const Pattern p{fields[0], fields[1], fields[2]};
  if (!check_pattern(p).ok()) return std::nullopt;
  return p;
}

Status check_pattern(const Pattern& p) {
  if (p.n >= 1 && p.n < p.m && p.m <= kMaxM && p.l >= 1 && p.l <= kMaxL) {
    return Status::success();
  }
  return invalid_argument("nm pattern N:M:L = " + std::to_string(p.n) + ":" + std::to_string(p.m) +
                          ":" + std::to_string(p.l) +
                          " is not allowed: need 1 <= N < M <= 256 and 1 <= L <= 256");
}

Result<Matrix> encode(const ConstMatrixView& w, const Pattern& p) {
  SPARROW_RETURN_IF_ERROR(check_encode_input(w, /*allow_fp32=*/false, "nm"));
  SPARROW_RETURN_IF_ERROR(check_pattern(p));
  const int64_t rows = w.rows, K = w.cols, N = p.n, M = p.m, L = p.l;
  Matrix m;
  m.shape = {rows, K, w.dtype};
  m.pattern = p;
  m.index_bits = index_bits_for(p.m);
  m.groups = ceil_div(K, M);
  const int64_t blocks = ceil_div(rows, L);
  m.padded_rows = blocks * L;  // rows and K fit in memory, so none of these overflow
  const int64_t b = m.index_bits, kc = m.kept_cols();
  m.words_per_block = ceil_div(kc * b, 32);

  std::vector<uint16_t> values(size_t(m.padded_rows) * size_t(kc), 0);  // padded rows stay 0
  std::vector<uint32_t> indices(size_t(blocks) * size_t(m.words_per_block), 0);
  const uint16_t* src = static_cast<const uint16_t*>(w.data);
  std::array<int, kMaxM> kept{};  // the N chosen column indices of the current group
  const int mask_words = int(ceil_div(M, 64));

  for (int64_t rb = 0; rb < blocks; ++rb) {
    const int64_t r0 = rb * L, r1 = std::min(rows, r0 + L);  // real rows of this block
    uint32_t* words = indices.data() + size_t(rb) * size_t(m.words_per_block);
    for (int64_t g = 0; g < m.groups; ++g) {
      const int64_t c0 = g * M;
      const int avail = int(std::min(M, K - c0));  // columns of this group inside K
      // Bit c of `mask` (M <= 256 bits) is set when column c0 + c is non-zero in any row of the
      // block. Built branch-free: at 50 % random, branches here would mispredict constantly.
      uint64_t mask[kMaxM / 64] = {0, 0, 0, 0};
      for (int64_t r = r0; r < r1; ++r) {
        const uint16_t* row = src + size_t(r) * size_t(w.ld) + size_t(c0);
        for (int c = 0; c < avail; ++c) {
          mask[c / 64] |= uint64_t(!is_zero16(row[c])) << (c % 64);
        }
      }
      int have = 0;
      for (int i = 0; i < mask_words; ++i) have += popcount64(mask[i]);
      if (have > N) {
        // "row block 3 (rows 12..15), group 7 (columns 28..31) holds 3 non-zero vectors";
        // with L = 1 the row block is just "row 12".
        const std::string rows_text = L > 1 ? "row block " + std::to_string(rb) + " (" +
                                                  span_text("row", r0, r1 - 1) + ")"
                                            : span_text("row", r0, r0);
        return invalid_argument("nm: matrix is not " + pattern_text(p) + ": " + rows_text +
                                ", group " + std::to_string(g) + " (" +
                                span_text("column", c0, c0 + avail - 1) + ") holds " +
                                std::to_string(have) +
                                (L > 1 ? " non-zero vectors" : " non-zeros") + " (at most " +
                                std::to_string(N) + " allowed)");
      }
      // Too few non-zero vectors: add the lowest unused indices as zero fillers. There are
      // M - have >= N - have unused indices below M, so the fillers never reach index M.
      for (int i = 0; have < N; ++i) {
        while (have < N && ~mask[i] != 0) {
          mask[i] |= ~mask[i] & (mask[i] + 1);  // lowest clear bit
          ++have;
        }
      }
      int n_kept = 0;  // set bits in ascending order = strictly increasing indices
      for (int i = 0; i < mask_words; ++i) {
        for (uint64_t bits = mask[i]; bits != 0; bits &= bits - 1) {
          kept[size_t(n_kept++)] = i * 64 + __builtin_ctzll(bits);
        }
      }
      for (int j = 0; j < N; ++j) {
        const int64_t col = c0 + kept[size_t(j)];
        put_index(words, (g * N + j) * b, int(b), uint32_t(kept[size_t(j)]));
        if (col >= K) continue;  // a filler past K: its values stay 0
        for (int64_t r = r0; r < r1; ++r) {
          values[size_t(r) * size_t(kc) + size_t(g * N + j)] =
              src[size_t(r) * size_t(w.ld) + size_t(col)];
        }
      }
    }
  }
  m.values = Buffer<uint16_t>(std::move(values));
  m.indices = Buffer<uint32_t>(std::move(indices));
  return m;
}

Status validate(const Matrix& m) {
  SPARROW_RETURN_IF_ERROR(check_host(m));
  const Shape& s = m.shape;
  if (s.rows <= 0 || s.cols <= 0) {
    return corrupt_data("nm: non-positive shape " + std::to_string(s.rows) + " x " +
                        std::to_string(s.cols));
  }
  if (s.dtype != DType::fp16 && s.dtype != DType::bf16) {
    return corrupt_data("nm: dtype must be fp16 or bf16, got " + std::string(dtype_name(s.dtype)));
  }
  const Pattern& p = m.pattern;
  if (Status ps = check_pattern(p); !ps.ok()) return corrupt_data("nm: " + ps.message());
  const int64_t N = p.n, M = p.m, L = p.l, K = s.cols;
  if (m.index_bits != index_bits_for(p.m)) {
    return corrupt_data("nm: index_bits is " + std::to_string(m.index_bits) + ", but M = " +
                        std::to_string(M) + " needs " + std::to_string(index_bits_for(p.m)));
  }
  if (m.groups != ceil_div(K, M)) {
    return corrupt_data("nm: groups is " + std::to_string(m.groups) + ", expected ceil(" +
                        std::to_string(K) + " / " + std::to_string(M) + ") = " +
                        std::to_string(ceil_div(K, M)));
  }
  const int64_t blocks = ceil_div(s.rows, L);
  const int64_t padded = checked_mul(blocks, L);
  if (padded < 0 || m.padded_rows != padded) {
    return corrupt_data("nm: padded_rows is " + std::to_string(m.padded_rows) +
                        ", expected rows rounded up to L = " + std::to_string(L));
  }
  const int64_t b = m.index_bits;
  const int64_t kc = checked_mul(m.groups, N);
  const int64_t bits = kc < 0 ? -1 : checked_mul(kc, b);
  if (bits < 0) return corrupt_data("nm: shape too large (index bits per row block overflow)");
  if (m.words_per_block != ceil_div(bits, 32)) {
    return corrupt_data("nm: words_per_block is " + std::to_string(m.words_per_block) +
                        ", expected ceil(G*N*b / 32) = " + std::to_string(ceil_div(bits, 32)));
  }
  const int64_t n_values = checked_mul(padded, kc);
  if (n_values < 0 || m.values.size() != uint64_t(n_values)) {
    return corrupt_data("nm: values has " + std::to_string(m.values.size()) +
                        " elements, expected padded_rows * G * N = " +
                        std::to_string(m.padded_rows) + " * " + std::to_string(kc));
  }
  const int64_t n_words = checked_mul(blocks, m.words_per_block);
  if (n_words < 0 || m.indices.size() != uint64_t(n_words)) {
    return corrupt_data("nm: indices has " + std::to_string(m.indices.size()) +
                        " words, expected row blocks * words_per_block = " +
                        std::to_string(blocks) + " * " + std::to_string(m.words_per_block));
  }

  const uint16_t* values = m.values.data();
  for (int64_t rb = 0; rb < blocks; ++rb) {
    const uint32_t* words = m.indices.data() + size_t(rb) * size_t(m.words_per_block);
    const int64_t r0 = rb * L;
    for (int64_t g = 0; g < m.groups; ++g) {
      int64_t prev = -1;
      for (int64_t j = 0; j < N; ++j) {
        const int64_t idx = get_index(words, (g * N + j) * b, int(b));
        auto where = [&] {
          return "nm: row block " + std::to_string(rb) + " (" +
                 span_text("row", r0, r0 + L - 1) + "), group " + std::to_string(g) +
                 ", index " + std::to_string(j) + " is " + std::to_string(idx);
        };
        if (idx >= M) return corrupt_data(where() + ", not below M = " + std::to_string(M));
        if (idx <= prev) {
          return corrupt_data(where() + ", not above the previous index " + std::to_string(prev));
        }
        prev = idx;
        if (g * M + idx < K) continue;
        for (int64_t r = r0; r < r0 + L; ++r) {  // a column past K must hold zeros only
          if (!is_zero16(values[size_t(r) * size_t(kc) + size_t(g * N + j)])) {
            return corrupt_data(where() + ", column " + std::to_string(g * M + idx) +
                                " is past K = " + std::to_string(K) + " but row " +
                                std::to_string(r) + " holds a non-zero there");
          }
        }
      }
    }
    // Bits after the last index of the block are unused and must be zero (canonical bytes).
    const int64_t used = bits % 32;
    if (used != 0 && (words[m.words_per_block - 1] >> used) != 0) {
      return corrupt_data("nm: row block " + std::to_string(rb) +
                          " has non-zero unused bits after its last index");
    }
  }
  for (int64_t r = s.rows; r < m.padded_rows; ++r) {
    for (int64_t k = 0; k < kc; ++k) {
      if (!is_zero16(values[size_t(r) * size_t(kc) + size_t(k)])) {
        return corrupt_data("nm: padding row " + std::to_string(r) + " (rows = " +
                            std::to_string(s.rows) + ") holds a non-zero at kept column " +
                            std::to_string(k));
      }
    }
  }
  return Status::success();
}

Result<HostMatrix> decode(const Matrix& m) {
  SPARROW_RETURN_IF_ERROR(validate(m));
  const int64_t N = m.pattern.n, M = m.pattern.m, L = m.pattern.l, K = m.shape.cols;
  const int64_t kc = m.kept_cols(), b = m.index_bits;
  HostMatrix out(m.shape.dtype, m.shape.rows, K);
  uint16_t* o = static_cast<uint16_t*>(out.data());
  const uint16_t* values = m.values.data();
  for (int64_t r = 0; r < m.shape.rows; ++r) {
    const uint32_t* words = m.indices.data() + size_t(r / L) * size_t(m.words_per_block);
    for (int64_t g = 0; g < m.groups; ++g) {
      for (int64_t j = 0; j < N; ++j) {
        const int64_t col = g * M + get_index(words, (g * N + j) * b, int(b));
        if (col >= K) continue;  // a zero filler past the last column
        o[size_t(r) * size_t(K) + size_t(col)] = values[size_t(r) * size_t(kc) + size_t(g * N + j)];
      }
    }
  }
  return out;
}

}  // namespace sparrow::nm
