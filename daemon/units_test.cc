// Copyright 2026 The GMLake Authors.

#include "daemon/units.h"

#include "gtest/gtest.h"

namespace gmlake {
namespace {

TEST(ParseCapacity, FractionOrBytes) {
  Capacity c = *ParseCapacity("0.9");
  EXPECT_TRUE(c.is_fraction);
  EXPECT_EQ(c.Resolve(1000), 900u);
  c = *ParseCapacity("1");
  EXPECT_TRUE(c.is_fraction);
  EXPECT_EQ(c.Resolve(1000), 1000u);
  c = *ParseCapacity("40GiB");
  EXPECT_FALSE(c.is_fraction);
  EXPECT_EQ(c.Resolve(1), 40ull << 30);
  c = *ParseCapacity("4096");
  EXPECT_FALSE(c.is_fraction);
  EXPECT_EQ(c.bytes, 4096u);
}

TEST(ParseCapacity, RejectsWithMessage) {
  for (const char* bad : {"0", "-0.5", "lots", "", "12XB"}) {
    absl::StatusOr<Capacity> c = ParseCapacity(bad);
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_NE(c.status().message().find("capacity"), std::string::npos);
  }
}

}  // namespace
}  // namespace gmlake
