// macko.warp_row vs the CPU reference (see decode_kernel_checks.hpp for what each test covers),
// plus long gaps (padding entries), K large enough that X^T is staged in token passes, and K so
// large that not even one token of X fits in shared memory (the L1 gather path).
#include "gpu/decode_kernel_checks.hpp"
#include "kernels/device_info.hpp"
#include "kernels/macko/entry_split.hpp"
#include "kernels/macko/warp_row.hpp"

using namespace sparrow;

SPARROW_DECODE_KERNEL_TESTS(MackoWarpRow, "macko.warp_row", Format::macko)

namespace {
// One token on w: plain, with bias, accumulating (expect_all_n), then with input_rms, plain and
// with bias + accumulate.
void expect_one_token(const kernels::KernelInfo& k, const Weight& w, const std::string& what,
                      uint64_t seed) {
  const DType t = shape_of(w).dtype;
  test::expect_all_n(k, w, {1}, what, seed);
  EXPECT_TRUE(test::kernel_ok(test::check_kernel(k, w, 1, seed + 7, false, false, true, true), t))
      << what << " input_rms";
  EXPECT_TRUE(test::kernel_ok(test::check_kernel(k, w, 1, seed + 8, true, true, true, true), t))
      << what << " input_rms bias+accumulate";
}
}  // namespace

// The same checks with one token always run as an entry split (macko_entry_split), whatever
// use_entry_split chooses on a shape (it picks it for uneven rows under dependent launches).
namespace {
Status run_entry_split(const kernels::Problem& p, Stream s) {
  return kernels::macko_warp_row::run_with(p, s, kernels::macko_warp_row::EntrySplit::always);
}
const bool kForcedEntrySplit =
    test::register_test_variant("macko.warp_row", "macko.warp_row:entry_split", run_entry_split);
}  // namespace

SPARROW_DECODE_KERNEL_TESTS(MackoEntrySplit, "macko.warp_row:entry_split", Format::macko)

// Where the entry split's warps and blocks meet rows: long uneven rows spread over several warps
// (a row's partial sums from a tail, middles and a closing head), rows of a few entries (dozens of
// row starts per 256-entry step: the warp's cache of 32 row starts refills inside a step), one
// dense row among empty ones, a single row longer than X fits in shared memory (X through L1),
// trailing empty rows; fp16 and bf16, plain, bias + accumulate and input_rms.
TEST(MackoEntrySplit, RowsAcrossWarpsAndBlocks) {
  ASSERT_TRUE(kForcedEntrySplit);
  const auto& k = test::kernel_named("macko.warp_row:entry_split");
  if (!k.run) return;
  struct Case {
    const char* what;
    HostMatrix h;
  };
  std::vector<Case> cases;
  for (DType t : {DType::fp16, DType::bf16}) {
    cases.push_back({"magnitude 4096x11008 s=0.9", patterns::magnitude(t, 4096, 11008, 0.9, 41)});
    cases.push_back({"magnitude 1500x3001 s=0.7", patterns::magnitude(t, 1500, 3001, 0.7, 42)});
    cases.push_back({"tiny rows 6000x300 s=0.99", patterns::random(t, 6000, 300, 0.99, 43)});
    HostMatrix one(t, 997, 20000);  // all zero ...
    const HostMatrix dense_row = patterns::random(t, 1, 20000, 0.0, 45);
    for (int64_t c = 0; c < 20000; ++c) one.set(500, c, dense_row.at(0, c));  // ... but row 500
    for (int64_t c = 0; c < 20000; c += 7) one.set(3, c, dense_row.at(0, c));
    cases.push_back({"one dense row 997x20000", std::move(one)});
    cases.push_back({"one row 1x70000 s=0.3", patterns::random(t, 1, 70000, 0.3, 46)});
    HostMatrix trailing = patterns::magnitude(t, 700, 2000, 0.8, 47);
    for (int64_t r = 650; r < 700; ++r)
      for (int64_t c = 0; c < 2000; ++c) trailing.set(r, c, 0.f);
    cases.push_back({"trailing empty rows 700x2000", std::move(trailing)});
  }
  uint64_t seed = 4000;
  for (const Case& c : cases) {
    const Weight w = test::encode_or_fail(Format::macko, c.h);
    const DType t = shape_of(w).dtype;
    const std::string what = std::string(c.what) + " " + dtype_name(t);
    expect_one_token(k, w, what, seed);
    seed += 10;
  }
  // The rule on real weights: 4096 magnitude-pruned rows (uneven) take the entry split under a
  // dependent launch, random ones (even) and plain launches the row kernel.
  namespace es = kernels::macko_entry_split;
  const Weight mag = test::encode_or_fail(Format::macko, cases[0].h);
  const auto& mm = std::get<macko::Matrix>(mag);
  EXPECT_TRUE(
      es::use_entry_split(mm.shape.rows, mm.entries(), mm.max_row_entries, 132, true, -1));
  EXPECT_FALSE(
      es::use_entry_split(mm.shape.rows, mm.entries(), mm.max_row_entries, 132, false, -1));
  const Weight rnd =
      test::encode_or_fail(Format::macko, patterns::random(DType::fp16, 4096, 4096, 0.9, 48));
  const auto& mr = std::get<macko::Matrix>(rnd);
  EXPECT_FALSE(
      es::use_entry_split(mr.shape.rows, mr.entries(), mr.max_row_entries, 132, true, -1));
}

TEST(MackoWarpRow, LongGapsAndWideRows) {
  const auto& k = test::kernel_named("macko.warp_row");
  // 99.5 % sparse over 20000 columns: most gaps exceed 16 and need padding entries; at N = 16
  // X^T is 640 KB, so the tokens run in passes of 4.
  const Weight w = test::encode_or_fail(Format::macko, patterns::random(DType::fp16, 300, 20000, 0.995, 5));
  test::expect_all_n(k, w, {1, 4, 8, 16}, "macko 300x20000 s=0.995", 6);
  const Weight w2 = test::encode_or_fail(Format::macko, patterns::random(DType::bf16, 200, 70000, 0.5, 7));
  test::expect_all_n(k, w2, {1, 3, 16}, "macko 200x70000 s=0.5", 8);
  // K = 130000: 260 KB per token, more than any GPU's shared memory per block: X gathered.
  const Weight w3 = test::encode_or_fail(Format::macko, patterns::random(DType::fp16, 64, 130000, 0.99, 9));
  test::expect_all_n(k, w3, {1, 2, 8, 16, 17}, "macko 64x130000 s=0.99", 10);
}

// Rows split over 2 and 4 warps (row_pieces): shapes sized from this GPU's SM count so the rule
// picks each piece count, with empty rows and a magnitude (uneven rows) weight among them.
TEST(MackoWarpRow, RowPieces) {
  const auto& k = test::kernel_named("macko.warp_row");
  if (!k.run) return;
  auto dev = kernels::current_device_info();
  ASSERT_TRUE(dev.ok());
  const int64_t slots = int64_t(dev.value().sm_count) * 64;
  struct Case {
    int64_t rows, cols;
    double sparsity;
    const char* pattern;
    int pieces;
  };
  const Case cases[] = {{slots / 4 - 5, 7001, 0.5, "random", 4},
                        {slots / 2 - 7, 3001, 0.3, "magnitude", 2},
                        {slots / 2 - 7, 3001, 0.3, "random", 2},
                        // Short rows on average (~450 entries), split because the longest are
                        // several times longer (uneven rows).
                        {slots / 2 - 7, 3001, 0.85, "magnitude", 2}};
  uint64_t seed = 700;
  for (const Case& c : cases) {
    HostMatrix h = test::make_weight(DType::fp16, c.pattern, c.rows, c.cols, c.sparsity, seed);
    for (int64_t r : {int64_t(0), int64_t(3), c.rows - 1})
      for (int64_t col = 0; col < h.cols(); ++col) h.set(r, col, 0.f);
    const Weight w = test::encode_or_fail(Format::macko, h);
    const auto& mm = std::get<macko::Matrix>(w);
    ASSERT_EQ(kernels::macko_warp_row::row_pieces(mm.shape.rows, mm.entries(), mm.max_row_entries,
                                                  dev.value().sm_count, 0),
              c.pieces)
        << c.rows << "x" << c.cols;
    test::expect_all_n(k, w, {1, 2}, "macko row pieces " + std::to_string(c.rows) + "x" +
                                         std::to_string(c.cols) + " " + c.pattern, seed);
    seed += 10;
  }
  // 2..4 tokens count half the warp slots (kFewTokensWarpsPerSm): a shape that the rule splits
  // in two there.
  {
    namespace wr = kernels::macko_warp_row;
    const int64_t few_slots = int64_t(dev.value().sm_count) * wr::kFewTokensWarpsPerSm;
    const Weight w = test::encode_or_fail(
        Format::macko, patterns::random(DType::fp16, few_slots / 4, 4001, 0.3, 780));
    const auto& mm = std::get<macko::Matrix>(w);
    ASSERT_EQ(wr::row_pieces(mm.shape.rows, mm.entries(), mm.max_row_entries,
                             dev.value().sm_count, 0, wr::kFewTokensWarpsPerSm),
              2);
    test::expect_all_n(k, w, {2, 3, 4}, "macko row pieces, 2..4 tokens", 781);
  }
  // bf16, the 4-piece shape.
  const Weight wb = test::encode_or_fail(
      Format::macko, patterns::random(DType::bf16, slots / 4 - 5, 7001, 0.5, 790));
  test::expect_all_n(k, wb, {1}, "macko row pieces bf16", 791);
}

// One token with a long X staged in shared memory (K > kSharedXMaxCols, here at density <= 0.2,
// or K = 8192 at low density): one_token_block_warps gives 16-warp blocks. Each row-kernel family
// runs there (whole warps, half warps on short even rows, 2 pieces), with empty rows, fp16 and
// bf16, input_rms, bias and accumulate; sized from this GPU's SM count so the rules pick each
// family.
TEST(MackoWarpRow, SixteenWarpBlocksOnLongX) {
  namespace wr = kernels::macko_warp_row;
  const auto& k = test::kernel_named("macko.warp_row");
  if (!k.run) return;
  auto dev = kernels::current_device_info();
  ASSERT_TRUE(dev.ok());
  const int sms = dev.value().sm_count;
  const int64_t slots = int64_t(sms) * 64;
  struct Case {
    int64_t rows, cols;
    double sparsity;
    wr::OneTokenKernel family;
    int pieces;
  };
  const Case cases[] = {{slots / 4 + 3, 9001, 0.85, wr::OneTokenKernel::warp, 1},
                        {slots + 5, 9001, 0.97, wr::OneTokenKernel::half_warp, 1},
                        {slots / 2 - 9, 9001, 0.81, wr::OneTokenKernel::warp, 2},
                        // K = 8192 at low density: 16-warp blocks too (kSixteenWarpsMaxDensity).
                        {slots + 5, 8192, 0.97, wr::OneTokenKernel::half_warp, 1}};
  uint64_t seed = 880;
  for (const Case& c : cases) {
    for (DType t : {DType::fp16, DType::bf16}) {
      HostMatrix h = patterns::random(t, c.rows, c.cols, c.sparsity, seed);
      for (int64_t r : {int64_t(0), c.rows / 2, c.rows - 1})
        for (int64_t col = 0; col < h.cols(); ++col) h.set(r, col, 0.f);
      const Weight w = test::encode_or_fail(Format::macko, h);
      const auto& mm = std::get<macko::Matrix>(w);
      const std::string what = "macko 16-warp blocks " + std::to_string(c.rows) + "x" +
                               std::to_string(c.cols) + " " + dtype_name(t);
      ASSERT_TRUE(wr::one_token_shared_x(mm.shape.rows, mm.shape.cols, mm.entries(), 2, -1))
          << what;
      ASSERT_EQ(wr::one_token_block_warps(mm.shape.rows, mm.shape.cols, mm.entries(), true, 0), 16)
          << what;
      const auto family = wr::choose_one_token(mm.shape.rows, mm.entries(), mm.max_row_entries,
                                               sms, wr::OneTokenKernel::automatic);
      ASSERT_EQ(family, c.family) << what;
      if (family == wr::OneTokenKernel::warp) {
        ASSERT_EQ(wr::row_pieces(mm.shape.rows, mm.entries(), mm.max_row_entries, sms, 0),
                  c.pieces)
            << what;
      }
      expect_one_token(k, w, what, seed);
      seed += 10;
    }
  }
}

// More rows than the GPU's warp slots: each warp of the row kernel's 2..8-token instances runs
// several rows (rows_per_segment), reading the next row's extent and first chunk while a row
// decodes; every other pass over the segments runs backwards. Sized from this GPU's SM count so
// 2..4 tokens take 4 rows per warp and 5..8 tokens (the 8-token instance) more; one token runs a
// row per warp; 12 tokens run the persistent kernel, several rows per warp there too. Random (index order) and magnitude (row_order, longest first) rows, with empty
// rows first, in the middle and last.
TEST(MackoWarpRow, SeveralRowsPerWarp) {
  const auto& k = test::kernel_named("macko.warp_row");
  if (!k.run) return;
  auto dev = kernels::current_device_info();
  ASSERT_TRUE(dev.ok());
  const int64_t rows = int64_t(dev.value().sm_count) * 48 * 2 + 13;
  namespace wr = kernels::macko_warp_row;
  uint64_t seed = 900;
  for (const char* pattern : {"random", "magnitude"}) {
    for (DType t : {DType::fp16, DType::bf16}) {
      HostMatrix h = test::make_weight(t, pattern, rows, 2801, 0.5, seed);
      for (int64_t r : {int64_t(0), rows / 2, rows - 1})
        for (int64_t col = 0; col < h.cols(); ++col) h.set(r, col, 0.f);
      const Weight w = test::encode_or_fail(Format::macko, h);
      const auto& mm = std::get<macko::Matrix>(w);
      ASSERT_EQ(wr::choose_one_token(mm.shape.rows, mm.entries(), mm.max_row_entries,
                                     dev.value().sm_count, wr::OneTokenKernel::automatic),
                wr::OneTokenKernel::warp);
      ASSERT_EQ(wr::row_pieces(mm.shape.rows, mm.entries(), mm.max_row_entries,
                               dev.value().sm_count, 0),
                1);
      // 5..8 tokens run the row kernel's 8-token instance here (>= 64 rows per SM, 50 %).
      ASSERT_EQ(wr::row_kernel_tokens(8, mm.shape.rows, mm.shape.cols, mm.entries(),
                                      dev.value().sm_count, -1),
                8);
      test::expect_all_n(k, w, {1, 2, 4, 5, 8, 12}, std::string("macko several rows per warp ") + pattern +
                                              (t == DType::bf16 ? " bf16" : " fp16"),
                         seed + 1);
      seed += 10;
    }
  }
}

// Two tokens run the row kernel's own 2-token instance (X^T of K x 2 in shared memory) on K up to
// kRowKernelTwoTokensMaxCols, twice the 3..8-token instances' limit, so K = 11008 (down_proj)
// runs it too; one column more and the persistent kernel runs. Random and magnitude (uneven rows,
// handed out longest first) weights, fp16 and bf16, empty rows first and last.
TEST(MackoWarpRow, TwoTokensOnLongRows) {
  const auto& k = test::kernel_named("macko.warp_row");
  if (!k.run) return;
  auto dev = kernels::current_device_info();
  ASSERT_TRUE(dev.ok());
  namespace wr = kernels::macko_warp_row;
  struct Case {
    int64_t rows, cols;
    double sparsity;
    const char* pattern;
    DType dtype;
    int tokens;  // row_kernel_tokens at N = 2
  };
  const Case cases[] = {{517, 11008, 0.5, "random", DType::fp16, 2},
                        {301, wr::kRowKernelTwoTokensMaxCols, 0.7, "magnitude", DType::bf16, 2},
                        {263, wr::kRowKernelTwoTokensMaxCols + 1, 0.9, "random", DType::fp16, 0}};
  uint64_t seed = 1200;
  for (const Case& c : cases) {
    HostMatrix h = test::make_weight(c.dtype, c.pattern, c.rows, c.cols, c.sparsity, seed);
    for (int64_t r : {int64_t(0), c.rows - 1})
      for (int64_t col = 0; col < h.cols(); ++col) h.set(r, col, 0.f);
    const Weight w = test::encode_or_fail(Format::macko, h);
    const auto& mm = std::get<macko::Matrix>(w);
    ASSERT_EQ(wr::row_kernel_tokens(2, mm.shape.rows, mm.shape.cols, mm.entries(),
                                    dev.value().sm_count, -1),
              c.tokens)
        << c.rows << "x" << c.cols;
    test::expect_all_n(k, w, {2, 3}, "macko two tokens " + std::to_string(c.rows) + "x" +
                                         std::to_string(c.cols) + " " + c.pattern, seed + 1);
    seed += 10;
  }
}

// 9..16 tokens per pass run the persistent kernel (X^T of K x 16 in shared memory). Rows long
// enough for interior (unmasked) steps and several 4-step batches (K = 6000 at 30 %), short ones
// (90 %), magnitude rows handed out longest first, empty rows first, middle and last, K not a
// multiple of 64; N = 13 (a partial pass), 16 and 32 (two passes), fp16 and bf16.
TEST(MackoWarpRow, SixteenTokenPasses) {
  const auto& k = test::kernel_named("macko.warp_row");
  if (!k.run) return;
  uint64_t seed = 3700;
  for (double s : {0.3, 0.9}) {
    for (const char* pattern : {"random", "magnitude"}) {
      for (DType t : {DType::fp16, DType::bf16}) {
        HostMatrix h = test::make_weight(t, pattern, 1111, 6000, s, seed);
        for (int64_t r : {int64_t(0), int64_t(555), int64_t(1110)})
          for (int64_t col = 0; col < h.cols(); ++col) h.set(r, col, 0.f);
        const Weight w = test::encode_or_fail(Format::macko, h);
        test::expect_all_n(k, w, {13, 16, 32},
                           std::string("macko 16-token passes ") + pattern + " s=" +
                               std::to_string(s) + (t == DType::bf16 ? " bf16" : " fp16"),
                           seed + 1);
        seed += 10;
      }
    }
  }
}
