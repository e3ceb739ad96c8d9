// Element types of weights and activations, and exact host conversions for the 16-bit ones.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace sparrow {

enum class DType : uint8_t { fp16, bf16, fp32 };

constexpr size_t dtype_size(DType t) { return t == DType::fp32 ? 4 : 2; }
const char* dtype_name(DType t);  // "fp16", "bf16", "fp32"
std::optional<DType> parse_dtype(std::string_view name);

// IEEE binary16 and bfloat16 <-> float, round to nearest even, NaN preserved, on the host.
// Inline: loading a model converts every weight element (a 7B model's norm folding: ~4.5 G
// elements), where a call per element cost more than the arithmetic.
namespace detail {
inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace detail

inline float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  if (exp == 0x1F) return detail::bits_float(sign | 0x7F800000u | (mant << 13));  // inf / nan
  if (exp == 0) {
    if (mant == 0) return detail::bits_float(sign);
    const float v = std::ldexp(float(mant), -24);  // subnormal: mant * 2^-24
    return sign ? -v : v;
  }
  return detail::bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

inline uint16_t float_to_half(float f) {
  const uint32_t u = detail::float_bits(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) {  // inf or nan (keep a quiet nan)
    return uint16_t(sign | 0x7C00u | (abs > 0x7F800000u ? 0x200u | ((abs >> 13) & 0x3FFu) : 0));
  }
  if (abs >= 0x477FF000u) return uint16_t(sign | 0x7C00u);  // rounds to >= 65520: overflow
  if (abs < 0x38800000u) {  // below the smallest normal 2^-14: subnormal or zero
    // abs / 2^-24 (exact) rounded to nearest even by the default rounding mode
    const float r = std::nearbyint(detail::bits_float(abs) * 16777216.0f);
    return uint16_t(sign | uint16_t(r));
  }
  // normal: drop 13 mantissa bits with round-to-nearest-even
  const uint32_t rounded = abs + 0xFFFu + ((abs >> 13) & 1u);
  return uint16_t(sign | ((rounded - 0x38000000u) >> 13));
}

inline float bf16_to_float(uint16_t b) { return detail::bits_float(uint32_t(b) << 16); }

inline uint16_t float_to_bf16(float f) {
  uint32_t u = detail::float_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((u >> 16) | 0x40u);  // quiet nan
  u += 0x7FFFu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

// `value` rounded to the nearest value representable in `t`.
float round_to_dtype(float value, DType t);

// Reads element `index` of a typed array as float (exact for all three types).
float load_as_float(const void* data, DType t, size_t index);
// Stores `value` rounded to `t` into element `index`.
void store_from_float(void* data, DType t, size_t index, float value);
// True for +0 and -0. Formats drop exactly these elements; signed zeros decode as +0.
bool is_zero_element(const void* data, DType t, size_t index);
// The same for the raw bits of an fp16 or bf16 element (both keep the sign in bit 15).
inline bool is_zero16(uint16_t bits) { return (bits & 0x7FFFu) == 0; }

}  // namespace sparrow
