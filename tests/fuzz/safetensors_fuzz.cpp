// libFuzzer target for the safetensors reader (and the config.json parser): any input must give
// either a validated file or a Status, never a crash, a sanitizer report or a read outside the
// buffer. Built by scripts/fuzz.sh only (not part of the CMake build).
#include <cstddef>
#include <cstdint>
#include <string>

#include "sparrow/io/config.hpp"
#include "sparrow/io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sparrow::io;
  auto f = SafetensorsFile::from_bytes(data, size);
  if (f.ok()) {
    // Touch every byte the reader claims is valid: ASan flags any out-of-range claim.
    volatile uint8_t sink = 0;
    for (const TensorInfo& t : f.value().tensors()) {
      const uint8_t* p = f.value().data(t);
      for (uint64_t i = 0; i < t.bytes(); i += 64) sink ^= p[i];
      if (t.bytes()) sink ^= p[t.bytes() - 1];
      auto v = f.value().tensor(t.name);
      if (v.ok()) {
        auto m = v.value().matrix();
        if (m.ok() && m.value().rows > 0 && m.value().cols > 0) {
          sink ^= uint8_t(m.value().at(m.value().rows - 1, m.value().cols - 1) > 0);
        }
      }
    }
    for (const auto& kv : f.value().metadata()) sink ^= uint8_t(kv.second.size());
    (void)sink;
  }
  if (size > 0 && data[0] == '{') {
    (void)parse_config(std::string(reinterpret_cast<const char*>(data), size));
  }
  return 0;
}
