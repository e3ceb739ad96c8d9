// engine::gpu::rope_and_cache against a CPU reference in double: q heads rotated in place, k
// rotated into the key cache and v copied into the value cache at each row's position, and
// nothing else written. Shapes cover both of the kernel's item widths (two pairs per load where
// rows and heads allow, one pair where head_dim / 2 is odd or a row stride is), grouped-query
// heads, q / k / v as column blocks of one fused row, passes of 1 to 130 rows of 2 sequences,
// positions up to the end of a 600-key context; shapes RoPE cannot rotate are refused.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/gpu_ops.hpp"
#include "gpu/gpu_test_util.hpp"

using namespace sparrow;
using namespace sparrow::test;

namespace {

struct RopeCase {
  int64_t heads, kv_heads, head_dim, extra_cols;  // extra_cols: the fused row's stride past q|k|v
  int64_t count, pos0;
};

}  // namespace

TEST(EngineRope, RopeAndCacheMatchesReference) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) GTEST_SKIP() << "no GPU";
  const int64_t batch = 2, context = 600;
  const std::vector<RopeCase> cases = {
      {6, 2, 72, 0, 1, 0},       // two pairs per item
      {6, 2, 72, 0, 3, 597},     // the last positions of the context
      {6, 2, 66, 0, 17, 5},      // head_dim / 2 odd: one pair per item
      {4, 4, 64, 1, 130, 470},   // an odd row stride: one pair per item, values not in 16 bytes
      {32, 8, 128, 0, 65, 211},  // Llama-3-8B's heads
  };
  int32_t* pos = nullptr;
  CUDA_OK(cudaMalloc(&pos, 4));
  for (const RopeCase& c : cases) {
    const int64_t hd = c.head_dim, half = hd / 2, qd = c.heads * hd, kvd = c.kv_heads * hd;
    const int64_t ld = qd + 2 * kvd + c.extra_cols, rows = batch * c.count;
    const engine::gpu::AttentionShape s{c.heads, c.kv_heads, hd, context};
    std::vector<float> inv(size_t(std::max<int64_t>(half, 1)));
    for (int64_t j = 0; j < half; ++j)
      inv[size_t(j)] = float(std::pow(10000.0, -2.0 * double(j) / double(hd)));
    float* d_inv = nullptr;
    CUDA_OK(cudaMalloc(&d_inv, inv.size() * 4));
    CUDA_OK(cudaMemcpy(d_inv, inv.data(), inv.size() * 4, cudaMemcpyHostToDevice));
    for (DType t : {DType::fp16, DType::bf16}) {
      const std::string what = "heads " + std::to_string(c.heads) + "/" +
                               std::to_string(c.kv_heads) + " head_dim " + std::to_string(hd) +
                               " ld " + std::to_string(ld) + " rows " + std::to_string(c.count) +
                               " pos0 " + std::to_string(c.pos0) + " " + dtype_name(t);
      const HostMatrix qkv = patterns::dense_random(t, rows, ld, 21 + c.count);
      const HostMatrix kc = patterns::dense_random(t, batch * context, kvd, 22 + c.pos0);
      const HostMatrix vc = patterns::dense_random(t, batch * context, kvd, 23 + c.pos0);
      const DeviceMatrix d_qkv = DeviceMatrix::upload(qkv);
      const DeviceMatrix d_kc = DeviceMatrix::upload(kc), d_vc = DeviceMatrix::upload(vc);
      const int32_t p0 = int32_t(c.pos0);
      CUDA_OK(cudaMemcpy(pos, &p0, 4, cudaMemcpyHostToDevice));
      engine::gpu::RowLayout layout{batch, c.count, pos};
      layout.q_ld = layout.kv_ld = ld;
      char* q = static_cast<char*>(d_qkv.view.data);
      const size_t es = dtype_size(t);
      const Status st = engine::gpu::rope_and_cache(q, q + qd * es, q + (qd + kvd) * es,
                                                    d_kc.view.data, d_vc.view.data, d_inv, layout,
                                                    s, t, nullptr);
      ASSERT_TRUE(st.ok()) << what << ": " << st.to_string();
      CUDA_OK(cudaDeviceSynchronize());
      const HostMatrix got_qkv = d_qkv.download(), got_kc = d_kc.download(),
                       got_vc = d_vc.download();

      // Expected: every element as it was, except the rotated and appended ones (tolerance) and
      // the appended values (exact).
      std::vector<double> want_qkv(size_t(rows * ld));
      std::vector<char> rotated_qkv(want_qkv.size(), 0);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t x = 0; x < ld; ++x) want_qkv[size_t(r * ld + x)] = qkv.at(r, x);
      std::vector<double> want_kc(size_t(batch * context * kvd)), want_vc(want_kc.size());
      std::vector<char> rotated_kc(want_kc.size(), 0);
      for (int64_t r = 0; r < batch * context; ++r)
        for (int64_t x = 0; x < kvd; ++x) {
          want_kc[size_t(r * kvd + x)] = kc.at(r, x);
          want_vc[size_t(r * kvd + x)] = vc.at(r, x);
        }
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t b = r / c.count, p = c.pos0 + r % c.count, cache_row = b * context + p;
        for (int64_t h = 0; h < c.heads + c.kv_heads; ++h) {
          const bool is_q = h < c.heads;
          const int64_t at = is_q ? h * hd : qd + (h - c.heads) * hd;
          for (int64_t j = 0; j < half; ++j) {
            const double angle = double(float(p) * inv[size_t(j)]);  // fp32 angle, as HF
            const double x1 = qkv.at(r, at + j), x2 = qkv.at(r, at + j + half);
            const double lo = x1 * std::cos(angle) - x2 * std::sin(angle);
            const double hi = x2 * std::cos(angle) + x1 * std::sin(angle);
            if (is_q) {
              const size_t qat = size_t(r * ld + at + j);
              want_qkv[qat] = lo;
              want_qkv[qat + size_t(half)] = hi;
              rotated_qkv[qat] = rotated_qkv[qat + size_t(half)] = 1;
            } else {
              const size_t kat = size_t(cache_row * kvd + (h - c.heads) * hd + j);
              want_kc[kat] = lo;
              want_kc[kat + size_t(half)] = hi;
              rotated_kc[kat] = rotated_kc[kat + size_t(half)] = 1;
            }
          }
        }
        for (int64_t x = 0; x < kvd; ++x)
          want_vc[size_t(cache_row * kvd + x)] = qkv.at(r, qd + kvd + x);
      }
      // A rotated element is the double rotation rounded once to the dtype: within its ulp.
      const double eps = t == DType::bf16 ? 1.0 / 128 : 1.0 / 1024;
      auto check = [&](double got, double want, bool rotated, const char* where, int64_t r,
                       int64_t x) {
        const double bound = rotated ? eps * std::fabs(want) + 1e-5 : 0.0;
        ASSERT_LE(std::fabs(got - want), bound)
            << what << ": " << where << " row " << r << " col " << x << " got " << got
            << " want " << want;
      };
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t x = 0; x < ld; ++x)
          check(got_qkv.at(r, x), want_qkv[size_t(r * ld + x)], rotated_qkv[size_t(r * ld + x)],
                "qkv", r, x);
      for (int64_t r = 0; r < batch * context; ++r)
        for (int64_t x = 0; x < kvd; ++x) {
          const size_t i = size_t(r * kvd + x);
          check(got_kc.at(r, x), want_kc[i], rotated_kc[i], "key cache", r, x);
          check(got_vc.at(r, x), want_vc[i], false, "value cache", r, x);
        }
    }
    cudaFree(d_inv);
  }
  // What RoPE cannot rotate is refused: an odd head_dim (its last element has no pair), q heads
  // not a multiple of the kv heads.
  const engine::gpu::RowLayout one{1, 1, pos};
  EXPECT_EQ(engine::gpu::rope_and_cache(pos, pos, pos, pos, pos, nullptr, one, {5, 5, 7, context},
                                        DType::fp16, nullptr)
                .code(),
            Code::invalid_argument);
  EXPECT_EQ(engine::gpu::rope_and_cache(pos, pos, pos, pos, pos, nullptr, one, {6, 4, 8, context},
                                        DType::fp16, nullptr)
                .code(),
            Code::invalid_argument);
  cudaFree(pos);
}
