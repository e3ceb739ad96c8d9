// Properties every format must have, checked across all six through the Weight API: exact round
// trip, validate accepts what encode makes, the reference product through the format equals the
// dense reference, and d_eff matches the DESIGN.md expectations.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "sparrow/patterns.hpp"
#include "sparrow/reference.hpp"
#include "sparrow/weight.hpp"

using namespace sparrow;

namespace {

EncodeOptions options_for(Format f) {
  EncodeOptions o;
  if (f == Format::nm) o.nm_pattern = {2, 4, 1};
  return o;
}

// An N:M matrix encodes in every format, so one generator serves all six.
HostMatrix nm_matrix(DType t, int64_t m, int64_t k, double extra, uint64_t seed) {
  return patterns::nm_pattern(t, m, k, nm::Pattern{2, 4, 1}, extra, seed);
}

double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::fabs(a[i] - b[i]));
    den = std::max(den, std::fabs(b[i]));
  }
  return den == 0 ? num : num / den;
}

}  // namespace

class EveryFormat : public ::testing::TestWithParam<Format> {};

// arrays_of names every array a kernel may read: together they are the stored and derived bytes.
TEST_P(EveryFormat, ArraysOfCoverStoredAndDerivedBytes) {
  const Format f = GetParam();
  HostMatrix w = nm_matrix(DType::fp16, 130, 70, 0.6, 7);
  auto enc = encode(f, w.view(), options_for(f));
  ASSERT_TRUE(enc.ok()) << enc.status().to_string();
  const std::vector<ArrayBytes> arrays = arrays_of(enc.value());
  ASSERT_FALSE(arrays.empty());
  size_t sum = 0;
  for (const ArrayBytes& a : arrays) {
    EXPECT_NE(a.data, nullptr);
    EXPECT_GT(a.bytes, 0u);
    sum += a.bytes;
  }
  EXPECT_EQ(sum, storage_bytes(enc.value()) + derived_bytes(enc.value())) << format_name(f);
}

TEST_P(EveryFormat, RoundTripValidateAndReferenceAgree) {
  const Format f = GetParam();
  for (DType t : {DType::fp16, DType::bf16}) {
    for (auto [m, k] : {std::pair<int64_t, int64_t>{1, 1}, {7, 13}, {130, 70}, {65, 300}}) {
      for (double extra : {0.0, 0.6, 1.0}) {
        HostMatrix w = nm_matrix(t, m, k, extra, uint64_t(m * 31 + k));
        auto enc = encode(f, w.view(), options_for(f));
        ASSERT_TRUE(enc.ok()) << format_name(f) << ": " << enc.status().to_string();
        ASSERT_TRUE(validate(enc.value()).ok()) << format_name(f);
        auto dec = decode(enc.value());
        ASSERT_TRUE(dec.ok()) << dec.status().to_string();
        EXPECT_TRUE(same_values(dec.value().view(), w.view()))
            << format_name(f) << " " << dtype_name(t) << " " << m << "x" << k;

        // The reference product walked through the format equals the dense reference.
        HostMatrix x = patterns::dense_random(t, 5, k, 99);
        auto dense_w = encode(Format::dense, w.view());
        ASSERT_TRUE(dense_w.ok());
        auto ref_dense = reference::matmul_f64(dense_w.value(), x.view());
        auto ref_fmt = reference::matmul_f64(enc.value(), x.view());
        ASSERT_TRUE(ref_dense.ok() && ref_fmt.ok());
        EXPECT_LE(max_rel_diff(ref_fmt.value(), ref_dense.value()), 1e-12) << format_name(f);
      }
    }
  }
}

TEST_P(EveryFormat, HostDeviceQueriesAndShape) {
  const Format f = GetParam();
  HostMatrix w = nm_matrix(DType::fp16, 33, 40, 0.0, 5);
  auto enc = encode(f, w.view(), options_for(f));
  ASSERT_TRUE(enc.ok()) << enc.status().to_string();
  EXPECT_EQ(format_of(enc.value()), f);
  EXPECT_EQ(shape_of(enc.value()).rows, 33);
  EXPECT_EQ(shape_of(enc.value()).cols, 40);
  EXPECT_EQ(location_of(enc.value()), Location::host);
  EXPECT_GT(storage_bytes(enc.value()), 0u);
}

TEST_P(EveryFormat, RejectsBadInput) {
  const Format f = GetParam();
  HostMatrix w(DType::fp16, 4, 4);
  ConstMatrixView v = w.view();
  v.rows = 0;
  EXPECT_EQ(encode(f, v, options_for(f)).status().code(), Code::invalid_argument);
  v = w.view();
  v.data = nullptr;
  EXPECT_EQ(encode(f, v, options_for(f)).status().code(), Code::invalid_argument);
  v = w.view();
  v.ld = 2;
  EXPECT_EQ(encode(f, v, options_for(f)).status().code(), Code::invalid_argument);
  if (f != Format::dense && f != Format::csr) {
    HostMatrix w32(DType::fp32, 4, 4);
    EXPECT_EQ(encode(f, w32.view(), options_for(f)).status().code(), Code::unsupported);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, EveryFormat, ::testing::ValuesIn(kAllFormats),
                         [](const auto& info) { return std::string(format_name(info.param)); });

// d_eff at 4096 x 4096, random pattern, against the DESIGN.md expectations (fp16).
TEST(EffectiveDensity, MatchesDesignExpectations) {
  const int64_t n = 4096;
  for (double s : {0.5, 0.7, 0.9}) {
    const double d = 1.0 - s;
    HostMatrix w = patterns::random(DType::fp16, n, n, s, 42);
    auto deff = [&](Format f, EncodeOptions o = {}) {
      auto e = encode(f, w.view(), o);
      EXPECT_TRUE(e.ok()) << e.status().to_string();
      return e.ok() ? d_eff(e.value()) : 1e9;
    };
    EncodeOptions c32;
    c32.csr_index = csr::IndexWidth::bits32;
    EXPECT_NEAR(deff(Format::dense), 1.0, 1e-9);
    EXPECT_NEAR(deff(Format::csr), 2 * d, 0.01) << s;        // 16-bit indices
    EXPECT_NEAR(deff(Format::csr, c32), 3 * d, 0.01) << s;   // 32-bit indices
    EXPECT_NEAR(deff(Format::tca_bme), d + 1.0 / 16, 0.01) << s;
    EXPECT_NEAR(deff(Format::tiled_csl), 2 * d, 0.01) << s;
    // macko: 1.25 d plus padding entries, which stay small down to d = 0.1 for random rows.
    EXPECT_GE(deff(Format::macko), 1.25 * d - 0.005) << s;
    EXPECT_LE(deff(Format::macko), 1.25 * d * (s <= 0.7 ? 1.02 : 1.35)) << s;
    if (s == 0.5) {
      EXPECT_LE(deff(Format::tca_bme), 0.57);
      EXPECT_LE(deff(Format::macko), 0.64);
    }
  }
  // nm 2:4 (L = 1): (N/M)(1 + 2/16)
  HostMatrix w24 = patterns::nm_pattern(DType::fp16, n, n, {2, 4, 1}, 0.0, 3);
  EncodeOptions o;
  o.nm_pattern = {2, 4, 1};
  auto e = encode(Format::nm, w24.view(), o);
  ASSERT_TRUE(e.ok());
  EXPECT_NEAR(d_eff(e.value()), 0.5 * (1 + 2.0 / 16), 1e-3);
}

// scale_columns (an RMSNorm gain folded into W): every stored element becomes round(w * g[col]),
// the pattern (macko's row_ptr and deltas, padding entries included; tca_bme's bitmaps and
// offsets) stays the same, and a refusal leaves W unchanged.
TEST(ScaleColumns, MultipliesEachColumnAndKeepsThePattern) {
  for (DType t : {DType::fp16, DType::bf16}) {
    for (double s : {0.0, 0.5, 0.995}) {  // 0.995: gaps > 15 columns, so padding entries
      // 70 x 150: tca_bme edge groups in both directions.
      const HostMatrix h = patterns::random(t, 70, 150, s, 11);
      std::vector<float> gain(150);
      for (size_t c = 0; c < gain.size(); ++c) gain[c] = 0.1f + 0.02f * float((c * 37) % 150);
      for (Format f : {Format::dense, Format::macko, Format::tca_bme}) {
        auto w = encode(f, h.view());
        ASSERT_TRUE(w.ok());
        Weight scaled = w.value();
        ASSERT_TRUE(scale_columns(scaled, gain).ok()) << format_name(f);
        auto before = decode(w.value()), after = decode(scaled);
        ASSERT_TRUE(before.ok() && after.ok());
        int64_t mismatches = 0;
        for (int64_t r = 0; r < h.rows(); ++r)
          for (int64_t c = 0; c < h.cols(); ++c)
            mismatches += after->at(r, c) !=
                          round_to_dtype(before->at(r, c) * gain[size_t(c)], t);
        EXPECT_EQ(mismatches, 0) << format_name(f) << " " << dtype_name(t) << " s=" << s;
        if (f == Format::macko) {
          const auto& a = std::get<macko::Matrix>(w.value());
          const auto& b = std::get<macko::Matrix>(scaled);
          EXPECT_EQ(a.row_ptr.host(), b.row_ptr.host());
          EXPECT_EQ(a.deltas.host(), b.deltas.host());
          EXPECT_EQ(a.entries(), b.entries());
        }
        if (f == Format::tca_bme) {
          const auto& a = std::get<tca_bme::Matrix>(w.value());
          const auto& b = std::get<tca_bme::Matrix>(scaled);
          EXPECT_EQ(a.bitmaps.host(), b.bitmaps.host());
          EXPECT_EQ(a.group_offsets.host(), b.group_offsets.host());
        }
        EXPECT_TRUE(validate(scaled).ok());
      }
    }
  }
}

// The refusal names the lowest column whose product does not fit, whichever row (and thread) met
// it first: columns 13 and 7 overflow here, the message says 7.
TEST(ScaleColumns, NamesTheLowestColumnThatOverflows) {
  const HostMatrix h = patterns::random(DType::fp16, 300, 20, 0.0, 13);
  auto w = encode(Format::dense, h.view());
  ASSERT_TRUE(w.ok());
  std::vector<float> gain(20, 1.f);
  gain[13] = gain[7] = 1e9f;
  Weight copy = w.value();
  const Status st = scale_columns(copy, gain);
  EXPECT_EQ(st.code(), Code::invalid_argument);
  EXPECT_NE(st.message().find("column 7 "), std::string::npos) << st.to_string();
}

// Dense fp16 rows are scaled 8 at a time with x86's F16C conversions where the CPU has them: every
// finite fp16 bit pattern, times gains that make normals, subnormals and zeros, must give the bits
// of the scalar conversions (float_to_half of the float product), in the vector part of a row and
// in its tail (131 columns: 16 chunks of 8 and 3 more). An overflow in the tail is found too.
TEST(ScaleColumns, DenseFp16MatchesTheScalarConversionsBitForBit) {
  const int64_t rows = 500, cols = 131;  // 65500 elements: every finite pattern once, some twice
  HostMatrix h(DType::fp16, rows, cols);
  std::vector<uint16_t> bits(size_t(rows * cols));
  uint32_t next = 0;
  for (auto& b : bits) {
    while (((next & 0x7C00u) == 0x7C00u)) next = (next + 1) & 0xFFFFu;  // skip inf / nan
    b = uint16_t(next);
    next = (next + 1) & 0xFFFFu;
  }
  std::memcpy(h.data(), bits.data(), bits.size() * 2);
  std::vector<float> gain(static_cast<size_t>(cols));
  for (int64_t c = 0; c < cols; ++c) {
    const float g[] = {1.0f, 0.7f, 1e-3f, 0.333f, 0.5f, 3e-5f, 0.999f};
    gain[size_t(c)] = g[size_t(c) % 7];
  }
  auto w = encode(Format::dense, h.view());
  ASSERT_TRUE(w.ok());
  Weight scaled = w.value();
  ASSERT_TRUE(scale_columns(scaled, gain).ok());
  const auto& m = std::get<dense::Matrix>(scaled);
  int64_t mismatches = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      uint16_t got;
      std::memcpy(&got, m.values.data() + size_t(r * m.ld + c) * 2, 2);
      const float product = half_to_float(bits[size_t(r * cols + c)]) * gain[size_t(c)];
      const uint16_t want = float_to_half(product);
      mismatches += got != want;
    }
  }
  EXPECT_EQ(mismatches, 0);
  // Column 129 (in the tail) overflows for its elements of magnitude 1.1 and more: refused,
  // named, and W is unchanged.
  std::vector<float> g2(static_cast<size_t>(cols), 1.0f);
  g2[129] = 60000.0f;
  Weight again = w.value();
  const Status st = scale_columns(again, g2);
  EXPECT_EQ(st.code(), Code::invalid_argument);
  EXPECT_NE(st.message().find("column 129 "), std::string::npos) << st.to_string();
  EXPECT_EQ(std::get<dense::Matrix>(again).values.host(),
            std::get<dense::Matrix>(w.value()).values.host());
}

TEST(ScaleColumns, RefusesWhatItCannotDoAndLeavesWUnchanged) {
  const HostMatrix h = patterns::random(DType::fp16, 8, 20, 0.5, 12);
  auto w = encode(Format::dense, h.view());
  ASSERT_TRUE(w.ok());
  Weight copy = w.value();
  // A gain that overflows fp16 for some stored element.
  std::vector<float> huge(20, 1e9f);
  Status st = scale_columns(copy, huge);
  EXPECT_EQ(st.code(), Code::invalid_argument);
  EXPECT_NE(st.message().find("unchanged"), std::string::npos) << st.to_string();
  EXPECT_EQ(std::get<dense::Matrix>(copy).values.host(),
            std::get<dense::Matrix>(w.value()).values.host());
  EXPECT_EQ(scale_columns(copy, std::vector<float>(19, 1.f)).code(), Code::invalid_argument);
  std::vector<float> nan_gain(20, 1.f);
  nan_gain[3] = std::nanf("");
  EXPECT_EQ(scale_columns(copy, nan_gain).code(), Code::invalid_argument);
  // A macko or tca_bme value that would round to zero (macko reads a stored zero as a gap entry,
  // tca_bme's bitmap marks it a non-zero), and an overflow there.
  const auto values_of = [](const Weight& w) {
    if (const auto* m = std::get_if<macko::Matrix>(&w)) return m->values.host();
    return std::get<tca_bme::Matrix>(w).values.host();
  };
  for (Format f : {Format::macko, Format::tca_bme}) {
    auto e = encode(f, h.view());
    ASSERT_TRUE(e.ok());
    Weight sw = e.value();
    st = scale_columns(sw, std::vector<float>(20, 1e-30f));
    EXPECT_EQ(st.code(), Code::invalid_argument) << format_name(f) << ": " << st.to_string();
    EXPECT_EQ(scale_columns(sw, huge).code(), Code::invalid_argument) << format_name(f);
    EXPECT_EQ(values_of(sw), values_of(e.value())) << format_name(f);
  }
  // dense stores zeros like any value: the same gain is fine there.
  Weight dz = w.value();
  EXPECT_TRUE(scale_columns(dz, std::vector<float>(20, 1e-30f)).ok());
  auto c = encode(Format::csr, h.view());
  ASSERT_TRUE(c.ok());
  Weight cw = c.value();
  EXPECT_EQ(scale_columns(cw, std::vector<float>(20, 1.f)).code(), Code::unsupported);
}
