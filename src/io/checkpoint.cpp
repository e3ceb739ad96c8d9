// Checkpoint: the safetensors files of a model directory, single-file or sharded.
#include <sys/stat.h>

#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "sparrow/io/checkpoint.hpp"

namespace sparrow::io {

namespace {
bool file_exists(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}
}  // namespace

Result<Checkpoint> Checkpoint::open(const std::string& dir) {
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Status(Code::io_error, dir + " is not a directory");
  }
  Checkpoint c;
  c.dir_ = dir;
  const std::string index_path = dir + "/model.safetensors.index.json";
  const std::string single_path = dir + "/model.safetensors";
  if (file_exists(index_path)) {
    c.sharded_ = true;
    std::ifstream in(index_path, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    auto j = nlohmann::json::parse(ss.str(), nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") ||
        !j["weight_map"].is_object()) {
      return corrupt_data(index_path + " is not a valid index (needs a \"weight_map\" object)");
    }
    // Shards in order of first appearance in sorted file names, for a stable layout.
    std::set<std::string> files;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string()) {
        return corrupt_data(index_path + ": weight_map entry '" + it.key() + "' is not a file name");
      }
      const std::string f = it.value().get<std::string>();
      if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..") {
        return corrupt_data(index_path + ": shard name '" + f + "' is not a plain file name");
      }
      files.insert(f);
    }
    std::map<std::string, int> shard_index;
    for (const std::string& f : files) {
      const std::string p = dir + "/" + f;
      if (!file_exists(p)) {
        return Status(Code::io_error, "missing shard " + f + " (listed in " + index_path + ")");
      }
      SPARROW_ASSIGN_OR_RETURN(SafetensorsFile sf, SafetensorsFile::open(p));
      shard_index[f] = int(c.shards_.size());
      c.shards_.push_back(std::move(sf));
    }
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      const int s = shard_index[it.value().get<std::string>()];
      if (!c.shards_[s].find(it.key())) {
        return corrupt_data(index_path + " puts '" + it.key() + "' in " +
                            it.value().get<std::string>() + ", which does not contain it");
      }
      c.where_[it.key()] = s;
    }
    // Tensors a shard holds but the index does not list would be invisible to other tools.
    for (size_t s = 0; s < c.shards_.size(); ++s) {
      for (const TensorInfo& t : c.shards_[s].tensors()) {
        auto it = c.where_.find(t.name);
        if (it == c.where_.end()) {
          return corrupt_data(c.shards_[s].path() + " holds '" + t.name +
                              "', which the index does not list");
        }
        if (it->second != int(s)) {
          return corrupt_data("tensor '" + t.name + "' appears in two shards");
        }
      }
    }
  } else if (file_exists(single_path)) {
    SPARROW_ASSIGN_OR_RETURN(SafetensorsFile sf, SafetensorsFile::open(single_path));
    c.shards_.push_back(std::move(sf));
    for (const TensorInfo& t : c.shards_[0].tensors()) c.where_[t.name] = 0;
  } else {
    return Status(Code::io_error, dir + " has neither model.safetensors nor "
                                        "model.safetensors.index.json");
  }
  return c;
}

std::vector<std::string> Checkpoint::tensor_names() const {
  std::vector<std::string> out;
  out.reserve(where_.size());
  for (const auto& [name, s] : where_) out.push_back(name);
  return out;
}

int Checkpoint::shard_of(std::string_view name) const {
  auto it = where_.find(name);
  return it == where_.end() ? -1 : it->second;
}

void Checkpoint::release_pages(std::string_view name) const {
  const int s = shard_of(name);
  if (s < 0) return;
  if (const TensorInfo* t = shards_[size_t(s)].find(name)) shards_[size_t(s)].release_pages(*t);
}

const TensorInfo* Checkpoint::find(std::string_view name) const {
  const int s = shard_of(name);
  return s < 0 ? nullptr : shards_[size_t(s)].find(name);
}

Result<TensorView> Checkpoint::tensor(std::string_view name) const {
  const int s = shard_of(name);
  if (s < 0) return invalid_argument("no tensor '" + std::string(name) + "' in " + dir_);
  return shards_[size_t(s)].tensor(name);
}

}  // namespace sparrow::io
