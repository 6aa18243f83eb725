// Copyright 2026 The GMLake Authors.
//
// Memory goes back to the node: after every client of a real gmlaked
// (host backend) exits, what the lake created falls to its floor
// (--precreate) once the chunks have been idle for --release_idle, and no
// further; gmlakectl status says why what is left is held.

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/daemon_harness.h"

namespace gmlake {
namespace testing {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kChunk = 2 << 20;

TEST(DaemonRelease, AfterAllClientsExitCreatedBytesFallToTheFloor) {
  // The default idle time (a minute) applies while sessions are open; once
  // the last one ends, everything above the floor goes at the next wake.
  absl::StatusOr<std::unique_ptr<Daemon>> d = Daemon::Start(
      {"--capacity=64MiB", "--precreate=16MiB", "--release_idle=1m"});
  ASSERT_OK(d);
  std::vector<std::unique_ptr<ClientProcess>> clients;
  for (const char* name : {"rank0", "rank1"}) {
    absl::StatusOr<std::unique_ptr<ClientProcess>> c =
        ClientProcess::Start((*d)->socket(), {absl::StrCat("--name=", name)});
    ASSERT_OK(c);
    ASSERT_OK((*c)->Command("acquire 0 10"));
    clients.push_back(*std::move(c));
  }
  absl::StatusOr<v1::StatusResponse> st = (*d)->Status();
  ASSERT_OK(st);
  EXPECT_EQ(st->devices(0).created_bytes(), 20 * kChunk);
  EXPECT_EQ(st->devices(0).floor_bytes(), 8 * kChunk);

  // One exits cleanly, one is killed: either way its chunks come back, and
  // then go back to the driver.
  ASSERT_OK(clients[0]->Quit());
  clients[1]->Kill(SIGKILL);
  const absl::Time exited = absl::Now();
  // Generous for a busy machine: with no session open the release comes at
  // the daemon's next wake (--liveness_interval, 200 ms).
  st = (*d)->WaitFor(
      [](const v1::StatusResponse& s) {
        // The books change first; release and the log line follow
        // outside the lake's lock.
        return s.sessions_size() == 0 &&
               s.devices(0).created_bytes() == 8 * kChunk;
      },
      absl::Seconds(30));
  ASSERT_OK(st) << (*d)->Log();
  const absl::Duration took = absl::Now() - exited;
  ASSERT_OK((*d)->CheckBooks());
  EXPECT_EQ(st->devices(0).free_bytes(), 8 * kChunk);
  EXPECT_EQ(st->devices(0).floor_kept_bytes(), 8 * kChunk);
  EXPECT_EQ(st->devices(0).idle_bytes(), 0u);
  EXPECT_EQ(st->released_idle_bytes(), 12 * kChunk);
  // Both ranks' chunks held their data and went back unzeroed: the daemon
  // zeroes as many bytes of what it creates next (Lake::ZeroRecreated).
  EXPECT_EQ(st->zeroed_bytes(), 0u);
  std::printf("created bytes fell to the floor %s after the clients exited\n",
              absl::FormatDuration(took).c_str());

  // And stay there: the floor is not released, however long it idles.
  absl::SleepFor(absl::Milliseconds(2500));
  st = (*d)->Status();
  ASSERT_OK(st);
  EXPECT_EQ(st->devices(0).created_bytes(), 8 * kChunk);
  EXPECT_THAT((*d)->Log(), HasSubstr("to the driver (--release_idle)"));

  absl::StatusOr<CommandResult> r = RunCommand(
      {RunfilePath("tools/gmlakectl"), "--socket=" + (*d)->socket(), "status"});
  ASSERT_OK(r);
  EXPECT_THAT(r->out, HasSubstr("device 0: 16.00 MiB created"));
  EXPECT_THAT(r->out, HasSubstr("16.00 MiB free, kept as the floor of "
                                "16.00 MiB (--precreate)"));
}

TEST(DaemonRelease, WhenTheLastSessionEndsFreeChunksGoBackWithinSeconds) {
  // The default idle time (a minute): only the end of the last session
  // sends the chunks back this soon.
  absl::StatusOr<std::unique_ptr<Daemon>> d = Daemon::Start(
      {"--capacity=64MiB", "--precreate=8MiB", "--release_idle=1m"});
  ASSERT_OK(d);
  absl::StatusOr<std::unique_ptr<ClientProcess>> job =
      ClientProcess::Start((*d)->socket(), {"--name=job"});
  ASSERT_OK(job);
  ASSERT_OK((*job)->Command("acquire 0 12"));
  absl::StatusOr<v1::StatusResponse> st = (*d)->Status();
  ASSERT_OK(st);
  EXPECT_EQ(st->devices(0).created_bytes(), 12 * kChunk);
  ASSERT_OK((*job)->Quit());
  const absl::Time exited = absl::Now();
  // About a second (the daemon's release round); generous for a busy
  // machine, and far below --release_idle.
  st = (*d)->WaitFor(
      [](const v1::StatusResponse& s) {
        return s.sessions_size() == 0 &&
               s.devices(0).created_bytes() == 4 * kChunk;
      },
      absl::Seconds(20));
  ASSERT_OK(st) << (*d)->Log();
  std::printf(
      "created bytes fell to the floor %s after the last session "
      "ended\n",
      absl::FormatDuration(absl::Now() - exited).c_str());
  ASSERT_OK((*d)->CheckBooks());
  EXPECT_EQ(st->released_idle_bytes(), 8 * kChunk);
  // The log line follows the release, outside the lake's lock.
  const absl::Time deadline = absl::Now() + kPatience;
  while ((*d)->Log().find("free, with no session open, to the driver") ==
             std::string::npos &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_THAT((*d)->Log(),
              HasSubstr("free, with no session open, to the driver"));
}

TEST(DaemonRelease, WhileASessionHoldsChunksFreeOnesStayForTheIdleTime) {
  absl::StatusOr<std::unique_ptr<Daemon>> d =
      Daemon::Start({"--capacity=64MiB", "--release_idle=1m"});
  ASSERT_OK(d);
  absl::StatusOr<std::unique_ptr<ClientProcess>> stays =
      ClientProcess::Start((*d)->socket(), {"--name=stays"});
  ASSERT_OK(stays);
  ASSERT_OK((*stays)->Command("acquire 0 2"));
  absl::StatusOr<std::unique_ptr<ClientProcess>> goes =
      ClientProcess::Start((*d)->socket(), {"--name=goes"});
  ASSERT_OK(goes);
  ASSERT_OK((*goes)->Command("acquire 0 6"));
  ASSERT_OK((*goes)->Quit());
  absl::StatusOr<v1::StatusResponse> st = (*d)->WaitFor(
      [](const v1::StatusResponse& s) { return s.sessions_size() == 1; },
      kPatience);
  ASSERT_OK(st);
  // Several release rounds: the free chunks stay warm for the session
  // still there (--release_idle, a minute).
  absl::SleepFor(absl::Milliseconds(2500));
  st = (*d)->Status();
  ASSERT_OK(st);
  EXPECT_EQ(st->devices(0).created_bytes(), 8 * kChunk);
  EXPECT_EQ(st->devices(0).free_bytes(), 6 * kChunk);
  EXPECT_EQ(st->released_idle_bytes(), 0u);
  ASSERT_OK((*stays)->Quit());
}

TEST(DaemonRelease, ZeroKeepsEverythingUntilTrim) {
  absl::StatusOr<std::unique_ptr<Daemon>> d =
      Daemon::Start({"--capacity=64MiB", "--release_idle=0"});
  ASSERT_OK(d);
  absl::StatusOr<std::unique_ptr<ClientProcess>> c =
      ClientProcess::Start((*d)->socket(), {});
  ASSERT_OK(c);
  ASSERT_OK((*c)->Command("acquire 0 4"));
  ASSERT_OK((*c)->Quit());
  absl::StatusOr<v1::StatusResponse> st = (*d)->WaitFor(
      [](const v1::StatusResponse& s) { return s.sessions_size() == 0; },
      absl::Seconds(10));
  ASSERT_OK(st);
  // Two rounds of the daemon's release loop later, all still created.
  absl::SleepFor(absl::Milliseconds(2500));
  st = (*d)->Status();
  ASSERT_OK(st);
  EXPECT_EQ(st->devices(0).created_bytes(), 4 * kChunk);
  EXPECT_EQ(st->devices(0).next_release_seconds(), -1);
  EXPECT_EQ(st->release_idle_seconds(), 0);
}

}  // namespace
}  // namespace testing
}  // namespace gmlake
