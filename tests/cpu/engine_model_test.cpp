// The engine's model description and CPU backend on small random models: the CPU backend against
// an independent double-precision forward pass, KV-cache consistency, sampling, bad input.
#include <gtest/gtest.h>

#include <cmath>

#include "decode_greedy_check.hpp"
#include "engine_test_util.hpp"
#include "sparrow/engine/backend.hpp"
#include "sparrow/engine/generate.hpp"

namespace sparrow {
namespace {

using engine::LlamaConfig;

// The whole sequence at once, no cache, in double: the textbook Llama forward pass.
std::vector<double> naive_logits(const engine::Model& m, const std::vector<int32_t>& tok) {
  const LlamaConfig& c = m.config;
  const int64_t T = int64_t(tok.size()), H = c.hidden, hd = c.head_dim;
  auto inv = engine::rope_inv_freq(c).value();
  auto dense = [](const Weight& w) { return decode(w).value(); };
  auto lin = [&](const HostMatrix& W, const std::vector<double>& x, const std::vector<float>& b) {
    std::vector<double> y(size_t(W.rows()));
    for (int64_t r = 0; r < W.rows(); ++r) {
      double s = b.empty() ? 0.0 : b[size_t(r)];
      for (int64_t k = 0; k < W.cols(); ++k) s += double(W.at(r, k)) * x[size_t(k)];
      y[size_t(r)] = s;
    }
    return y;
  };
  auto norm = [&](const std::vector<double>& x, const std::vector<float>& w) {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double inv_rms = 1.0 / std::sqrt(ss / double(x.size()) + c.rms_eps);
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv_rms * w[i];
    return y;
  };
  auto rope = [&](std::vector<double>& v, int64_t heads, int64_t pos) {
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < hd / 2; ++i) {
        const double a = double(pos) * double(inv[size_t(i)]);
        const double x1 = v[size_t(h * hd + i)], x2 = v[size_t(h * hd + i + hd / 2)];
        v[size_t(h * hd + i)] = x1 * std::cos(a) - x2 * std::sin(a);
        v[size_t(h * hd + i + hd / 2)] = x2 * std::cos(a) + x1 * std::sin(a);
      }
  };
  std::vector<std::vector<double>> x(static_cast<size_t>(T),
                                     std::vector<double>(static_cast<size_t>(H)));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < H; ++i) x[size_t(t)][size_t(i)] = m.embed.at(tok[size_t(t)], i);
  for (const engine::Layer& L : m.layers) {
    HostMatrix q = dense(L.q), k = dense(L.k), v = dense(L.v), o = dense(L.o);
    HostMatrix g = dense(L.gate), u = dense(L.up), d = dense(L.down);
    std::vector<std::vector<double>> qs, ks, vs;
    for (int64_t t = 0; t < T; ++t) {
      auto h = norm(x[size_t(t)], L.attn_norm);
      qs.push_back(lin(q, h, L.q_bias));
      ks.push_back(lin(k, h, L.k_bias));
      vs.push_back(lin(v, h, L.v_bias));
      rope(qs.back(), c.heads, t);
      rope(ks.back(), c.kv_heads, t);
    }
    for (int64_t t = 0; t < T; ++t) {
      std::vector<double> att(size_t(c.q_dim()), 0.0);
      for (int64_t head = 0; head < c.heads; ++head) {
        const int64_t kvh = head / (c.heads / c.kv_heads);
        std::vector<double> s(size_t(t + 1));
        double mx = -1e300, sum = 0;
        for (int64_t j = 0; j <= t; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < hd; ++e)
            dot += qs[size_t(t)][size_t(head * hd + e)] * ks[size_t(j)][size_t(kvh * hd + e)];
          s[size_t(j)] = dot / std::sqrt(double(hd));
          mx = std::max(mx, s[size_t(j)]);
        }
        for (auto& e : s) sum += (e = std::exp(e - mx));
        for (int64_t j = 0; j <= t; ++j)
          for (int64_t e = 0; e < hd; ++e)
            att[size_t(head * hd + e)] += s[size_t(j)] / sum * vs[size_t(j)][size_t(kvh * hd + e)];
      }
      auto proj = lin(o, att, {});
      for (int64_t i = 0; i < H; ++i) x[size_t(t)][size_t(i)] += proj[size_t(i)];
      auto h = norm(x[size_t(t)], L.mlp_norm);
      auto gv = lin(g, h, {}), uv = lin(u, h, {});
      for (size_t i = 0; i < gv.size(); ++i) gv[i] = gv[i] / (1 + std::exp(-gv[i])) * uv[i];
      auto down = lin(d, gv, {});
      for (int64_t i = 0; i < H; ++i) x[size_t(t)][size_t(i)] += down[size_t(i)];
    }
  }
  HostMatrix head = dense(m.lm_head);
  std::vector<double> out;
  for (int64_t t = 0; t < T; ++t) {
    auto l = lin(head, norm(x[size_t(t)], m.final_norm), {});
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

std::shared_ptr<const engine::Model> make_model(const LlamaConfig& c, uint64_t seed) {
  auto src = test::random_source(c, seed);
  auto m = engine::build_model(c, src);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return std::make_shared<engine::Model>(std::move(m).value());
}

double rel_error(const std::vector<float>& y, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (double(y[i]) - ref[i]) * (double(y[i]) - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}

void expect_matches_naive(const LlamaConfig& c) {
  auto model = make_model(c, 7);
  auto b = engine::make_cpu_backend(model).value();
  std::vector<int32_t> tok = {3, 17, 0, 42, 5, 60, 11, 9, 33};
  std::vector<float> logits;
  ASSERT_TRUE(b->forward(tok.data(), 1, int64_t(tok.size()), true, logits).ok());
  // fp32 arithmetic vs double: a few ulps per operation over a 2-layer model.
  EXPECT_LT(rel_error(logits, naive_logits(*model, tok)), 1e-5);
}

TEST(EngineCpu, MatchesNaiveForwardLlama) { expect_matches_naive(test::tiny_config()); }

TEST(EngineCpu, MatchesNaiveForwardQwen2BiasTiedLlama3Rope) {
  LlamaConfig c = test::tiny_config();
  c.qkv_bias = true;
  c.tied_embeddings = true;
  c.rope.type = "llama3";
  c.rope.theta = 500000;
  c.rope.factor = 8;
  c.rope.low_freq_factor = 1;
  c.rope.high_freq_factor = 4;
  c.rope.original_max_position = 16;
  expect_matches_naive(c);
}

TEST(EngineCpu, MultiQueryAndLinearRope) {
  LlamaConfig c = test::tiny_config();
  c.kv_heads = 1;
  c.rope.type = "linear";
  c.rope.factor = 2;
  expect_matches_naive(c);
}

TEST(EngineCpu, IncrementalDecodeEqualsOnePass) {
  auto model = make_model(test::tiny_config(), 11);
  auto b = engine::make_cpu_backend(model).value();
  std::vector<int32_t> tok = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  std::vector<float> all, step;
  ASSERT_TRUE(b->forward(tok.data(), 1, int64_t(tok.size()), true, all).ok());
  b->reset();
  const int64_t V = model->config.vocab;
  // Prefill 5, then one token at a time: same logits bit for bit (same summation order).
  ASSERT_TRUE(b->forward(tok.data(), 1, 5, false, step).ok());
  for (int64_t i = 0; i < V; ++i) ASSERT_EQ(step[size_t(i)], all[size_t(4 * V + i)]);
  for (size_t t = 5; t < tok.size(); ++t) {
    ASSERT_TRUE(b->forward(&tok[t], 1, 1, false, step).ok());
    for (int64_t i = 0; i < V; ++i) ASSERT_EQ(step[size_t(i)], all[t * size_t(V) + size_t(i)]);
  }
}

TEST(EngineCpu, BatchRowsAreIndependent) {
  auto model = make_model(test::tiny_config(), 5);
  engine::BackendOptions opt;
  opt.max_batch = 2;
  auto b = engine::make_cpu_backend(model, opt).value();
  auto g = engine::generate(*b, {{4, 5, 6}, {7, 8, 9}}, 6, {}).value();
  auto one = engine::make_cpu_backend(model).value();
  EXPECT_EQ(engine::generate(*one, {{7, 8, 9}}, 6, {}).value().tokens[0], g.tokens[1]);
  EXPECT_EQ(engine::generate(*one, {{4, 5, 6}}, 6, {}).value().tokens[0], g.tokens[0]);
}

// Backend::decode_greedy (the base class's loop on the CPU backend): the picks of forward_greedy
// steps, stops, the position, branches after a stop and bad arguments (decode_greedy_check.hpp).
TEST(EngineCpu, DecodeGreedyIsTheLoopOfSteps) {
  auto model = make_model(test::tiny_config(), 7);
  engine::BackendOptions opt;
  opt.max_batch = 2;
  auto b = engine::make_cpu_backend(model, opt).value();
  auto ref = engine::make_cpu_backend(model, opt).value();
  test::expect_decode_greedy_matches_loop(*b, *ref, {4, 5, 6, 7, 8, 9}, 2, 10, 4);
  test::expect_decode_greedy_matches_loop(*b, *ref, {4, 5, 6}, 1, 6, 1);
}

TEST(EngineSampling, GreedyTopKAndSeeds) {
  std::vector<float> logits = {0.1f, 2.0f, 1.9f, -1.0f, 2.0f};
  EXPECT_EQ(engine::argmax(logits.data(), 5), 1);  // first of the tied maxima
  engine::SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 1;
  engine::Sampler s1(p);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(s1.next(logits.data(), 5), 1);
  p.top_k = 0;
  p.seed = 42;
  engine::Sampler a(p), b(p);
  std::vector<int> counts(5, 0);
  for (int i = 0; i < 2000; ++i) {
    const int32_t x = a.next(logits.data(), 5);
    EXPECT_EQ(x, b.next(logits.data(), 5));  // same seed, same stream
    ++counts[size_t(x)];
  }
  // p(3) = e^-1 / (e^.1 + 2e^2 + e^1.9 + e^-1) ~ 1.5 %; p(1) ~ 34 %.
  EXPECT_GT(counts[1], 550);
  EXPECT_LT(counts[1], 800);
  EXPECT_LT(counts[3], 80);
  // top-p 0.5 keeps ids 1 and 4 only (0.34 + 0.34 >= 0.5).
  p.top_p = 0.5f;
  engine::Sampler n(p);
  for (int i = 0; i < 200; ++i) {
    const int32_t x = n.next(logits.data(), 5);
    EXPECT_TRUE(x == 1 || x == 4) << x;
  }
  p.top_p = 0.0f;
  EXPECT_FALSE(p.check().ok());
}

TEST(EngineModel, MissingAndMismatchedTensorsAreClearErrors) {
  LlamaConfig c = test::tiny_config();
  auto src = test::random_source(c, 1);
  src.matrices.erase("model.layers.1.mlp.up_proj.weight");
  auto m = engine::build_model(c, src);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("model.layers.1.mlp.up_proj.weight"), std::string::npos);

  auto src2 = test::random_source(c, 1);
  src2.matrices["model.layers.0.self_attn.k_proj.weight"] = HostMatrix(DType::fp16, 5, c.hidden);
  m = engine::build_model(c, src2);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("(5, 48)"), std::string::npos) << m.status().message();

  LlamaConfig bad = c;
  bad.kv_heads = 3;
  EXPECT_FALSE(engine::build_model(bad, src).ok());
  bad = c;
  bad.rope.type = "yarn";
  EXPECT_EQ(engine::build_model(bad, src).status().code(), Code::unsupported);
}

TEST(EngineCpu, ContextAndVocabLimits) {
  auto model = make_model(test::tiny_config(), 3);
  auto b = engine::make_cpu_backend(model).value();
  std::vector<int32_t> prompt(60, 1);
  auto g = engine::generate(*b, {prompt}, 10, {});
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("context of 64"), std::string::npos) << g.status().message();
  std::vector<float> logits;
  std::vector<int32_t> bad = {61};
  EXPECT_FALSE(b->forward(bad.data(), 1, 1, false, logits).ok());
  EXPECT_EQ(b->position(), 0);
}

TEST(EngineModel, RopeInvFreqLlama3) {
  LlamaConfig c = test::tiny_config();
  c.head_dim = 128;
  c.rope.theta = 500000;
  c.rope.type = "llama3";
  c.rope.factor = 8;
  c.rope.low_freq_factor = 1;
  c.rope.high_freq_factor = 4;
  c.rope.original_max_position = 8192;
  auto inv = engine::rope_inv_freq(c).value();
  ASSERT_EQ(inv.size(), 64u);
  EXPECT_FLOAT_EQ(inv[0], 1.0f);  // short wavelengths unchanged
  // The longest wavelength (> 8192 positions) is slowed down 8x.
  const double base = 1.0 / std::pow(500000.0, 126.0 / 128.0);
  EXPECT_NEAR(inv[63], base / 8, base * 1e-5);
}

}  // namespace
}  // namespace sparrow
