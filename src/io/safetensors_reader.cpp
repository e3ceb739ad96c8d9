// The safetensors reader: maps the file and validates every header field against the file before
// any tensor is handed out, so a corrupt or hostile file yields a corrupt_data Status, never an
// out-of-bounds read.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "sparrow/io/safetensors.hpp"

namespace sparrow::io {

using nlohmann::json;

// The bytes of a file: an mmap of it, or an owned copy (from_bytes).
struct SafetensorsFile::Storage {
  const uint8_t* data = nullptr;
  uint64_t size = 0;
  void* mapping = nullptr;  // non-null when mmapped
  std::vector<uint8_t> owned;
  ~Storage() {
    if (mapping) munmap(mapping, size);
  }
};

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Result<ConstMatrixView> TensorView::matrix() const {
  if (!info || !data) return invalid_argument("empty tensor view");
  auto dt = to_dtype(info->dtype);
  if (!dt) {
    return invalid_argument("tensor '" + info->name + "' has dtype " +
                            tensor_dtype_name(info->dtype) + ", not F16, BF16 or F32");
  }
  if (info->shape.size() != 2) {
    return invalid_argument("tensor '" + info->name + "' is " +
                            std::to_string(info->shape.size()) + "-D, expected a 2-D matrix");
  }
  // Matrix views are read with typed loads: the data must be aligned to its element size. Files
  // written by safetensors/sparrow are, unless an odd-sized tensor precedes this one.
  if (reinterpret_cast<uintptr_t>(data) % dtype_size(*dt) != 0) {
    return unsupported("tensor '" + info->name + "' is not aligned to its element size in the "
                       "file; load a copy (ModelWeights::load) instead of a view");
  }
  return ConstMatrixView{data, *dt, info->shape[0], info->shape[1], info->shape[1]};
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

Result<TensorView> SafetensorsFile::tensor(std::string_view name) const {
  const TensorInfo* t = find(name);
  if (!t) return invalid_argument("no tensor '" + std::string(name) + "' in " + path_);
  return TensorView{t, data(*t)};
}

void SafetensorsFile::release_pages(const TensorInfo& t) const {
  if (!storage_ || !storage_->mapping) return;
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t lo = (reinterpret_cast<uintptr_t>(data(t)) + page - 1) / page * page;
  const uintptr_t hi = reinterpret_cast<uintptr_t>(data(t) + t.bytes()) / page * page;
  if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status(Code::io_error, "cannot open " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status(Code::io_error, path + " is not a regular file");
  }
  auto storage = std::make_shared<Storage>();
  storage->size = uint64_t(st.st_size);
  if (storage->size > 0) {
    void* m = mmap(nullptr, storage->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      ::close(fd);
      return Status(Code::io_error, "cannot mmap " + path + ": " + std::strerror(errno));
    }
    storage->mapping = m;
    storage->data = static_cast<const uint8_t*>(m);
  }
  ::close(fd);
  return parse(std::move(storage), path);
}

Result<SafetensorsFile> SafetensorsFile::from_bytes(const void* data, size_t size,
                                                    std::string label) {
  auto storage = std::make_shared<Storage>();
  const auto* p = static_cast<const uint8_t*>(data);
  storage->owned.assign(p, p + size);
  storage->data = storage->owned.data();
  storage->size = size;
  return parse(std::move(storage), std::move(label));
}

namespace {

// Parses the header JSON, reporting duplicate keys in any object (nlohmann keeps the last one
// silently; a duplicated tensor name would otherwise hide a tensor).
Result<json> parse_header_json(const char* begin, const char* end, const std::string& label) {
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  auto cb = [&](int /*depth*/, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::object_start) {
      open_objects.emplace_back();
    } else if (ev == json::parse_event_t::object_end) {
      if (!open_objects.empty()) open_objects.pop_back();
    } else if (ev == json::parse_event_t::key && !open_objects.empty()) {
      const std::string key = parsed.get<std::string>();
      if (!open_objects.back().insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };
  json j = json::parse(begin, end, cb, /*allow_exceptions=*/false);
  if (j.is_discarded()) return corrupt_data(label + ": header is not valid JSON");
  if (!duplicate.empty()) return corrupt_data(label + ": header has duplicate key '" + duplicate + "'");
  if (!j.is_object()) return corrupt_data(label + ": header is not a JSON object");
  return j;
}

bool get_u64(const json& v, uint64_t& out) {
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0)) return false;
  out = v.get<uint64_t>();
  return true;
}

}  // namespace

Result<SafetensorsFile> SafetensorsFile::parse(std::shared_ptr<Storage> storage, std::string label) {
  const uint64_t size = storage->size;
  if (size < 8) {
    return corrupt_data(label + ": file is " + std::to_string(size) +
                        " bytes, too short for a safetensors header (truncated?)");
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | storage->data[i];
  if (header_len > kMaxHeaderBytes) {
    return corrupt_data(label + ": header length " + std::to_string(header_len) +
                        " exceeds the 100 MB limit (corrupt file?)");
  }
  if (header_len > size - 8) {
    return corrupt_data(label + ": header length " + std::to_string(header_len) +
                        " runs past the end of the " + std::to_string(size) +
                        "-byte file (truncated?)");
  }
  const char* hbegin = reinterpret_cast<const char*>(storage->data + 8);
  SPARROW_ASSIGN_OR_RETURN(json header, parse_header_json(hbegin, hbegin + header_len, label));

  SafetensorsFile f;
  f.path_ = label;
  f.size_ = size;
  f.data_section_ = storage->data + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) return corrupt_data(label + ": __metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) {
          return corrupt_data(label + ": __metadata__ value for '" + m.key() + "' is not a string");
        }
        f.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string what = label + ": tensor '" + name + "'";
    if (!v.is_object()) return corrupt_data(what + " is not an object");
    for (auto k = v.begin(); k != v.end(); ++k) {
      if (k.key() != "dtype" && k.key() != "shape" && k.key() != "data_offsets") {
        return corrupt_data(what + " has unknown field '" + k.key() + "'");
      }
    }
    if (!v.contains("dtype") || !v["dtype"].is_string()) return corrupt_data(what + " has no dtype");
    auto dt = parse_tensor_dtype(v["dtype"].get<std::string>());
    if (!dt) return corrupt_data(what + " has unknown dtype '" + v["dtype"].get<std::string>() + "'");
    TensorInfo t;
    t.name = name;
    t.dtype = *dt;
    if (!v.contains("shape") || !v["shape"].is_array()) return corrupt_data(what + " has no shape");
    uint64_t numel = 1;
    for (const json& d : v["shape"]) {
      uint64_t dim = 0;
      if (!get_u64(d, dim) || dim > (uint64_t(1) << 62)) {
        return corrupt_data(what + " has an invalid dimension " + d.dump());
      }
      if (__builtin_mul_overflow(numel, dim, &numel)) return corrupt_data(what + " shape overflows");
      t.shape.push_back(int64_t(dim));
    }
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(numel, uint64_t(tensor_dtype_size(*dt)), &nbytes)) {
      return corrupt_data(what + " size overflows");
    }
    const json* off = v.contains("data_offsets") ? &v["data_offsets"] : nullptr;
    if (!off || !off->is_array() || off->size() != 2 || !get_u64((*off)[0], t.begin) ||
        !get_u64((*off)[1], t.end)) {
      return corrupt_data(what + " has no valid data_offsets [begin, end]");
    }
    if (t.end < t.begin) return corrupt_data(what + " has data_offsets end < begin");
    if (t.end > data_size) {
      return corrupt_data(what + " ends at byte " + std::to_string(t.end) +
                          " of a data section of " + std::to_string(data_size) +
                          " bytes (truncated file?)");
    }
    if (t.end - t.begin != nbytes) {
      return corrupt_data(what + " holds " + std::to_string(t.end - t.begin) + " bytes but its " +
                          tensor_dtype_name(*dt) + " shape needs " + std::to_string(nbytes));
    }
    f.tensors_.push_back(std::move(t));
  }

  // The tensors must tile the data section exactly: sorted by offset, each starts where the
  // previous one ended (no overlap, no gap) and the last ends at the end of the file.
  std::sort(f.tensors_.begin(), f.tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expect = 0;
  for (const TensorInfo& t : f.tensors_) {
    if (t.begin < expect) {
      return corrupt_data(label + ": tensor '" + t.name + "' overlaps the previous tensor");
    }
    if (t.begin > expect) {
      return corrupt_data(label + ": gap of " + std::to_string(t.begin - expect) +
                          " bytes before tensor '" + t.name + "' (data is not contiguous)");
    }
    expect = t.end;
  }
  if (expect != data_size) {
    return corrupt_data(label + ": " + std::to_string(data_size - expect) +
                        " bytes after the last tensor are not covered by the header");
  }
  for (size_t i = 0; i < f.tensors_.size(); ++i) f.index_.emplace(f.tensors_[i].name, i);
  f.storage_ = std::move(storage);
  return f;
}

}  // namespace sparrow::io
