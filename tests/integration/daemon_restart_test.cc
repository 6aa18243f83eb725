// Copyright 2026 The GMLake Authors.
//
// gmlaked restarted under running jobs, as systemd's Restart= does: the
// real daemon killed with SIGKILL and started again by the harness on the
// same sockets, real client processes replaying shipped traces through
// their allocators meanwhile. The clients finish with no error, reconnect
// by themselves and are adopted; the books balance; a client that died
// while the daemon was down leaves nothing behind; and a restarted daemon
// refuses what it cannot prove.

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
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

constexpr uint64_t kChunk = 2 << 20;

// A trace_client process (tests/integration/trace_client_main.cc).
std::unique_ptr<ClientProcess> StartTraceClient(
    const Daemon& d, const std::string& trace,
    const std::vector<std::string>& more) {
  std::vector<std::string> flags = {"--trace=" + ShippedTracePath(trace)};
  flags.insert(flags.end(), more.begin(), more.end());
  absl::StatusOr<std::unique_ptr<ClientProcess>> c = ClientProcess::StartBinary(
      "tests/integration/trace_client", d.socket(), flags);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

// Reads lines until one starts with `word` (progress lines are skipped);
// an "err" line is returned as its error.
absl::StatusOr<std::string> Until(ClientProcess* c, absl::string_view word) {
  for (;;) {
    absl::StatusOr<std::string> line = c->Receive(kPatience);
    if (!line.ok()) return line.status();
    if (absl::StartsWith(*line, word)) return *line;
  }
}

TEST(DaemonRestartTest, TwoClientsMidTraceFinishAcrossAKillAndARestart) {
  absl::StatusOr<std::unique_ptr<Daemon>> d =
      Daemon::Start({"--capacity=4GiB"});
  ASSERT_OK(d);
  Daemon& daemon = **d;
  // A trainer and an inference engine, each a trace slice replayed twice,
  // paced so that the kill lands in the middle. Under a sanitizer a client
  // takes seconds to start: the pace is slower by as much, or the first
  // one is done before the second one connects.
  const std::vector<std::string> pace = {
      "--scale=8", "--loops=2", "--end=0.5",
      absl::StrCat("--event_sleep_us=", 1500 * testing::TimeScale()),
      "--progress_every=10000"};
  std::unique_ptr<ClientProcess> a =
      StartTraceClient(daemon, "llama1b_lora_ckpt", pace);
  std::unique_ptr<ClientProcess> b =
      StartTraceClient(daemon, "llama1b_infer", pace);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_OK(Until(a.get(), "progress"));
  ASSERT_OK(Until(b.get(), "progress"));
  absl::StatusOr<v1::StatusResponse> held = daemon.Status();
  ASSERT_OK(held);
  ASSERT_EQ(held->sessions_size(), 2) << daemon.Log();
  ASSERT_OK(daemon.Stop(SIGKILL, absl::Seconds(10)));
  absl::SleepFor(absl::Milliseconds(300));  // the jobs run on without it
  ASSERT_OK(daemon.Restart()) << daemon.Log();
  // Both adopted again by the new daemon, and its books balance with them.
  const absl::Time deadline = absl::Now() + kPatience;
  // (The log line of an adoption names the client's pid.)
  auto adopted = [&](const ClientProcess& c) {
    return absl::StrContains(daemon.Log(),
                             absl::StrCat("pid ", c.pid(), "): adopted "));
  };
  while (!(adopted(*a) && adopted(*b)) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_TRUE(adopted(*a) && adopted(*b)) << daemon.Log();
  ASSERT_OK(daemon.CheckBooks());
  for (ClientProcess* c : {a.get(), b.get()}) {
    absl::StatusOr<std::string> done = Until(c, "done");
    ASSERT_OK(done) << daemon.Log();
    // "done <events> <reconnections> <readopted> <oom waits> <loops>"
    std::vector<std::string> w = absl::StrSplit(*done, ' ');
    ASSERT_EQ(w.size(), 6u) << *done;
    EXPECT_EQ(w[2], "1") << *done;
    uint64_t readopted = 0;
    ASSERT_TRUE(absl::SimpleAtoi(w[3], &readopted));
    EXPECT_GT(readopted, 0u) << *done;
  }
  // Both exited: what they had adopted went back to the driver, the rest
  // is free; the books balance.
  absl::StatusOr<v1::StatusResponse> end = daemon.WaitFor(
      [](const v1::StatusResponse& st) { return st.sessions_size() == 0; },
      kPatience);
  ASSERT_OK(end);
  ASSERT_OK(daemon.CheckBooks());
  EXPECT_EQ(end->devices(0).leased_chunks(), 0u);
  EXPECT_EQ(end->devices(0).created_chunks(), end->devices(0).free_chunks());
}

// A client killed while gmlaked was down: the new daemon never learns of
// its chunks (nobody shows them), and the kernel (the driver, on a GPU)
// freed them with the process. The whole capacity is there for another
// uid, and what it gets is zero.
TEST(DaemonRestartTest, AClientThatDiedWhileTheDaemonWasDownLeavesNothing) {
  absl::StatusOr<std::unique_ptr<Daemon>> d =
      Daemon::Start({"--capacity=16MiB"});
  ASSERT_OK(d);
  Daemon& daemon = **d;
  absl::StatusOr<std::unique_ptr<ClientProcess>> a =
      ClientProcess::Start(daemon.socket(), {"--uid=2000"});
  ASSERT_OK(a);
  ASSERT_OK((*a)->Command("acquire 0 8"));
  ASSERT_OK((*a)->Command("fill 0 171"));
  ASSERT_OK(daemon.Stop(SIGKILL, absl::Seconds(10)));
  (*a)->Kill(SIGKILL);
  ASSERT_OK(daemon.Restart()) << daemon.Log();
  absl::StatusOr<v1::StatusResponse> st = daemon.Status();
  ASSERT_OK(st);
  EXPECT_EQ(st->devices(0).created_chunks(), 0u);
  EXPECT_EQ(st->sessions_size(), 0);
  absl::StatusOr<std::unique_ptr<ClientProcess>> b =
      ClientProcess::Start(daemon.socket(), {"--uid=65534"});
  ASSERT_OK(b);
  ASSERT_OK((*b)->Command("acquire 0 8"));  // the whole capacity
  ASSERT_OK((*b)->Command("check 0 0"));
  ASSERT_OK(daemon.CheckBooks());
}

// A session of this process driven by hand, for adopt requests.
struct Raw {
  uint64_t id = 0;
  std::string token;
  UniqueFd fd;
};

absl::StatusOr<v1::FdReply> Exchange(int sock, const v1::FdRequest& req,
                                     const std::vector<int>& fds = {}) {
  if (absl::Status s = SendFds(sock, req.SerializeAsString(), fds); !s.ok()) {
    return s;
  }
  absl::StatusOr<ReceivedMessage> msg = RecvFds(sock, 65536, 0);
  if (!msg.ok()) return msg.status();
  v1::FdReply reply;
  if (!reply.ParseFromString(msg->payload)) {
    return absl::DataLossError("not an FdReply");
  }
  return reply;
}

absl::StatusOr<Raw> OpenRaw(Daemon* d) {
  v1::OpenSessionRequest req;
  req.set_pid(::getpid());
  req.set_name("raw");
  req.set_protocol_version(ProtocolVersion());
  v1::OpenSessionResponse resp;
  grpc::ClientContext ctx;
  if (absl::Status s = FromGrpc(d->stub()->OpenSession(&ctx, req, &resp));
      !s.ok()) {
    return s;
  }
  Raw r;
  r.id = resp.session_id();
  r.token = resp.token();
  absl::StatusOr<UniqueFd> fd = ConnectUnix(resp.fd_socket());
  if (!fd.ok()) return fd.status();
  r.fd = *std::move(fd);
  const timeval tv{10, 0};
  ::setsockopt(r.fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  v1::FdRequest b;
  b.set_session_id(r.id);
  b.set_token(r.token);
  b.mutable_bind();
  absl::StatusOr<v1::FdReply> reply = Exchange(r.fd.get(), b);
  if (!reply.ok()) return reply.status();
  if (reply->code() != 0) return absl::InternalError(reply->message());
  return r;
}

absl::StatusOr<v1::FdReply> AdoptRaw(const Raw& r, const std::vector<int>& fds,
                                     int ids) {
  v1::FdRequest req;
  req.set_session_id(r.id);
  req.set_token(r.token);
  req.mutable_adopt()->set_device(0);
  for (int i = 0; i < ids; ++i) req.mutable_adopt()->add_previous_chunk_ids(i);
  return Exchange(r.fd.get(), req, fds);
}

// A sealed memfd of one chunk, as the host backend makes them.
UniqueFd ForgedChunk(size_t size = kChunk) {
  UniqueFd fd(::memfd_create("forged", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  EXPECT_EQ(::ftruncate(fd.get(), static_cast<off_t>(size)), 0);
  EXPECT_EQ(
      ::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
      0);
  return fd;
}

TEST(DaemonRestartTest, TheDaemonAdoptsOnlyWhatItIsShownAndNeverPoolsIt) {
  absl::StatusOr<std::unique_ptr<Daemon>> d =
      Daemon::Start({"--capacity=8MiB"});
  ASSERT_OK(d);
  Daemon& daemon = **d;
  absl::StatusOr<Raw> r = OpenRaw(&daemon);
  ASSERT_OK(r);
  // A claim without descriptors.
  absl::StatusOr<v1::FdReply> no = AdoptRaw(*r, {}, 3);
  ASSERT_OK(no);
  EXPECT_EQ(no->code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(no->message(), HasSubstr("must carry the chunks' descriptors"));
  // A pipe, an unsealed memfd, a memfd of the wrong size.
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  UniqueFd pr(p[0]), pw(p[1]);
  UniqueFd loose(::memfd_create("loose", MFD_CLOEXEC));
  ASSERT_EQ(::ftruncate(loose.get(), kChunk), 0);
  UniqueFd big = ForgedChunk(2 * kChunk);
  for (int bad : {pr.get(), loose.get(), big.get()}) {
    absl::StatusOr<v1::FdReply> reply = AdoptRaw(*r, {bad}, 1);
    ASSERT_OK(reply);
    EXPECT_EQ(reply->code(),
              static_cast<int>(absl::StatusCode::kInvalidArgument));
    // A pipe is refused as a kind before its size is looked at.
    EXPECT_THAT(reply->message(),
                bad == pr.get()
                    ? HasSubstr("a pipe or FIFO cannot stand for a chunk")
                    : HasSubstr("is not a chunk of 2.00 MiB"));
  }
  // More than the capacity: 5 chunks in a lake of 4.
  std::vector<UniqueFd> five;
  std::vector<int> raw;
  for (int i = 0; i < 5; ++i) {
    five.push_back(ForgedChunk());
    raw.push_back(five.back().get());
  }
  absl::StatusOr<v1::FdReply> over = AdoptRaw(*r, raw, 5);
  ASSERT_OK(over);
  EXPECT_EQ(over->code(),
            static_cast<int>(absl::StatusCode::kResourceExhausted));
  ASSERT_OK(daemon.CheckBooks());
  // Memory of its own that the client passes off as chunks is adopted
  // into its session only: counted, then dropped with the session.
  raw.pop_back();
  absl::StatusOr<v1::FdReply> own = AdoptRaw(*r, raw, 4);
  ASSERT_OK(own);
  EXPECT_EQ(own->code(), 0) << own->message();
  EXPECT_EQ(own->chunk_ids_size(), 4);
  absl::StatusOr<v1::StatusResponse> st = daemon.Status();
  ASSERT_OK(st);
  EXPECT_EQ(st->devices(0).created_chunks(), 4u);
  ASSERT_OK(daemon.CheckBooks());
  {
    v1::CloseSessionRequest req;
    req.set_session_id(r->id);
    req.set_token(r->token);
    v1::CloseSessionResponse resp;
    grpc::ClientContext ctx;
    ASSERT_OK(FromGrpc(daemon.stub()->CloseSession(&ctx, req, &resp)));
  }
  st = daemon.WaitFor(
      [](const v1::StatusResponse& s) { return s.sessions_size() == 0; },
      kPatience);
  ASSERT_OK(st);
  EXPECT_EQ(st->devices(0).created_chunks(), 0u);
  EXPECT_EQ(st->devices(0).free_chunks(), 0u);
  // Another uid gets only chunks the daemon made: zero, not the forger's.
  ASSERT_EQ(::pwrite(five[0].get(), "secret", 6, 0), 6);
  absl::StatusOr<std::unique_ptr<ClientProcess>> other =
      ClientProcess::Start(daemon.socket(), {"--uid=65534"});
  ASSERT_OK(other);
  ASSERT_OK((*other)->Command("acquire 0 4"));
  ASSERT_OK((*other)->Command("check 0 0"));
}

}  // namespace
}  // namespace testing
}  // namespace gmlake
