// Copyright 2026 The GMLake Authors.
//
// The session table alone: caps, tokens, claims and liveness decisions,
// with real processes where a process must run or exit. Times are given, not
// waited for.

#include "daemon/session_table.h"

#include <sys/wait.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gmlake {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

const absl::Time kT0 = absl::FromUnixSeconds(1000000);

SessionLimits Small() {
  SessionLimits l;
  l.max_sessions = 4;
  l.max_per_uid = 2;
  l.max_unbound = 2;
  l.unbound_eviction_age = absl::Seconds(1);
  l.bind_timeout = absl::Seconds(10);
  l.claim_timeout = absl::Seconds(30);
  return l;
}

Session* OpenBound(SessionTable* t, uid_t uid, absl::Time at = kT0) {
  uint64_t evict = 0;
  EXPECT_TRUE(t->CheckOpen(at, &evict).ok());
  Session* s = t->Add(::getpid(), "s", "token", at);
  const PeerIdentity peer{::getpid(), uid, uid};
  EXPECT_TRUE(t->CheckBind(*s, peer).ok());
  t->Bind(s, peer, nullptr);
  return s;
}

TEST(SessionTableTest, TokensAndLabels) {
  SessionTable t(Small());
  Session* s = t.Add(::getpid(), std::string(300, 'n'), "secret", kT0);
  EXPECT_EQ(s->name.size(), 128u);
  EXPECT_TRUE(t.Find(s->id, "secret").ok());
  EXPECT_EQ(t.Find(s->id, "secreT").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(t.Find(s->id + 1, "secret").status().code(),
            absl::StatusCode::kNotFound);
  Session* named = t.Add(42, "trainer", "x", kT0);
  EXPECT_EQ(named->Label(),
            absl::StrCat("session ", named->id, " (trainer, pid 42)"));
}

TEST(SessionTableTest, BindChecksPidAndUidCap) {
  SessionTable t(Small());
  Session* s = t.Add(::getpid(), "s", "k", kT0);
  absl::Status wrong_pid = t.CheckBind(*s, {::getpid() + 1, 1000, 1000});
  EXPECT_EQ(wrong_pid.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(wrong_pid.message(), HasSubstr("opened for pid"));
  t.Bind(s, {::getpid(), 1000, 1000}, nullptr);
  EXPECT_TRUE(s->process.Alive());
  EXPECT_EQ(t.CheckBind(*s, {::getpid(), 1000, 1000}).code(),
            absl::StatusCode::kFailedPrecondition);
  OpenBound(&t, 1000);
  Session* third = t.Add(::getpid(), "s", "k", kT0);
  absl::Status capped = t.CheckBind(*third, {::getpid(), 1000, 1000});
  EXPECT_EQ(capped.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(capped.message(), HasSubstr("--max_sessions_per_uid"));
  EXPECT_TRUE(t.CheckBind(*third, {::getpid(), 2000, 2000}).ok());
  // An ended session kept for its chunks still counts.
  t.KeepEnded(t.Remove(s->id), "test");
  EXPECT_EQ(t.CheckBind(*third, {::getpid(), 1000, 1000}).code(),
            absl::StatusCode::kResourceExhausted);
  t.RemoveEnded(s->id);
  EXPECT_TRUE(t.CheckBind(*third, {::getpid(), 1000, 1000}).ok());
}

// A session is its opener's uid's: another uid binds it, or calls for it,
// with its token in vain.
TEST(SessionTableTest, OnlyTheOpenersUidBindsAndCalls) {
  SessionTable t(Small());
  Session* s = t.Add(::getpid(), "s", "k", kT0, /*opener_uid=*/1000);
  absl::Status other = t.CheckBind(*s, {::getpid(), 2000, 2000});
  EXPECT_EQ(other.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(other.message(), HasSubstr("opened by uid 1000"));
  EXPECT_TRUE(SessionTable::CheckCaller(*s, 1000).ok());
  EXPECT_EQ(SessionTable::CheckCaller(*s, 2000).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(SessionTable::CheckCaller(*s, std::nullopt).ok());
  ASSERT_TRUE(t.CheckBind(*s, {::getpid(), 1000, 1000}).ok());
  t.Bind(s, {::getpid(), 1000, 1000}, nullptr);
  absl::Status call = SessionTable::CheckCaller(*s, 2000);
  EXPECT_EQ(call.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(call.message(),
              HasSubstr(absl::StrCat("session ", s->id,
                                     " belongs to uid 1000; "
                                     "this call came from uid 2000")));
  // Opened where gmlaked could not tell the uid: the bound peer's counts.
  Session* unknown = OpenBound(&t, 3000);
  EXPECT_TRUE(SessionTable::CheckCaller(*unknown, 3000).ok());
  EXPECT_FALSE(SessionTable::CheckCaller(*unknown, 1000).ok());
}

TEST(SessionTableTest, UnboundCapEvictsOnlyTheLongWaiting) {
  SessionTable t(Small());
  uint64_t evict = 0;
  Session* a = t.Add(::getpid(), "a", "k", kT0);
  t.Add(::getpid(), "b", "k", kT0 + absl::Milliseconds(500));
  absl::Status full = t.CheckOpen(kT0 + absl::Milliseconds(600), &evict);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(full.message(), HasSubstr("--max_unbound_sessions"));
  ASSERT_TRUE(t.CheckOpen(kT0 + absl::Seconds(2), &evict).ok());
  EXPECT_EQ(evict, a->id);
  // Bound sessions count against max_sessions only.
  SessionTable u(Small());
  for (int i = 0; i < 4; ++i) OpenBound(&u, 1000 + i);
  EXPECT_THAT(u.CheckOpen(kT0, &evict).message(), HasSubstr("--max_sessions"));
}

TEST(SessionTableTest, LeasesAreClaimedOnceByTheirOwner) {
  SessionTable t(Small());
  Session* a = OpenBound(&t, 1000);
  Session* b = OpenBound(&t, 2000);
  t.AddUnclaimed(a, 7, {1, 2, 3}, kT0);
  EXPECT_EQ(t.Claim(b->id, "token", 7).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(t.Claim(a->id, "wrong", 7).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(t.Claim(a->id, "token", 8).status().code(),
            absl::StatusCode::kNotFound);
  SessionTable::DropFromUnclaimed(a, {2});
  absl::StatusOr<std::vector<uint64_t>> ids = t.Claim(a->id, "token", 7);
  ASSERT_TRUE(ids.ok());
  EXPECT_THAT(*ids, ElementsAre(1, 3));
  EXPECT_EQ(t.Claim(a->id, "token", 7).status().code(),
            absl::StatusCode::kNotFound);
  // Unclaimed leases go with their session.
  t.AddUnclaimed(a, 9, {4}, kT0);
  t.AddUnclaimed(a, 10, {5, 6}, kT0);
  EXPECT_THAT(t.TakeUnclaimed(a, 9), ElementsAre(4));
  EXPECT_THAT(t.TakeUnclaimed(a), ElementsAre(5, 6));
  EXPECT_EQ(t.Claim(a->id, "token", 10).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(SessionTableTest, LivenessDecisions) {
  SessionTable t(Small());
  Session* unbound = t.Add(::getpid(), "u", "k", kT0);
  Session* me = OpenBound(&t, 1000);
  EXPECT_THAT(t.ToEnd(kT0 + absl::Seconds(5)), IsEmpty());
  std::vector<std::pair<uint64_t, std::string>> end =
      t.ToEnd(kT0 + absl::Seconds(11));
  ASSERT_EQ(end.size(), 1u);
  EXPECT_EQ(end[0].first, unbound->id);
  EXPECT_THAT(end[0].second, HasSubstr("not bound"));
  t.AddUnclaimed(me, 3, {1}, kT0);
  EXPECT_THAT(t.ExpiredUnclaimed(kT0 + absl::Seconds(29)), IsEmpty());
  EXPECT_THAT(t.ExpiredUnclaimed(kT0 + absl::Seconds(31)),
              ElementsAre(Pair(me->id, 3)));

  // A real process that exits.
  const pid_t child = ::fork();
  if (child == 0) {
    ::usleep(100 * 1000);
    ::_exit(0);
  }
  uint64_t evict = 0;
  ASSERT_TRUE(t.CheckOpen(kT0, &evict).ok());
  Session* c = t.Add(child, "c", "k", kT0);
  t.Bind(c, {child, 1000, 1000}, nullptr);
  // Ended while it runs, holding chunks: kept.
  t.KeepEnded(t.Remove(c->id), "its Watch stream broke");
  auto holds = [](uint64_t) { return true; };
  EXPECT_THAT(t.EndedAndDone(holds), IsEmpty());
  EXPECT_THAT(t.EndedAndDone([](uint64_t) { return false; }),
              ElementsAre(c->id));
  int status;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_THAT(t.EndedAndDone(holds), ElementsAre(c->id));
  EXPECT_NE(t.Any(c->id), nullptr);
  EXPECT_EQ(t.Live(c->id), nullptr);
  EXPECT_TRUE(t.Any(c->id)->ended);
  EXPECT_THAT(t.ended(), UnorderedElementsAre(Pair(c->id, ::testing::_)));
}

}  // namespace
}  // namespace gmlake
