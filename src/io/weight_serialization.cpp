// A Weight as named safetensors arrays plus a JSON metadata entry, and back. Every Buffer of the
// format object is stored verbatim (bytes, in order), so write-then-read is byte-exact; the
// scalar fields go into the metadata and the rebuilt object is validated before it is returned.
#include <cstring>

#include <nlohmann/json.hpp>

#include "io/weight_io.hpp"
#include "sparrow/version.hpp"

namespace sparrow::io {

using nlohmann::json;

namespace {

// Values arrays are labelled with the weight's element type when the sizes allow (so Python
// tools show real numbers), otherwise with the raw unsigned type of the buffer.
template <class T>
TensorDType raw_dtype() {
  if constexpr (sizeof(T) == 1) return TensorDType::U8;
  if constexpr (sizeof(T) == 2) return TensorDType::U16;
  if constexpr (sizeof(T) == 4) return TensorDType::U32;
  return TensorDType::U64;
}

template <class T>
WeightArray array_of(const std::string& prefix, const char* what, const Buffer<T>& b,
                     bool values, DType dt) {
  WeightArray a{prefix + what, raw_dtype<T>(), {int64_t(b.size())}, b.data(), b.bytes()};
  if (values && b.bytes() % dtype_size(dt) == 0 &&
      (sizeof(T) == 1 || sizeof(T) == dtype_size(dt))) {
    a.dtype = to_tensor_dtype(dt);
    a.shape = {int64_t(b.bytes() / dtype_size(dt))};
  }
  return a;
}

struct Visitor {
  std::string p;  // "<name>.<format>."
  std::vector<WeightArray>& out;
  void operator()(const dense::Matrix& m) {
    WeightArray a = array_of(p, "values", m.values, true, m.shape.dtype);
    // (rows, ld) when consistent, so the array reads as a padded matrix.
    if (m.ld > 0 && a.dtype != TensorDType::U8 && a.shape[0] == m.shape.rows * m.ld) {
      a.shape = {m.shape.rows, m.ld};
    }
    out.push_back(a);
  }
  void operator()(const csr::Matrix& m) {
    out.push_back(array_of(p, "row_ptr", m.row_ptr, false, m.shape.dtype));
    out.push_back(array_of(p, "col16", m.col16, false, m.shape.dtype));
    out.push_back(array_of(p, "col32", m.col32, false, m.shape.dtype));
    out.push_back(array_of(p, "values", m.values, true, m.shape.dtype));
  }
  void operator()(const macko::Matrix& m) {
    out.push_back(array_of(p, "row_ptr", m.row_ptr, false, m.shape.dtype));
    out.push_back(array_of(p, "values", m.values, true, m.shape.dtype));
    out.push_back(array_of(p, "deltas", m.deltas, false, m.shape.dtype));
  }
  void operator()(const tca_bme::Matrix& m) {
    out.push_back(array_of(p, "bitmaps", m.bitmaps, false, m.shape.dtype));
    out.push_back(array_of(p, "group_offsets", m.group_offsets, false, m.shape.dtype));
    out.push_back(array_of(p, "values", m.values, true, m.shape.dtype));
  }
  void operator()(const tiled_csl::Matrix& m) {
    out.push_back(array_of(p, "tile_offsets", m.tile_offsets, false, m.shape.dtype));
    out.push_back(array_of(p, "entries", m.entries, false, m.shape.dtype));
  }
  void operator()(const nm::Matrix& m) {
    out.push_back(array_of(p, "values", m.values, true, m.shape.dtype));
    out.push_back(array_of(p, "indices", m.indices, false, m.shape.dtype));
  }
};

json format_params(const Weight& w) {
  return std::visit(
      [](const auto& m) -> json {
        using M = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<M, dense::Matrix>) {
          return {{"ld", m.ld}};
        } else if constexpr (std::is_same_v<M, csr::Matrix>) {
          return {{"index_bits", m.index_bits}};
        } else if constexpr (std::is_same_v<M, macko::Matrix>) {
          return {{"nnz", m.nnz}};
        } else if constexpr (std::is_same_v<M, tca_bme::Matrix>) {
          return {{"groups_m", m.groups_m}, {"groups_k", m.groups_k}, {"nnz", m.nnz}};
        } else if constexpr (std::is_same_v<M, tiled_csl::Matrix>) {
          return {{"tiles_m", m.tiles_m}, {"tiles_k", m.tiles_k}, {"reordered", m.reordered}};
        } else {
          return {{"n", m.pattern.n},
                  {"m", m.pattern.m},
                  {"l", m.pattern.l},
                  {"index_bits", m.index_bits},
                  {"groups", m.groups},
                  {"padded_rows", m.padded_rows},
                  {"words_per_block", m.words_per_block}};
        }
      },
      w);
}

}  // namespace

std::vector<WeightArray> weight_arrays(const std::string& name, const Weight& w) {
  std::vector<WeightArray> out;
  std::visit(Visitor{name + "." + format_name(format_of(w)) + ".", out}, w);
  return out;
}

std::string weight_metadata(const Weight& w, const SparseTensorInfo& info) {
  const Shape& s = shape_of(w);
  json arrays = json::array();
  for (const WeightArray& a : weight_arrays("", w)) {
    arrays.push_back(a.tensor_name.substr(a.tensor_name.rfind('.') + 1));
  }
  json j = {{"format", format_name(format_of(w))},
            {"shape", {s.rows, s.cols}},
            {"dtype", dtype_name(s.dtype)},
            {"sparsity", info.sparsity},
            {"method", info.method},
            {"structure", info.structure},
            {"library_version", info.library_version.empty() ? std::string(kVersion)
                                                             : info.library_version},
            {"storage_bytes", storage_bytes(w)},
            {"arrays", arrays},
            {"params", format_params(w)}};
  return j.dump();
}

Status write_weight(SafetensorsWriter& writer, std::map<std::string, std::string>& metadata,
                    const std::string& name, const Weight& w, const SparseTensorInfo& info) {
  if (location_of(w) != Location::host) return invalid_argument("write_weight needs a host weight");
  for (const WeightArray& a : weight_arrays(name, w)) {
    SPARROW_RETURN_IF_ERROR(writer.add(a.tensor_name, a.dtype, a.shape, a.data, a.bytes));
  }
  metadata[std::string(kSparseMetadataPrefix) + name] = weight_metadata(w, info);
  return Status::success();
}

namespace detail {

Result<SparseTensorInfo> parse_weight_metadata(const std::string& name, const std::string& text) {
  const std::string what = "sparse tensor '" + name + "' metadata";
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return corrupt_data(what + " is not a JSON object");
  SparseTensorInfo info;
  if (!j.contains("format") || !j["format"].is_string()) return corrupt_data(what + " has no format");
  auto f = parse_format(j["format"].get<std::string>());
  if (!f) return corrupt_data(what + " names unknown format '" + j["format"].get<std::string>() + "'");
  info.format = *f;
  if (!j.contains("shape") || !j["shape"].is_array() || j["shape"].size() != 2 ||
      !j["shape"][0].is_number_integer() || !j["shape"][1].is_number_integer()) {
    return corrupt_data(what + " has no [rows, cols] shape");
  }
  info.shape.rows = j["shape"][0].get<int64_t>();
  info.shape.cols = j["shape"][1].get<int64_t>();
  if (info.shape.rows <= 0 || info.shape.cols <= 0) return corrupt_data(what + " has a non-positive shape");
  if (!j.contains("dtype") || !j["dtype"].is_string()) return corrupt_data(what + " has no dtype");
  auto dt = parse_dtype(j["dtype"].get<std::string>());
  if (!dt) return corrupt_data(what + " has unknown dtype");
  info.shape.dtype = *dt;
  if (j.contains("sparsity") && j["sparsity"].is_number()) info.sparsity = j["sparsity"].get<double>();
  if (j.contains("method") && j["method"].is_string()) info.method = j["method"].get<std::string>();
  if (j.contains("structure") && j["structure"].is_string()) {
    info.structure = j["structure"].get<std::string>();
  }
  if (j.contains("library_version") && j["library_version"].is_string()) {
    info.library_version = j["library_version"].get<std::string>();
  }
  return info;
}

namespace {

template <class T>
Status fill(Buffer<T>& b, const std::string& tensor, const ArrayLookup& lookup) {
  SPARROW_ASSIGN_OR_RETURN(TensorView v, lookup(tensor));
  const uint64_t n = v.info->bytes();
  if (n % sizeof(T) != 0) {
    return corrupt_data("array '" + tensor + "' has " + std::to_string(n) +
                        " bytes, not a multiple of " + std::to_string(sizeof(T)));
  }
  std::vector<T> host(n / sizeof(T));
  if (n) std::memcpy(host.data(), v.data, n);
  b = Buffer<T>(std::move(host));
  return Status::success();
}

Status get_param(const json& p, const char* key, int64_t& out, const std::string& what) {
  if (!p.contains(key) || !p[key].is_number_integer()) {
    return corrupt_data(what + " lacks format parameter '" + key + "'");
  }
  out = p[key].get<int64_t>();
  return Status::success();
}

}  // namespace

Result<Weight> read_weight(const std::string& name, const std::string& meta_json,
                           const ArrayLookup& lookup) {
  SPARROW_ASSIGN_OR_RETURN(SparseTensorInfo info, parse_weight_metadata(name, meta_json));
  const std::string what = "sparse tensor '" + name + "'";
  json j = json::parse(meta_json, nullptr, false);
  const json p = j.contains("params") && j["params"].is_object() ? j["params"] : json::object();
  const std::string pre = name + "." + format_name(info.format) + ".";
  Weight w;
  int64_t v = 0;
  switch (info.format) {
    case Format::dense: {
      dense::Matrix m;
      m.shape = info.shape;
      SPARROW_RETURN_IF_ERROR(get_param(p, "ld", m.ld, what));
      SPARROW_RETURN_IF_ERROR(fill(m.values, pre + "values", lookup));
      w = std::move(m);
      break;
    }
    case Format::csr: {
      csr::Matrix m;
      m.shape = info.shape;
      SPARROW_RETURN_IF_ERROR(get_param(p, "index_bits", v, what));
      m.index_bits = int(v);
      SPARROW_RETURN_IF_ERROR(fill(m.row_ptr, pre + "row_ptr", lookup));
      SPARROW_RETURN_IF_ERROR(fill(m.col16, pre + "col16", lookup));
      SPARROW_RETURN_IF_ERROR(fill(m.col32, pre + "col32", lookup));
      SPARROW_RETURN_IF_ERROR(fill(m.values, pre + "values", lookup));
      csr::derive(m);  // max_row_nnz: derived, not stored
      w = std::move(m);
      break;
    }
    case Format::macko: {
      macko::Matrix m;
      m.shape = info.shape;
      SPARROW_RETURN_IF_ERROR(get_param(p, "nnz", m.nnz, what));
      SPARROW_RETURN_IF_ERROR(fill(m.row_ptr, pre + "row_ptr", lookup));
      SPARROW_RETURN_IF_ERROR(fill(m.values, pre + "values", lookup));
      SPARROW_RETURN_IF_ERROR(fill(m.deltas, pre + "deltas", lookup));
      macko::derive(m);  // max_row_entries, row_order: derived, not stored
      w = std::move(m);
      break;
    }
    case Format::tca_bme: {
      tca_bme::Matrix m;
      m.shape = info.shape;
      SPARROW_RETURN_IF_ERROR(get_param(p, "groups_m", m.groups_m, what));
      SPARROW_RETURN_IF_ERROR(get_param(p, "groups_k", m.groups_k, what));
      SPARROW_RETURN_IF_ERROR(get_param(p, "nnz", m.nnz, what));
      SPARROW_RETURN_IF_ERROR(fill(m.bitmaps, pre + "bitmaps", lookup));
      SPARROW_RETURN_IF_ERROR(fill(m.group_offsets, pre + "group_offsets", lookup));
      SPARROW_RETURN_IF_ERROR(fill(m.values, pre + "values", lookup));
      tca_bme::derive(m);  // max_group_values, strip_starts: derived, not stored
      w = std::move(m);
      break;
    }
    case Format::tiled_csl: {
      tiled_csl::Matrix m;
      m.shape = info.shape;
      SPARROW_RETURN_IF_ERROR(get_param(p, "tiles_m", m.tiles_m, what));
      SPARROW_RETURN_IF_ERROR(get_param(p, "tiles_k", m.tiles_k, what));
      if (!p.contains("reordered") || !p["reordered"].is_boolean()) {
        return corrupt_data(what + " lacks format parameter 'reordered'");
      }
      m.reordered = p["reordered"].get<bool>();
      SPARROW_RETURN_IF_ERROR(fill(m.tile_offsets, pre + "tile_offsets", lookup));
      SPARROW_RETURN_IF_ERROR(fill(m.entries, pre + "entries", lookup));
      w = std::move(m);
      break;
    }
    case Format::nm: {
      nm::Matrix m;
      m.shape = info.shape;
      SPARROW_RETURN_IF_ERROR(get_param(p, "n", v, what));
      m.pattern.n = int(v);
      SPARROW_RETURN_IF_ERROR(get_param(p, "m", v, what));
      m.pattern.m = int(v);
      SPARROW_RETURN_IF_ERROR(get_param(p, "l", v, what));
      m.pattern.l = int(v);
      SPARROW_RETURN_IF_ERROR(get_param(p, "index_bits", v, what));
      m.index_bits = int(v);
      SPARROW_RETURN_IF_ERROR(get_param(p, "groups", m.groups, what));
      SPARROW_RETURN_IF_ERROR(get_param(p, "padded_rows", m.padded_rows, what));
      SPARROW_RETURN_IF_ERROR(get_param(p, "words_per_block", m.words_per_block, what));
      SPARROW_RETURN_IF_ERROR(fill(m.values, pre + "values", lookup));
      SPARROW_RETURN_IF_ERROR(fill(m.indices, pre + "indices", lookup));
      w = std::move(m);
      break;
    }
  }
  Status s = validate(w);
  if (!s.ok()) return corrupt_data(what + " failed validation: " + s.message());
  return w;
}

}  // namespace detail
}  // namespace sparrow::io
