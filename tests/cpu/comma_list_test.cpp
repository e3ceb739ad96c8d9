// core/comma_list: the one splitting of the engine's knobs and the per-matmul format lists.
#include "core/comma_list.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace sparrow;
using Fields = std::vector<std::string>;

TEST(CommaList, FieldsAreTrimmedAndEmptyOnesKept) {
  EXPECT_EQ(split_list(""), Fields{});
  EXPECT_EQ(split_list("  \t "), Fields{});
  EXPECT_EQ(split_list("o"), Fields{"o"});
  EXPECT_EQ(split_list(" o , down\t"), (Fields{"o", "down"}));
  EXPECT_EQ(split_list("a,,b"), (Fields{"a", "", "b"}));
  EXPECT_EQ(split_list("a,"), (Fields{"a", ""}));
  EXPECT_EQ(split_list(",a"), (Fields{"", "a"}));
  EXPECT_EQ(trim(" \tx y \t"), "x y");
}

TEST(CommaList, KeyValueSplitsAtTheFirstEquals) {
  const KeyValue a = split_key_value(" o = tca_bme.mma ");
  EXPECT_TRUE(a.has_value);
  EXPECT_EQ(a.key, "o");
  EXPECT_EQ(a.value, "tca_bme.mma");
  const KeyValue b = split_key_value("k=v=w");
  EXPECT_EQ(b.key, "k");
  EXPECT_EQ(b.value, "v=w");
  const KeyValue c = split_key_value(" o ");
  EXPECT_FALSE(c.has_value);
  EXPECT_EQ(c.key, "o");
  EXPECT_EQ(c.value, "");
  const KeyValue d = split_key_value("o=");
  EXPECT_TRUE(d.has_value);
  EXPECT_EQ(d.value, "");
}
