#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "sparrow/dtype.hpp"

using namespace sparrow;

TEST(DType, NamesRoundTrip) {
  for (DType t : {DType::fp16, DType::bf16, DType::fp32}) {
    ASSERT_TRUE(parse_dtype(dtype_name(t)).has_value());
    EXPECT_EQ(*parse_dtype(dtype_name(t)), t);
  }
  EXPECT_FALSE(parse_dtype("int8").has_value());
}

TEST(DType, HalfKnownValues) {
  EXPECT_EQ(float_to_half(1.0f), 0x3C00);
  EXPECT_EQ(float_to_half(-2.0f), 0xC000);
  EXPECT_EQ(float_to_half(65504.f), 0x7BFF);
  EXPECT_EQ(float_to_half(65520.f), 0x7C00);  // rounds to infinity
  EXPECT_EQ(float_to_half(5.9604645e-08f), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_half(0.f), 0x0000);
  EXPECT_EQ(float_to_half(-0.f), 0x8000);
  EXPECT_EQ(float_to_half(1.0f + 1.0f / 2048), 0x3C00);  // tie to even
  EXPECT_EQ(float_to_half(1.0f + 3.0f / 2048), 0x3C02);  // tie to even (up)
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(std::nanf("")))));
  EXPECT_EQ(half_to_float(0x3555), 0.333251953125f);
}

TEST(DType, HalfRoundTripsEveryValue) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = half_to_float(uint16_t(b));
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_half(f), b) << std::hex << b;
  }
}

TEST(DType, Bf16RoundTripsEveryValue) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = bf16_to_float(uint16_t(b));
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_bf16(f), b) << std::hex << b;
  }
  EXPECT_EQ(float_to_bf16(1.0f + 1.0f / 256), 0x3F80);  // tie to even
}

TEST(DType, ZeroDetectionIgnoresSign) {
  uint16_t h[3] = {0x0000, 0x8000, 0x0001};
  EXPECT_TRUE(is_zero_element(h, DType::fp16, 0));
  EXPECT_TRUE(is_zero_element(h, DType::fp16, 1));
  EXPECT_FALSE(is_zero_element(h, DType::fp16, 2));
  float f[2] = {-0.0f, 1e-45f};
  EXPECT_TRUE(is_zero_element(f, DType::fp32, 0));
  EXPECT_FALSE(is_zero_element(f, DType::fp32, 1));
}
