// "fastest": the formats prune_model / synth_model / bench-model pick for a decoder layer, judged
// by the matmuls the GPU engine runs (q, k, v stacked; o; gate, up stacked; down; dependent
// launches; the norm folded into qkv and gate_up).
#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include "engine_test_util.hpp"
#include "sparrow/dispatch.hpp"
#include "sparrow/engine/transform.hpp"

namespace sparrow {
namespace {

std::string names(const std::vector<Format>& fs) {
  std::string s;
  for (Format f : fs) s += std::string(format_name(f)) + " ";
  return s;
}

// A decoder layer's seven formats in role order q, k, v, o, gate, up, down.
std::vector<Format> formats_of(const engine::Layer& l) {
  return {format_of(l.q),    format_of(l.k),  format_of(l.v),   format_of(l.o),
          format_of(l.gate), format_of(l.up), format_of(l.down)};
}

// One format per engine matmul, and it is the pick for that matmul as the engine calls it: the
// rule table's per matmul, or the layer's engine cell where one covers it (pick_engine_layer).
// Llama-3-8B's k and v (1024 x 4096) are far smaller than q: picked alone they used to differ
// from q (70 % at 8 tokens: q dense, k and v tca_bme), and a layer whose q, k, v differ in format
// cannot be stacked, which turned the engine's stacking off for the whole model.
TEST(EngineTransform, FastestPicksOneFormatPerEngineMatmul) {
  for (const char* preset : {"tiny", "llama2-7b", "llama3-8b"}) {
    auto c = engine::synth_config(preset);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    const engine::LlamaConfig& k = c.value();
    struct Group {
      int first, last;  // roles q, k, v, o, gate, up, down = 0..6
      int64_t rows, cols;
      bool normed;
    };
    const Group groups[] = {{0, 2, k.q_dim() + 2 * k.kv_dim(), k.hidden, true},
                            {3, 3, k.hidden, k.q_dim(), false},
                            {4, 5, 2 * k.intermediate, k.hidden, true},
                            {6, 6, k.hidden, k.intermediate, false}};
    for (double density : {0.5, 0.3, 0.1}) {
      for (int64_t n : {1, 2, 4, 8, 16, 32}) {
        const std::vector<Format> f = engine::fastest_formats(k, density, n);
        ASSERT_EQ(f.size(), 7u);
        const std::string at = std::string(preset) + " density " + std::to_string(density) +
                               " N=" + std::to_string(n) + ": " + names(f);
        std::array<EngineMatmulLayers, 4> layer;
        for (size_t m = 0; m < 4; ++m) {
          layer[m].matmul = EngineMatmul(m);
          layer[m].add(groups[m].rows, groups[m].cols, density);
        }
        const std::array<FormatPick, 4> want = pick_engine_layer(layer, n);
        for (size_t m = 0; m < 4; ++m) {
          const Group& g = groups[m];
          // Without an engine cell the pick is the rule table's for the stacked shape.
          if (want[m].reason.rfind("engine cell", 0) != 0) {
            const FormatPick alone = pick_format(density, n, false, g.rows, g.cols, g.normed,
                                                 /*dependent_launch=*/true);
            EXPECT_EQ(want[m].format, alone.format) << at << " matmul " << m;
          }
          for (int i = g.first; i <= g.last; ++i)
            EXPECT_EQ(f[size_t(i)], want[m].format)
                << at << " role " << i << ": " << want[m].reason;
        }
      }
    }
  }
}

// prune_model with "fastest" encodes each layer as fastest_formats says for the pruned density
// (magnitude pruning per matrix: every matrix at the target), at each pick N.
TEST(EngineTransform, PruneModelFastestEncodesThePicks) {
  const engine::LlamaConfig c = test::tiny_config();
  auto m = engine::build_model(c, test::random_source(c, 11));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  prune::MaskOptions mask;
  mask.sparsity = 0.5;
  for (int64_t n : {1, 2, 8}) {
    auto p = engine::prune_model(m.value(), mask, "fastest", true, n);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    const std::vector<Format> want = engine::fastest_formats(c, 0.5, n);
    for (const engine::Layer& l : p->layers) {
      const std::vector<Format> got = formats_of(l);
      EXPECT_EQ(got, want) << "N=" << n << ": " << names(got) << "vs " << names(want);
    }
  }
}

// synth_parts once, then a model per format (bench-model's batch groups): each model is the one
// synth_model builds from the preset directly, value for value, and the parts stay reusable.
TEST(EngineTransform, SynthPartsBuildTheSameModelPerFormat) {
  prune::MaskOptions mask;
  mask.sparsity = 0.5;
  auto parts = engine::synth_parts("tiny", mask, 2);
  ASSERT_TRUE(parts.ok()) << parts.status().to_string();
  // Bit for bit, dtype and signed zeros included.
  auto same_bytes = [](const HostMatrix& a, const HostMatrix& b) {
    return a.dtype() == b.dtype() && a.rows() == b.rows() && a.cols() == b.cols() &&
           std::memcmp(a.data(), b.data(), a.bytes()) == 0;
  };
  auto same = [&](const Weight& a, const Weight& b) {
    auto da = decode(a), db = decode(b);
    return da.ok() && db.ok() && same_bytes(da.value(), db.value());
  };
  for (const char* format : {"macko", "tca_bme", "dense"}) {
    auto from_parts = engine::synth_model(parts.value(), format, false, 2);
    auto direct = engine::synth_model("tiny", mask, format, false, 1);
    ASSERT_TRUE(from_parts.ok()) << from_parts.status().to_string();
    ASSERT_TRUE(direct.ok()) << direct.status().to_string();
    const engine::Model& a = from_parts.value();
    const engine::Model& b = direct.value();
    EXPECT_EQ(a.name, b.name);
    EXPECT_TRUE(same_bytes(a.embed, b.embed)) << format;
    EXPECT_TRUE(same(a.lm_head, b.lm_head)) << format;
    ASSERT_EQ(a.layers.size(), b.layers.size());
    for (size_t i = 0; i < a.layers.size(); ++i) {
      const engine::Layer& la = a.layers[i];
      const engine::Layer& lb = b.layers[i];
      for (auto [wa, wb] : {std::pair{&la.q, &lb.q}, {&la.k, &lb.k}, {&la.v, &lb.v},
                            {&la.o, &lb.o}, {&la.gate, &lb.gate}, {&la.up, &lb.up},
                            {&la.down, &lb.down}}) {
        EXPECT_EQ(format_of(*wa), format_of(*wb)) << format << " layer " << i;
        EXPECT_TRUE(same(*wa, *wb)) << format << " layer " << i;
      }
      EXPECT_EQ(la.attn_norm, lb.attn_norm);
      EXPECT_EQ(la.mlp_norm, lb.mlp_norm);
    }
    EXPECT_EQ(a.final_norm, b.final_norm);
    EXPECT_EQ(std::optional<Format>(format_of(a.layers[0].q)), parse_format(format));
  }
  // A bad format is refused before any work, as synth_model(preset, ...) refuses it.
  auto bad = engine::synth_model(parts.value(), "sparse", false);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::invalid_argument);
  // An unknown preset: a clear error from synth_parts.
  auto none = engine::synth_parts("llama9-1t", mask);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("llama9-1t"), std::string::npos) << none.status().message();
}

// A format per engine matmul ("qkv=dense,o=dense,gate_up=tca_bme,down=macko"): q, k, v take qkv's,
// gate and up gate_up's; a list that does not name each of the four once, or names an unknown
// matmul or format, is refused before any work with a message that says what is wrong.
TEST(EngineTransform, FormatListPerEngineMatmul) {
  const engine::LlamaConfig c = test::tiny_config();
  auto m = engine::build_model(c, test::random_source(c, 12));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  prune::MaskOptions mask;
  mask.sparsity = 0.5;
  const std::string list = "down=macko,qkv=dense,o=csr,gate_up=tca_bme";  // any order
  EXPECT_TRUE(engine::check_format_choice(list).ok());
  auto p = engine::prune_model(m.value(), mask, list, true);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  const std::vector<Format> want = {Format::dense, Format::dense,   Format::dense, Format::csr,
                                    Format::tca_bme, Format::tca_bme, Format::macko};
  for (const engine::Layer& l : p->layers) EXPECT_EQ(formats_of(l), want) << names(formats_of(l));
  struct Bad {
    const char* list;
    const char* says;
  };
  for (const Bad& b : {Bad{"qkv=dense,o=dense,gate_up=dense", "'down' missing"},
                       Bad{"qkv=dense,o=dense,gate_up=dense,down=dense,o=csr", "'o' named twice"},
                       Bad{"qkv=dense,out=dense,gate_up=dense,down=dense", "unknown matmul 'out'"},
                       Bad{"qkv=dense,o=sparse,gate_up=dense,down=dense", "unknown format 'sparse'"},
                       Bad{"qkv=dense,o,gate_up=dense,down=dense", "'o' has no '='"},
                       Bad{"qkv=dense,o=dense,gate_up=dense,down=dense,", "'' has no '='"}}) {
    const Status st = engine::check_format_choice(b.list);
    EXPECT_EQ(st.code(), Code::invalid_argument) << b.list;
    EXPECT_NE(st.message().find(b.says), std::string::npos) << b.list << ": " << st.message();
    auto q = engine::prune_model(m.value(), mask, b.list, true);
    EXPECT_FALSE(q.ok()) << b.list;
  }
  // A format without a GPU kernel (nm has none in this build) in a list the GPU engine will run.
  auto nm = engine::prune_model(m.value(), mask, "qkv=nm,o=dense,gate_up=dense,down=dense", true);
  ASSERT_FALSE(nm.ok());
  EXPECT_EQ(nm.status().code(), Code::invalid_argument);
  EXPECT_NE(nm.status().message().find("nm has no GPU kernel"), std::string::npos)
      << nm.status().message();
}

// The GPU engine stacks q/k/v and gate/up only when each group shares a stackable format in every
// layer; otherwise it says which layer and tensors stop it (and runs them one by one).
TEST(EngineTransform, StackingBlockerNamesTheLayerAndTensors) {
  const engine::LlamaConfig c = test::tiny_config();
  auto m = engine::build_model(c, test::random_source(c, 5));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(engine::stacking_blocker(m.value()), "");
  auto alike = engine::reencode_model(m.value(), Format::tca_bme);
  ASSERT_TRUE(alike.ok());
  EXPECT_EQ(engine::stacking_blocker(alike.value()), "");

  engine::Model mixed = m.value();
  auto k_csr = encode(Format::csr, decode(mixed.layers[1].k).value().view());
  ASSERT_TRUE(k_csr.ok());
  mixed.layers[1].k = k_csr.value();
  const std::string b = engine::stacking_blocker(mixed);
  EXPECT_NE(b.find("layer 1"), std::string::npos) << b;
  EXPECT_NE(b.find("k_proj csr"), std::string::npos) << b;
  EXPECT_NE(b.find("different formats"), std::string::npos) << b;

  engine::Model mlp = m.value();
  auto up_macko = encode(Format::macko, decode(mlp.layers[0].up).value().view());
  ASSERT_TRUE(up_macko.ok());
  mlp.layers[0].up = up_macko.value();
  EXPECT_NE(engine::stacking_blocker(mlp).find("layer 0: gate_proj dense, up_proj macko"),
            std::string::npos)
      << engine::stacking_blocker(mlp);

  engine::Model bias = m.value();
  bias.layers[0].q_bias.assign(size_t(c.q_dim()), 0.5f);
  EXPECT_NE(engine::stacking_blocker(bias).find("biases"), std::string::npos);
}

}  // namespace
}  // namespace sparrow
