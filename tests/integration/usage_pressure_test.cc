// Copyright 2026 The GMLake Authors.
//
// Pressure asks the right session: real client processes whose allocators
// (client/allocator.h over DaemonChunkSource) report what they use and
// cache, and a newcomer whose lease needs memory back. gmlaked must ask the
// process with the most cache, not the largest holder.

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/daemon_harness.h"

namespace gmlake {
namespace testing {
namespace {

constexpr uint64_t kMiB = 1 << 20;

std::unique_ptr<ClientProcess> StartClient(
    Daemon* d, const std::vector<std::string>& flags) {
  absl::StatusOr<std::unique_ptr<ClientProcess>> c =
      ClientProcess::Start(d->socket(), flags);
  EXPECT_TRUE(c.ok()) << c.status() << "\n" << d->Log();
  return c.ok() ? *std::move(c) : nullptr;
}

// The usage gmlaked has for `session` on device 0, or {-1, -1}.
std::pair<int64_t, int64_t> ReportedUsage(const v1::StatusResponse& st,
                                          uint64_t session) {
  for (const v1::SessionStatus& s : st.sessions()) {
    if (s.session_id() != session) continue;
    for (const v1::DeviceUsage& u : s.usage()) {
      if (u.device() == 0) {
        return {static_cast<int64_t>(u.used_bytes()),
                static_cast<int64_t>(u.cached_bytes())};
      }
    }
  }
  return {-1, -1};
}

TEST(UsagePressure, TheSessionWithTheMostCacheGivesFirst) {
  absl::StatusOr<std::unique_ptr<Daemon>> started =
      Daemon::Start({"--capacity=40MiB", "--reclaim_timeout=10s",
                     // Asks for the shortfall only, not the newcomer's
                     // growth over a window of time.
                     "--pressure_growth_window=0"});
  ASSERT_OK(started);
  Daemon* d = started->get();
  // The largest holder: 24 MiB, 20 of them live.
  std::unique_ptr<ClientProcess> busy =
      StartClient(d, {"--name=busy", "--allocator"});
  // A smaller holder whose 8 MiB are all cache.
  std::unique_ptr<ClientProcess> idle =
      StartClient(d, {"--name=idle", "--allocator"});
  ASSERT_NE(busy, nullptr);
  ASSERT_NE(idle, nullptr);
  ASSERT_OK(busy->Command(absl::StrCat("malloc 0 ", 20 * kMiB)));
  ASSERT_OK(busy->Command(absl::StrCat("malloc 0 ", 4 * kMiB)));
  ASSERT_OK(busy->Command("free 1"));
  ASSERT_OK(idle->Command(absl::StrCat("malloc 0 ", 8 * kMiB)));
  ASSERT_OK(idle->Command("free 0"));

  // The allocators' own figures reach gmlaked without any call from here.
  absl::StatusOr<v1::StatusResponse> st = d->WaitFor(
      [&](const v1::StatusResponse& s) {
        return ReportedUsage(s, busy->session()) ==
                   std::make_pair<int64_t, int64_t>(20 * kMiB, 4 * kMiB) &&
               ReportedUsage(s, idle->session()) ==
                   std::make_pair<int64_t, int64_t>(0, 8 * kMiB);
      },
      absl::Seconds(20));
  ASSERT_OK(st) << "\n" << d->Status()->DebugString();
  absl::StatusOr<std::string> usage = busy->Command("usage 0");
  ASSERT_OK(usage);
  std::vector<std::string> u = absl::StrSplit(*usage, ' ');
  ASSERT_EQ(u.size(), 3u);
  EXPECT_EQ(u[0], absl::StrCat(20 * kMiB));
  EXPECT_EQ(u[1], absl::StrCat(24 * kMiB));
  EXPECT_NE(u[2], "0");  // reports sent on its own

  // A newcomer fills the lake, then needs 6 MiB more.
  std::unique_ptr<ClientProcess> newcomer = StartClient(d, {"--name=new"});
  ASSERT_NE(newcomer, nullptr);
  ASSERT_OK(newcomer->Command("acquire 0 4"));
  ASSERT_OK(newcomer->Command("acquire 0 3"));

  // The idle cache gave it; the busy process was never asked. (The idle
  // side counts what it returned once its handler is done, which may be
  // after the newcomer's lease went through.)
  const std::string gave = absl::StrCat("1 ", 6 * kMiB);
  absl::StatusOr<std::string> p;
  for (absl::Time end = absl::Now() + absl::Seconds(20);;) {
    p = idle->Command("pressure");
    ASSERT_OK(p);
    if (*p == gave || absl::Now() > end) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(*p, gave);
  p = busy->Command("pressure");
  ASSERT_OK(p);
  EXPECT_EQ(*p, "0 0");
  usage = busy->Command("usage 0");
  ASSERT_OK(usage);
  EXPECT_THAT(*usage, ::testing::StartsWith(
                          absl::StrCat(20 * kMiB, " ", 24 * kMiB, " ")));
  st = d->Status();
  ASSERT_OK(st);
  EXPECT_EQ(st->pressure_requests_sent(), 1u);
  ASSERT_OK(d->CheckBooks());

  // Everyone leaves cleanly; the lake has every chunk back.
  for (ClientProcess* c : {busy.get(), idle.get(), newcomer.get()}) {
    absl::StatusOr<int> code = c->Quit();
    ASSERT_OK(code);
    EXPECT_EQ(*code, 0);
  }
  st = d->WaitFor(
      [](const v1::StatusResponse& s) {
        return s.devices(0).leased_chunks() == 0;
      },
      absl::Seconds(10));
  ASSERT_OK(st);
  ASSERT_OK(d->CheckBooks());
}

}  // namespace
}  // namespace testing
}  // namespace gmlake
