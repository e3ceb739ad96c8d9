// The safetensors writer: data is streamed to a temporary file as tensors are added, because the
// header (which precedes the data) needs every offset; finish() writes header + data.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include <nlohmann/json.hpp>

#include "sparrow/io/safetensors.hpp"

namespace sparrow::io {

namespace {
Status io_fail(const std::string& what, const std::string& path) {
  return Status(Code::io_error, what + " " + path + ": " + std::strerror(errno));
}
}  // namespace

Result<SafetensorsWriter> SafetensorsWriter::create(const std::string& path) {
  SafetensorsWriter w;
  w.path_ = path;
  w.tmp_path_ = path + ".data.tmp";
  w.tmp_ = std::fopen(w.tmp_path_.c_str(), "wb+");
  if (!w.tmp_) return io_fail("cannot create", w.tmp_path_);
  return w;
}

SafetensorsWriter::SafetensorsWriter(SafetensorsWriter&& o) noexcept { *this = std::move(o); }

SafetensorsWriter& SafetensorsWriter::operator=(SafetensorsWriter&& o) noexcept {
  if (this != &o) {
    if (tmp_) {
      std::fclose(tmp_);
      std::remove(tmp_path_.c_str());
    }
    path_ = std::move(o.path_);
    tmp_path_ = std::move(o.tmp_path_);
    tmp_ = o.tmp_;
    o.tmp_ = nullptr;
    offset_ = o.offset_;
    entries_ = std::move(o.entries_);
    names_ = std::move(o.names_);
  }
  return *this;
}

SafetensorsWriter::~SafetensorsWriter() {
  if (tmp_) {
    std::fclose(tmp_);
    std::remove(tmp_path_.c_str());
  }
}

Status SafetensorsWriter::add(const std::string& name, TensorDType dtype,
                              const std::vector<int64_t>& shape, const void* data, size_t bytes) {
  if (!tmp_) return invalid_argument("safetensors writer for " + path_ + " is finished or closed");
  if (name.empty() || name == "__metadata__") {
    return invalid_argument("invalid tensor name '" + name + "'");
  }
  if (names_.count(name)) return invalid_argument("duplicate tensor name '" + name + "'");
  uint64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0) return invalid_argument("tensor '" + name + "' has a negative dimension");
    numel *= uint64_t(d);
  }
  if (numel * tensor_dtype_size(dtype) != bytes) {
    return invalid_argument("tensor '" + name + "': " + std::to_string(bytes) +
                            " bytes given, its shape needs " +
                            std::to_string(numel * tensor_dtype_size(dtype)));
  }
  if (bytes > 0 && std::fwrite(data, 1, bytes, tmp_) != bytes) return io_fail("cannot write", tmp_path_);
  names_.emplace(name, entries_.size());
  entries_.push_back({name, dtype, shape, offset_, offset_ + bytes});
  offset_ += bytes;
  return Status::success();
}

Status SafetensorsWriter::finish(const std::map<std::string, std::string>& metadata) {
  if (!tmp_) return invalid_argument("safetensors writer for " + path_ + " is already finished");
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    auto& m = header["__metadata__"];
    m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
  }
  for (const Entry& e : entries_) {
    header[e.name] = {{"dtype", tensor_dtype_name(e.dtype)},
                      {"shape", e.shape},
                      {"data_offsets", {e.begin, e.end}}};
  }
  std::string text = header.dump();
  // Pad with spaces (valid JSON whitespace) so the data section starts 8-byte aligned, as the
  // reference implementation does.
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(text.size()) >> (8 * i));

  std::FILE* out = std::fopen(path_.c_str(), "wb");
  if (!out) return io_fail("cannot create", path_);
  bool ok = std::fwrite(len, 1, 8, out) == 8 &&
            std::fwrite(text.data(), 1, text.size(), out) == text.size();
  std::rewind(tmp_);
  std::vector<char> chunk(8 << 20);
  uint64_t copied = 0;
  while (ok && copied < offset_) {
    const size_t n = std::fread(chunk.data(), 1, chunk.size(), tmp_);
    if (n == 0) break;
    ok = std::fwrite(chunk.data(), 1, n, out) == n;
    copied += n;
  }
  ok = ok && copied == offset_;
  ok = (std::fclose(out) == 0) && ok;
  std::fclose(tmp_);
  tmp_ = nullptr;
  std::remove(tmp_path_.c_str());
  if (!ok) {
    std::remove(path_.c_str());
    return io_fail("failed writing", path_);
  }
  return Status::success();
}

}  // namespace sparrow::io
