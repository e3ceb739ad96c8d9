// libFuzzer target for sparse checkpoint loading: a safetensors image whose `sparrow:<name>`
// metadata entries are rebuilt into Weights (detail::read_weight: the format's validate() runs
// before a Weight is returned) and then decoded. A hostile checkpoint must give a Status, never a
// crash or an out-of-bounds access in decode. Built by scripts/fuzz.sh only.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "io/weight_io.hpp"
#include "sparrow/io/safetensors.hpp"

// The weight code references device copies; this target never reaches them.
namespace sparrow::detail {
Result<std::shared_ptr<void>> device_alloc(size_t) { return Status(Code::no_device, "fuzz"); }
Status copy_to_device(void*, const void*, size_t) { return Status(Code::no_device, "fuzz"); }
Status copy_to_host(void*, const void*, size_t) { return Status(Code::no_device, "fuzz"); }
}  // namespace sparrow::detail

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sparrow;
  auto f = io::SafetensorsFile::from_bytes(data, size);
  if (!f.ok()) return 0;
  const io::SafetensorsFile& file = f.value();
  for (const auto& [key, value] : file.metadata()) {
    if (key.rfind(io::kSparseMetadataPrefix, 0) != 0) continue;
    const std::string name = key.substr(std::string(io::kSparseMetadataPrefix).size());
    auto w = io::detail::read_weight(name, value, [&](const std::string& t) { return file.tensor(t); });
    if (!w.ok()) continue;
    // Keep decode bounded: the fuzzer may declare a huge logical shape with tiny arrays, which
    // validate() should reject; anything it accepts must decode.
    const Shape& s = shape_of(w.value());
    if (double(s.rows) * double(s.cols) > 4e6) continue;
    auto d = decode(w.value());
    (void)d;
  }
  return 0;
}
