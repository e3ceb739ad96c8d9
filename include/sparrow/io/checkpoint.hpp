// Model directories: Hugging Face checkpoints (one model.safetensors, or shards listed in
// model.safetensors.index.json), sparrow sparse checkpoints (docs/checkpoints.md) and
// compressed-tensors `sparse-bitmask` checkpoints, behind one loader that hands out, per tensor
// name, either a dense tensor or a sparrow Weight on the host.
#pragma once

#include <map>
#include <set>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "sparrow/io/safetensors.hpp"
#include "sparrow/weight.hpp"

namespace sparrow::io {

// The safetensors files of one directory. A missing shard, a tensor listed in two shards, or a
// tensor the index names but its shard lacks is an error at open().
class Checkpoint {
 public:
  static Result<Checkpoint> open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  bool sharded() const { return sharded_; }
  const std::vector<SafetensorsFile>& shards() const { return shards_; }
  std::vector<std::string> tensor_names() const;  // sorted
  const TensorInfo* find(std::string_view name) const;
  Result<TensorView> tensor(std::string_view name) const;
  // Drops the mapped pages of stored tensor `name` (see SafetensorsFile::release_pages).
  void release_pages(std::string_view name) const;
  // Which shard holds `name` (index into shards()); -1 when absent.
  int shard_of(std::string_view name) const;

 private:
  std::string dir_;
  bool sharded_ = false;
  std::vector<SafetensorsFile> shards_;
  std::map<std::string, int, std::less<>> where_;
};

// An owning dense tensor.
struct HostTensor {
  TensorDType dtype = TensorDType::F16;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  int64_t numel() const;
  // 2-D F16/BF16/F32 as a matrix view (ld == cols).
  Result<ConstMatrixView> matrix() const;
};

// How a sparse tensor was made, stored with it (the `__metadata__` entry "sparrow:<name>").
struct SparseTensorInfo {
  Format format = Format::dense;
  Shape shape;
  double sparsity = 0;       // fraction of zero elements of the logical matrix
  std::string method;        // "magnitude", "wanda", "random", "input" (already sparse), ...
  std::string structure;     // "unstructured", "2:4", "block:4x4", ...
  std::string library_version;
};

using LoadedTensor = std::variant<HostTensor, Weight>;

enum class CheckpointLayout : uint8_t { dense, sparrow, compressed_tensors };
const char* layout_name(CheckpointLayout l);

class ModelWeights {
 public:
  static Result<ModelWeights> open(const std::string& dir);

  CheckpointLayout layout() const { return layout_; }
  const Checkpoint& checkpoint() const { return ckpt_; }
  // Logical tensor names ("model.layers.0.mlp.up_proj.weight"), sorted; a sparse tensor's arrays
  // are not listed separately.
  const std::vector<std::string>& names() const { return names_; }
  bool contains(std::string_view name) const;
  bool is_sparse(std::string_view name) const;
  // Shape of a logical tensor (a sparse one's logical M x K).
  Result<std::vector<int64_t>> shape(std::string_view name) const;
  const SparseTensorInfo* sparse_info(std::string_view name) const;

  // A dense tensor as a copy, or a sparrow sparse tensor as a validated host Weight.
  // compressed-tensors bitmask tensors are decompressed and returned as a HostTensor (they are an
  // input format: `sparrow prune` re-encodes them).
  Result<LoadedTensor> load(std::string_view name) const;
  // Dense view of any tensor: a dense tensor as is, a sparse one decoded.
  Result<HostTensor> load_dense(std::string_view name) const;
  // Drops the mapped pages of every stored tensor behind logical tensor `name` (after load).
  void release_pages(std::string_view name) const;

 private:
  Checkpoint ckpt_;
  CheckpointLayout layout_ = CheckpointLayout::dense;
  std::vector<std::string> names_;
  std::map<std::string, SparseTensorInfo, std::less<>> sparse_;
  std::map<std::string, std::string, std::less<>> bitmask_prefix_;  // compressed-tensors weights
  std::set<std::string> hidden_;  // stored arrays behind logical sparse tensors
};

// ---- sparse tensor serialisation (used by the writer side of `sparrow prune`) ----------------

// One array of a serialised Weight: tensor name "<name>.<format>.<array>" (e.g.
// "model.layers.0.mlp.up_proj.weight.tca_bme.bitmaps"), pointing into the Weight's buffers.
struct WeightArray {
  std::string tensor_name;
  TensorDType dtype;
  std::vector<int64_t> shape;
  const void* data;
  size_t bytes;
};
// The arrays of a host Weight, in a fixed order. dense::Matrix weights are also accepted (their
// padded (rows, ld) values array), though `sparrow prune` stores dense layers as plain tensors.
std::vector<WeightArray> weight_arrays(const std::string& name, const Weight& w);
// The JSON metadata string stored under "sparrow:<name>": format, shape, dtype, sparsity,
// method, structure, library version and the format's own parameters.
std::string weight_metadata(const Weight& w, const SparseTensorInfo& info);
// Adds the weight's arrays to `writer` and its metadata entry to `metadata`.
Status write_weight(SafetensorsWriter& writer, std::map<std::string, std::string>& metadata,
                    const std::string& name, const Weight& w, const SparseTensorInfo& info);

constexpr const char* kSparseMetadataPrefix = "sparrow:";

}  // namespace sparrow::io
