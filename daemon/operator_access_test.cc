// Copyright 2026 The GMLake Authors.

#include "daemon/operator_access.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gmlake {
namespace {

using ::testing::HasSubstr;

constexpr uid_t kDaemonUid = 998;

v1::StatusResponse ThreeUsers() {
  v1::StatusResponse st;
  st.add_devices()->set_leased_bytes(48);
  const int64_t uids[] = {1000, 2000, 1000, -1, 0};
  for (int i = 0; i < 5; ++i) {
    v1::SessionStatus* s = st.add_sessions();
    s->set_session_id(i + 1);
    s->set_uid(uids[i]);
    s->set_bound(uids[i] >= 0);
    s->set_name(absl::StrCat("job", i + 1));
  }
  return st;
}

Caller Uid(uid_t uid) { return PeerCredentials{1234, uid, uid}; }

TEST(OperatorAccess, OnlyRootAndTheDaemonsUidMayTrim) {
  OperatorAccess a(kDaemonUid);
  EXPECT_TRUE(a.MayTrim(Uid(0)).ok());
  EXPECT_TRUE(a.MayTrim(Uid(kDaemonUid)).ok());
  absl::Status s = a.MayTrim(Uid(1000));
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(s.message(), HasSubstr("only root and gmlaked's own uid (998)"));
  EXPECT_THAT(s.message(), HasSubstr("uid 1000 (pid 1234) may not"));
  s = a.MayTrim(std::nullopt);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(s.message(), HasSubstr("cannot tell who is calling"));
}

TEST(OperatorAccess, OperatorsSeeEverySession) {
  OperatorAccess a(kDaemonUid);
  for (uid_t uid : {uid_t{0}, kDaemonUid}) {
    v1::StatusResponse st = ThreeUsers();
    a.ShowTo(Uid(uid), &st);
    EXPECT_EQ(st.sessions_size(), 5);
    EXPECT_EQ(st.sessions_hidden(), 0u);
    EXPECT_EQ(st.caller_uid(), uid);
    EXPECT_EQ(st.daemon_uid(), kDaemonUid);
  }
}

TEST(OperatorAccess, OthersSeeTheirOwnSessionsAndTheTotals) {
  OperatorAccess a(kDaemonUid);
  v1::StatusResponse st = ThreeUsers();
  a.ShowTo(Uid(1000), &st);
  ASSERT_EQ(st.sessions_size(), 2);
  EXPECT_EQ(st.sessions(0).session_id(), 1u);
  EXPECT_EQ(st.sessions(1).session_id(), 3u);
  EXPECT_EQ(st.sessions_hidden(), 3u);
  EXPECT_EQ(st.caller_uid(), 1000);
  EXPECT_EQ(st.devices(0).leased_bytes(), 48u);  // totals stay

  st = ThreeUsers();
  a.ShowTo(Uid(3000), &st);
  EXPECT_EQ(st.sessions_size(), 0);
  EXPECT_EQ(st.sessions_hidden(), 5u);
}

TEST(OperatorAccess, AnUnknownCallerSeesNoSession) {
  OperatorAccess a(kDaemonUid);
  v1::StatusResponse st = ThreeUsers();
  a.ShowTo(std::nullopt, &st);
  EXPECT_EQ(st.sessions_size(), 0);
  EXPECT_EQ(st.sessions_hidden(), 5u);
  EXPECT_EQ(st.caller_uid(), -1);
}

}  // namespace
}  // namespace gmlake
