// Copyright 2026 The GMLake Authors.
//
// Hostile clients of gmlaked (issue 20), each confirmed against an earlier
// daemon: a descriptor whose close blocks (a TCP socket with SO_LINGER, a
// full send queue and a peer that never reads) sent on either socket; a
// flood that takes gmlaked to its descriptor limit; and floods of gRPC
// connections and calls. While each runs, a client at another uid opens a
// session, leases, claims and asks for health, and SIGTERM still ends the
// daemon at once. Real daemon, real client processes and real sockets.

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/fd_passing.h"
#include "common/unique_fd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/gmlake.pb.h"
#include "proto/health.grpc.pb.h"
#include "proto/protocol.h"
#include "tests/integration/daemon_harness.h"
#include "tests/time_scale.h"

namespace gmlake {
namespace testing {
namespace {

using ::testing::HasSubstr;

// How long the lingering descriptor blocks whoever closes it last.
constexpr int kLingerSeconds = 8;
// The target: while an attack runs, each call of another uid
// succeeds within 1 s. Each call carries that deadline itself (raw_client
// --rpc_timeout, gmlakectl --timeout), so only its own time counts, and a
// late call fails: nothing retries it. (Scaled for sanitizer builds, which
// run the daemon 5-15 times slower.)
const absl::Duration kServed = testing::Scaled(absl::Seconds(1));

// The header of a framed message (common/fd_passing.h) announcing
// `payload` bytes and one descriptor.
std::string FrameHeaderBytes(uint32_t payload) {
  const uint32_t fields[3] = {kFdFrameMagic, payload, 1};
  return std::string(reinterpret_cast<const char*>(fields), sizeof(fields));
}

// Each test runs with both guards of the gRPC socket: the kernel refusing
// descriptors (SO_PASSRIGHTS) and the relay older kernels need (forced
// here, as this kernel has SO_PASSRIGHTS), so that every gRPC call of the
// suite also goes through the relay.
class Hostile : public ::testing::TestWithParam<std::string> {
 protected:
  bool relayed() const { return GetParam() == "proxy"; }

  void StartDaemon(std::vector<std::string> flags) {
    flags.push_back("--grpc_fd_guard=" + GetParam());
    absl::StatusOr<std::unique_ptr<Daemon>> d = Daemon::Start(flags);
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = *std::move(d);
  }

  // A session of this process, bound on a new fd-socket connection.
  UniqueFd BoundFdConnection(uint64_t* session, std::string* token) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    v1::OpenSessionRequest req;
    req.set_pid(::getpid());
    req.set_name("hostile");
    req.set_protocol_version(ProtocolVersion());
    v1::OpenSessionResponse resp;
    EXPECT_TRUE(daemon_->stub()->OpenSession(&ctx, req, &resp).ok());
    *session = resp.session_id();
    *token = resp.token();
    absl::StatusOr<UniqueFd> fd = ConnectUnix(daemon_->fd_socket());
    EXPECT_TRUE(fd.ok()) << fd.status();
    if (!fd.ok()) return UniqueFd();
    v1::FdRequest bind;
    bind.set_session_id(*session);
    bind.set_token(*token);
    bind.mutable_bind();
    EXPECT_TRUE(SendFds(fd->get(), bind.SerializeAsString(), {}).ok());
    EXPECT_EQ(ReadReply(fd->get()).code(), 0);
    return *std::move(fd);
  }

  static v1::FdReply ReadReply(int sock) {
    const timeval tv{20, 0};
    ::setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    v1::FdReply reply;
    absl::StatusOr<ReceivedMessage> m = RecvFds(sock, 1 << 20, 0);
    EXPECT_TRUE(m.ok()) << m.status();
    if (m.ok()) reply.ParseFromString(m->payload);
    return reply;
  }

  // Another uid opens a session (and binds it), leases and claims,
  // returns, and asks for health: each call within kServed, its own
  // deadline.
  void ExpectServedMeanwhile(int uid) {
    const std::string timeout = absl::StrCat(
        "--rpc_timeout=", absl::ToInt64Milliseconds(kServed), "ms");
    absl::StatusOr<std::unique_ptr<ClientProcess>> c =
        ClientProcess::StartBinary(
            "tests/integration/raw_client", daemon_->socket(),
            {absl::StrCat("--uid=", uid), "--name=v", timeout});
    ASSERT_TRUE(c.ok()) << "OpenSession or bind of uid " << uid << ": "
                        << c.status() << "\n"
                        << daemon_->Log();
    absl::StatusOr<std::string> got = (*c)->Command("lease 0 1", kPatience);
    ASSERT_TRUE(got.ok()) << "lease and claim of uid " << uid << ": "
                          << got.status() << "\n"
                          << daemon_->Log();
    const std::vector<std::string> words = absl::StrSplit(*got, ' ');
    ASSERT_EQ(words.size(), 2u) << *got;
    EXPECT_TRUE((*c)->Command("return " + words[1], kPatience).ok());
    absl::StatusOr<CommandResult> health = RunCommand(
        {RunfilePath("tools/gmlakectl"), "--socket=" + daemon_->socket(),
         absl::StrCat("--timeout=", absl::ToInt64Milliseconds(kServed), "ms"),
         "health"},
        kPatience);
    ASSERT_TRUE(health.ok()) << health.status();
    EXPECT_EQ(health->exit_code, 0)
        << "gmlakectl health: " << health->out << health->err;
    (*c)->Kill(SIGKILL);
  }

  void ExpectQuickSigterm() {
    absl::StatusOr<int> code =
        daemon_->Stop(SIGTERM, testing::Scaled(absl::Seconds(2)));
    EXPECT_TRUE(code.ok()) << "SIGTERM did not end gmlaked within 2 s: "
                           << code.status() << "\n"
                           << daemon_->Log();
  }

  std::unique_ptr<Daemon> daemon_;
};

// A lingering socket sent with an adopt request, with a claim request, and
// left unread in a half-sent message: the fd thread used to close each
// itself and stop serving everyone for the linger.
TEST_P(Hostile, ALingeringDescriptorOnTheFdSocketBlocksNobody) {
  StartDaemon({"--capacity=16MiB", "--precreate=16MiB"});
  uint64_t session = 0;
  std::string token;
  UniqueFd conn = BoundFdConnection(&session, &token);
  ASSERT_TRUE(conn.valid());
  std::vector<LingeringSocket> lingering;

  // With an adopt request: refused, as a socket is no chunk.
  lingering.push_back(MakeLingeringSocket(kLingerSeconds));
  v1::FdRequest adopt;
  adopt.set_session_id(session);
  adopt.set_token(token);
  adopt.mutable_adopt()->set_device(0);
  adopt.mutable_adopt()->add_previous_chunk_ids(1);
  adopt.mutable_adopt()->add_chunk_bytes(2 << 20);
  std::vector<int> one = {lingering.back().sock.get()};
  ASSERT_OK(SendFds(conn.get(), adopt.SerializeAsString(), one));
  lingering.back().sock.Reset();  // gmlaked holds the last reference
  const v1::FdReply refused = ReadReply(conn.get());
  EXPECT_EQ(refused.code(),
            static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(refused.message(),
              HasSubstr("a socket cannot stand for a chunk"));
  ExpectServedMeanwhile(2000);

  // With a claim request.
  lingering.push_back(MakeLingeringSocket(kLingerSeconds));
  v1::FdRequest claim;
  claim.set_session_id(session);
  claim.set_token(token);
  claim.mutable_claim()->set_lease_id(12345);
  one = {lingering.back().sock.get()};
  ASSERT_OK(SendFds(conn.get(), claim.SerializeAsString(), one));
  lingering.back().sock.Reset();
  EXPECT_THAT(ReadReply(conn.get()).message(),
              HasSubstr("descriptors only with an adopt request"));
  ExpectServedMeanwhile(2001);

  // Half a message, its descriptor with the header: the connection is
  // dropped after --partial_timeout, its unread descriptor with it.
  lingering.push_back(MakeLingeringSocket(kLingerSeconds));
  absl::StatusOr<UniqueFd> half = ConnectUnix(daemon_->fd_socket());
  ASSERT_OK(half);
  ASSERT_EQ(SendWithFd(half->get(), FrameHeaderBytes(100),
                       lingering.back().sock.get()),
            0);
  lingering.back().sock.Reset();
  char c;
  const timeval tv{30, 0};
  ::setsockopt(half->get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  // Dropped: EOF, or ECONNRESET as the daemon's end had unread bytes.
  const ssize_t got = ::read(half->get(), &c, 1);
  EXPECT_TRUE(got == 0 || (got < 0 && errno == ECONNRESET))
      << got << " " << std::strerror(errno);
  ExpectServedMeanwhile(2002);

  // And one left in a half-sent message at SIGTERM.
  lingering.push_back(MakeLingeringSocket(kLingerSeconds));
  absl::StatusOr<UniqueFd> last = ConnectUnix(daemon_->fd_socket());
  ASSERT_OK(last);
  ASSERT_EQ(SendWithFd(last->get(), FrameHeaderBytes(100),
                       lingering.back().sock.get()),
            0);
  lingering.back().sock.Reset();
  absl::SleepFor(absl::Milliseconds(300));  // accepted meanwhile
  ExpectQuickSigterm();
}

// The same descriptor sent on the gRPC socket: gRPC used to close it in
// the acceptor, and no session opened. The kernel now refuses it
// (SO_PASSRIGHTS); where it cannot, the relay takes it, closes it on the
// closer thread and drops the connection.
TEST_P(Hostile, ALingeringDescriptorOnTheGrpcSocketBlocksNobody) {
  StartDaemon({"--capacity=16MiB", "--precreate=16MiB"});
  std::vector<LingeringSocket> lingering;
  std::vector<UniqueFd> conns;
  for (const std::string& bytes :
       {std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), std::string("x")}) {
    lingering.push_back(MakeLingeringSocket(kLingerSeconds));
    absl::StatusOr<UniqueFd> c = ConnectUnix(daemon_->socket());
    ASSERT_OK(c);
    const int err = SendWithFd(c->get(), bytes, lingering.back().sock.get());
    if (relayed()) {
      EXPECT_EQ(err, 0) << std::strerror(err);
    } else {
      EXPECT_EQ(err, EPERM) << "the gRPC socket took a descriptor";
    }
    if (err != 0) {
      // Still ours alone: closed without the wait.
      const linger off{0, 0};
      ::setsockopt(lingering.back().sock.get(), SOL_SOCKET, SO_LINGER, &off,
                   sizeof(off));
    }
    lingering.back().sock.Reset();  // with the relay, gmlaked holds the last
    conns.push_back(*std::move(c));
  }
  if (relayed()) {
    // Dropped, both: EOF after whatever gRPC had sent.
    for (const UniqueFd& c : conns) {
      const timeval tv{30, 0};
      ::setsockopt(c.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      char buf[512];
      ssize_t n;
      while ((n = ::read(c.get(), buf, sizeof(buf))) > 0) {
      }
      EXPECT_TRUE(n == 0 || errno == ECONNRESET) << std::strerror(errno);
    }
    EXPECT_THAT(daemon_->Log(), HasSubstr("sent 1 descriptors; they were "
                                          "closed and the connection dropped"));
  }
  // Served within 1 s each while both still linger (8 s).
  ExpectServedMeanwhile(2000);
  ExpectServedMeanwhile(2001);
  ExpectQuickSigterm();
}

// At gmlaked's descriptor limit, the fd socket's accept used to fail with
// EMFILE at once, again and again (1.7M log lines in 10 s). Now it refuses
// the newcomer with the spare descriptor, backs off and logs a line a
// second; once the flood ends, service resumes.
TEST_P(Hostile, OutOfDescriptorsTheFdSocketBacksOff) {
  StartDaemon({"--capacity=16MiB", "--precreate=16MiB", "--fd_limit=96",
               "--bind_timeout=120s"});
  std::vector<UniqueFd> flood;
  // Connections are taken until the limit; the rest wait in the backlog or
  // are refused.
  for (int i = 0; i < 160; ++i) {
    absl::StatusOr<UniqueFd> c = ConnectUnix(daemon_->fd_socket());
    if (c.ok()) flood.push_back(*std::move(c));
  }
  auto lines = [](const std::string& log) {
    return std::count(log.begin(), log.end(), '\n');
  };
  const size_t lines_before = lines(daemon_->Log());
  absl::SleepFor(absl::Seconds(2));
  const std::string log = daemon_->Log();
  const size_t lines_after = lines(log);
  EXPECT_LT(lines_after - lines_before, 20u) << log.substr(0, 4000);
  EXPECT_THAT(log, HasSubstr("fd socket: accept: Too many open files"));
  // A refused one was told why.
  bool told = false;
  for (auto it = flood.rbegin(); it != flood.rend() && !told; ++it) {
    pollfd p{it->get(), POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) continue;
    absl::StatusOr<ReceivedMessage> m = RecvFds(it->get(), 1 << 16, 0);
    v1::FdReply reply;
    if (m.ok() && reply.ParseFromString(m->payload)) {
      told = absl::StrContains(reply.message(), "out of descriptors");
    }
  }
  EXPECT_TRUE(told) << "no refused connection read why";
  flood.clear();
  // Service resumes once the flood is gone.
  ExpectServedMeanwhile(2000);
  ExpectQuickSigterm();
}

// Forks a process at `uid` that opens `n` connections to `path`; returns
// how many stayed open a moment later, and in *said what the first one
// closed by the daemon had read.
struct Flood {
  pid_t pid = -1;
  UniqueFd report;  // from the child: "<open> <text of a refused one>"
  UniqueFd hold;    // closing it ends the child
};

Flood StartFlood(int uid, const std::string& path, int n) {
  int report[2], hold[2];
  EXPECT_EQ(::pipe2(report, O_CLOEXEC), 0);
  EXPECT_EQ(::pipe2(hold, O_CLOEXEC), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(report[0]);
    ::close(hold[1]);
    if (::setgid(uid) != 0 || ::setuid(uid) != 0) ::_exit(3);
    static int fds[4096];
    int opened = 0;
    for (int i = 0; i < n && i < 4096; ++i) {
      absl::StatusOr<UniqueFd> c = ConnectUnix(path);
      if (!c.ok()) continue;
      // A client's HTTP/2 preface and SETTINGS: a connection gRPC keeps.
      static const char kPreface[] =
          "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0";
      [[maybe_unused]] ssize_t w =
          ::send(c->get(), kPreface, sizeof(kPreface) - 1, MSG_NOSIGNAL);
      fds[opened++] = c->Release();
    }
    // A moment for the daemon to refuse some; then count the open ones.
    ::usleep(3000000);
    // Open: what gRPC sent, then nothing yet; refused: then EOF.
    int open = 0;
    char said[600] = {0};
    for (int i = 0; i < opened; ++i) {
      char buf[600];
      size_t got = 0;
      ssize_t r;
      while ((r = ::recv(fds[i], buf + got, sizeof(buf) - 1 - got,
                         MSG_DONTWAIT)) > 0) {
        got += static_cast<size_t>(r);
        if (got == sizeof(buf) - 1) got = 0;  // keeps the tail
      }
      if (r < 0 && errno == EAGAIN) {
        ++open;
        continue;
      }
      if (said[0] == 0) {
        for (size_t k = 0; k < got; ++k) {
          said[k] = buf[k] < 32 || buf[k] > 126 ? '.' : buf[k];
        }
      }
    }
    char line[700];
    const int len = std::snprintf(line, sizeof(line), "%d %s\n", open, said);
    [[maybe_unused]] ssize_t w = ::write(report[1], line, len);
    char c;
    [[maybe_unused]] ssize_t r = ::read(hold[0], &c, 1);
    ::_exit(0);
  }
  ::close(report[1]);
  ::close(hold[0]);
  Flood f;
  f.pid = pid;
  f.report.Reset(report[0]);
  f.hold.Reset(hold[1]);
  return f;
}

std::string ReadReport(Flood* f) {
  std::string out;
  char buf[1024];
  for (;;) {
    pollfd p{f->report.get(), POLLIN, 0};
    if (::poll(&p, 1, 30000) <= 0) break;
    const ssize_t n = ::read(f->report.get(), buf, sizeof(buf));
    if (n <= 0) break;
    out.append(buf, n);
    if (out.back() == '\n') break;
  }
  return out;
}

void EndFlood(Flood* f) {
  f->hold.Reset();
  int status;
  ::waitpid(f->pid, &status, 0);
}

// The daemon's resident memory (/proc/PID/status VmRSS), in bytes.
uint64_t ResidentBytes(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    uint64_t kib = 0;
    if (absl::StartsWith(line, "VmRSS:") &&
        absl::SimpleAtoi(absl::StripAsciiWhitespace(absl::StripSuffix(
                             absl::StripPrefix(line, "VmRSS:"), "kB")),
                         &kib)) {
      return kib << 10;
    }
  }
  return 0;
}

// One uid used to hold 19,790 idle gRPC connections, until no session
// opened for anyone. Connections beyond --max_grpc_connections_per_uid are
// refused, with a GOAWAY that names the limit.
TEST_P(Hostile, GrpcConnectionsPerUidAreCapped) {
  StartDaemon({"--capacity=16MiB", "--precreate=16MiB",
               "--max_grpc_connections_per_uid=16"});
  const uint64_t rss_before = ResidentBytes(daemon_->pid());
  Flood f = StartFlood(65534, daemon_->socket(), 800);
  const std::string report = ReadReport(&f);
  // Memory stays bounded while the flood holds what it could open (20,000
  // connections once grew it by 242 MB; 800 refused ones must not).
  const uint64_t rss_during = ResidentBytes(daemon_->pid());
  EXPECT_GT(rss_before, 0u);
  EXPECT_LT(rss_during, rss_before + (uint64_t{64} << 20))
      << rss_before << " -> " << rss_during;
  int open = -1;
  ASSERT_TRUE(absl::SimpleAtoi(report.substr(0, report.find(' ')), &open))
      << report;
  EXPECT_EQ(open, 16) << report;
  EXPECT_THAT(report, HasSubstr("uid 65534 has 16 gRPC connections"));
  EXPECT_THAT(report, HasSubstr("--max_grpc_connections_per_uid"));
  ExpectServedMeanwhile(2000);
  EndFlood(&f);
  ExpectQuickSigterm();
}

// Connections that never call are closed after --grpc_idle_timeout.
TEST_P(Hostile, IdleGrpcConnectionsAreClosed) {
  StartDaemon({"--capacity=16MiB", "--grpc_idle_timeout=500ms"});
  std::vector<UniqueFd> idle;
  for (int i = 0; i < 8; ++i) {
    absl::StatusOr<UniqueFd> c = ConnectUnix(daemon_->socket());
    ASSERT_OK(c);
    idle.push_back(*std::move(c));
  }
  for (const UniqueFd& c : idle) {
    // Whatever gRPC sent (its SETTINGS, a GOAWAY), then EOF.
    const timeval tv{30, 0};
    ::setsockopt(c.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char buf[512];
    ssize_t n;
    while ((n = ::read(c.get(), buf, sizeof(buf))) > 0) {
    }
    EXPECT_EQ(n, 0) << std::strerror(errno);
  }
  ExpectQuickSigterm();
}

// 20,000 health Watch streams on few connections used to grow gmlaked
// without bound: a connection carries --max_streams_per_connection calls
// at once; the rest wait in the client.
TEST_P(Hostile, CallsPerConnectionAreCapped) {
  StartDaemon({"--capacity=16MiB", "--max_streams_per_connection=4"});
  std::shared_ptr<grpc::Channel> channel = grpc::CreateChannel(
      "unix:" + daemon_->socket(), grpc::InsecureChannelCredentials());
  std::unique_ptr<grpc::health::v1::Health::Stub> health =
      grpc::health::v1::Health::NewStub(channel);
  constexpr int kStreams = 12;
  std::vector<std::unique_ptr<grpc::ClientContext>> ctx;
  std::vector<std::unique_ptr<
      grpc::ClientReader<grpc::health::v1::HealthCheckResponse>>>
      streams;
  grpc::health::v1::HealthCheckRequest req;
  for (int i = 0; i < kStreams; ++i) {
    ctx.push_back(std::make_unique<grpc::ClientContext>());
  }
  streams.resize(kStreams);
  // A call the connection has no room for waits in the client (starting it
  // blocks): one thread each.
  int answered = 0;
  std::vector<std::thread> readers;
  std::atomic<int> got{0};
  for (int i = 0; i < kStreams; ++i) {
    readers.emplace_back([&, i] {
      streams[i] = health->Watch(ctx[i].get(), req);
      grpc::health::v1::HealthCheckResponse r;
      if (streams[i]->Read(&r)) ++got;
      streams[i]->Finish().IgnoreError();
    });
  }
  absl::SleepFor(absl::Seconds(2));
  answered = got.load();
  EXPECT_EQ(answered, 4);
  for (auto& c : ctx) c->TryCancel();
  for (std::thread& t : readers) t.join();
  ExpectServedMeanwhile(2000);
  ExpectQuickSigterm();
}

// 20,000 health Watch streams on many connections grew gmlaked by 360 MB:
// one uid holds at most --max_health_watches_per_uid of them at once, over
// all its connections; the rest are refused with a message naming the
// limit, and another uid is served (and may watch) meanwhile.
TEST_P(Hostile, HealthWatchesPerUidAreCapped) {
  StartDaemon({"--capacity=16MiB", "--precreate=16MiB",
               "--max_health_watches_per_uid=8",
               "--max_streams_per_connection=4"});
  absl::StatusOr<std::unique_ptr<ClientProcess>> flood =
      ClientProcess::StartBinary("tests/integration/raw_client",
                                 daemon_->socket(), {"--uid=65534"});
  ASSERT_OK(flood);
  // 24 streams, 4 to a connection: 6 connections of one uid.
  absl::StatusOr<std::string> got =
      (*flood)->Command("health_watches 24 4", kPatience);
  ASSERT_OK(got);
  EXPECT_THAT(*got, ::testing::StartsWith("8 16 "));
  EXPECT_THAT(*got, HasSubstr("uid 65534 has 8 health Watch streams open, "
                              "the limit (--max_health_watches_per_uid)"));
  // Another uid has its own count.
  absl::StatusOr<std::unique_ptr<ClientProcess>> other =
      ClientProcess::StartBinary("tests/integration/raw_client",
                                 daemon_->socket(), {"--uid=2001"});
  ASSERT_OK(other);
  got = (*other)->Command("health_watches 4 4", kPatience);
  ASSERT_OK(got);
  EXPECT_THAT(*got, ::testing::StartsWith("4 0"));
  ExpectServedMeanwhile(2000);
  // Streams that end make room again, once gmlaked has seen them end (the
  // client's cancel returns before the server's end of the stream runs).
  const absl::Time give_up = absl::Now() + kPatience;
  do {
    ASSERT_OK((*flood)->Command("health_watches_end", kPatience));
    got = (*flood)->Command("health_watches 8 4", kPatience);
    ASSERT_OK(got);
  } while (!absl::StartsWith(*got, "8 0") && absl::Now() < give_up);
  EXPECT_THAT(*got, ::testing::StartsWith("8 0"));
  ExpectQuickSigterm();
}

// Each client session holds a gRPC connection of its own (its Watch
// stream keeps it open), so --max_grpc_connections_per_uid caps a uid's
// live sessions too; the refused client is told which limit it met.
TEST_P(Hostile, TheConnectionCapIsASessionCapAndSaysSo) {
  StartDaemon({"--capacity=16MiB", "--max_grpc_connections_per_uid=2"});
  std::vector<std::unique_ptr<ClientProcess>> clients;
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<std::unique_ptr<ClientProcess>> c =
        ClientProcess::StartBinary("tests/integration/raw_client",
                                   daemon_->socket(), {"--uid=2003"});
    ASSERT_OK(c);
    ASSERT_OK((*c)->Command("watch nothing", kPatience));
    clients.push_back(*std::move(c));
  }
  absl::StatusOr<std::unique_ptr<ClientProcess>> third =
      ClientProcess::StartBinary("tests/integration/raw_client",
                                 daemon_->socket(), {"--uid=2003"});
  ASSERT_FALSE(third.ok());
  EXPECT_THAT(std::string(third.status().message()),
              HasSubstr("--max_grpc_connections_per_uid"));
  EXPECT_THAT(std::string(third.status().message()), HasSubstr("sessions"));
  ExpectServedMeanwhile(2000);
  ExpectQuickSigterm();
}

// Behind the relay gRPC's peer is gmlaked's own socketpair: the caller's
// uid must still be the client's, recorded from the accepted socket, or a
// uid-bound token would work from anywhere (or nowhere).
TEST_P(Hostile, CallsAreTheClientsUidThroughEitherGuard) {
  StartDaemon({"--capacity=16MiB"});
  absl::StatusOr<std::unique_ptr<ClientProcess>> victim =
      ClientProcess::StartBinary("tests/integration/raw_client",
                                 daemon_->socket(), {"--uid=2000"});
  absl::StatusOr<std::unique_ptr<ClientProcess>> thief =
      ClientProcess::StartBinary("tests/integration/raw_client",
                                 daemon_->socket(), {"--uid=2001"});
  ASSERT_OK(victim);
  ASSERT_OK(thief);
  absl::StatusOr<std::string> token = (*victim)->Command("token", kPatience);
  ASSERT_OK(token);
  ASSERT_OK((*thief)->Command(
      absl::StrCat("impersonate ", (*victim)->session(), " ", *token),
      kPatience));
  absl::StatusOr<std::string> r = (*thief)->Command("lease 0 1", kPatience);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kPermissionDenied)
      << r.status();
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr(absl::StrCat("session ", (*victim)->session(),
                                     " belongs to uid 2000")));
  absl::StatusOr<std::string> own = (*victim)->Command("lease 0 1", kPatience);
  EXPECT_TRUE(own.ok()) << own.status();
  ExpectQuickSigterm();
}

INSTANTIATE_TEST_SUITE_P(Guards, Hostile,
                         ::testing::Values("passrights", "proxy"),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           return i.param;
                         });

}  // namespace
}  // namespace testing
}  // namespace gmlake
