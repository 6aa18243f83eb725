// Copyright 2026 The GMLake Authors.

#include "daemon/session_token.h"

#include <set>
#include <string>

#include "gtest/gtest.h"

namespace gmlake {
namespace {

TEST(SessionTokenTest, RandomAndDistinct) {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    absl::StatusOr<std::string> t = NewSessionToken();
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_EQ(t->size(), kSessionTokenBytes);
    EXPECT_TRUE(seen.insert(*t).second) << "a token came twice";
  }
}

TEST(SessionTokenTest, EqualOnlyWhenEveryByteIs) {
  const std::string a(16, 'a');
  std::string b = a;
  EXPECT_TRUE(TokensEqual(a, b));
  b[15] = 'b';
  EXPECT_FALSE(TokensEqual(a, b));
  b[15] = 'a';
  b[0] = '\0';
  EXPECT_FALSE(TokensEqual(a, b));
  EXPECT_FALSE(TokensEqual(a, a.substr(0, 15)));
  EXPECT_FALSE(TokensEqual(a, ""));
  EXPECT_TRUE(TokensEqual("", ""));
}

}  // namespace
}  // namespace gmlake
