// `sparrow prune` as a library call: read a model directory tensor by tensor, prune and encode
// its linear layers, and write a sparse checkpoint into a temporary sibling directory that is
// renamed into place only when everything succeeded.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/rng.hpp"
#include "sparrow/dispatch.hpp"
#include "sparrow/io/checkpoint.hpp"
#include "sparrow/io/config.hpp"
#include "sparrow/prune.hpp"
#include "sparrow/version.hpp"

namespace fs = std::filesystem;

namespace sparrow::prune {

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// Removes the temporary directory unless released (every early return cleans up).
struct TempDir {
  fs::path path;
  bool keep = false;
  ~TempDir() {
    if (!keep && !path.empty()) {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  }
};

struct Encoded {
  std::optional<Weight> weight;  // nullopt: stored as a plain dense tensor
  std::string format = "dense";
  std::string note;
  uint64_t bytes = 0;
};

// Encodes in `format`: a format name (forced; "fastest" and a per-matmul list resolve to one before
// this), or auto,
// the smallest among those that can encode the layer, never one larger than the dense tensor.
Result<Encoded> encode_layer(const HostMatrix& m, const std::string& format,
                             const ModelPruneOptions& o) {
  const uint64_t dense_bytes = m.bytes();
  Encoded e;
  e.bytes = dense_bytes;
  EncodeOptions eo;
  eo.nm_pattern = o.structure.nm;
  if (format == "dense") return e;
  if (format != "auto") {
    auto f = parse_format(format);
    auto w = encode(*f, m.view(), eo);
    if (!w.ok()) {
      return Status(w.status().code(), "cannot encode as " + format + ": " + w.status().message());
    }
    e.bytes = storage_bytes(w.value());
    e.format = format;
    if (e.bytes >= dense_bytes) e.note = "larger than dense (format forced)";
    e.weight = std::move(w).value();
    return e;
  }
  std::vector<Format> candidates = {Format::csr, Format::macko, Format::tca_bme, Format::tiled_csl};
  if (o.structure.kind == Structure::Kind::nm) candidates.push_back(Format::nm);
  std::optional<Weight> best;
  std::string failures;
  for (Format f : candidates) {
    auto w = encode(f, m.view(), eo);
    if (!w.ok()) {
      failures += std::string(failures.empty() ? "" : "; ") + format_name(f) + ": " +
                  code_name(w.status().code());
      continue;
    }
    if (!best || storage_bytes(w.value()) < storage_bytes(*best)) best = std::move(w).value();
  }
  if (!best) {
    e.note = "no sparse format could encode it (" + failures + ")";
    return e;
  }
  const uint64_t b = storage_bytes(*best);
  if (b >= dense_bytes) {
    e.note = std::string("kept dense: smallest sparse format ") + format_name(format_of(*best)) +
             " needs " + std::to_string(b) + " bytes >= dense";
    return e;
  }
  e.format = format_name(format_of(*best));
  e.bytes = b;
  e.weight = std::move(best);
  return e;
}

// One pruned and encoded layer, waiting to be written.
struct PrunedLayer {
  LayerReport lr;
  Encoded enc;
  HostMatrix m;  // the pruned dense matrix when it is kept dense
  io::TensorDType dtype = io::TensorDType::F16;
  std::vector<int64_t> shape;
  std::string method;
};

Status write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
  out.close();
  if (!out) return Status(Code::io_error, "cannot write " + p.string());
  return Status::success();
}

// The shard a logical tensor's data lives in.
int shard_of_logical(const io::Checkpoint& ck, const std::string& name) {
  int s = ck.shard_of(name);
  if (s >= 0) return s;
  const std::string pre = name + ".";
  for (const std::string& t : ck.tensor_names())
    if (t.rfind(pre, 0) == 0) return ck.shard_of(t);
  // compressed-tensors: "<p>.weight" is stored as "<p>.compressed" etc.
  if (name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0) {
    return ck.shard_of(name.substr(0, name.size() - 7) + ".compressed");
  }
  return 0;
}

HostMatrix to_matrix(const io::HostTensor& t) {
  const ConstMatrixView v = t.matrix().value();
  HostMatrix m(v.dtype, v.rows, v.cols);
  std::copy(t.bytes.begin(), t.bytes.end(), static_cast<uint8_t*>(m.data()));
  return m;
}

std::string fmt_speedup(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2fx", x);
  return buf;
}

// --format fastest: each candidate tensor's format, one per engine matmul of its decoder layer
// (the tensors of "model.layers.3.self_attn.{q,k,v}_proj.weight" share one pick, made for their
// stacked shape and combined target density; a layer's four matmuls together where
// pick_engine_layer's engine cells cover them), or for a tensor the engine does not stack, its own
// shape. From the targets rather than the pruned result so every tensor's format is known before
// the parallel pruning starts (a tensor kept because it was already sparser than its target
// still gets its group's format).
using FastestPicks = std::map<std::string, FormatPick>;
Result<FastestPicks> fastest_picks(const std::set<std::string>& candidates,
                                   const io::ModelWeights& mw,
                                   const std::function<double(const std::string&)>& target_of,
                                   int64_t batch, bool allow_nm) {
  // A decoder layer's engine matmuls (EngineMatmul's order) and the tensors each stacks.
  struct LayerGroup {
    std::array<EngineMatmulLayers, 4> matmuls;
    std::array<std::vector<std::string>, 4> members;
  };
  std::map<std::string, LayerGroup> layers;
  FastestPicks picks;
  for (const std::string& name : candidates) {
    SPARROW_ASSIGN_OR_RETURN(const std::vector<int64_t> shape, mw.shape(name));
    const double density = 1.0 - target_of(name);
    const std::optional<EngineMatmul> m = engine_matmul_of(name);
    if (!m) {
      picks[name] = pick_format(density, batch, allow_nm, shape[0], shape[1], false, true);
      continue;
    }
    // The decoder layer's prefix: everything before ".self_attn." or ".mlp.".
    size_t cut = name.rfind(".self_attn.");
    if (cut == std::string::npos) cut = name.rfind(".mlp.");
    LayerGroup& g = layers[name.substr(0, cut)];
    const size_t i = size_t(*m);
    g.matmuls[i].matmul = *m;
    g.matmuls[i].add(shape[0], shape[1], density);
    g.members[i].push_back(name);
  }
  // A layer missing a matmul (a tensor left unpruned) matches no engine cell: its matmuls are
  // then picked one by one.
  for (const auto& [prefix, g] : layers) {
    const std::array<FormatPick, 4> chosen = pick_engine_layer(g.matmuls, batch, allow_nm);
    for (size_t i = 0; i < 4; ++i)
      for (const std::string& name : g.members[i]) picks[name] = chosen[i];
  }
  return picks;
}

}  // namespace

Result<ModelPruneReport> prune_model(
    const ModelPruneOptions& o,
    const std::function<void(size_t, size_t, const std::string&)>& progress) {
  const auto t_start = Clock::now();
  // ---- arguments (all checked before anything is read or written) ----
  const bool is_nm = o.structure.kind == Structure::Kind::nm;
  if (!(o.sparsity >= 0.0 && o.sparsity < 1.0)) {
    return invalid_argument("--sparsity must be in [0, 1), got " + std::to_string(o.sparsity));
  }
  const bool fastest = o.format == "fastest";
  // A format per engine matmul ("qkv=F,o=F,gate_up=F,down=F"): q, k and v take qkv's, gate and
  // up gate_up's; a candidate tensor the engine does not stack or name gets auto.
  std::optional<std::array<Format, 4>> per_matmul;
  if (auto list = matmul_format_list(o.format)) {
    if (!list->ok()) return list->status();
    per_matmul = list->value();
  }
  if (o.format != "auto" && !fastest && !per_matmul && !parse_format(o.format)) {
    return invalid_argument("unknown --format '" + o.format +
                            "' (auto, fastest, dense, csr, macko, tca_bme, tiled_csl, nm, or "
                            "qkv=F,o=F,gate_up=F,down=F)");
  }
  if (o.batch < 1) {
    return invalid_argument("--batch must be at least 1, got " + std::to_string(o.batch));
  }
  const bool nm_named =
      o.format == "nm" ||
      (per_matmul && std::count(per_matmul->begin(), per_matmul->end(), Format::nm) > 0);
  if (nm_named && !is_nm) {
    return invalid_argument("--format nm needs an N:M --structure (e.g. --structure 2:4)");
  }
  if (o.method == Method::wanda && o.calibration.empty()) {
    return invalid_argument("--method wanda needs --calibration FILE with input-channel norms "
                            "(sparrow calibrate -m DIR --text FILE -o norms.json writes them)");
  }
  std::vector<std::regex> ignore;
  for (const std::string& r : o.ignore) {
    try {
      ignore.emplace_back(r);
    } catch (const std::regex_error&) {
      return invalid_argument("--ignore '" + r + "' is not a valid regular expression");
    }
  }
  if (o.out_dir.empty()) return invalid_argument("--out is required");
  fs::path out = fs::absolute(o.out_dir).lexically_normal();
  if (out.filename().empty()) out = out.parent_path();  // "dir/"
  fs::path in = fs::absolute(o.model_dir).lexically_normal();
  if (in.filename().empty()) in = in.parent_path();
  if (out == in) return invalid_argument("--out must differ from --model");
  if (fs::exists(out) && !o.force) {
    return invalid_argument("output directory " + out.string() +
                            " already exists (use --force to replace it)");
  }
  const Granularity gran = o.granularity.value_or(
      o.method == Method::wanda ? Granularity::row : Granularity::layer);

  // ---- input ----
  SPARROW_ASSIGN_OR_RETURN(io::ModelConfig cfg, io::load_config(o.model_dir));
  SPARROW_ASSIGN_OR_RETURN(io::ModelWeights mw, io::ModelWeights::open(o.model_dir));
  const io::Checkpoint& ck = mw.checkpoint();
  std::set<std::string> candidates;
  for (const io::ExpectedTensor& e : io::expected_matrices(cfg)) {
    auto shape = mw.shape(e.name);
    if (!shape.ok()) {
      return corrupt_data("config.json does not match the checkpoint: it implies tensor '" +
                          e.name + "', which the checkpoint lacks");
    }
    if (shape.value() != std::vector<int64_t>{e.rows, e.cols}) {
      std::string got;
      for (int64_t d : shape.value()) got += (got.empty() ? "" : ", ") + std::to_string(d);
      return corrupt_data("config.json does not match the checkpoint: '" + e.name + "' is [" +
                          got + "], the config implies [" + std::to_string(e.rows) + ", " +
                          std::to_string(e.cols) + "]");
    }
    bool skip = !e.linear;
    for (const auto& re : ignore) skip = skip || std::regex_search(e.name, re);
    if (!skip) candidates.insert(e.name);
  }
  Schedule schedule = Schedule::uniform(o.sparsity);
  if (o.schedule == "owl") {
    schedule = Schedule::owl(cfg.num_layers, o.sparsity);
  } else if (o.schedule != "uniform") {
    SPARROW_ASSIGN_OR_RETURN(schedule, Schedule::from_file(o.schedule, o.sparsity));
  }
  auto target_of = [&](const std::string& name) {
    return is_nm ? 1.0 - double(o.structure.nm.n) / o.structure.nm.m : schedule.sparsity_for(name);
  };
  SPARROW_ASSIGN_OR_RETURN(const FastestPicks picks,
                           fastest ? fastest_picks(candidates, mw, target_of, o.batch, is_nm)
                                   : FastestPicks{});
  std::map<std::string, std::vector<float>> norms;
  if (!o.calibration.empty()) {
    SPARROW_ASSIGN_OR_RETURN(norms, load_input_norms(o.calibration));
  }
  auto norms_for = [&](const std::string& name) -> const std::vector<float>* {
    auto it = norms.find(name);
    if (it == norms.end() && name.size() > 7) it = norms.find(name.substr(0, name.size() - 7));
    return it == norms.end() ? nullptr : &it->second;
  };
  for (const std::string& name : candidates) {
    const auto shape = mw.shape(name).value();
    if (is_nm && shape[1] % o.structure.nm.m != 0) {
      return invalid_argument("N:M structure " + structure_name(o.structure) + ": M = " +
                              std::to_string(o.structure.nm.m) + " does not divide K = " +
                              std::to_string(shape[1]) + " of '" + name + "'");
    }
    if (o.method == Method::wanda) {
      const auto* n = norms_for(name);
      if (!n || int64_t(n->size()) != shape[1]) {
        return corrupt_data("calibration file " + o.calibration + " has no " +
                            std::to_string(shape[1]) + " input-channel norms for '" + name + "'");
      }
    }
  }

  // ---- output: a temporary sibling directory, renamed at the end ----
  std::error_code ec;
  fs::create_directories(out.parent_path(), ec);
  TempDir tmp;
  tmp.path = out.parent_path() / ("." + out.filename().string() + ".tmp-" + std::to_string(::getpid()));
  fs::remove_all(tmp.path, ec);
  if (!fs::create_directory(tmp.path, ec)) {
    return Status(Code::io_error, "cannot create " + tmp.path.string() + ": " + ec.message());
  }

  ModelPruneReport report;
  // Output shard names follow the input's.
  std::vector<std::string> shard_names;
  for (const io::SafetensorsFile& f : ck.shards()) {
    shard_names.push_back(ck.sharded() ? fs::path(f.path()).filename().string() : "model.safetensors");
  }
  std::vector<std::vector<std::string>> by_shard(ck.shards().size());
  for (const std::string& n : mw.names()) by_shard[size_t(shard_of_logical(ck, n))].push_back(n);

  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  nlohmann::ordered_json layer_formats = nlohmann::ordered_json::object();
  std::set<std::string> not_pruned;
  double zeros_in_pruned = 0, params_in_pruned = 0;
  const size_t total_tensors = mw.names().size();
  size_t done = 0;

  // Memory grows with the batch (about one layer per worker), so it is capped at 8.
  const int workers = int(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
  auto process = [&](const std::string& name) -> Result<PrunedLayer> {
    PrunedLayer p;
    LayerReport& lr = p.lr;
    lr.name = name;
    lr.target = target_of(name);
    const auto t0 = Clock::now();
    SPARROW_ASSIGN_OR_RETURN(io::HostTensor dense, mw.load_dense(name));
    HostMatrix m = to_matrix(dense);
    p.dtype = dense.dtype;
    p.shape = dense.shape;
    dense = io::HostTensor{};  // the matrix copy is enough
    lr.rows = m.rows();
    lr.cols = m.cols();
    lr.bytes_before = m.bytes();
    MaskOptions mo;
    mo.method = o.method;
    mo.granularity = gran;
    mo.structure = o.structure;
    mo.sparsity = lr.target;
    mo.seed = o.seed ^ fnv1a(name.data(), name.size());
    mo.input_norms = o.method == Method::wanda ? norms_for(name) : nullptr;
    const double z = zero_fraction(m.view());
    p.method = method_name(o.method);
    bool keep_input = !o.reprune && z >= lr.target - 1e-12;
    if (keep_input && o.structure.kind != Structure::Kind::unstructured) {
      // Already sparse, but does it have the requested structure? Only if the structured
      // mask would remove nothing but zeros.
      SPARROW_ASSIGN_OR_RETURN(auto keep, compute_mask(m.view(), mo));
      for (size_t i = 0; i < keep.size() && keep_input; ++i) {
        keep_input = keep[i] || is_zero_element(m.data(), m.dtype(), i);
      }
    }
    if (keep_input) {
      p.method = "input";
      lr.note = "already sparse (" + std::to_string(int(std::lround(z * 100))) + "% zeros), kept";
    } else {
      SPARROW_ASSIGN_OR_RETURN(auto keep, compute_mask(m.view(), mo));
      SPARROW_ASSIGN_OR_RETURN(m, apply_mask(m.view(), keep));
    }
    lr.prune_ms = ms_since(t0);
    lr.sparsity = zero_fraction(m.view());
    const auto t1 = Clock::now();
    std::string format = o.format;
    if (per_matmul) {
      const std::optional<EngineMatmul> em = engine_matmul_of(name);
      format = em ? format_name((*per_matmul)[size_t(*em)]) : "auto";
    }
    if (fastest) {
      const FormatPick& pick = picks.at(name);
      format = format_name(pick.format);
      lr.note += (lr.note.empty() ? "" : "; ") + std::string("fastest at batch ") +
                 std::to_string(o.batch) + ": " +
                 (pick.format == Format::dense ? "no sparse kernel measured faster"
                                               : pick.kernel + " " +
                                                     fmt_speedup(pick.measured_speedup) +
                                                     " cuBLAS");
    }
    SPARROW_ASSIGN_OR_RETURN(p.enc, encode_layer(m, format, o));
    lr.encode_ms = ms_since(t1);
    lr.format = p.enc.format;
    if (!p.enc.note.empty()) lr.note += (lr.note.empty() ? "" : "; ") + p.enc.note;
    // A kept-dense layer is written from the pruned matrix; a sparse one from its Weight.
    if (p.enc.weight) m = HostMatrix();
    p.m = std::move(m);
    return p;
  };

  // Writes one pruned layer and accounts for it.
  auto write_layer = [&](io::SafetensorsWriter& writer, std::map<std::string, std::string>& meta,
                         PrunedLayer& p) -> Status {
    LayerReport& lr = p.lr;
    if (p.enc.weight) {
      io::SparseTensorInfo info;
      info.format = format_of(*p.enc.weight);
      info.shape = shape_of(*p.enc.weight);
      info.sparsity = lr.sparsity;
      info.method = p.method;
      info.structure = structure_name(o.structure);
      info.library_version = kVersion;
      SPARROW_RETURN_IF_ERROR(io::write_weight(writer, meta, lr.name, *p.enc.weight, info));
    } else {
      SPARROW_RETURN_IF_ERROR(writer.add(lr.name, p.dtype, p.shape, p.m.data(), p.m.bytes()));
    }
    lr.bytes_after = p.enc.bytes;
    report.linear_before += lr.bytes_before;
    report.linear_after += lr.bytes_after;
    report.total_before += lr.bytes_before;
    report.total_after += lr.bytes_after;
    zeros_in_pruned += lr.sparsity * double(lr.rows) * double(lr.cols);
    params_in_pruned += double(lr.rows) * double(lr.cols);
    layer_formats[lr.name] = lr.format;
    report.layers.push_back(std::move(lr));
    return Status::success();
  };
  // Copies a tensor that is not pruned: plain tensors byte for byte straight from the mapping,
  // sparrow sparse tensors re-serialised, compressed-tensors weights decompressed (sparrow stores
  // them dense when they are not pruned).
  auto copy_tensor = [&](io::SafetensorsWriter& writer, std::map<std::string, std::string>& meta,
                         const std::string& name) -> Status {
    not_pruned.insert(name);
    uint64_t bytes = 0;
    if (!mw.is_sparse(name)) {
      SPARROW_ASSIGN_OR_RETURN(io::TensorView v, ck.tensor(name));
      SPARROW_RETURN_IF_ERROR(writer.add(name, v.info->dtype, v.info->shape, v.data, v.info->bytes()));
      bytes = v.info->bytes();
    } else {
      SPARROW_ASSIGN_OR_RETURN(io::LoadedTensor lt, mw.load(name));
      if (auto* w = std::get_if<Weight>(&lt)) {
        SPARROW_RETURN_IF_ERROR(io::write_weight(writer, meta, name, *w, *mw.sparse_info(name)));
        bytes = storage_bytes(*w);
      } else {
        const auto& t = std::get<io::HostTensor>(lt);
        SPARROW_RETURN_IF_ERROR(writer.add(name, t.dtype, t.shape, t.bytes.data(), t.bytes.size()));
        bytes = t.bytes.size();
      }
    }
    report.total_before += bytes;
    report.total_after += bytes;
    return Status::success();
  };
  auto after_tensor = [&](const std::string& name) {
    mw.release_pages(name);  // keeps resident memory near one tensor (batch) on large models
    ++done;
    if (progress) progress(done, total_tensors, name);
  };

  for (size_t s = 0; s < ck.shards().size(); ++s) {
    const fs::path shard_path = tmp.path / shard_names[s];
    SPARROW_ASSIGN_OR_RETURN(io::SafetensorsWriter writer, io::SafetensorsWriter::create(shard_path.string()));
    std::map<std::string, std::string> meta = {{"format", "pt"},
                                               {"sparrow.version", kVersion}};
    const std::vector<std::string>& names = by_shard[s];
    size_t i = 0;
    while (i < names.size()) {
      if (o.interrupted && *o.interrupted) return Status(Code::io_error, "interrupted; nothing written");
      if (!candidates.count(names[i])) {
        SPARROW_RETURN_IF_ERROR(copy_tensor(writer, meta, names[i]));
        after_tensor(names[i++]);
        continue;
      }
      // A batch of consecutive linear layers is pruned and encoded in parallel (one thread
      // each), then written in order: the output is identical to a sequential run.
      size_t end = i;
      while (end < names.size() && end - i < size_t(workers) && candidates.count(names[end])) ++end;
      std::vector<std::optional<Result<PrunedLayer>>> results(end - i);
      std::vector<std::thread> pool;
      for (size_t k = 1; k < results.size(); ++k) {
        pool.emplace_back([&, k] { results[k] = process(names[i + k]); });
      }
      results[0] = process(names[i]);
      for (auto& t : pool) t.join();
      for (const auto& r : results) {
        if (!r->ok()) return r->status();
      }
      for (auto& r : results) {
        SPARROW_RETURN_IF_ERROR(write_layer(writer, meta, r->value()));
        after_tensor(names[i++]);
      }
    }
    SPARROW_RETURN_IF_ERROR(writer.finish(meta));
    // Index entries: every stored tensor of this shard.
    SPARROW_ASSIGN_OR_RETURN(io::SafetensorsFile written, io::SafetensorsFile::open(shard_path.string()));
    for (const io::TensorInfo& t : written.tensors()) weight_map[t.name] = shard_names[s];
  }

  if (ck.sharded()) {
    uint64_t total = 0;
    for (const auto& n : shard_names) total += fs::file_size(tmp.path / n);
    nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    SPARROW_RETURN_IF_ERROR(write_text(tmp.path / "model.safetensors.index.json", index.dump(2)));
  }

  // config.json with a sparsity_config block (in the spirit of compressed-tensors'), and every
  // other non-weight file (tokenizer, generation config, README) copied.
  {
    std::ifstream cin(fs::path(o.model_dir) / "config.json", std::ios::binary);
    std::ostringstream ss;
    ss << cin.rdbuf();
    auto cj = nlohmann::ordered_json::parse(ss.str(), nullptr, false);
    if (cj.is_discarded()) return corrupt_data("config.json is not valid JSON");
    nlohmann::ordered_json ignore_list = nlohmann::ordered_json::array();
    for (const auto& n : not_pruned) {
      if (n.size() > 7 && n.compare(n.size() - 7, 7, ".weight") == 0 &&
          mw.shape(n).value().size() == 2) {
        ignore_list.push_back(n);
      }
    }
    cj["sparsity_config"] = {
        {"format", "sparrow"},
        {"global_sparsity", params_in_pruned > 0 ? zeros_in_pruned / params_in_pruned : 0.0},
        {"sparsity_structure", structure_name(o.structure)},
        {"targets", nlohmann::ordered_json::array({"Linear"})},
        {"ignore", ignore_list},
        {"sparrow",
         {{"version", kVersion},
          {"method", method_name(o.method)},
          {"granularity", gran == Granularity::row ? "row" : "layer"},
          {"schedule", schedule.describe()},
          {"requested_sparsity", o.sparsity},
          {"format", o.format},
          {"layers", layer_formats}}}};
    SPARROW_RETURN_IF_ERROR(write_text(tmp.path / "config.json", cj.dump(2) + "\n"));
  }
  for (const auto& entry : fs::directory_iterator(o.model_dir)) {
    if (!entry.is_regular_file()) continue;
    const std::string fname = entry.path().filename().string();
    if (fname == "config.json" || fname == "model.safetensors.index.json") continue;
    if (entry.path().extension() == ".safetensors") continue;
    fs::copy_file(entry.path(), tmp.path / fname, fs::copy_options::overwrite_existing, ec);
    if (ec) return Status(Code::io_error, "cannot copy " + fname + ": " + ec.message());
  }

  // Atomic publish: the complete directory appears under its final name in one rename.
  if (fs::exists(out)) {
    const fs::path old = out.parent_path() / ("." + out.filename().string() + ".old-" + std::to_string(::getpid()));
    fs::rename(out, old, ec);
    if (ec) return Status(Code::io_error, "cannot move the existing " + out.string() + " aside: " + ec.message());
    fs::rename(tmp.path, out, ec);
    if (ec) {
      fs::rename(old, out);
      return Status(Code::io_error, "cannot rename into " + out.string() + ": " + ec.message());
    }
    fs::remove_all(old, ec);
  } else {
    fs::rename(tmp.path, out, ec);
    if (ec) return Status(Code::io_error, "cannot rename into " + out.string() + ": " + ec.message());
  }
  tmp.keep = true;
  // Table order: by layer, then name (shards may hold layers out of order).
  std::stable_sort(report.layers.begin(), report.layers.end(),
                   [](const LayerReport& a, const LayerReport& b) {
                     const int64_t la = layer_index(a.name), lb = layer_index(b.name);
                     return la != lb ? la < lb : a.name < b.name;
                   });
  report.seconds = ms_since(t_start) / 1000.0;
  return report;
}

}  // namespace sparrow::prune
