// ModelWeights: one loader over dense HF, sparrow sparse and compressed-tensors sparse-bitmask
// checkpoints.
//
// compressed-tensors `sparse-bitmask` layout (as read from the compressed-tensors sources,
// BitmaskCompressor): a weight "<p>.weight" is stored as four tensors
//   <p>.shape        int64 [2]                       dense shape (rows, cols)
//   <p>.compressed   values [nnz]                    the non-zeros in row-major order
//   <p>.bitmask      uint8 [rows, ceil(cols / 8)]    numpy.packbits(mask, axis=-1,
//                                                    bitorder="little"): column c of a row is
//                                                    bit (c % 8) of byte c / 8
//   <p>.row_offsets  int64 [rows]                    index in `compressed` where each row starts
#include <algorithm>
#include <cstring>
#include <set>

#include "io/weight_io.hpp"
#include "sparrow/io/checkpoint.hpp"

namespace sparrow::io {

const char* layout_name(CheckpointLayout l) {
  switch (l) {
    case CheckpointLayout::dense: return "dense";
    case CheckpointLayout::sparrow: return "sparrow";
    case CheckpointLayout::compressed_tensors: return "compressed-tensors";
  }
  return "?";
}

int64_t HostTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Result<ConstMatrixView> HostTensor::matrix() const {
  auto dt = to_dtype(dtype);
  if (!dt || shape.size() != 2) return invalid_argument("tensor is not a 2-D F16/BF16/F32 matrix");
  return ConstMatrixView{bytes.data(), *dt, shape[0], shape[1], shape[1]};
}

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

const char* const kBitmaskParts[] = {".compressed", ".bitmask", ".row_offsets", ".shape"};

// Reads an integer tensor element (I32/I64/U32/U64) as int64.
bool read_int(const TensorView& v, int64_t i, int64_t& out) {
  const size_t sz = tensor_dtype_size(v.info->dtype);
  const uint8_t* p = v.data + size_t(i) * sz;
  switch (v.info->dtype) {
    case TensorDType::I64: { int64_t x; std::memcpy(&x, p, 8); out = x; return true; }
    case TensorDType::U64: { uint64_t x; std::memcpy(&x, p, 8); out = int64_t(x); return true; }
    case TensorDType::I32: { int32_t x; std::memcpy(&x, p, 4); out = x; return true; }
    case TensorDType::U32: { uint32_t x; std::memcpy(&x, p, 4); out = x; return true; }
    default: return false;
  }
}

Result<HostTensor> decompress_bitmask(const Checkpoint& ckpt, const std::string& prefix) {
  const std::string what = "compressed-tensors weight '" + prefix + "'";
  SPARROW_ASSIGN_OR_RETURN(TensorView shape_t, ckpt.tensor(prefix + ".shape"));
  SPARROW_ASSIGN_OR_RETURN(TensorView values, ckpt.tensor(prefix + ".compressed"));
  SPARROW_ASSIGN_OR_RETURN(TensorView bitmask, ckpt.tensor(prefix + ".bitmask"));
  SPARROW_ASSIGN_OR_RETURN(TensorView offsets, ckpt.tensor(prefix + ".row_offsets"));
  int64_t rows = 0, cols = 0;
  if (shape_t.info->numel() != 2 || !read_int(shape_t, 0, rows) || !read_int(shape_t, 1, cols) ||
      rows <= 0 || cols <= 0) {
    return corrupt_data(what + ": .shape is not two positive integers");
  }
  if (!to_dtype(values.info->dtype) || values.info->shape.size() != 1) {
    return corrupt_data(what + ": .compressed is not a 1-D F16/BF16/F32 tensor");
  }
  const int64_t row_bytes = (cols + 7) / 8;
  if (tensor_dtype_size(bitmask.info->dtype) != 1 || bitmask.info->numel() != rows * row_bytes) {
    return corrupt_data(what + ": .bitmask should hold " + std::to_string(rows) + " x " +
                        std::to_string(row_bytes) + " bytes");
  }
  if (offsets.info->numel() != rows) return corrupt_data(what + ": .row_offsets should hold one entry per row");
  const size_t es = tensor_dtype_size(values.info->dtype);
  const int64_t nnz = values.info->numel();
  HostTensor out;
  out.dtype = values.info->dtype;
  out.shape = {rows, cols};
  out.bytes.assign(size_t(rows * cols) * es, 0);
  int64_t next = 0;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t off = 0;
    if (!read_int(offsets, r, off) || off != next) {
      return corrupt_data(what + ": .row_offsets[" + std::to_string(r) + "] does not match the bitmask");
    }
    const uint8_t* bits = bitmask.data + r * row_bytes;
    for (int64_t c = 0; c < cols; ++c) {
      if (!((bits[c / 8] >> (c % 8)) & 1)) continue;
      if (next >= nnz) return corrupt_data(what + ": bitmask has more set bits than stored values");
      std::memcpy(&out.bytes[size_t(r * cols + c) * es], values.data + size_t(next) * es, es);
      ++next;
    }
  }
  if (next != nnz) return corrupt_data(what + ": " + std::to_string(nnz - next) + " stored values are not used by the bitmask");
  return out;
}

}  // namespace

Result<ModelWeights> ModelWeights::open(const std::string& dir) {
  ModelWeights mw;
  SPARROW_ASSIGN_OR_RETURN(mw.ckpt_, Checkpoint::open(dir));
  std::set<std::string> hidden;  // stored arrays that belong to a logical sparse tensor
  std::set<std::string> logical;
  // sparrow sparse tensors: metadata entries "sparrow:<name>" in any shard.
  for (const SafetensorsFile& f : mw.ckpt_.shards()) {
    for (const auto& [key, value] : f.metadata()) {
      if (key.rfind(kSparseMetadataPrefix, 0) != 0) continue;
      const std::string name = key.substr(std::strlen(kSparseMetadataPrefix));
      SPARROW_ASSIGN_OR_RETURN(SparseTensorInfo info, detail::parse_weight_metadata(name, value));
      const std::string pre = name + "." + format_name(info.format) + ".";
      for (const std::string& t : mw.ckpt_.tensor_names()) {
        if (t.rfind(pre, 0) == 0) hidden.insert(t);
      }
      mw.sparse_[name] = info;
      logical.insert(name);
      mw.layout_ = CheckpointLayout::sparrow;
    }
  }
  // compressed-tensors bitmask weights: "<p>.compressed" with its three siblings.
  for (const std::string& t : mw.ckpt_.tensor_names()) {
    if (!ends_with(t, ".compressed") || hidden.count(t)) continue;
    const std::string p = t.substr(0, t.size() - std::strlen(".compressed"));
    bool all = true;
    for (const char* part : kBitmaskParts) all = all && mw.ckpt_.find(p + part);
    if (!all) continue;
    for (const char* part : kBitmaskParts) hidden.insert(p + part);
    logical.insert(p + ".weight");
    mw.bitmask_prefix_[p + ".weight"] = p;
    if (mw.layout_ == CheckpointLayout::dense) mw.layout_ = CheckpointLayout::compressed_tensors;
  }
  for (const std::string& t : mw.ckpt_.tensor_names()) {
    if (!hidden.count(t)) logical.insert(t);
  }
  mw.names_.assign(logical.begin(), logical.end());
  mw.hidden_ = std::move(hidden);
  return mw;
}

bool ModelWeights::contains(std::string_view name) const {
  return sparse_.count(name) || bitmask_prefix_.count(name) ||
         (ckpt_.find(name) != nullptr && std::binary_search(names_.begin(), names_.end(), name));
}

bool ModelWeights::is_sparse(std::string_view name) const {
  return sparse_.count(name) || bitmask_prefix_.count(name);
}

const SparseTensorInfo* ModelWeights::sparse_info(std::string_view name) const {
  auto it = sparse_.find(name);
  return it == sparse_.end() ? nullptr : &it->second;
}

Result<std::vector<int64_t>> ModelWeights::shape(std::string_view name) const {
  if (const SparseTensorInfo* s = sparse_info(name)) return std::vector<int64_t>{s->shape.rows, s->shape.cols};
  auto b = bitmask_prefix_.find(name);
  if (b != bitmask_prefix_.end()) {
    SPARROW_ASSIGN_OR_RETURN(TensorView st, ckpt_.tensor(b->second + ".shape"));
    int64_t r = 0, c = 0;
    if (st.info->numel() != 2 || !read_int(st, 0, r) || !read_int(st, 1, c)) {
      return corrupt_data("bad .shape for '" + std::string(name) + "'");
    }
    return std::vector<int64_t>{r, c};
  }
  if (!contains(name)) return invalid_argument("no tensor '" + std::string(name) + "' in " + ckpt_.dir());
  return ckpt_.find(name)->shape;
}

Result<LoadedTensor> ModelWeights::load(std::string_view name) const {
  const std::string n(name);
  if (auto it = sparse_.find(name); it != sparse_.end()) {
    // The metadata entry may sit in any shard.
    for (const SafetensorsFile& f : ckpt_.shards()) {
      auto m = f.metadata().find(kSparseMetadataPrefix + n);
      if (m == f.metadata().end()) continue;
      SPARROW_ASSIGN_OR_RETURN(
          Weight w, detail::read_weight(n, m->second, [this](const std::string& t) {
            return ckpt_.tensor(t);
          }));
      return LoadedTensor(std::move(w));
    }
  }
  if (auto it = bitmask_prefix_.find(name); it != bitmask_prefix_.end()) {
    SPARROW_ASSIGN_OR_RETURN(HostTensor t, decompress_bitmask(ckpt_, it->second));
    return LoadedTensor(std::move(t));
  }
  if (!contains(name)) return invalid_argument("no tensor '" + n + "' in " + ckpt_.dir());
  SPARROW_ASSIGN_OR_RETURN(TensorView v, ckpt_.tensor(name));
  HostTensor t;
  t.dtype = v.info->dtype;
  t.shape = v.info->shape;
  t.bytes.assign(v.data, v.data + v.info->bytes());
  return LoadedTensor(std::move(t));
}

void ModelWeights::release_pages(std::string_view name) const {
  ckpt_.release_pages(name);
  if (auto it = sparse_.find(name); it != sparse_.end()) {
    const std::string pre = std::string(name) + "." + format_name(it->second.format) + ".";
    for (auto t = hidden_.lower_bound(pre); t != hidden_.end() && t->rfind(pre, 0) == 0; ++t) {
      ckpt_.release_pages(*t);
    }
  }
  if (auto it = bitmask_prefix_.find(name); it != bitmask_prefix_.end()) {
    for (const char* part : kBitmaskParts) ckpt_.release_pages(it->second + part);
  }
}

Result<HostTensor> ModelWeights::load_dense(std::string_view name) const {
  SPARROW_ASSIGN_OR_RETURN(LoadedTensor lt, load(name));
  if (auto* t = std::get_if<HostTensor>(&lt)) return std::move(*t);
  SPARROW_ASSIGN_OR_RETURN(HostMatrix m, decode(std::get<Weight>(lt)));
  HostTensor t;
  t.dtype = to_tensor_dtype(m.dtype());
  t.shape = {m.rows(), m.cols()};
  const auto* p = static_cast<const uint8_t*>(m.data());
  t.bytes.assign(p, p + m.bytes());
  return t;
}

}  // namespace sparrow::io
