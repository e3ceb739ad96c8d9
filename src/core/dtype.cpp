#include "sparrow/dtype.hpp"

namespace sparrow {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::fp16: return "fp16";
    case DType::bf16: return "bf16";
    case DType::fp32: return "fp32";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view name) {
  if (name == "fp16" || name == "float16" || name == "half") return DType::fp16;
  if (name == "bf16" || name == "bfloat16") return DType::bf16;
  if (name == "fp32" || name == "float32" || name == "float") return DType::fp32;
  return std::nullopt;
}

float round_to_dtype(float v, DType t) {
  switch (t) {
    case DType::fp16: return half_to_float(float_to_half(v));
    case DType::bf16: return bf16_to_float(float_to_bf16(v));
    case DType::fp32: return v;
  }
  return v;
}

float load_as_float(const void* data, DType t, size_t i) {
  switch (t) {
    case DType::fp16: return half_to_float(static_cast<const uint16_t*>(data)[i]);
    case DType::bf16: return bf16_to_float(static_cast<const uint16_t*>(data)[i]);
    case DType::fp32: return static_cast<const float*>(data)[i];
  }
  return 0.f;
}

void store_from_float(void* data, DType t, size_t i, float v) {
  switch (t) {
    case DType::fp16: static_cast<uint16_t*>(data)[i] = float_to_half(v); break;
    case DType::bf16: static_cast<uint16_t*>(data)[i] = float_to_bf16(v); break;
    case DType::fp32: static_cast<float*>(data)[i] = v; break;
  }
}

bool is_zero_element(const void* data, DType t, size_t i) {
  if (t == DType::fp32) {
    return (detail::float_bits(static_cast<const float*>(data)[i]) & 0x7FFFFFFFu) == 0;
  }
  return is_zero16(static_cast<const uint16_t*>(data)[i]);
}

}  // namespace sparrow
