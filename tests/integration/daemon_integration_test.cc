// Copyright 2026 The GMLake Authors.
//
// gmlaked with real client processes: each test starts the daemon (host
// backend) and lake_client processes, drives them, and checks the daemon's
// books through its Status RPC after each step.

#include <signal.h>
#include <unistd.h>

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/daemon_harness.h"

namespace gmlake {
namespace testing {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kChunk = 2 << 20;

#define ASSERT_BOOKS(daemon)                                                 \
  do {                                                                       \
    absl::Status _b = (daemon)->CheckBooks();                                \
    ASSERT_TRUE(_b.ok()) << _b << "\n" << (daemon)->Status()->DebugString(); \
  } while (0)

std::unique_ptr<Daemon> StartDaemon(const std::vector<std::string>& flags) {
  absl::StatusOr<std::unique_ptr<Daemon>> d = Daemon::Start(flags);
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *std::move(d) : nullptr;
}

std::unique_ptr<ClientProcess> StartClient(
    Daemon* d, const std::vector<std::string>& flags = {}) {
  absl::StatusOr<std::unique_ptr<ClientProcess>> c =
      ClientProcess::Start(d->socket(), flags);
  EXPECT_TRUE(c.ok()) << c.status() << "\n" << d->Log();
  return c.ok() ? *std::move(c) : nullptr;
}

const v1::SessionStatus* FindSession(const v1::StatusResponse& st,
                                     uint64_t id) {
  for (const auto& s : st.sessions()) {
    if (s.session_id() == id) return &s;
  }
  return nullptr;
}

TEST(DaemonIntegration, SeveralClientsLeaseWriteReturnAndTheBooksBalance) {
  std::unique_ptr<Daemon> d = StartDaemon({"--capacity=64MiB"});
  ASSERT_NE(d, nullptr);
  std::vector<std::unique_ptr<ClientProcess>> clients;
  for (int i = 0; i < 3; ++i) {
    clients.push_back(StartClient(d.get(), {absl::StrCat("--name=c", i)}));
    ASSERT_NE(clients.back(), nullptr);
  }
  for (int i = 0; i < 3; ++i) {
    ASSERT_OK(clients[i]->Command("acquire 0 4"));
    ASSERT_OK(clients[i]->Command(absl::StrCat("fill 0 ", 10 + i)));
    ASSERT_BOOKS(d);
  }
  absl::StatusOr<v1::StatusResponse> st = d->Status();
  ASSERT_OK(st);
  EXPECT_EQ(st->devices(0).leased_chunks(), 12u);
  EXPECT_EQ(st->devices(0).created_chunks(), 12u);
  ASSERT_EQ(st->sessions_size(), 3);
  for (int i = 0; i < 3; ++i) {
    const v1::SessionStatus* s = FindSession(*st, clients[i]->session());
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->leased_chunks(), 4u);
    EXPECT_EQ(s->pid(), clients[i]->pid());
    EXPECT_EQ(s->uid(), static_cast<int64_t>(::geteuid()));
    EXPECT_EQ(s->name(), absl::StrCat("c", i));
    EXPECT_TRUE(s->bound());
    EXPECT_TRUE(s->watching());
  }
  // Nobody's writes reached anybody else's chunks.
  for (int i = 0; i < 3; ++i) {
    ASSERT_OK(clients[i]->Command(absl::StrCat("check 0 ", 10 + i)));
  }

  ASSERT_OK(clients[0]->Command("return 0 2"));
  ASSERT_BOOKS(d);
  st = d->Status();
  EXPECT_EQ(st->devices(0).leased_chunks(), 10u);
  EXPECT_EQ(st->devices(0).free_chunks(), 2u);

  // The next lease reuses the free chunks before creating new ones.
  ASSERT_OK(clients[1]->Command("acquire 0 3"));
  ASSERT_BOOKS(d);
  st = d->Status();
  EXPECT_EQ(st->devices(0).created_chunks(), 13u);
  EXPECT_EQ(st->devices(0).free_chunks(), 0u);
  ASSERT_OK(clients[0]->Command("check 0 10"));

  for (auto& c : clients) {
    absl::StatusOr<int> code = c->Quit();
    ASSERT_OK(code);
    EXPECT_EQ(*code, 0);
    ASSERT_BOOKS(d);
  }
  st = d->Status();
  EXPECT_EQ(st->sessions_size(), 0);
  EXPECT_EQ(st->devices(0).leased_chunks(), 0u);
  EXPECT_EQ(st->devices(0).free_chunks(), 13u);
}

// At once: the session ends when its connections close, without waiting
// for the liveness poll. (How long that takes on an idle machine is
// printed, not asserted: timings belong in benchmarks.)
// A client that makes its own chunks (LeaseRequest.client_makes): killed,
// its memory goes with its process, and gmlaked counts the capacity free
// again, with nothing of it to release or zero.
TEST(DaemonIntegration, KilledClientsMadeChunksGiveTheirCapacityBack) {
  std::unique_ptr<Daemon> d = StartDaemon({"--capacity=16MiB"});
  ASSERT_NE(d, nullptr);
  std::unique_ptr<ClientProcess> a =
      StartClient(d.get(), {"--name=maker", "--make_chunks"});
  ASSERT_NE(a, nullptr);
  ASSERT_OK(a->Command("acquire 0 8"));
  ASSERT_OK(a->Command("fill 0 171"));
  absl::StatusOr<v1::StatusResponse> st = d->Status();
  ASSERT_OK(st);
  EXPECT_EQ(st->client_made_bytes_total(), 8 * kChunk);
  EXPECT_EQ(st->devices(0).leased_chunks(), 8u);
  ASSERT_BOOKS(d);
  a->Kill(SIGKILL);
  st = d->WaitFor(
      [](const v1::StatusResponse& s) {
        return s.sessions_size() == 0 && s.devices(0).leased_chunks() == 0;
      },
      kPatience);
  ASSERT_OK(st);
  EXPECT_EQ(st->devices(0).created_chunks(), 0u);
  EXPECT_EQ(st->devices(0).free_chunks(), 0u);
  EXPECT_EQ(st->zeroed_bytes(), 0u);
  ASSERT_BOOKS(d);
  // The whole capacity leases again.
  std::unique_ptr<ClientProcess> b =
      StartClient(d.get(), {"--name=next", "--make_chunks"});
  ASSERT_NE(b, nullptr);
  ASSERT_OK(b->Command("acquire 0 8"));
  ASSERT_BOOKS(d);
}

TEST(DaemonIntegration, KilledClientsChunksComeBack) {
  std::unique_ptr<Daemon> d = StartDaemon({"--capacity=16MiB"});
  ASSERT_NE(d, nullptr);
  std::unique_ptr<ClientProcess> a = StartClient(d.get(), {"--name=victim"});
  ASSERT_NE(a, nullptr);
  ASSERT_OK(a->Command("acquire 0 8"));
  ASSERT_OK(a->Command("fill 0 171"));
  ASSERT_BOOKS(d);
  const absl::Time killed = absl::Now();
  a->Kill(SIGKILL);
  absl::StatusOr<v1::StatusResponse> st = d->WaitFor(
      [](const v1::StatusResponse& s) {
        return s.sessions_size() == 0 && s.devices(0).leased_chunks() == 0;
      },
      kPatience);
  ASSERT_OK(st);
  std::cout << "[ INFO ] the killed client's chunks were back in "
            << absl::Now() - killed << std::endl;
  EXPECT_EQ(st->devices(0).free_chunks(), 8u);
  ASSERT_BOOKS(d);
  // Either the session ended (its fd socket closed or its Watch stream
  // broke, whichever the daemon saw first) when the process was already
  // gone, or a moment before the process was reaped and the chunks waited
  // for that (at most --liveness_interval).
  const std::string log = d->Log();
  EXPECT_TRUE(absl::StrContains(log,
                                "ended: its fd-socket connection closed "
                                "(the client closed the connection); "
                                "16.00 MiB back in the lake") ||
              absl::StrContains(log,
                                "ended: its Watch stream broke; "
                                "16.00 MiB back in the lake") ||
              absl::StrContains(log,
                                "exited; 16.00 MiB of its ended session "
                                "back in the lake"))
      << log;
}

TEST(DaemonIntegration,
     ChunksOfAKilledClientAreZeroedBeforeAnotherUidGetsThem) {
  if (::geteuid() != 0) {
    GTEST_SKIP() << "needs root to run a client as another uid";
  }
  std::unique_ptr<Daemon> d = StartDaemon({"--capacity=16MiB"});
  ASSERT_NE(d, nullptr);
  std::unique_ptr<ClientProcess> a = StartClient(d.get());
  ASSERT_NE(a, nullptr);
  ASSERT_OK(a->Command("acquire 0 8"));
  ASSERT_OK(a->Command("fill 0 171"));
  a->Kill(SIGKILL);
  ASSERT_OK(d->WaitFor(
      [](const v1::StatusResponse& s) { return s.sessions_size() == 0; },
      kPatience));

  // uid 65534 connects as itself (SO_PEERCRED) and must get the same eight
  // chunks (the capacity is eight), zeroed.
  std::unique_ptr<ClientProcess> b = StartClient(d.get(), {"--uid=65534"});
  ASSERT_NE(b, nullptr);
  ASSERT_OK(b->Command("acquire 0 8"));
  ASSERT_OK(b->Command("check 0 0"));
  absl::StatusOr<v1::StatusResponse> st = d->Status();
  ASSERT_OK(st);
  EXPECT_EQ(st->chunks_scrubbed(), 8u);
  EXPECT_EQ(st->devices(0).created_chunks(), 8u);
  EXPECT_EQ(FindSession(*st, b->session())->uid(), 65534);
  ASSERT_BOOKS(d);
}

TEST(DaemonIntegration, SameUidKeepsBytesUnlessScrubIsAlways) {
  for (const std::string policy : {"cross-uid", "always"}) {
    std::unique_ptr<Daemon> d =
        StartDaemon({"--capacity=8MiB", "--scrub=" + policy});
    ASSERT_NE(d, nullptr);
    std::unique_ptr<ClientProcess> a = StartClient(d.get());
    ASSERT_OK(a->Command("acquire 0 4"));
    ASSERT_OK(a->Command("fill 0 90"));
    ASSERT_OK(a->Quit());
    std::unique_ptr<ClientProcess> b = StartClient(d.get());
    ASSERT_OK(b->Command("acquire 0 4"));
    ASSERT_OK(b->Command(policy == "always" ? "check 0 0" : "check 0 90"))
        << policy;
    ASSERT_BOOKS(d);
  }
}

TEST(DaemonIntegration, OverQuotaIsAClearErrorAndTheDaemonGoesOn) {
  std::unique_ptr<Daemon> d = StartDaemon(
      {"--capacity=64MiB", "--uid_quota=12MiB", "--session_quota=8MiB"});
  ASSERT_NE(d, nullptr);
  std::unique_ptr<ClientProcess> a = StartClient(d.get());
  std::unique_ptr<ClientProcess> b = StartClient(d.get());
  absl::StatusOr<std::string> r = a->Command("acquire 0 5");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(r.status().message(),
              HasSubstr("lease of 10.00 MiB would put session"));
  EXPECT_THAT(r.status().message(),
              HasSubstr("over its quota of 8.00 MiB (--session_quota)"));
  ASSERT_OK(a->Command("acquire 0 4"));
  ASSERT_OK(b->Command("acquire 0 2"));
  r = b->Command("acquire 0 1");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(),
              HasSubstr(absl::StrCat("would put uid ", ::geteuid(),
                                     " at 14.00 MiB, over its quota of "
                                     "12.00 MiB (--uid_quota)")));
  ASSERT_BOOKS(d);
  absl::StatusOr<v1::StatusResponse> st = d->Status();
  EXPECT_EQ(st->devices(0).leased_chunks(), 6u);
  EXPECT_EQ(st->leases_failed(), 2u);
  // Still serving: returning makes room under the quota again.
  ASSERT_OK(a->Command("return 0 1"));
  ASSERT_OK(b->Command("acquire 0 1"));
  ASSERT_BOOKS(d);
}

TEST(DaemonIntegration, PressureMakesAnIdleClientReturnSoABusyOneGetsMemory) {
  std::unique_ptr<Daemon> d =
      StartDaemon({"--capacity=16MiB", "--reclaim_timeout=60s"});
  ASSERT_NE(d, nullptr);
  // The idle client keeps up to 4 returned chunks for reuse.
  std::unique_ptr<ClientProcess> idle =
      StartClient(d.get(), {"--name=idle", "--reclaim",
                            absl::StrCat("--idle_watermark=", 4 * kChunk)});
  std::unique_ptr<ClientProcess> busy = StartClient(d.get(), {"--name=busy"});
  ASSERT_NE(idle, nullptr);
  ASSERT_NE(busy, nullptr);
  ASSERT_OK(idle->Command("acquire 0 8"));
  ASSERT_OK(idle->Command("return 0 2"));  // kept idle, below the watermark
  absl::StatusOr<std::string> held = idle->Command("held 0");
  ASSERT_OK(held);
  EXPECT_EQ(*held, "6 2");
  ASSERT_BOOKS(d);

  ASSERT_OK(busy->Command("acquire 0 5", kPatience));
  // 2 idle chunks went first, then the handler gave 3 of its 6.
  held = idle->Command("held 0");
  ASSERT_OK(held);
  EXPECT_EQ(*held, "3 0");
  absl::StatusOr<std::string> p = idle->Command("pressure");
  ASSERT_OK(p);
  EXPECT_EQ(*p, absl::StrCat("1 ", 5 * kChunk));
  ASSERT_OK(busy->Command("fill 0 1"));
  ASSERT_OK(idle->Command("fill 0 2"));
  ASSERT_OK(busy->Command("check 0 1"));
  ASSERT_BOOKS(d);
  absl::StatusOr<v1::StatusResponse> st = d->Status();
  EXPECT_EQ(st->pressure_requests_sent(), 1u);
  EXPECT_EQ(st->devices(0).leased_chunks(), 8u);
  EXPECT_EQ(FindSession(*st, busy->session())->leased_chunks(), 5u);

  // A holder that cannot give (no handler) makes the lease fail clearly.
  std::unique_ptr<ClientProcess> third = StartClient(d.get(), {"--name=3rd"});
  absl::StatusOr<std::string> r = third->Command("acquire 0 1");
  // The idle client still gives one more chunk: that one succeeds.
  ASSERT_OK(r);
  r = third->Command("acquire 0 8");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("asked"));
  ASSERT_BOOKS(d);
}

TEST(DaemonIntegration, VersionMismatchSaysWhichSideToUpgrade) {
  std::unique_ptr<Daemon> d = StartDaemon({"--capacity=8MiB"});
  ASSERT_NE(d, nullptr);
  absl::StatusOr<std::unique_ptr<ClientProcess>> c =
      ClientProcess::Start(d->socket(), {"--protocol_version=2"});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(c.status().message(),
              HasSubstr("client speaks protocol 2, gmlaked speaks 1: upgrade "
                        "gmlaked"));
  // The daemon is unharmed and holds no session for it.
  std::unique_ptr<ClientProcess> ok = StartClient(d.get());
  ASSERT_NE(ok, nullptr);
  absl::StatusOr<v1::StatusResponse> st = d->Status();
  EXPECT_EQ(st->sessions_size(), 1);
}

TEST(DaemonIntegration, TheSampleFlagfileStartsAndItsSettingsShow) {
  std::unique_ptr<Daemon> d =
      StartDaemon({"--flagfile=" + RunfilePath("deploy/gmlaked.flags"),
                   "--host_capacity=1GiB"});
  ASSERT_NE(d, nullptr);
  absl::StatusOr<v1::StatusResponse> st = d->Status();
  ASSERT_OK(st);
  EXPECT_EQ(st->scrub_policy(), "cross-uid");
  // --capacity=0.9 of the 1 GiB emulated device, in whole chunks.
  EXPECT_EQ(st->devices(0).capacity_bytes(), 460 * kChunk);
  const std::string log = d->Log();
  EXPECT_THAT(log, HasSubstr("backend: host backend"));
  EXPECT_THAT(log, HasSubstr("device 0: capacity 920.00 MiB in chunks of "
                             "2.00 MiB"));
  EXPECT_THAT(log, HasSubstr("limits: uid quota none"));
  EXPECT_THAT(log, HasSubstr("serving: gRPC on unix:" + d->socket()));
  std::unique_ptr<ClientProcess> c = StartClient(d.get());
  ASSERT_NE(c, nullptr);
  ASSERT_OK(c->Command("acquire 0 3"));
}

TEST(DaemonIntegration, BadFlagsStopTheStartWithAClearMessage) {
  for (const auto& [flag, words] :
       std::vector<std::pair<std::string, std::string>>{
           {"--capacity=lots", "--capacity"},
           {"--scrub=sometimes", "always, cross-uid or never"},
           {"--uid_quota=12XB", "--uid_quota"},
           {"--chunk_size=3MiB", "--chunk_size"},
           {"--backend=accounting", "no memory to share"},
           {"--host_capacity=big", "--host_capacity"},
           {"--capacity=1GiB,2GiB", "one for all devices or one per device"},
           {"--precreate=some", "--precreate"},
           {"--socket_mode=0999", "not an octal mode"},
           {"--max_sessions=0", "--max_sessions must be positive"},
           {"--max_waiting_leases=0", "--max_waiting_leases"},
           {"--pressure_patience=0s", "--pressure_patience must be positive"},
           {"--pressure_peak_margin_divisor=-64", "0 for no margin"},
           {"--release_idle=-1s", "--release_idle must be 0"},
           {"--grpc_fd_guard=maybe", "passrights"}}) {
    absl::StatusOr<std::unique_ptr<Daemon>> d = Daemon::Start({flag});
    ASSERT_FALSE(d.ok()) << flag;
    EXPECT_THAT(d.status().message(), HasSubstr(words)) << flag;
  }
}

TEST(DaemonIntegration, ASecondDaemonOnTheSameSocketsRefusesToStart) {
  std::unique_ptr<Daemon> d = StartDaemon({"--capacity=8MiB"});
  ASSERT_NE(d, nullptr);
  absl::StatusOr<CommandResult> r =
      RunCommand({RunfilePath("daemon/gmlaked"), "--backend=host",
                  "--socket=" + d->socket(), "--fd_socket=" + d->fd_socket()},
                 absl::Seconds(10));
  ASSERT_OK(r);
  EXPECT_EQ(r->exit_code, 1);
  EXPECT_THAT(r->err, HasSubstr("--socket"));
  // The first one still serves, on sockets the second left alone.
  std::unique_ptr<ClientProcess> c = StartClient(d.get());
  ASSERT_NE(c, nullptr);
  ASSERT_OK(c->Command("acquire 0 1"));
}

TEST(DaemonIntegration, NoDaemonIsNotFound) {
  absl::StatusOr<std::unique_ptr<ClientProcess>> c =
      ClientProcess::Start("/tmp/gml.nonexistent/gmlaked.sock", {});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(c.status().message(), HasSubstr("gmlaked is not running"));
}

TEST(DaemonIntegration, SigtermShutsDownCleanlyAndClientsKeepWhatTheyHold) {
  std::unique_ptr<Daemon> d = StartDaemon({"--capacity=16MiB"});
  ASSERT_NE(d, nullptr);
  // An acquire waits this long for gmlaked to be back (30 s by default).
  std::unique_ptr<ClientProcess> c =
      StartClient(d.get(), {"--reconnect_wait=1s"});
  ASSERT_OK(c->Command("acquire 0 4"));
  ASSERT_OK(c->Command("fill 0 119"));
  absl::StatusOr<int> code = d->Stop(SIGTERM, kPatience);
  ASSERT_OK(code);
  EXPECT_EQ(*code, 0);
  EXPECT_NE(::access(d->socket().c_str(), F_OK), 0);
  EXPECT_NE(::access(d->fd_socket().c_str(), F_OK), 0);
  const std::string log = d->Log();
  EXPECT_THAT(log, HasSubstr("SIGTERM: shutting down"));
  EXPECT_THAT(log, HasSubstr("released 8.00 MiB of chunks; stopped"));

  // The client notices, keeps its memory, and refuses new leases clearly.
  absl::StatusOr<std::string> s;
  const absl::Time deadline = absl::Now() + kPatience;
  do {
    s = c->Command("status");
  } while (s.ok() && absl::Now() < deadline &&
           (absl::SleepFor(absl::Milliseconds(20)), true));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnavailable);
  ASSERT_OK(c->Command("check 0 119"));
  absl::StatusOr<std::string> r = c->Command("acquire 0 1");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(r.status().message(), HasSubstr("is gone"));
  EXPECT_THAT(r.status().message(), HasSubstr("keeps the 4 chunks"));
  EXPECT_THAT(r.status().message(), HasSubstr("until gmlaked is back"));
  ASSERT_OK(c->Command("return 0 4"));
  absl::StatusOr<int> exit = c->Quit();
  ASSERT_OK(exit);
  EXPECT_EQ(*exit, 0);
}

}  // namespace
}  // namespace testing
}  // namespace gmlake
