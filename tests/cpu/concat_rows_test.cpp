// concat_rows: stacking encoded weights along M equals encoding the stacked matrix (decode and
// validate agree), for the row-ordered formats and tca_bme; tiled_csl and mismatched parts are
// refused.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sparrow/patterns.hpp"
#include "sparrow/weight.hpp"

using namespace sparrow;

namespace {

Weight encode_ok(Format f, const HostMatrix& h, const EncodeOptions& eo = {}) {
  auto w = encode(f, h.view(), eo);
  EXPECT_TRUE(w.ok()) << w.status().to_string();
  return std::move(w).value();
}

// The parts' rows one after another, compared element by element with the decoded result.
void expect_stacked(const std::vector<HostMatrix>& parts, const Weight& joined, const std::string& what) {
  ASSERT_TRUE(validate(joined).ok()) << what << ": " << validate(joined).to_string();
  auto d = decode(joined);
  ASSERT_TRUE(d.ok()) << what;
  int64_t r0 = 0;
  for (const HostMatrix& p : parts) {
    for (int64_t r = 0; r < p.rows(); ++r)
      for (int64_t c = 0; c < p.cols(); ++c)
        ASSERT_EQ(d->at(r0 + r, c), p.at(r, c)) << what << " row " << r0 + r << " col " << c;
    r0 += p.rows();
  }
  EXPECT_EQ(d->rows(), r0) << what;
}

}  // namespace

TEST(ConcatRows, RowOrderedFormatsStackExactly) {
  for (Format f : {Format::dense, Format::csr, Format::macko, Format::tca_bme}) {
    for (DType t : {DType::fp16, DType::bf16}) {
      // Odd row counts and densities, an empty part-row and a very sparse part (macko padding
      // entries; an odd number of entries before a part shifts its delta nibbles).
      std::vector<HostMatrix> parts;
      parts.push_back(patterns::random(t, 37, 150, 0.5, 1));
      parts.push_back(patterns::random(t, 5, 150, 0.97, 2));
      parts.push_back(patterns::magnitude(t, 64, 150, 0.7, 3));
      for (int64_t c = 0; c < 150; ++c) parts[1].set(2, c, 0.f);
      std::vector<Weight> enc;
      for (const HostMatrix& p : parts) enc.push_back(encode_ok(f, p));
      std::vector<const Weight*> ptrs;
      for (const Weight& w : enc) ptrs.push_back(&w);
      auto joined = concat_rows(ptrs);
      const std::string what = std::string(format_name(f)) + " " + dtype_name(t);
      ASSERT_TRUE(joined.ok()) << what << ": " << joined.status().to_string();
      EXPECT_EQ(format_of(joined.value()), f);
      EXPECT_EQ(shape_of(joined.value()).rows, 37 + 5 + 64);
      expect_stacked(parts, joined.value(), what);
      if (f == Format::macko) {
        int64_t nnz = 0;
        for (const Weight& w : enc) nnz += std::get<macko::Matrix>(w).nnz;
        EXPECT_EQ(std::get<macko::Matrix>(joined.value()).nnz, nnz);
      }
    }
  }
  // csr with 32-bit columns, and a single part.
  const HostMatrix wide = patterns::random(DType::fp16, 9, 70000, 0.999, 4);
  const Weight w32 = encode_ok(Format::csr, wide);
  auto one = concat_rows({&w32, &w32});
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  expect_stacked({wide, wide}, one.value(), "csr 32-bit");
  auto single = concat_rows({&w32});
  ASSERT_TRUE(single.ok());
  expect_stacked({wide}, single.value(), "csr single part");
}

TEST(ConcatRows, RefusesWhatItCannotJoin) {
  const HostMatrix a = patterns::random(DType::fp16, 64, 128, 0.5, 5);
  const HostMatrix b = patterns::random(DType::fp16, 64, 96, 0.5, 6);
  const HostMatrix c = patterns::random(DType::bf16, 64, 128, 0.5, 7);
  const Weight ma = encode_ok(Format::macko, a), mb = encode_ok(Format::macko, b);
  const Weight mc = encode_ok(Format::macko, c), ca = encode_ok(Format::csr, a);
  EXPECT_EQ(concat_rows({}).status().code(), Code::invalid_argument);
  EXPECT_EQ(concat_rows({&ma, &mb}).status().code(), Code::invalid_argument);  // columns
  EXPECT_EQ(concat_rows({&ma, &mc}).status().code(), Code::invalid_argument);  // dtype
  EXPECT_EQ(concat_rows({&ma, &ca}).status().code(), Code::invalid_argument);  // formats
  for (Format f : {Format::dense, Format::csr, Format::macko, Format::tca_bme}) {
    EXPECT_TRUE(can_concat_rows(f));
  }
  for (Format f : {Format::tiled_csl, Format::nm}) EXPECT_FALSE(can_concat_rows(f));
  {
    const Weight w = encode_ok(Format::tiled_csl, a);
    auto r = concat_rows({&w, &w});
    EXPECT_EQ(r.status().code(), Code::unsupported);
    EXPECT_NE(r.status().message().find("tiles"), std::string::npos) << r.status().message();
  }
  // csr parts with different column index widths.
  EncodeOptions e16, e32;
  e16.csr_index = csr::IndexWidth::bits16;
  e32.csr_index = csr::IndexWidth::bits32;
  const Weight c16 = encode_ok(Format::csr, a, e16), c32 = encode_ok(Format::csr, a, e32);
  EXPECT_EQ(concat_rows({&c16, &c32}).status().code(), Code::unsupported);
}

// csr's derived longest row is the longest over all parts, and the joined matrix validates; a
// stale value is reported by validate.
TEST(ConcatRows, CsrLongestRow) {
  HostMatrix a(DType::fp16, 2, 30), b(DType::fp16, 1, 30);
  for (int c = 0; c < 5; ++c) a.set(1, 3 * c, 1.0f + c);
  for (int c = 0; c < 9; ++c) b.set(0, 2 * c + 1, -0.5f * c - 1.0f);
  const Weight wa = encode_ok(Format::csr, a), wb = encode_ok(Format::csr, b);
  EXPECT_EQ(std::get<csr::Matrix>(wa).max_row_nnz, 5);
  EXPECT_EQ(std::get<csr::Matrix>(wb).max_row_nnz, 9);
  auto joined = concat_rows({&wa, &wb});
  ASSERT_TRUE(joined.ok()) << joined.status().to_string();
  EXPECT_EQ(std::get<csr::Matrix>(joined.value()).max_row_nnz, 9);
  EXPECT_TRUE(validate(joined.value()).ok());
  csr::Matrix stale = std::get<csr::Matrix>(joined.value());
  stale.max_row_nnz = 5;
  const Status s = csr::validate(stale);
  EXPECT_EQ(s.code(), Code::corrupt_data);
  EXPECT_NE(s.message().find("max_row_nnz"), std::string::npos) << s.message();
}

// macko parts with an odd number of entries: the next part's deltas move by one nibble.
TEST(ConcatRows, MackoOddEntryCounts) {
  HostMatrix a(DType::fp16, 1, 20), b(DType::fp16, 2, 20);
  a.set(0, 1, 1.0f);
  a.set(0, 19, 2.0f);  // 3 entries (one gap-bridging padding entry)
  b.set(0, 0, -1.0f);
  b.set(0, 7, 0.5f);
  b.set(1, 18, 0.25f);
  const Weight wa = encode_ok(Format::macko, a), wb = encode_ok(Format::macko, b);
  ASSERT_EQ(std::get<macko::Matrix>(wa).row_ptr.host().back() % 2, 1u);
  for (auto parts : {std::vector<const Weight*>{&wa, &wb}, std::vector<const Weight*>{&wa, &wa, &wb, &wa}}) {
    auto joined = concat_rows(parts);
    ASSERT_TRUE(joined.ok()) << joined.status().to_string();
    std::vector<HostMatrix> hosts;
    for (const Weight* w : parts) hosts.push_back(w == &wa ? a : b);
    expect_stacked(hosts, joined.value(), "macko odd");
    EXPECT_EQ(std::get<macko::Matrix>(joined.value()).max_row_entries, 3);
    EXPECT_TRUE(validate(joined.value()).ok());  // the row order is rebuilt for the whole
  }
}

// tca_bme parts whose rows are multiples of 64 (all but the last) are joined array by array: the
// result must be the very arrays encode gives the stacked matrix (q/k/v and gate/up of every Llama).
TEST(ConcatRows, TcaBmeGroupRowsJoinArrayByArray) {
  for (DType t : {DType::fp16, DType::bf16}) {
    std::vector<HostMatrix> parts;
    parts.push_back(patterns::random(t, 128, 200, 0.5, 11));
    parts.push_back(patterns::magnitude(t, 64, 200, 0.9, 12));
    parts.push_back(patterns::random(t, 70, 200, 0.3, 13));  // the last part may be ragged
    HostMatrix all(t, 128 + 64 + 70, 200);
    int64_t r0 = 0;
    for (const HostMatrix& p : parts) {
      for (int64_t r = 0; r < p.rows(); ++r)
        for (int64_t c = 0; c < p.cols(); ++c) all.set(r0 + r, c, p.at(r, c));
      r0 += p.rows();
    }
    std::vector<Weight> enc;
    for (const HostMatrix& p : parts) enc.push_back(encode_ok(Format::tca_bme, p));
    auto joined = concat_rows({&enc[0], &enc[1], &enc[2]});
    ASSERT_TRUE(joined.ok()) << joined.status().to_string();
    expect_stacked(parts, joined.value(), "tca_bme aligned");
    const auto& j = std::get<tca_bme::Matrix>(joined.value());
    const Weight direct = encode_ok(Format::tca_bme, all);
    const auto& d = std::get<tca_bme::Matrix>(direct);
    EXPECT_EQ(j.groups_m, d.groups_m);
    EXPECT_EQ(j.nnz, d.nnz);
    EXPECT_EQ(j.bitmaps.host(), d.bitmaps.host());
    EXPECT_EQ(j.group_offsets.host(), d.group_offsets.host());
    EXPECT_EQ(j.values.host(), d.values.host());
    EXPECT_EQ(j.max_group_values, d.max_group_values);  // derived for the stack
    EXPECT_EQ(j.max_strip_values, d.max_strip_values);
  }
}
