// The engine's attention kernels against a CPU reference in double. The split-K kernel
// (engine::gpu::attention): grouped-query heads, an odd head_dim, several rows per sequence
// (prefill) and one (decode), positions from 0 to the end of the context, fixed key ranges and keys
// shared evenly by the splits (split_len 0, the decode mode). The tensor-core prefill kernel
// (prefill_attention): passes of several 64-row tiles, fused q rows. Outputs poisoned with NaN
// before each call.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "engine/gpu_ops.hpp"
#include "engine/prefill_attention.hpp"
#include "gpu/gpu_test_util.hpp"

using namespace sparrow;
using namespace sparrow::test;

namespace {

// out (rows, heads * hd) of softmax(q k^T / sqrt(hd)) v over keys 0 .. pos of each row.
std::vector<double> attention_ref(const HostMatrix& q, const HostMatrix& kc, const HostMatrix& vc,
                                  const engine::gpu::AttentionShape& s, int64_t batch,
                                  int64_t count, int64_t pos0) {
  const int64_t hd = s.head_dim, kvd = s.kv_heads * hd;
  std::vector<double> out(size_t(batch * count * s.heads * hd), 0.0);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < count; ++i) {
      const int64_t r = b * count + i, pos = pos0 + i;
      for (int64_t h = 0; h < s.heads; ++h) {
        const int64_t kvh = h / (s.heads / s.kv_heads);
        std::vector<double> score(size_t(pos + 1));
        double mx = -1e300;
        for (int64_t j = 0; j <= pos; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < hd; ++d)
            dot += double(q.at(r, h * hd + d)) * kc.at(b * s.context + j, kvh * hd + d);
          score[size_t(j)] = dot / std::sqrt(double(hd));
          mx = std::max(mx, score[size_t(j)]);
        }
        double sum = 0;
        for (auto& x : score) sum += (x = std::exp(x - mx));
        for (int64_t d = 0; d < hd; ++d) {
          double a = 0;
          for (int64_t j = 0; j <= pos; ++j)
            a += score[size_t(j)] * vc.at(b * s.context + j, kvh * hd + d);
          out[size_t(r * s.heads * hd + h * hd + d)] = a / sum;
        }
      }
    }
  }
  return out;
}

struct Case {
  int64_t count, pos0, split_len, n_splits;
};

}  // namespace

TEST(EngineAttention, MatchesReference) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) GTEST_SKIP() << "no GPU";
  // 3 query heads per kv head. head_dim 72 runs the general kernel (2-byte loads, any head_dim);
  // 64, 128 and 256 the vectorised one (16-byte loads, 8 / 16 / 32 lanes per key).
  for (int64_t hd : {72, 64, 128, 256}) {
    const engine::gpu::AttentionShape s{6, 2, hd, 600};
    const int64_t batch = 2;
    const std::vector<Case> cases = {
        {1, 0, 0, 32},  {1, 5, 0, 32},    {1, 544, 0, 32},  {1, 599, 0, 32},
        {1, 544, 0, 7}, {1, 544, 0, 1},   {1, 599, 128, 5}, {1, 30, 128, 5},
        {3, 0, 150, 4}, {3, 200, 150, 4}, {17, 583, 0, 4},  {17, 583, 600, 1},
    };
    for (DType t : {DType::fp16, DType::bf16}) {
      const HostMatrix kc =
          patterns::dense_random(t, batch * s.context, s.kv_heads * s.head_dim, 1);
      const HostMatrix vc =
          patterns::dense_random(t, batch * s.context, s.kv_heads * s.head_dim, 2);
      const DeviceMatrix dk = DeviceMatrix::upload(kc), dv = DeviceMatrix::upload(vc);
      int32_t* pos = nullptr;
      CUDA_OK(cudaMalloc(&pos, 4));
      for (const Case& c : cases) {
        for (int warps : {4, 8, 16}) {
          const std::string what = "head_dim " + std::to_string(hd) + " " + dtype_name(t) +
                                   " count " + std::to_string(c.count) + " pos0 " +
                                   std::to_string(c.pos0) + " split_len " +
                                   std::to_string(c.split_len) + " splits " +
                                   std::to_string(c.n_splits) + " warps " + std::to_string(warps);
          const int64_t rows = batch * c.count;
          const HostMatrix q = patterns::dense_random(t, rows, s.heads * s.head_dim, 3 + c.pos0);
          const DeviceMatrix dq = DeviceMatrix::upload(q);
          DeviceMatrix dout = DeviceMatrix::alloc(t, rows, s.heads * s.head_dim);
          dout.poison();
          float* partials = nullptr;
          CUDA_OK(cudaMalloc(&partials,
                             engine::gpu::attention_partials_floats(rows, s, c.n_splits) * 4));
          CUDA_OK(cudaMemset(partials, 0xFF,
                             engine::gpu::attention_partials_floats(rows, s, c.n_splits) * 4));
          const int32_t p0 = int32_t(c.pos0);
          CUDA_OK(cudaMemcpy(pos, &p0, 4, cudaMemcpyHostToDevice));
          const engine::gpu::RowLayout layout{batch, c.count, pos};
          const Status st = engine::gpu::attention(dq.view.data, dk.view.data, dv.view.data,
                                                   dout.view.data, partials, layout, s, c.split_len,
                                                   c.n_splits, t, nullptr, nullptr, warps);
          ASSERT_TRUE(st.ok()) << what << ": " << st.to_string();
          CUDA_OK(cudaDeviceSynchronize());
          const std::vector<double> ref = attention_ref(q, kc, vc, s, batch, c.count, c.pos0);
          const HostMatrix y = dout.download();
          const double err = reference::normalized_error(y.view(), ref);
          EXPECT_LE(err, 2 * tolerance(t)) << what;
          cudaFree(partials);
        }
      }
      // Fixed ranges that do not reach the end of the context are refused, not run short.
      const engine::gpu::RowLayout layout{1, 1, pos};
      EXPECT_EQ(engine::gpu::attention(nullptr, nullptr, nullptr, nullptr, nullptr, layout, s, 128,
                                       4, t, nullptr)
                    .code(),
                Code::invalid_argument);
      EXPECT_EQ(engine::gpu::attention(nullptr, nullptr, nullptr, nullptr, nullptr, layout, s, -1,
                                       4, t, nullptr)
                    .code(),
                Code::invalid_argument);
      // Blocks of 4, 8 or 16 warps only.
      EXPECT_EQ(engine::gpu::attention(nullptr, nullptr, nullptr, nullptr, nullptr, layout, s, 0, 4,
                                       t, nullptr, nullptr, 12)
                    .code(),
                Code::invalid_argument);
      cudaFree(pos);
    }
  }
}

// Decode with RoPE and the cache append folded into attention (DecodeRope) against the unfused
// pair rope_and_cache + attention on the same inputs: outputs and both caches bit-identical.
// q, k and v are column blocks of one fused projection row (q_ld = kv_ld), as in the engine;
// grouped-query heads (3 per kv head, so one block of each group writes the cache); positions 0,
// 5, 544 and 599 of a 600 context; 32, 7 and 1 splits; both attention kernels (head_dim 72: the
// general one; 64 / 128 / 256: the vectorised one). Outputs poisoned before each call.
TEST(EngineAttention, FoldedRopeMatchesUnfused) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) GTEST_SKIP() << "no GPU";
  for (int64_t hd : {72, 64, 128, 256}) {
    const engine::gpu::AttentionShape s{6, 2, hd, 600};
    const int64_t batch = 2, qd = s.heads * hd, kvd = s.kv_heads * hd, ld = qd + 2 * kvd;
    std::vector<float> inv(size_t(hd / 2));
    for (int64_t j = 0; j < hd / 2; ++j)
      inv[size_t(j)] = float(std::pow(10000.0, -2.0 * double(j) / double(hd)));
    float* d_inv = nullptr;
    CUDA_OK(cudaMalloc(&d_inv, inv.size() * 4));
    CUDA_OK(cudaMemcpy(d_inv, inv.data(), inv.size() * 4, cudaMemcpyHostToDevice));
    int32_t* pos = nullptr;
    CUDA_OK(cudaMalloc(&pos, 4));
    for (DType t : {DType::fp16, DType::bf16}) {
      const size_t es = dtype_size(t);
      for (int64_t p : {0, 5, 544, 599}) {
        for (int64_t splits : {32, 7, 1}) {
          for (int warps : {4, 16}) {
            const std::string what = "head_dim " + std::to_string(hd) + " " + dtype_name(t) +
                                     " pos " + std::to_string(p) + " splits " +
                                     std::to_string(splits) + " warps " + std::to_string(warps);
            const HostMatrix kc = patterns::dense_random(t, batch * s.context, kvd, 11 + p);
            const HostMatrix vc = patterns::dense_random(t, batch * s.context, kvd, 12 + p);
            const HostMatrix qkv = patterns::dense_random(t, batch, ld, 13 + p + splits);
            const int32_t p0 = int32_t(p);
            CUDA_OK(cudaMemcpy(pos, &p0, 4, cudaMemcpyHostToDevice));
            engine::gpu::RowLayout layout{batch, 1, pos};
            layout.q_ld = layout.kv_ld = ld;
            const size_t part_floats = engine::gpu::attention_partials_floats(batch, s, splits);
            float* partials = nullptr;
            CUDA_OK(cudaMalloc(&partials, part_floats * 4));
            // Unfused: q rotated in place, k and v appended, then attention.
            DeviceMatrix a_qkv = DeviceMatrix::upload(qkv);
            DeviceMatrix a_k = DeviceMatrix::upload(kc), a_v = DeviceMatrix::upload(vc);
            DeviceMatrix a_out = DeviceMatrix::alloc(t, batch, qd);
            a_out.poison();
            char* aq = static_cast<char*>(a_qkv.view.data);
            ASSERT_TRUE(engine::gpu::rope_and_cache(aq, aq + qd * es, aq + (qd + kvd) * es,
                                                    a_k.view.data, a_v.view.data, d_inv, layout, s,
                                                    t, nullptr)
                            .ok());
            ASSERT_TRUE(engine::gpu::attention(aq, a_k.view.data, a_v.view.data, a_out.view.data,
                                               partials, layout, s, 0, splits, t, nullptr, nullptr,
                                               warps)
                            .ok());
            // Folded.
            DeviceMatrix b_qkv = DeviceMatrix::upload(qkv);
            DeviceMatrix b_k = DeviceMatrix::upload(kc), b_v = DeviceMatrix::upload(vc);
            DeviceMatrix b_out = DeviceMatrix::alloc(t, batch, qd);
            b_out.poison();
            char* bq = static_cast<char*>(b_qkv.view.data);
            const engine::gpu::DecodeRope rope{bq + qd * es, bq + (qd + kvd) * es, b_k.view.data,
                                               b_v.view.data, d_inv};
            const Status st =
                engine::gpu::attention(bq, b_k.view.data, b_v.view.data, b_out.view.data, partials,
                                       layout, s, 0, splits, t, nullptr, &rope, warps);
            ASSERT_TRUE(st.ok()) << what << ": " << st.to_string();
            CUDA_OK(cudaDeviceSynchronize());
            auto same = [&](const DeviceMatrix& x, const DeviceMatrix& y, const char* name) {
              const HostMatrix hx = x.download(), hy = y.download();
              EXPECT_EQ(0, std::memcmp(hx.data(), hy.data(), size_t(hx.rows() * hx.cols()) * es))
                  << what << ": " << name << " differs";
            };
            same(a_out, b_out, "output");
            same(a_k, b_k, "key cache");
            same(a_v, b_v, "value cache");
            // The output is attention over the rotated keys, not poison.
            const HostMatrix out = b_out.download();
            for (int64_t r = 0; r < batch; ++r)
              for (int64_t c = 0; c < qd; ++c)
                ASSERT_TRUE(std::isfinite(out.at(r, c))) << what << " row " << r << " col " << c;
            cudaFree(partials);
          }
        }
      }
      // Prefill passes (several rows per sequence) cannot fold: refused.
      engine::gpu::RowLayout prefill{1, 3, pos};
      const engine::gpu::DecodeRope rope{pos, pos, pos, pos, d_inv};
      EXPECT_EQ(
          engine::gpu::attention(pos, pos, pos, pos, nullptr, prefill, s, 0, 4, t, nullptr, &rope)
              .code(),
          Code::invalid_argument);
    }
    cudaFree(pos);
    cudaFree(d_inv);
  }
}

// The tensor-core prefill kernel (prefill_attention.hpp) against the CPU reference in double:
// head_dim 64 and 128, fp16 and bf16, 3 query heads per kv head, two sequences, passes of 2 to
// 200 rows (partial 64-row tiles, several tiles) from positions 0 to 583 (key tiles partly past a
// row's position), q packed or as a column block of a wider fused row (q_ld), scores spread and
// peaked (q x 1, x 8). Output poisoned with NaN, with two rows past the pass that must stay NaN.
// The tile configurations other than the shipped one (SPARROW_ENGINE_PREFILL_WARPS=8,
// SPARROW_ENGINE_PREFILL_STAGES=3) are this test run in a process with the knob set.
TEST(EngineAttention, PrefillTensorCoreMatchesReference) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) GTEST_SKIP() << "no GPU";
  struct Pass {
    int64_t count, pos0;
  };
  const std::vector<Pass> passes = {{2, 0},    {17, 583}, {63, 0},   {64, 1},
                                    {65, 100}, {130, 0},  {130, 470}, {200, 7}};
  for (int64_t hd : {64, 128}) {
    const engine::gpu::AttentionShape s{6, 2, hd, 600};
    const int64_t batch = 2, q_cols = s.heads * hd, fused_ld = q_cols + 2 * s.kv_heads * hd;
    for (DType t : {DType::fp16, DType::bf16}) {
      const HostMatrix kc = patterns::dense_random(t, batch * s.context, s.kv_heads * hd, 11);
      const HostMatrix vc = patterns::dense_random(t, batch * s.context, s.kv_heads * hd, 12);
      const DeviceMatrix dk = DeviceMatrix::upload(kc), dv = DeviceMatrix::upload(vc);
      int32_t* pos = nullptr;
      CUDA_OK(cudaMalloc(&pos, 4));
      for (const Pass& p : passes) {
        for (float q_scale : {1.0f, 8.0f}) {
          const int64_t rows = batch * p.count;
          HostMatrix q = patterns::dense_random(t, rows, q_cols, 13 + p.pos0 + p.count);
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < q_cols; ++c) q.set(r, c, q.at(r, c) * q_scale);
          const std::vector<double> ref = attention_ref(q, kc, vc, s, batch, p.count, p.pos0);
          for (int64_t q_ld : {int64_t(0), fused_ld}) {
            const std::string what = "head_dim " + std::to_string(hd) + " " + dtype_name(t) +
                                     " count " + std::to_string(p.count) + " pos0 " +
                                     std::to_string(p.pos0) + " q_ld " + std::to_string(q_ld) +
                                     " q x " + std::to_string(int(q_scale));
            const DeviceMatrix dq = DeviceMatrix::upload(q, q_ld);
            DeviceMatrix dout = DeviceMatrix::alloc(t, rows + 2, q_cols);
            dout.poison();
            const int32_t p0 = int32_t(p.pos0);
            CUDA_OK(cudaMemcpy(pos, &p0, 4, cudaMemcpyHostToDevice));
            engine::gpu::RowLayout layout{batch, p.count, pos};
            layout.q_ld = q_ld;
            ASSERT_TRUE(engine::gpu::prefill_attention_fits(dq.view.data, dk.view.data,
                                                            dv.view.data, layout, s))
                << what;
            const Status st = engine::gpu::prefill_attention(
                dq.view.data, dk.view.data, dv.view.data, dout.view.data, layout, s, t, nullptr);
            ASSERT_TRUE(st.ok()) << what << ": " << st.to_string();
            CUDA_OK(cudaDeviceSynchronize());
            const HostMatrix y = dout.download();
            ConstMatrixView pass = y.view();  // the pass's rows, without the two past it
            pass.rows = rows;
            EXPECT_LE(reference::normalized_error(pass, ref), 2 * tolerance(t)) << what;
            bool past_untouched = true;
            for (int64_t r = rows; r < rows + 2; ++r)
              for (int64_t c = 0; c < q_cols; ++c) past_untouched &= std::isnan(y.at(r, c));
            EXPECT_TRUE(past_untouched) << what << ": rows past the pass were written";
          }
        }
      }
      // What does not fit is refused, not run: head_dim 72 / 256, a misaligned cache, query
      // heads that are not whole groups of the kv heads.
      const engine::gpu::RowLayout layout{1, 4, pos};
      for (int64_t bad_hd : {72, 256}) {
        const engine::gpu::AttentionShape bad{6, 2, bad_hd, 600};
        EXPECT_FALSE(engine::gpu::prefill_attention_fits(dk.view.data, dk.view.data,
                                                         dv.view.data, layout, bad));
        EXPECT_EQ(engine::gpu::prefill_attention(dk.view.data, dk.view.data, dv.view.data,
                                                 nullptr, layout, bad, t, nullptr)
                      .code(),
                  Code::invalid_argument);
      }
      const char* shifted = static_cast<const char*>(dk.view.data) + 8;
      EXPECT_FALSE(engine::gpu::prefill_attention_fits(dk.view.data, shifted, dv.view.data,
                                                       layout, s));
      const engine::gpu::AttentionShape ragged{5, 2, hd, 600};
      EXPECT_FALSE(engine::gpu::prefill_attention_fits(dk.view.data, dk.view.data, dv.view.data,
                                                       layout, ragged));
      cudaFree(pos);
    }
  }
}
