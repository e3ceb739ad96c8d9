// safetensors dtype names and sizes.
#include <array>

#include "sparrow/io/safetensors.hpp"

namespace sparrow::io {

namespace {
struct DTypeEntry {
  TensorDType type;
  const char* name;
  size_t size;
};
constexpr std::array<DTypeEntry, 15> kDTypes = {{
    {TensorDType::BOOL, "BOOL", 1}, {TensorDType::U8, "U8", 1},     {TensorDType::I8, "I8", 1},
    {TensorDType::U16, "U16", 2},   {TensorDType::I16, "I16", 2},   {TensorDType::F16, "F16", 2},
    {TensorDType::BF16, "BF16", 2}, {TensorDType::U32, "U32", 4},   {TensorDType::I32, "I32", 4},
    {TensorDType::F32, "F32", 4},   {TensorDType::U64, "U64", 8},   {TensorDType::I64, "I64", 8},
    {TensorDType::F64, "F64", 8},   {TensorDType::F8_E4M3, "F8_E4M3", 1},
    {TensorDType::F8_E5M2, "F8_E5M2", 1},
}};
}  // namespace

const char* tensor_dtype_name(TensorDType t) {
  for (const auto& e : kDTypes)
    if (e.type == t) return e.name;
  return "?";
}

std::optional<TensorDType> parse_tensor_dtype(std::string_view name) {
  for (const auto& e : kDTypes)
    if (name == e.name) return e.type;
  return std::nullopt;
}

size_t tensor_dtype_size(TensorDType t) {
  for (const auto& e : kDTypes)
    if (e.type == t) return e.size;
  return 0;
}

std::optional<DType> to_dtype(TensorDType t) {
  switch (t) {
    case TensorDType::F16: return DType::fp16;
    case TensorDType::BF16: return DType::bf16;
    case TensorDType::F32: return DType::fp32;
    default: return std::nullopt;
  }
}

TensorDType to_tensor_dtype(DType t) {
  switch (t) {
    case DType::fp16: return TensorDType::F16;
    case DType::bf16: return TensorDType::BF16;
    case DType::fp32: return TensorDType::F32;
  }
  return TensorDType::F32;
}

}  // namespace sparrow::io
