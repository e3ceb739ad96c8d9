#include "sparrow/dtype.hpp"

#include <cmath>
#include <cstring>

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

static uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
static float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  if (exp == 0x1F) return bits_float(sign | 0x7F800000u | (mant << 13));  // inf / nan
  if (exp == 0) {
    if (mant == 0) return bits_float(sign);
    // subnormal: value = mant * 2^-24
    float v = std::ldexp(float(mant), -24);
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

uint16_t float_to_half(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) {  // inf or nan (keep a quiet nan)
    return uint16_t(sign | 0x7C00u | (abs > 0x7F800000u ? 0x200u | ((abs >> 13) & 0x3FFu) : 0));
  }
  if (abs >= 0x477FF000u) return uint16_t(sign | 0x7C00u);  // rounds to >= 65520: overflow
  if (abs < 0x38800000u) {                                  // below the smallest normal 2^-14
    // subnormal or zero: round abs / 2^-24 to nearest even
    const float a = bits_float(abs);
    const float scaled = a * 16777216.0f;  // 2^24, exact
    float r = std::nearbyint(scaled);      // default rounding mode: nearest even
    return uint16_t(sign | uint16_t(r));
  }
  // normal: drop 13 mantissa bits with round-to-nearest-even
  uint32_t rounded = abs + 0xFFFu + ((abs >> 13) & 1u);
  return uint16_t(sign | ((rounded - 0x38000000u) >> 13));
}

float bf16_to_float(uint16_t b) { return bits_float(uint32_t(b) << 16); }

uint16_t float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((u >> 16) | 0x40u);  // quiet nan
  u += 0x7FFFu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
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
  if (t == DType::fp32) return (float_bits(static_cast<const float*>(data)[i]) & 0x7FFFFFFFu) == 0;
  return is_zero16(static_cast<const uint16_t*>(data)[i]);
}

}  // namespace sparrow
