// Copyright 2026 The GMLake Authors.
//
// Attacks on gmlaked by clients at other uids, each once confirmed against
// an earlier daemon: resizing a chunk's memfd, stalling the descriptor
// socket with a slow reader, taking every session, and parking hundreds of
// leases on one thread each. Real daemon, real client processes
// (raw_client, which speaks the protocol by hand) and real sockets.

#include <dirent.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

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

}  // namespace
}  // namespace testing
}  // namespace gmlake
