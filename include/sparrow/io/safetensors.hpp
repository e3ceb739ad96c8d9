// safetensors files: a validated, memory-mapped reader and a streaming writer.
//
// File layout (https://github.com/huggingface/safetensors): 8 bytes little-endian header length
// H, then H bytes of JSON {"name": {"dtype": "F16", "shape": [..], "data_offsets": [b, e]}, ...,
// "__metadata__": {"key": "string value"}}, then the data section; offsets are relative to the
// data section's start. The reader checks everything before any byte of data is handed out: the
// header size (<= 100 MB), JSON syntax, dtype names, shape * dtype size == e - b, offsets inside
// the file, no overlaps and no gaps (the tensors tile the data section exactly), no duplicate
// names, metadata values are strings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sparrow/dtype.hpp"
#include "sparrow/matrix.hpp"
#include "sparrow/status.hpp"

namespace sparrow::io {

// Element types a safetensors file may hold (names as in the file: "F16", "BF16", "U32", ...).
enum class TensorDType : uint8_t { BOOL, U8, I8, U16, I16, F16, BF16, U32, I32, F32, U64, I64, F64,
                                   F8_E4M3, F8_E5M2 };

const char* tensor_dtype_name(TensorDType t);
std::optional<TensorDType> parse_tensor_dtype(std::string_view name);
size_t tensor_dtype_size(TensorDType t);
// F16/BF16/F32 <-> sparrow's DType; nullopt for the others.
std::optional<DType> to_dtype(TensorDType t);
TensorDType to_tensor_dtype(DType t);

constexpr uint64_t kMaxHeaderBytes = 100ull * 1000 * 1000;

struct TensorInfo {
  std::string name;
  TensorDType dtype = TensorDType::F16;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets in the data section, [begin, end)
  uint64_t end = 0;

  int64_t numel() const;
  uint64_t bytes() const { return end - begin; }
};

// A non-owning typed view of one tensor's bytes (valid while its file is open).
struct TensorView {
  const TensorInfo* info = nullptr;
  const uint8_t* data = nullptr;  // no alignment guaranteed: copy, or memcpy element-wise

  // A 2-D F16/BF16/F32 tensor as a matrix view (ld == cols); error for anything else, and
  // (unsupported) when the data is not aligned to its element size in the mapped file.
  Result<ConstMatrixView> matrix() const;
};

class SafetensorsFile {
 public:
  // Maps the file read-only and validates the header against the file size.
  static Result<SafetensorsFile> open(const std::string& path);
  // Validates an in-memory image (copied); used by the fuzz target and tests.
  static Result<SafetensorsFile> from_bytes(const void* data, size_t size,
                                            std::string label = "<memory>");

  const std::string& path() const { return path_; }
  // In data-offset order.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(std::string_view name) const;
  // The `__metadata__` string map (empty when absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  Result<TensorView> tensor(std::string_view name) const;
  const uint8_t* data(const TensorInfo& t) const { return data_section_ + t.begin; }
  uint64_t file_size() const { return size_; }
  // Drops the mapped pages of a tensor already copied out (madvise DONTNEED), so streaming over
  // a large model keeps resident memory near one tensor; the data stays readable (re-faulted
  // from the file). No-op for in-memory files.
  void release_pages(const TensorInfo& t) const;

 private:
  struct Storage;
  std::shared_ptr<Storage> storage_;
  std::string path_;
  const uint8_t* data_section_ = nullptr;
  uint64_t size_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;

  static Result<SafetensorsFile> parse(std::shared_ptr<Storage> storage, std::string label);
};

// Writes a safetensors file tensor by tensor without holding the model in memory: data goes to a
// temporary file `<path>.data.tmp` as tensors arrive; finish() writes `<path>` (header padded with
// spaces so the data section starts 8-byte aligned, then the data) and deletes the temporary.
// Tensors appear in the data section in the order they were added.
class SafetensorsWriter {
 public:
  static Result<SafetensorsWriter> create(const std::string& path);
  SafetensorsWriter(SafetensorsWriter&&) noexcept;
  SafetensorsWriter& operator=(SafetensorsWriter&&) noexcept;
  ~SafetensorsWriter();  // removes the temporary file if finish() was not called

  // `bytes` must equal numel(shape) * tensor_dtype_size(dtype). Names must be unique.
  Status add(const std::string& name, TensorDType dtype, const std::vector<int64_t>& shape,
             const void* data, size_t bytes);
  Status finish(const std::map<std::string, std::string>& metadata = {});

  uint64_t data_bytes() const { return offset_; }
  size_t tensor_count() const { return entries_.size(); }

 private:
  SafetensorsWriter() = default;
  struct Entry {
    std::string name;
    TensorDType dtype;
    std::vector<int64_t> shape;
    uint64_t begin, end;
  };
  std::string path_, tmp_path_;
  std::FILE* tmp_ = nullptr;
  uint64_t offset_ = 0;
  std::vector<Entry> entries_;
  std::map<std::string, size_t, std::less<>> names_;
};

}  // namespace sparrow::io
