// Sparse checkpoints: byte-exact Weight serialisation, synth -> prune -> load round trips for
// every format, sizes, the real trained tinyllama, and compressed-tensors bitmask input.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "sparrow/io/checkpoint.hpp"
#include "sparrow/io/config.hpp"
#include "sparrow/io/synth.hpp"
#include "sparrow/patterns.hpp"
#include "sparrow/prune.hpp"

namespace fs = std::filesystem;
using namespace sparrow;
using namespace sparrow::io;

namespace {

fs::path temp_dir(const std::string& tag) {
  fs::path p = fs::temp_directory_path() / ("sparrow_ckpt_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// A tiny synthetic model, written once per test binary run.
const fs::path& tiny_model() {
  static const fs::path dir = [] {
    fs::path d = temp_dir("tiny_model") / "tiny";
    SynthOptions o = synth_preset("tiny").value();
    EXPECT_TRUE(write_synthetic_model(o, d.string(), false).ok());
    return d;
  }();
  return dir;
}

HostMatrix as_matrix(const HostTensor& t) {
  const ConstMatrixView v = t.matrix().value();
  HostMatrix m(v.dtype, v.rows, v.cols);
  std::memcpy(m.data(), t.bytes.data(), t.bytes.size());
  return m;
}

// Checks that every pruned linear layer of `out` decodes to the input layer with the mask that
// the same options compute, and that all other tensors are byte-identical to the input.
void expect_round_trip(const fs::path& in, const fs::path& out, const prune::MaskOptions& mo,
                       const std::string& expect_format) {
  auto src = ModelWeights::open(in.string());
  auto dst = ModelWeights::open(out.string());
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  ASSERT_TRUE(dst.ok()) << dst.status().to_string();
  EXPECT_EQ(src->names(), dst->names());
  const ModelConfig cfg = load_config(in.string()).value();
  int linear = 0;
  for (const ExpectedTensor& e : expected_matrices(cfg)) {
    if (!e.linear) continue;
    ++linear;
    const HostMatrix orig = as_matrix(src->load_dense(e.name).value());
    auto keep = prune::compute_mask(orig.view(), mo);
    ASSERT_TRUE(keep.ok());
    const HostMatrix want = prune::apply_mask(orig.view(), keep.value()).value();
    auto got = dst->load(e.name);
    ASSERT_TRUE(got.ok()) << e.name << ": " << got.status().to_string();
    if (expect_format == "dense") {
      ASSERT_TRUE(std::holds_alternative<HostTensor>(got.value())) << e.name;
      EXPECT_TRUE(same_values(as_matrix(std::get<HostTensor>(got.value())).view(), want.view()));
    } else {
      ASSERT_TRUE(std::holds_alternative<Weight>(got.value())) << e.name;
      const Weight& w = std::get<Weight>(got.value());
      if (expect_format != "auto") EXPECT_EQ(format_name(format_of(w)), expect_format) << e.name;
      const HostMatrix dec = decode(w).value();
      EXPECT_TRUE(same_values(dec.view(), want.view())) << e.name;
      ASSERT_NE(dst->sparse_info(e.name), nullptr);
      EXPECT_NEAR(dst->sparse_info(e.name)->sparsity, prune::zero_fraction(want.view()), 1e-12);
    }
  }
  EXPECT_GT(linear, 0);
  for (const std::string& n : src->names()) {
    bool is_linear = false;
    for (const ExpectedTensor& e : expected_matrices(cfg)) is_linear |= (e.linear && e.name == n);
    if (is_linear) continue;
    EXPECT_EQ(src->load_dense(n).value().bytes, dst->load_dense(n).value().bytes) << n;
  }
}

prune::ModelPruneReport run_prune(const fs::path& in, const fs::path& out, const std::string& fmt,
                                  const std::string& structure = "unstructured", double s = 0.5) {
  prune::ModelPruneOptions o;
  o.model_dir = in.string();
  o.out_dir = out.string();
  o.sparsity = s;
  o.format = fmt;
  o.structure = prune::parse_structure(structure).value();
  o.force = true;
  auto r = prune::prune_model(o);
  EXPECT_TRUE(r.ok()) << fmt << ": " << r.status().to_string();
  return r.ok() ? r.value() : prune::ModelPruneReport{};
}

}  // namespace

TEST(IoSparseCheckpoint, WeightWriteReadIsByteExact) {
  const fs::path dir = temp_dir("bytes");
  // N:M 2:4 with extra zeros: every format can encode it. Odd sizes exercise the padding.
  const HostMatrix m = patterns::nm_pattern(DType::fp16, 133, 200, nm::Pattern{2, 4, 1}, 0.2, 7);
  auto writer = SafetensorsWriter::create((dir / "model.safetensors").string());
  ASSERT_TRUE(writer.ok());
  std::map<std::string, std::string> meta{{"format", "pt"}};
  std::vector<std::pair<std::string, Weight>> written;
  for (Format f : kAllFormats) {
    EncodeOptions eo;
    eo.nm_pattern = {2, 4, 1};
    auto w = encode(f, m.view(), eo);
    ASSERT_TRUE(w.ok()) << format_name(f) << ": " << w.status().to_string();
    const std::string name = std::string("layer.") + format_name(f) + ".weight";
    SparseTensorInfo info;
    info.sparsity = 0.6;
    info.method = "magnitude";
    info.structure = "2:4";
    ASSERT_TRUE(write_weight(writer.value(), meta, name, w.value(), info).ok());
    written.emplace_back(name, std::move(w).value());
  }
  // The fp32 csr path too.
  const HostMatrix m32 = patterns::random(DType::fp32, 17, 70000, 0.99, 3);  // 32-bit columns
  auto w32 = encode(Format::csr, m32.view());
  ASSERT_TRUE(w32.ok());
  ASSERT_TRUE(write_weight(writer.value(), meta, "layer.csr32.weight", w32.value(), {}).ok());
  written.emplace_back("layer.csr32.weight", std::move(w32).value());
  ASSERT_TRUE(writer->finish(meta).ok());

  auto mw = ModelWeights::open(dir.string());
  ASSERT_TRUE(mw.ok()) << mw.status().to_string();
  EXPECT_EQ(mw->layout(), CheckpointLayout::sparrow);
  EXPECT_EQ(mw->names().size(), written.size());
  for (const auto& [name, w] : written) {
    auto got = mw->load(name);
    ASSERT_TRUE(got.ok()) << name << ": " << got.status().to_string();
    const Weight& r = std::get<Weight>(got.value());
    EXPECT_EQ(format_of(r), format_of(w));
    const auto a = weight_arrays(name, w), b = weight_arrays(name, r);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].tensor_name, b[i].tensor_name);
      ASSERT_EQ(a[i].bytes, b[i].bytes) << a[i].tensor_name;
      EXPECT_EQ(std::memcmp(a[i].data, b[i].data, a[i].bytes), 0) << a[i].tensor_name;
    }
    EXPECT_EQ(weight_metadata(w, {}), weight_metadata(r, {}));
    if (format_of(w) == Format::csr) {  // derived at load, not stored
      EXPECT_EQ(std::get<csr::Matrix>(r).max_row_nnz, std::get<csr::Matrix>(w).max_row_nnz);
    }
    if (format_of(w) == Format::macko) {  // derived at load, not stored
      EXPECT_GT(std::get<macko::Matrix>(r).max_row_entries, 0);
      EXPECT_EQ(std::get<macko::Matrix>(r).max_row_entries,
                std::get<macko::Matrix>(w).max_row_entries);
      EXPECT_FALSE(std::get<macko::Matrix>(r).row_order.empty());
      EXPECT_EQ(std::get<macko::Matrix>(r).row_order.host(),
                std::get<macko::Matrix>(w).row_order.host());
    }
    EXPECT_EQ(mw->sparse_info(name)->method, name == "layer.csr32.weight" ? "" : "magnitude");
  }
  // Tampering with a stored array is caught by validation at load.
  fs::remove_all(dir);
}

TEST(IoSparseCheckpoint, SynthPruneLoadEveryFormat) {
  const fs::path out = temp_dir("rt");
  prune::MaskOptions mo;  // magnitude, layer granularity: what prune_model uses by default
  mo.sparsity = 0.5;
  for (const std::string fmt : {"dense", "csr", "macko", "tca_bme", "tiled_csl", "auto"}) {
    run_prune(tiny_model(), out / fmt, fmt);
    expect_round_trip(tiny_model(), out / fmt, mo, fmt);
  }
  prune::MaskOptions nm_opt;
  nm_opt.structure = prune::parse_structure("2:4").value();
  run_prune(tiny_model(), out / "nm", "nm", "2:4");
  expect_round_trip(tiny_model(), out / "nm", nm_opt, "nm");
  // config.json carries the sparsity_config block.
  std::ifstream cfg(out / "tca_bme" / "config.json");
  auto j = nlohmann::json::parse(cfg);
  EXPECT_EQ(j["sparsity_config"]["format"], "sparrow");
  EXPECT_NEAR(j["sparsity_config"]["global_sparsity"].get<double>(), 0.5, 1e-3);
  EXPECT_EQ(j["sparsity_config"]["sparrow"]["layers"]["model.layers.0.mlp.up_proj.weight"], "tca_bme");
  EXPECT_TRUE(load_config((out / "tca_bme").string()).ok());
  fs::remove_all(out);
}

TEST(IoSparseCheckpoint, TcaBmeAtHalfIsSmall) {
  const fs::path out = temp_dir("size");
  const auto rep = run_prune(tiny_model(), out / "m", "tca_bme");
  ASSERT_GT(rep.linear_before, 0u);
  const double ratio = double(rep.linear_after) / double(rep.linear_before);
  EXPECT_LE(ratio, 0.58) << ratio;
  // On disk: the stored arrays of the linear layers, counted from the file itself.
  auto mw = ModelWeights::open((out / "m").string()).value();
  uint64_t sparse_bytes = 0;
  for (const std::string& n : mw.checkpoint().tensor_names())
    if (n.find(".tca_bme.") != std::string::npos) sparse_bytes += mw.checkpoint().find(n)->bytes();
  EXPECT_EQ(sparse_bytes, rep.linear_after);
  fs::remove_all(out);
}

TEST(IoSparseCheckpoint, AlreadySparseInputIsKept) {
  const fs::path out = temp_dir("again");
  run_prune(tiny_model(), out / "a", "dense", "unstructured", 0.5);
  prune::ModelPruneOptions o;
  o.model_dir = (out / "a").string();
  o.out_dir = (out / "b").string();
  o.method = prune::Method::random;  // would change the mask if it re-pruned
  o.sparsity = 0.5;
  o.format = "dense";
  auto r = prune::prune_model(o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  for (const auto& l : r->layers) EXPECT_NE(l.note.find("already sparse"), std::string::npos) << l.name;
  auto a = ModelWeights::open((out / "a").string()).value();
  auto b = ModelWeights::open((out / "b").string()).value();
  for (const auto& n : a.names()) EXPECT_EQ(a.load_dense(n)->bytes, b.load_dense(n)->bytes) << n;
  o.out_dir = (out / "c").string();
  o.reprune = true;
  auto rr = prune::prune_model(o);
  ASSERT_TRUE(rr.ok());
  auto c = ModelWeights::open((out / "c").string()).value();
  EXPECT_NE(a.load_dense("model.layers.0.mlp.up_proj.weight")->bytes,
            c.load_dense("model.layers.0.mlp.up_proj.weight")->bytes);
  fs::remove_all(out);
}

// compressed-tensors sparse-bitmask (layout documented in src/io/model_weights.cpp): a fixture
// written here from a pruned tiny model, read back and re-pruned by sparrow.
TEST(IoSparseCheckpoint, ReadsCompressedTensorsBitmask) {
  const fs::path out = temp_dir("ct");
  run_prune(tiny_model(), out / "pruned", "dense", "unstructured", 0.5);
  auto src = ModelWeights::open((out / "pruned").string()).value();
  const ModelConfig cfg = load_config(tiny_model().string()).value();
  const fs::path ct = out / "ct";
  fs::create_directories(ct);
  auto w = SafetensorsWriter::create((ct / "model.safetensors").string()).value();
  for (const std::string& n : src.names()) {
    const HostTensor t = src.load_dense(n).value();
    bool linear = false;
    for (const auto& e : expected_matrices(cfg)) linear |= e.linear && e.name == n;
    if (!linear) {
      ASSERT_TRUE(w.add(n, t.dtype, t.shape, t.bytes.data(), t.bytes.size()).ok());
      continue;
    }
    const int64_t rows = t.shape[0], cols = t.shape[1], rb = (cols + 7) / 8;
    std::vector<uint8_t> bits(size_t(rows * rb), 0), values;
    std::vector<int64_t> offsets;
    int64_t nnz = 0;
    for (int64_t r = 0; r < rows; ++r) {
      offsets.push_back(nnz);
      for (int64_t c = 0; c < cols; ++c) {
        if (is_zero_element(t.bytes.data(), DType::fp16, size_t(r * cols + c))) continue;
        bits[size_t(r * rb + c / 8)] |= uint8_t(1u << (c % 8));  // packbits, bitorder="little"
        values.insert(values.end(), &t.bytes[size_t(r * cols + c) * 2], &t.bytes[size_t(r * cols + c) * 2] + 2);
        ++nnz;
      }
    }
    const std::string p = n.substr(0, n.size() - 7);  // without ".weight"
    const std::vector<int64_t> shape = {rows, cols};
    ASSERT_TRUE(w.add(p + ".shape", TensorDType::I64, {2}, shape.data(), 16).ok());
    ASSERT_TRUE(w.add(p + ".compressed", TensorDType::F16, {nnz}, values.data(), values.size()).ok());
    ASSERT_TRUE(w.add(p + ".bitmask", TensorDType::U8, {rows, rb}, bits.data(), bits.size()).ok());
    ASSERT_TRUE(w.add(p + ".row_offsets", TensorDType::I64, {rows}, offsets.data(), offsets.size() * 8).ok());
  }
  ASSERT_TRUE(w.finish({{"format", "pt"}}).ok());
  fs::copy_file(tiny_model() / "config.json", ct / "config.json");

  auto mw = ModelWeights::open(ct.string());
  ASSERT_TRUE(mw.ok()) << mw.status().to_string();
  EXPECT_EQ(mw->layout(), CheckpointLayout::compressed_tensors);
  EXPECT_EQ(mw->names(), src.names());
  for (const std::string& n : src.names()) {
    EXPECT_EQ(mw->load_dense(n).value().bytes, src.load_dense(n).value().bytes) << n;
  }
  // sparrow prune takes it as input: already 50 % sparse, so kept and re-encoded.
  prune::MaskOptions mo;
  mo.sparsity = 0.5;
  auto rep = run_prune(ct, out / "from_ct", "tca_bme");
  for (const auto& l : rep.layers) EXPECT_NE(l.note.find("already sparse"), std::string::npos);
  expect_round_trip(out / "pruned", out / "from_ct", mo, "tca_bme");
  fs::remove_all(out);
}

TEST(IoSparseCheckpoint, TrainedTinyLlamaPruneWriteRead) {
  const fs::path src = fs::path(SPARROW_SOURCE_DIR) / ".." / "shared" / "models" / "tinyllama-py";
  if (!fs::exists(src)) GTEST_SKIP() << "no " << src << " (shared models absent)";
  const fs::path out = temp_dir("tl");
  const auto rep = run_prune(src, out / "tl50", "auto");
  EXPECT_EQ(rep.layers.size(), 56u);
  EXPECT_LT(double(rep.linear_after) / double(rep.linear_before), 0.6);
  auto mw = ModelWeights::open((out / "tl50").string());
  ASSERT_TRUE(mw.ok()) << mw.status().to_string();
  EXPECT_TRUE(mw->checkpoint().sharded());
  EXPECT_EQ(mw->checkpoint().shards().size(), 4u);
  prune::MaskOptions mo;
  mo.sparsity = 0.5;
  expect_round_trip(src, out / "tl50", mo, "auto");
  EXPECT_TRUE(fs::exists(out / "tl50" / "README.md"));
  fs::remove_all(out);
}

// OPT: a hand-made checkpoint (config + every tensor the config implies, plus biases and norms);
// its six projections per layer are pruned, wanda norms come from a safetensors file.
TEST(IoSparseCheckpoint, OptCheckpointWithWandaNormsFromSafetensors) {
  const fs::path root = temp_dir("opt");
  const fs::path in = root / "opt";
  fs::create_directories(in);
  std::ofstream(in / "config.json") << R"({"model_type":"opt","architectures":["OPTForCausalLM"],
    "hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"ffn_dim":128,
    "vocab_size":50,"max_position_embeddings":30,"torch_dtype":"float16"})";
  const ModelConfig cfg = load_config(in.string()).value();
  auto w = SafetensorsWriter::create((in / "model.safetensors").string()).value();
  auto norms = SafetensorsWriter::create((root / "norms.safetensors").string()).value();
  uint64_t seed = 1;
  for (const ExpectedTensor& e : expected_matrices(cfg)) {
    const HostMatrix m = patterns::trained_like(DType::fp16, e.rows, e.cols, seed++);
    ASSERT_TRUE(w.add(e.name, TensorDType::F16, {e.rows, e.cols}, m.data(), m.bytes()).ok());
    if (e.linear) {
      std::vector<float> n(size_t(e.cols));
      for (size_t i = 0; i < n.size(); ++i) n[i] = 1.0f + float(i % 7);
      ASSERT_TRUE(norms.add(e.name, TensorDType::F32, {e.cols}, n.data(), n.size() * 4).ok());
      const std::vector<uint16_t> bias(size_t(e.rows), 0x3C00);  // 1.0
      const std::string b = e.name.substr(0, e.name.size() - 7) + ".bias";
      ASSERT_TRUE(w.add(b, TensorDType::F16, {e.rows}, bias.data(), bias.size() * 2).ok());
    }
  }
  ASSERT_TRUE(w.finish().ok());
  ASSERT_TRUE(norms.finish().ok());

  prune::ModelPruneOptions o;
  o.model_dir = in.string();
  o.out_dir = (root / "out").string();
  o.method = prune::Method::wanda;
  o.calibration = (root / "norms.safetensors").string();
  o.format = "tca_bme";
  auto r = prune::prune_model(o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->layers.size(), 12u);  // q, k, v, out_proj, fc1, fc2 x 2 layers
  auto norm_map = prune::load_input_norms(o.calibration).value();
  prune::MaskOptions mo;
  mo.method = prune::Method::wanda;
  mo.granularity = prune::Granularity::row;
  auto src = ModelWeights::open(in.string()).value();
  auto dst = ModelWeights::open(o.out_dir).value();
  EXPECT_EQ(src.names(), dst.names());
  for (const auto& l : r->layers) {
    mo.input_norms = &norm_map.at(l.name);
    const HostMatrix orig = as_matrix(src.load_dense(l.name).value());
    const HostMatrix want =
        prune::apply_mask(orig.view(), prune::compute_mask(orig.view(), mo).value()).value();
    const Weight got = std::get<Weight>(dst.load(l.name).value());
    EXPECT_TRUE(same_values(decode(got).value().view(), want.view())) << l.name;
  }
  // Biases and embeddings are untouched.
  EXPECT_EQ(src.load_dense("model.decoder.layers.0.fc1.bias")->bytes,
            dst.load_dense("model.decoder.layers.0.fc1.bias")->bytes);
  EXPECT_FALSE(dst.is_sparse("model.decoder.embed_tokens.weight"));
  fs::remove_all(root);
}
