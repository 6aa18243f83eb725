// Copyright 2026 The GMLake Authors.
//
// Attacks on gmlaked by clients at other uids, each once confirmed against
// an earlier daemon: resizing a chunk's memfd, stalling the descriptor
// socket with a slow reader, taking every session, and parking hundreds of
// leases on one thread each. Real daemon, real client processes
// (raw_client, which speaks the protocol by hand) and real sockets.

#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/fd_passing.h"
#include "common/unique_fd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/protocol.h"
#include "tests/integration/daemon_harness.h"
#include "tests/time_scale.h"

namespace gmlake {
namespace testing {
namespace {

using ::testing::HasSubstr;

class Attack : public ::testing::Test {
 protected:
  void StartDaemon(const std::vector<std::string>& flags) {
    clients_.clear();
    absl::StatusOr<std::unique_ptr<Daemon>> d = Daemon::Start(flags);
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = *std::move(d);
  }

  ClientProcess* Client(int uid, const std::string& name = "attacker") {
    absl::StatusOr<std::unique_ptr<ClientProcess>> c =
        ClientProcess::StartBinary(
            "tests/integration/raw_client", daemon_->socket(),
            {absl::StrCat("--uid=", uid), "--name=" + name});
    EXPECT_TRUE(c.ok()) << c.status() << "\n" << daemon_->Log();
    if (!c.ok()) return nullptr;
    clients_.push_back(*std::move(c));
    return clients_.back().get();
  }

  // gmlaked still runs, answers, and its books balance.
  void ExpectAlive() {
    int status = 0;
    ASSERT_EQ(::waitpid(daemon_->pid(), &status, WNOHANG), 0)
        << "gmlaked died ("
        << (WIFSIGNALED(status) ? ::strsignal(WTERMSIG(status)) : "exited")
        << "):\n"
        << daemon_->Log();
    absl::Status books = daemon_->CheckBooks();
    ASSERT_TRUE(books.ok()) << books << "\n" << daemon_->Log();
  }

  void TrimAll() {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    v1::TrimRequest req;
    req.set_device(-1);
    v1::TrimResponse resp;
    EXPECT_TRUE(daemon_->stub()->Trim(&ctx, req, &resp).ok());
  }

  std::unique_ptr<Daemon> daemon_;
  std::vector<std::unique_ptr<ClientProcess>> clients_;
};

// The first word of a "lease" answer is the lease id, then the chunk ids.
std::vector<std::string> ChunkIds(const std::string& answer) {
  std::vector<std::string> words = absl::StrSplit(answer, ' ');
  return std::vector<std::string>(words.begin() + 1, words.end());
}

// A session's token used to work from any uid: another uid that learned it
// could lease, return the session's chunks or close it. Each call is now
// tied to the uid that opened the session, and gmlaked says whose it is.
TEST_F(Attack, AnotherUidCannotUseASessionsToken) {
  StartDaemon({"--capacity=16MiB"});
  ClientProcess* victim = Client(2000, "victim");
  ClientProcess* thief = Client(2001, "thief");
  ASSERT_NE(victim, nullptr);
  ASSERT_NE(thief, nullptr);
  absl::StatusOr<std::string> held = victim->Command("lease 0 2");
  ASSERT_TRUE(held.ok()) << held.status();
  absl::StatusOr<std::string> token = victim->Command("token");
  ASSERT_TRUE(token.ok()) << token.status();
  ASSERT_TRUE(thief
                  ->Command(absl::StrCat("impersonate ", victim->session(), " ",
                                         *token))
                  .ok());
  const std::string whose =
      absl::StrCat("session ", victim->session(), " belongs to uid 2000");
  for (const std::string& call :
       {std::string("lease 0 1"), absl::StrCat("return ", ChunkIds(*held)[0]),
        std::string("usage"), std::string("close")}) {
    absl::StatusOr<std::string> r = thief->Command(call);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kPermissionDenied)
        << call << ": " << r.status();
    EXPECT_THAT(r.status().message(), HasSubstr(whose)) << call;
  }
  // The victim's session is whole, and works for the victim.
  EXPECT_EQ(victim->Command("count 0").status().code(), absl::StatusCode::kOk);
  absl::StatusOr<std::string> more = victim->Command("lease 0 1");
  EXPECT_TRUE(more.ok()) << more.status();
  ExpectAlive();
}

// A client shrinks or grows the memfd of a chunk it holds, then returns it:
// the daemon's zeroing of it (for another uid's lease, or before a trim)
// used to die of SIGBUS, and a grown chunk stayed poisoned for every later
// holder.
TEST_F(Attack, ChunkMemfdsCannotBeResized) {
  StartDaemon({"--capacity=16MiB"});
  ClientProcess* a = Client(2000, "resizer");
  ASSERT_NE(a, nullptr);
  absl::StatusOr<std::string> got = a->Command("lease 0 4");
  ASSERT_OK(got);
  const std::vector<std::string> ids = ChunkIds(*got);
  ASSERT_EQ(ids.size(), 4u);
  ASSERT_OK(a->Command("fill 9"));
  absl::StatusOr<std::string> shrink =
      a->Command(absl::StrCat("truncate ", ids[0], " 0"));
  EXPECT_FALSE(shrink.ok());
  absl::StatusOr<std::string> grow =
      a->Command(absl::StrCat("truncate ", ids[1], " 1099511627776"));
  EXPECT_FALSE(grow.ok());
  ASSERT_OK(a->Command("return_held"));

  // Another uid's lease zeroes them.
  ClientProcess* b = Client(2002, "victim");
  ASSERT_NE(b, nullptr);
  ASSERT_OK(b->Command("lease 0 8"));
  ASSERT_OK(b->Command("check 0"));
  ASSERT_OK(b->Command("fill 3"));
  ExpectAlive();

  // And a trim zeroes what held data before releasing it.
  ClientProcess* c = Client(2003, "resizer2");
  ASSERT_NE(c, nullptr);
  ASSERT_OK(b->Command("return_held"));
  got = c->Command("lease 0 2");
  ASSERT_OK(got);
  const std::vector<std::string> more = ChunkIds(*got);
  c->Command(absl::StrCat("truncate ", more[0], " 4096")).IgnoreError();
  ASSERT_OK(c->Command("return_held"));
  TrimAll();
  ExpectAlive();
}

// Fields of a raw_client "flood_status" answer.
struct FloodStatus {
  uint64_t sent = 0;
  bool closed = false;
};
absl::StatusOr<FloodStatus> Flood(ClientProcess* c) {
  absl::StatusOr<std::string> got = c->Command("flood_status");
  if (!got.ok()) return got.status();
  std::vector<std::string> w = absl::StrSplit(*got, ' ');
  FloodStatus f;
  if (w.size() != 3 || !absl::SimpleAtoi(w[0], &f.sent)) {
    return absl::InternalError(absl::StrCat("bad flood_status: ", *got));
  }
  f.closed = w[2] == "closed";
  return f;
}

// One connection queues hundreds of requests that are refused and reads the
// replies at 256 bytes/s. The fd socket's single thread used to stay with
// it (each send's timeout restarting after every partial send): another
// uid's bind hung and failed, and housekeeping stopped.
TEST_F(Attack, ASlowReaderOnTheFdSocketStallsNobody) {
  for (const char* kind : {"bind", "claim"}) {
    SCOPED_TRACE(kind);
    StartDaemon({"--capacity=16MiB", "--bind_timeout=1s"});
    ClientProcess* slow = Client(65534, "slow");
    ASSERT_NE(slow, nullptr);
    ASSERT_OK(slow->Command(absl::StrCat("flood 3000 ", kind)));
    // Until the daemon's socket buffer towards it is full and the flood
    // stops going in (or the daemon has dropped it).
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    uint64_t last_sent = 0;
    absl::Time last_progress = absl::Now();
    for (;;) {
      absl::StatusOr<FloodStatus> f = Flood(slow);
      ASSERT_OK(f);
      if (f->closed) break;
      if (f->sent != last_sent) {
        last_sent = f->sent;
        last_progress = absl::Now();
      } else if (f->sent >= 100 &&
                 absl::Now() - last_progress > absl::Milliseconds(500)) {
        break;
      }
      ASSERT_LT(absl::Now(), deadline)
          << "the flood did not get going: " << f->sent << " sent";
      absl::SleepFor(absl::Milliseconds(20));
    }
    // A connection that never binds is still dropped on time.
    absl::StatusOr<UniqueFd> idle = ConnectUnix(daemon_->fd_socket());
    ASSERT_OK(idle);
    // Another uid opens, binds, leases and claims meanwhile.
    ClientProcess* victim = Client(2002, "victim");
    ASSERT_NE(victim, nullptr);
    ASSERT_OK(victim->Command("lease 0 2"));
    ASSERT_OK(victim->Command("fill 5"));
    // The slow reader is dropped, and so is the idle connection.
    for (;;) {
      absl::StatusOr<FloodStatus> f = Flood(slow);
      ASSERT_OK(f);
      if (f->closed) break;
      ASSERT_LT(absl::Now(), deadline + absl::Seconds(30))
          << "the slow reader was never dropped\n"
          << daemon_->Log();
      absl::SleepFor(absl::Milliseconds(50));
    }
    pollfd p{idle->get(), POLLRDHUP, 0};
    EXPECT_EQ(::poll(&p, 1, 20000), 1) << "the idle connection stayed open";
    ExpectAlive();
  }
}

// One uid used to be able to open and bind every session (8192 in 4 s),
// after which every other user was refused. Now each uid has its own cap,
// and sessions not yet bound (whose uid is unknown) a small one apart.
TEST_F(Attack, OneUidCannotTakeEverySession) {
  StartDaemon({"--capacity=16MiB", "--max_sessions_per_uid=4",
               "--max_unbound_sessions=4"});
  for (int i = 0; i < 4; ++i) ASSERT_NE(Client(2000, "hog"), nullptr);
  absl::StatusOr<std::unique_ptr<ClientProcess>> fifth =
      ClientProcess::StartBinary("tests/integration/raw_client",
                                 daemon_->socket(), {"--uid=2000"});
  ASSERT_FALSE(fifth.ok());
  EXPECT_EQ(fifth.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(fifth.status().message(), HasSubstr("--max_sessions_per_uid"));
  ClientProcess* other = Client(2002, "other");
  ASSERT_NE(other, nullptr);
  ASSERT_OK(other->Command("lease 0 1"));

  // Sessions opened and never bound.
  for (int i = 0; i < 4; ++i) {
    grpc::ClientContext ctx;
    v1::OpenSessionRequest req;
    req.set_pid(::getpid());
    req.set_protocol_version(ProtocolVersion());
    v1::OpenSessionResponse resp;
    ASSERT_OK(FromGrpc(daemon_->stub()->OpenSession(&ctx, req, &resp)));
  }
  absl::StatusOr<std::unique_ptr<ClientProcess>> refused =
      ClientProcess::StartBinary("tests/integration/raw_client",
                                 daemon_->socket(), {"--uid=2003"});
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("--max_unbound_sessions"));
  // Those that clearly are not binding make room (after 1 s).
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  for (;;) {
    absl::StatusOr<std::unique_ptr<ClientProcess>> late =
        ClientProcess::StartBinary("tests/integration/raw_client",
                                   daemon_->socket(), {"--uid=2003"});
    if (late.ok()) break;
    ASSERT_THAT(late.status().message(), HasSubstr("--max_unbound_sessions"));
    ASSERT_LT(absl::Now(), deadline) << "no room was made";
    absl::SleepFor(absl::Milliseconds(100));
  }
  ExpectAlive();
}

// Threads of process `pid` (entries of /proc/PID/task).
int Threads(pid_t pid) {
  DIR* d = ::opendir(absl::StrCat("/proc/", pid, "/task").c_str());
  if (d == nullptr) return -1;
  int n = 0;
  while (const dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
  ::closedir(d);
  return n;
}

// With a holder that never answers pressure (stopped), 300 leases from two
// uids all have to wait for memory. Each waiting lease holds one of gRPC's
// threads, and the daemon used to grow to 314 threads. Waiting leases are
// capped per uid and in all; the rest fail at once, saying so.
TEST_F(Attack, WaitingLeasesDoNotEachHoldAThread) {
  // Both the wait and the bound on answers scale for sanitizer builds;
  // the bound stays below the wait, or the timeout would answer them all.
  const absl::Duration wait = testing::Scaled(absl::Seconds(10));
  StartDaemon(
      {"--capacity=16MiB",
       absl::StrCat("--reclaim_timeout=", absl::ToInt64Seconds(wait), "s")});
  const int baseline = Threads(daemon_->pid());
  ASSERT_GT(baseline, 0);
  absl::StatusOr<std::unique_ptr<ClientProcess>> holder =
      ClientProcess::Start(daemon_->socket(), {"--uid=2001", "--name=holder"});
  ASSERT_OK(holder);
  ASSERT_OK((*holder)->Command("acquire 0 8"));  // the whole lake
  ASSERT_EQ(::kill((*holder)->pid(), SIGSTOP), 0);
  ClientProcess* a = Client(2000, "many-a");
  ClientProcess* b = Client(2002, "many-b");
  ASSERT_TRUE(a != nullptr && b != nullptr);
  ASSERT_OK(a->Command("lease_many 150 0 1"));
  ASSERT_OK(b->Command("lease_many 150 0 1"));
  // Those past the caps are answered at once; the others wait (10 s).
  const absl::Time deadline = absl::Now() + wait * 0.8;
  for (ClientProcess* c : {a, b}) {
    for (;;) {
      absl::StatusOr<std::string> answered = c->Command("lease_many_status");
      ASSERT_OK(answered);
      uint64_t n = 0;
      ASSERT_TRUE(absl::SimpleAtoi(*answered, &n));
      if (n >= 150 - 16) break;
      ASSERT_LT(absl::Now(), deadline)
          << "only " << n << " of 150 leases were answered: they all wait";
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
  // With 32 leases waiting, watch the threads: the waiting ones hold one
  // each, the refused ones none any more.
  int most = 0;
  for (int i = 0; i < 20; ++i) {
    most = std::max(most, Threads(daemon_->pid()));
    absl::SleepFor(absl::Milliseconds(50));
  }
  std::cerr << "gmlaked threads: " << baseline << " at rest, at most " << most
            << " with 300 leases sent and 32 waiting\n";
  // 2 x 16 waiting (--max_waiting_leases_per_uid), and gRPC's pollers.
  EXPECT_LT(most, baseline + 2 * 16 + 24);
  ASSERT_EQ(::kill((*holder)->pid(), SIGCONT), 0);
  for (ClientProcess* c : {a, b}) {
    absl::StatusOr<std::string> done =
        c->Command("lease_many_wait", absl::Seconds(60));
    ASSERT_OK(done);
    std::vector<std::string> w = absl::StrSplit(*done, ' ');
    ASSERT_EQ(w.size(), 3u) << *done;
    EXPECT_EQ(w[0], "0");  // nothing to grant: the holder keeps all
    EXPECT_EQ(w[1], "150");
    uint64_t capped = 0;
    ASSERT_TRUE(absl::SimpleAtoi(w[2], &capped));
    EXPECT_GE(capped, 150u - 16u);
  }
  ExpectAlive();
}

}  // namespace
}  // namespace testing
}  // namespace gmlake
