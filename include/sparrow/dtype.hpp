// Element types of weights and activations, and exact host conversions for the 16-bit ones.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace sparrow {

enum class DType : uint8_t { fp16, bf16, fp32 };

constexpr size_t dtype_size(DType t) { return t == DType::fp32 ? 4 : 2; }
const char* dtype_name(DType t);  // "fp16", "bf16", "fp32"
std::optional<DType> parse_dtype(std::string_view name);

// IEEE binary16 and bfloat16 <-> float, round to nearest even, NaN preserved, on the host.
float half_to_float(uint16_t bits);
uint16_t float_to_half(float value);
float bf16_to_float(uint16_t bits);
uint16_t float_to_bf16(float value);

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
