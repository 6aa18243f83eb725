// Copyright 2026 The GMLake Authors.
//
// Races around a lease in flight, with real client processes at different
// uids (raw_client, speaking the protocol by hand) against a real gmlaked.
// While a lease zeroes chunks without the daemon's lock, its session may
// end, return chunks or have chunks trimmed under it; none of that may hand
// one chunk to two sessions, let data cross uids unzeroed, or wedge the
// daemon. The daemon's --testonly_scrub_gate holds the lease in its window
// until the test opens the gate, so every step below happens inside it, on
// any machine load.

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

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

constexpr uint64_t kChunkMiB = 2;

#define ASSERT_BOOKS(daemon)                               \
  do {                                                     \
    absl::Status _b = (daemon)->CheckBooks();              \
    ASSERT_TRUE(_b.ok()) << _b << "\n" << (daemon)->Log(); \
  } while (0)

#define EXPECT_OK(expr)                                        \
  do {                                                         \
    const absl::Status _e = ::gmlake::testing::StatusOf(expr); \
    EXPECT_TRUE(_e.ok()) << #expr << ": " << _e;               \
  } while (0)

class LeaseRace : public ::testing::Test {
 protected:
  void TearDown() override {
    clients_.clear();
    daemon_.reset();
    if (!gate_.empty()) ::unlink(gate_.c_str());
  }

  // A daemon of `capacity` chunks, `precreate` of them made at start, whose
  // leases wait at the gate before zeroing.
  void StartDaemon(uint64_t capacity, uint64_t precreate) {
    // A fresh name, not the pid's: runs in sandboxes of their own pid
    // namespace share pids, and one run's gate would open another's.
    char name[] = "/tmp/gml-gate-XXXXXX";
    const int fd = ::mkstemp(name);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    ::close(fd);
    ::unlink(name);
    gate_ = name;
    absl::StatusOr<std::unique_ptr<Daemon>> d = Daemon::Start(
        {absl::StrCat("--capacity=", capacity * kChunkMiB, "MiB"),
         absl::StrCat("--precreate=", precreate * kChunkMiB, "MiB"),
         "--testonly_scrub_gate=" + gate_});
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = *std::move(d);
  }

  void OpenGate() {
    FILE* f = std::fopen(gate_.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fclose(f);
  }

  ClientProcess* Client(int uid, const std::string& name) {
    absl::StatusOr<std::unique_ptr<ClientProcess>> c =
        ClientProcess::StartBinary(
            "tests/integration/raw_client", daemon_->socket(),
            {absl::StrCat("--uid=", uid), "--name=" + name});
    EXPECT_TRUE(c.ok()) << c.status() << "\n" << daemon_->Log();
    if (!c.ok()) return nullptr;
    clients_.push_back(*std::move(c));
    return clients_.back().get();
  }

  // `n` chunks leased once by uid 2001 and given back: the next lease by
  // another uid must zero them, which is where it waits at the gate.
  void Dirty(uint64_t n) {
    ClientProcess* warm = Client(2001, "warm");
    ASSERT_NE(warm, nullptr);
    ASSERT_OK(warm->Command(absl::StrCat("lease 0 ", n)));
    ASSERT_OK(warm->Command("fill 1"));
    ASSERT_OK(warm->Command("close"));
  }

  // Starts a lease of `n` chunks by `c` and waits until it zeroes
  // `scrubbing` chunks (held at the gate).
  void LeaseInFlight(ClientProcess* c, uint64_t n, uint64_t scrubbing) {
    ASSERT_OK(c->Command(absl::StrCat("lease_async 0 ", n)));
    ASSERT_OK(daemon_->WaitFor(
        [&](const v1::StatusResponse& st) {
          return st.devices(0).scrubbing_chunks() == scrubbing;
        },
        absl::Seconds(20)));
  }

  void WaitSessionGone(uint64_t session) {
    ASSERT_OK(daemon_->WaitFor(
        [&](const v1::StatusResponse& st) {
          for (const auto& s : st.sessions()) {
            if (s.session_id() == session) return false;
          }
          return true;
        },
        absl::Seconds(20)));
  }

  // Chunks a new lease could get now: free ones and capacity left.
  uint64_t Available() {
    absl::StatusOr<v1::StatusResponse> st = daemon_->Status();
    EXPECT_TRUE(st.ok()) << st.status();
    if (!st.ok()) return 0;
    const v1::DeviceStatus& d = st->devices(0);
    return d.free_chunks() +
           (d.capacity_bytes() - d.created_bytes()) / d.chunk_size();
  }

  uint64_t SessionChunks(uint64_t session) {
    absl::StatusOr<v1::StatusResponse> st = daemon_->Status();
    EXPECT_TRUE(st.ok()) << st.status();
    if (!st.ok()) return 0;
    for (const auto& s : st->sessions()) {
      if (s.session_id() == session) return s.leased_chunks();
    }
    return 0;
  }

  // Trims every free chunk, as an operator (root) would.
  void TrimAll() {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    v1::TrimRequest req;
    req.set_device(-1);
    v1::TrimResponse resp;
    ASSERT_TRUE(daemon_->stub()->Trim(&ctx, req, &resp).ok());
  }

  // The daemon answers, its books balance, every chunk comes back once its
  // clients are gone, and SIGTERM still stops it.
  void ExpectServingAndStoppable() {
    ASSERT_BOOKS(daemon_);
    clients_.clear();  // killed
    ASSERT_OK(daemon_->WaitFor(
        [](const v1::StatusResponse& st) {
          return st.sessions_size() == 0 && st.devices(0).leased_chunks() == 0;
        },
        absl::Seconds(20)));
    ASSERT_BOOKS(daemon_);
    ClientProcess* probe = Client(2005, "probe");
    ASSERT_NE(probe, nullptr);
    ASSERT_OK(probe->Command("lease 0 1"));
    ASSERT_OK(probe->Command("close"));
    absl::StatusOr<int> code = daemon_->Stop(SIGTERM, absl::Seconds(10));
    ASSERT_TRUE(code.ok()) << code.status() << "\n" << daemon_->Log();
    EXPECT_EQ(*code, 0) << daemon_->Log();
  }

  std::unique_ptr<Daemon> daemon_;
  std::vector<std::unique_ptr<ClientProcess>> clients_;
  std::string gate_;
};

// A session that ends (closed, or its process killed) while its lease zeroes
// chunks: the chunks the lease had picked must not be freed twice, once by
// the session's end and once by the lease's rollback, or a chunk another
// uid leased in between is freed under it and leased a third time.
TEST_F(LeaseRace, ASessionEndingMidLeaseCannotFreeAnotherUidsChunks) {
  for (const bool kill : {false, true}) {
    SCOPED_TRACE(kill ? "killed with -9" : "closed");
    StartDaemon(16, 16);
    Dirty(8);  // 8 fresh chunks and 8 that uid 2000 must have zeroed
    ClientProcess* a = Client(2000, "a");
    ASSERT_NE(a, nullptr);
    const uint64_t a_session = a->session();
    LeaseInFlight(a, 16, 8);
    if (kill) {
      a->Kill(SIGKILL);
    } else {
      ASSERT_OK(a->Command("close"));
    }
    WaitSessionGone(a_session);

    // B (another uid) leases while A's lease is still in flight: either
    // nothing is free yet, or what it gets is its own.
    ClientProcess* b = Client(2002, "b");
    ASSERT_NE(b, nullptr);
    bool b_holds = b->Command("lease 0 4").ok();
    if (b_holds) {
      ASSERT_OK(b->Command("fill 170"));
    }

    OpenGate();
    if (!kill) {
      EXPECT_FALSE(a->Command("lease_wait").ok());
    }
    ASSERT_OK(daemon_->WaitFor(
        [](const v1::StatusResponse& st) {
          return st.devices(0).scrubbing_chunks() == 0 &&
                 st.devices(0).creating_bytes() == 0;
        },
        absl::Seconds(20)));
    if (!b_holds) {
      ASSERT_OK(b->Command("lease 0 4"));
      ASSERT_OK(b->Command("fill 170"));
    }
    ASSERT_BOOKS(daemon_);
    EXPECT_EQ(SessionChunks(b->session()), 4u);

    // C (a third uid) takes everything the lake offers and writes it.
    ClientProcess* c = Client(2003, "c");
    ASSERT_NE(c, nullptr);
    const uint64_t n = Available();
    EXPECT_EQ(n, 12u);
    if (n > 0) {
      ASSERT_OK(c->Command(absl::StrCat("lease 0 ", n)));
      ASSERT_OK(c->Command("fill 204"));
    }
    // B's memory is still B's alone.
    EXPECT_OK(b->Command("check 170"));
    ExpectServingAndStoppable();
    clients_.clear();
    daemon_.reset();
  }
}

// Chunks of a lease in flight are not the session's yet: returning them is
// refused. Otherwise another uid leases such a chunk and writes to it, the
// grant files it under the first uid, and once returned it goes back to
// the first uid without zeroing.
TEST_F(LeaseRace, ChunksOfALeaseInFlightCannotBeReturned) {
  StartDaemon(20, 16);
  Dirty(8);
  ClientProcess* a = Client(2000, "a");
  ASSERT_NE(a, nullptr);
  LeaseInFlight(a, 16, 8);
  // A does not know its chunk ids yet; it tries them all.
  int returned = 0;
  for (int id = 1; id <= 20; ++id) {
    returned += a->Command(absl::StrCat("return ", id)).ok();
  }
  EXPECT_EQ(returned, 0);

  ClientProcess* b = Client(2002, "b");
  ASSERT_NE(b, nullptr);
  ASSERT_OK(b->Command("lease 0 1"));
  ASSERT_OK(b->Command("fill 94"));  // B's secret

  OpenGate();
  absl::StatusOr<std::string> got = a->Command("lease_wait");
  EXPECT_OK(got);
  if (got.ok()) {
    std::vector<std::string> words = absl::StrSplit(*got, ' ');
    EXPECT_EQ(words.size(), 17u);  // the lease id and its 16 chunks
  }
  ASSERT_OK(b->Command("return_held"));
  ASSERT_BOOKS(daemon_);

  // A takes all that is left: B's secret must not be in it.
  const uint64_t n = Available();
  ASSERT_GT(n, 0u);
  ASSERT_OK(a->Command(absl::StrCat("lease 0 ", n)));
  absl::StatusOr<std::string> secrets = a->Command("count 94");
  ASSERT_OK(secrets);
  EXPECT_EQ(*secrets, "0");
  ExpectServingAndStoppable();
}

// A session closed mid-lease, then Trim (which releases free chunks to the
// driver): the lease's rollback must not look for chunks that are gone. It
// used to throw std::out_of_range with the lake's lock held, after which
// the daemon answered nothing and ignored SIGTERM.
TEST_F(LeaseRace, TrimDuringARolledBackLeaseLeavesTheDaemonServing) {
  StartDaemon(16, 16);
  Dirty(8);
  ClientProcess* a = Client(65534, "a");
  ASSERT_NE(a, nullptr);
  LeaseInFlight(a, 16, 8);
  ASSERT_OK(a->Command("close"));
  WaitSessionGone(a->session());
  TrimAll();
  OpenGate();
  EXPECT_FALSE(a->Command("lease_wait").ok());
  ExpectServingAndStoppable();
}

// The same through Return: chunks returned mid-lease and trimmed must not
// be looked for by the grant.
TEST_F(LeaseRace, TrimAfterAReturnMidLeaseLeavesTheDaemonServing) {
  StartDaemon(16, 16);
  Dirty(8);
  ClientProcess* a = Client(65534, "a");
  ASSERT_NE(a, nullptr);
  LeaseInFlight(a, 16, 8);
  for (int id = 1; id <= 16; ++id) {
    a->Command(absl::StrCat("return ", id)).IgnoreError();
  }
  TrimAll();
  OpenGate();
  EXPECT_OK(a->Command("lease_wait"));
  ASSERT_OK(a->Command("close"));
  ExpectServingAndStoppable();
}

}  // namespace
}  // namespace testing
}  // namespace gmlake
