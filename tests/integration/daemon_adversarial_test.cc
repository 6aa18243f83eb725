// Copyright 2026 The GMLake Authors.
//
// gmlaked against bad and unlucky clients: this test speaks the protocol by
// hand (gRPC + the fd socket) to send what a well-behaved client never
// would, and checks after each case that the answer is a clear error, the
// daemon still serves, and no chunk or descriptor went missing.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
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

// A session driven by hand from this process.
struct Raw {
  uint64_t id = 0;
  std::string token;
  UniqueFd fd;  // the fd-socket connection (bound unless asked otherwise)
};

class Adversarial : public ::testing::Test {
 protected:
  void SetUp() override { StartWith({"--capacity=32MiB"}); }

  void StartWith(const std::vector<std::string>& flags) {
    daemon_.reset();
    absl::StatusOr<std::unique_ptr<Daemon>> d = Daemon::Start(flags);
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = *std::move(d);
  }

  // The daemon is alive, answers, and its books balance.
  void ExpectHealthy() {
    int status;
    ASSERT_EQ(::waitpid(daemon_->pid(), &status, WNOHANG), 0)
        << "gmlaked exited:\n"
        << daemon_->Log();
    absl::Status books = daemon_->CheckBooks();
    ASSERT_TRUE(books.ok()) << books;
    // And it still serves a whole lease round trip.
    absl::StatusOr<Raw> r = Open();
    ASSERT_OK(r);
    absl::StatusOr<v1::LeaseResponse> l = Lease(*r, 0, 1);
    ASSERT_OK(l);
    ASSERT_OK(ClaimAll(*r, l->lease_id()));
    ASSERT_OK(Close(*r));
  }

  absl::StatusOr<Raw> Open(bool bind = true, pid_t pid = ::getpid()) {
    v1::OpenSessionRequest req;
    req.set_pid(pid);
    req.set_name("raw");
    req.set_protocol_version(ProtocolVersion());
    v1::OpenSessionResponse resp;
    grpc::ClientContext ctx;
    absl::Status s = FromGrpc(daemon_->stub()->OpenSession(&ctx, req, &resp));
    if (!s.ok()) return s;
    Raw r;
    r.id = resp.session_id();
    r.token = resp.token();
    absl::StatusOr<UniqueFd> fd = ConnectUnix(resp.fd_socket());
    if (!fd.ok()) return fd.status();
    r.fd = *std::move(fd);
    const timeval tv{5, 0};
    ::setsockopt(r.fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (bind) {
      v1::FdRequest b;
      b.set_session_id(r.id);
      b.set_token(r.token);
      b.mutable_bind();
      absl::StatusOr<v1::FdReply> reply = Exchange(r.fd.get(), b);
      if (!reply.ok()) return reply.status();
      if (reply->code() != 0) {
        return absl::Status(static_cast<absl::StatusCode>(reply->code()),
                            reply->message());
      }
    }
    return r;
  }

  absl::Status Close(Raw& r) {
    v1::CloseSessionRequest req;
    req.set_session_id(r.id);
    req.set_token(r.token);
    v1::CloseSessionResponse resp;
    grpc::ClientContext ctx;
    return FromGrpc(daemon_->stub()->CloseSession(&ctx, req, &resp));
  }

  absl::StatusOr<v1::LeaseResponse> Lease(const Raw& r, int device,
                                          uint64_t count) {
    v1::LeaseRequest req;
    req.set_session_id(r.id);
    req.set_token(r.token);
    req.set_device(device);
    req.set_chunk_count(count);
    v1::LeaseResponse resp;
    grpc::ClientContext ctx;
    absl::Status s = FromGrpc(daemon_->stub()->Lease(&ctx, req, &resp));
    if (!s.ok()) return s;
    return resp;
  }

  absl::Status Return(const Raw& r, const std::vector<uint64_t>& ids) {
    v1::ReturnRequest req;
    req.set_session_id(r.id);
    req.set_token(r.token);
    for (uint64_t id : ids) req.add_chunk_ids(id);
    v1::ReturnResponse resp;
    grpc::ClientContext ctx;
    return FromGrpc(daemon_->stub()->Return(&ctx, req, &resp));
  }

  // Sends `req` on `sock` (with `fds`) and reads one reply.
  static absl::StatusOr<v1::FdReply> Exchange(
      int sock, const v1::FdRequest& req, std::vector<int> fds = {},
      std::vector<UniqueFd>* got = nullptr) {
    absl::Status s = SendFds(sock, req.SerializeAsString(), fds);
    if (!s.ok()) return s;
    return ReadReply(sock, got);
  }

  static absl::StatusOr<v1::FdReply> ReadReply(int sock,
                                               std::vector<UniqueFd>* got) {
    absl::StatusOr<ReceivedMessage> m = RecvFds(sock, 1 << 20, 1024);
    if (!m.ok()) return m.status();
    v1::FdReply reply;
    if (!reply.ParseFromString(m->payload)) {
      return absl::DataLossError("not an FdReply");
    }
    if (got != nullptr) {
      for (UniqueFd& fd : m->fds) got->push_back(std::move(fd));
    }
    return reply;
  }

  // Claims a lease on the session's own connection: all its descriptors.
  absl::StatusOr<std::vector<UniqueFd>> ClaimAll(const Raw& r, uint64_t lease) {
    v1::FdRequest req;
    req.set_session_id(r.id);
    req.set_token(r.token);
    req.mutable_claim()->set_lease_id(lease);
    absl::Status s = SendFds(r.fd.get(), req.SerializeAsString(), {});
    if (!s.ok()) return s;
    std::vector<UniqueFd> fds;
    for (;;) {
      absl::StatusOr<v1::FdReply> reply = ReadReply(r.fd.get(), &fds);
      if (!reply.ok()) return reply.status();
      if (reply->code() != 0) {
        return absl::Status(static_cast<absl::StatusCode>(reply->code()),
                            reply->message());
      }
      if (static_cast<size_t>(reply->chunk_ids_size()) > fds.size()) {
        return absl::DataLossError("fewer descriptors than ids");
      }
      if (reply->last()) return fds;
    }
  }

  // Whether the daemon closed the connection `fd` within `timeout`.
  static bool ClosedByPeer(int fd, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 50) > 0) {
        char buf[4096];
        const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n == 0) return true;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return true;
      }
    }
    return false;
  }

  std::unique_ptr<Daemon> daemon_;
};

TEST_F(Adversarial, UnknownAndForeignLeaseIdsAreRefused) {
  absl::StatusOr<Raw> a = Open();
  absl::StatusOr<Raw> b = Open();
  ASSERT_OK(a);
  ASSERT_OK(b);
  absl::StatusOr<v1::LeaseResponse> la = Lease(*a, 0, 3);
  ASSERT_OK(la);

  // Unknown lease id.
  absl::StatusOr<std::vector<UniqueFd>> c = ClaimAll(*a, 987654321);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(c.status().message(), HasSubstr("lease 987654321 is unknown"));
  // Another session's lease id, on b's own connection with b's token.
  c = ClaimAll(*b, la->lease_id());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(c.status().message(), HasSubstr("belongs to another session"));
  // a's session id on b's connection.
  v1::FdRequest req;
  req.set_session_id(a->id);
  req.set_token(a->token);
  req.mutable_claim()->set_lease_id(la->lease_id());
  absl::StatusOr<v1::FdReply> reply = Exchange(b->fd.get(), req);
  ASSERT_OK(reply);
  EXPECT_EQ(reply->code(),
            static_cast<int>(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(reply->message(), HasSubstr("bound to session"));
  // A wrong token on a's own connection.
  req.set_token("not the token");
  reply = Exchange(a->fd.get(), req);
  ASSERT_OK(reply);
  EXPECT_EQ(reply->code(),
            static_cast<int>(absl::StatusCode::kPermissionDenied));

  // None of that disturbed the lease: a claims it, and gets real chunks.
  c = ClaimAll(*a, la->lease_id());
  ASSERT_OK(c);
  ASSERT_EQ(c->size(), 3u);
  for (const UniqueFd& fd : *c) {
    struct stat st;
    ASSERT_EQ(::fstat(fd.get(), &st), 0);
    EXPECT_EQ(static_cast<uint64_t>(st.st_size), kChunk);
  }
  // Claimed once only.
  EXPECT_EQ(ClaimAll(*a, la->lease_id()).status().code(),
            absl::StatusCode::kNotFound);
  ExpectHealthy();
}

TEST_F(Adversarial, ForeignUnknownAndDuplicateReturnsChangeNothing) {
  absl::StatusOr<Raw> a = Open();
  absl::StatusOr<Raw> b = Open();
  ASSERT_OK(a);
  ASSERT_OK(b);
  absl::StatusOr<v1::LeaseResponse> la = Lease(*a, 0, 2);
  absl::StatusOr<v1::LeaseResponse> lb = Lease(*b, 0, 2);
  ASSERT_OK(la);
  ASSERT_OK(lb);
  absl::Status s = Return(*a, {la->chunk_ids(0), lb->chunk_ids(0)});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("nothing was returned"));
  s = Return(*a, {la->chunk_ids(0), la->chunk_ids(0)});
  EXPECT_THAT(s.message(), HasSubstr("listed twice"));
  s = Return(*a, {1ull << 60});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  Raw forged;
  forged.id = a->id;
  forged.token = b->token;
  EXPECT_EQ(Return(forged, {la->chunk_ids(0)}).code(),
            absl::StatusCode::kPermissionDenied);
  absl::StatusOr<v1::StatusResponse> st = daemon_->Status();
  ASSERT_OK(st);
  EXPECT_EQ(st->devices(0).leased_chunks(), 4u);
  ASSERT_OK(Return(*a, {la->chunk_ids(0), la->chunk_ids(1)}));
  ExpectHealthy();
}

TEST_F(Adversarial, BindingNeedsTheClaimedPidAndAGoodToken) {
  // A session opened for another pid cannot be bound from here.
  absl::StatusOr<Raw> r = Open(/*bind=*/false, ::getppid());
  ASSERT_OK(r);
  v1::FdRequest b;
  b.set_session_id(r->id);
  b.set_token(r->token);
  b.mutable_bind();
  absl::StatusOr<v1::FdReply> reply = Exchange(r->fd.get(), b);
  ASSERT_OK(reply);
  EXPECT_EQ(reply->code(),
            static_cast<int>(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(reply->message(), HasSubstr("opened for pid"));
  // Nor with a wrong token, nor for a session that does not exist.
  absl::StatusOr<Raw> mine = Open(/*bind=*/false);
  ASSERT_OK(mine);
  b.set_session_id(mine->id);
  b.set_token("guess");
  reply = Exchange(mine->fd.get(), b);
  ASSERT_OK(reply);
  EXPECT_EQ(reply->code(),
            static_cast<int>(absl::StatusCode::kPermissionDenied));
  b.set_session_id(999999);
  reply = Exchange(mine->fd.get(), b);
  ASSERT_OK(reply);
  EXPECT_EQ(reply->code(), static_cast<int>(absl::StatusCode::kNotFound));
  // An unbound session cannot lease.
  absl::StatusOr<v1::LeaseResponse> l = Lease(*mine, 0, 1);
  EXPECT_EQ(l.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(l.status().message(), HasSubstr("not bound"));
  // Claims need a bound connection.
  v1::FdRequest claim;
  claim.set_session_id(mine->id);
  claim.set_token(mine->token);
  claim.mutable_claim()->set_lease_id(1);
  reply = Exchange(mine->fd.get(), claim);
  ASSERT_OK(reply);
  EXPECT_THAT(reply->message(), HasSubstr("bind a session"));
  // The right bind still works on the same connection, once.
  b.set_session_id(mine->id);
  b.set_token(mine->token);
  reply = Exchange(mine->fd.get(), b);
  ASSERT_OK(reply);
  EXPECT_EQ(reply->code(), 0) << reply->message();
  reply = Exchange(mine->fd.get(), b);
  ASSERT_OK(reply);
  EXPECT_EQ(reply->code(),
            static_cast<int>(absl::StatusCode::kFailedPrecondition));
  ExpectHealthy();
}

TEST_F(Adversarial, GarbageOnTheFdSocketIsAnsweredAndDropped) {
  // Raw bytes: not our framing at all.
  {
    absl::StatusOr<UniqueFd> s = ConnectUnix(daemon_->fd_socket());
    ASSERT_OK(s);
    const std::string junk =
        "GET / HTTP/1.1\r\nHost: gmlake\r\n\r\n\x01\x02\x03 garbage garbage";
    ASSERT_EQ(::write(s->get(), junk.data(), junk.size()),
              static_cast<ssize_t>(junk.size()));
    absl::StatusOr<v1::FdReply> reply = ReadReply(s->get(), nullptr);
    ASSERT_OK(reply);
    EXPECT_EQ(reply->code(),
              static_cast<int>(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(reply->message(), HasSubstr("unreadable message"));
    EXPECT_TRUE(ClosedByPeer(s->get(), kPatience));
  }
  // Our framing around something that is not an FdRequest.
  {
    absl::StatusOr<UniqueFd> s = ConnectUnix(daemon_->fd_socket());
    ASSERT_OK(s);
    ASSERT_OK(SendFds(s->get(), std::string("\xff\xff\xff\xff garbage"), {}));
    absl::StatusOr<v1::FdReply> reply = ReadReply(s->get(), nullptr);
    ASSERT_OK(reply);
    EXPECT_THAT(reply->message(), HasSubstr("not an FdRequest"));
    EXPECT_TRUE(ClosedByPeer(s->get(), kPatience));
  }
  // A header announcing a huge payload.
  {
    absl::StatusOr<UniqueFd> s = ConnectUnix(daemon_->fd_socket());
    ASSERT_OK(s);
    const uint32_t header[3] = {kFdFrameMagic, 100u << 20, 0};
    ASSERT_EQ(::write(s->get(), header, sizeof(header)),
              static_cast<ssize_t>(sizeof(header)));
    absl::StatusOr<v1::FdReply> reply = ReadReply(s->get(), nullptr);
    ASSERT_OK(reply);
    EXPECT_THAT(reply->message(), HasSubstr("payload bytes"));
    EXPECT_TRUE(ClosedByPeer(s->get(), kPatience));
  }
  // A bound connection survives a request of neither kind.
  {
    absl::StatusOr<Raw> r = Open();
    ASSERT_OK(r);
    v1::FdRequest empty;
    empty.set_session_id(r->id);
    absl::StatusOr<v1::FdReply> reply = Exchange(r->fd.get(), empty);
    ASSERT_OK(reply);
    EXPECT_THAT(reply->message(), HasSubstr("neither bind nor claim"));
    absl::StatusOr<v1::LeaseResponse> l = Lease(*r, 0, 1);
    ASSERT_OK(l);
    ASSERT_OK(ClaimAll(*r, l->lease_id()));
  }
  EXPECT_THAT(daemon_->Log(), HasSubstr("closed an unbound connection"));
  ExpectHealthy();
}

TEST_F(Adversarial, DescriptorsSentToTheDaemonAreClosed) {
  absl::StatusOr<Raw> r = Open();
  ASSERT_OK(r);
  int pipe_fds[2];
  ASSERT_EQ(::pipe2(pipe_fds, O_CLOEXEC), 0);
  UniqueFd read_end(pipe_fds[0]), write_end(pipe_fds[1]);
  v1::FdRequest req;
  req.set_session_id(r->id);
  req.set_token(r->token);
  req.mutable_claim()->set_lease_id(5);
  absl::StatusOr<v1::FdReply> reply =
      Exchange(r->fd.get(), req, {write_end.get(), write_end.get()});
  ASSERT_OK(reply);
  EXPECT_THAT(reply->message(),
              HasSubstr("takes descriptors only with an adopt request; the 2 "
                        "sent were closed"));
  // Once ours is closed too, the pipe has no writer left: EOF.
  write_end.Reset();
  pollfd p{read_end.get(), POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 2000), 1);
  char c;
  EXPECT_EQ(::read(read_end.get(), &c, 1), 0);
  // The connection is still in step and bound.
  absl::StatusOr<v1::LeaseResponse> l = Lease(*r, 0, 2);
  ASSERT_OK(l);
  absl::StatusOr<std::vector<UniqueFd>> got = ClaimAll(*r, l->lease_id());
  ASSERT_OK(got);
  EXPECT_EQ(got->size(), 2u);
  ExpectHealthy();
}

TEST_F(Adversarial, AStalledPartialMessageBlocksNobodyAndIsDropped) {
  absl::StatusOr<UniqueFd> stalled = ConnectUnix(daemon_->fd_socket());
  ASSERT_OK(stalled);
  const uint32_t magic = kFdFrameMagic;
  ASSERT_EQ(::write(stalled->get(), &magic, 4), 4);  // 4 of 12 header bytes
  // Everyone else is served meanwhile: while the stalled connection is
  // still open (a daemon that waited for the rest of its message would
  // serve nobody until its partial timeout, 2 s, dropped it).
  const absl::Time start = absl::Now();
  absl::StatusOr<Raw> r = Open();
  ASSERT_OK(r);
  absl::StatusOr<v1::LeaseResponse> l = Lease(*r, 0, 3);
  ASSERT_OK(l);
  ASSERT_OK(ClaimAll(*r, l->lease_id()));
  EXPECT_FALSE(ClosedByPeer(stalled->get(), absl::ZeroDuration()))
      << "served only after the stalled connection was dropped";
  // The stalled connection is closed after the partial timeout (2 s).
  EXPECT_TRUE(ClosedByPeer(stalled->get(), kPatience));
  EXPECT_GE(absl::Now() - start, absl::Seconds(1.5));
  ExpectHealthy();
}

TEST_F(Adversarial, GarbageOnTheGrpcSocketLeavesTheDaemonServing) {
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<UniqueFd> s = ConnectUnix(daemon_->socket());
    ASSERT_OK(s);
    std::string junk(8192, '\0');
    for (size_t j = 0; j < junk.size(); ++j) {
      junk[j] = static_cast<char>((j * 7919 + i * 31) & 0xff);
    }
    if (i == 1) junk.replace(0, 24, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
    [[maybe_unused]] ssize_t n =
        ::send(s->get(), junk.data(), junk.size(), MSG_NOSIGNAL);
  }
  ExpectHealthy();
}

TEST_F(Adversarial, MalformedRequestsAreInvalidArgument) {
  absl::StatusOr<Raw> r = Open();
  ASSERT_OK(r);
  auto lease = [&](int device, uint64_t count, uint64_t bytes) {
    v1::LeaseRequest req;
    req.set_session_id(r->id);
    req.set_token(r->token);
    req.set_device(device);
    req.set_chunk_count(count);
    req.set_bytes(bytes);
    v1::LeaseResponse resp;
    grpc::ClientContext ctx;
    return FromGrpc(daemon_->stub()->Lease(&ctx, req, &resp));
  };
  EXPECT_EQ(lease(0, 0, 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(lease(0, 1, kChunk).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(lease(99, 1, 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(lease(-5, 0, kChunk).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(lease(0, 1ull << 40, 0).code(), absl::StatusCode::kInvalidArgument);
  absl::Status big = lease(0, 17, 0);  // more than the whole lake (16)
  EXPECT_EQ(big.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(big.message(), HasSubstr("whole capacity"));
  // Bytes round up to whole chunks.
  v1::LeaseRequest req;
  req.set_session_id(r->id);
  req.set_token(r->token);
  req.set_bytes(kChunk + 1);
  v1::LeaseResponse resp;
  {
    grpc::ClientContext ctx;
    ASSERT_OK(FromGrpc(daemon_->stub()->Lease(&ctx, req, &resp)));
    EXPECT_EQ(resp.chunk_ids_size(), 2);
  }
  {
    v1::ReportUsageRequest u;
    u.set_session_id(r->id);
    u.set_token(r->token);
    u.add_usage()->set_device(99);
    v1::ReportUsageResponse ur;
    grpc::ClientContext ctx;
    EXPECT_EQ(FromGrpc(daemon_->stub()->ReportUsage(&ctx, u, &ur)).code(),
              absl::StatusCode::kInvalidArgument);
  }
  {
    v1::TrimRequest t;
    t.set_device(42);
    v1::TrimResponse tr;
    grpc::ClientContext ctx;
    EXPECT_EQ(FromGrpc(daemon_->stub()->Trim(&ctx, t, &tr)).code(),
              absl::StatusCode::kInvalidArgument);
  }
  {
    v1::OpenSessionRequest o;
    o.set_pid(0);
    o.set_protocol_version(ProtocolVersion());
    o.set_name(std::string(1 << 20, 'n'));
    v1::OpenSessionResponse orr;
    grpc::ClientContext ctx;
    EXPECT_EQ(FromGrpc(daemon_->stub()->OpenSession(&ctx, o, &orr)).code(),
              absl::StatusCode::kInvalidArgument);
  }
  {
    v1::CloseSessionRequest c;
    c.set_session_id(123456);
    v1::CloseSessionResponse cr;
    grpc::ClientContext ctx;
    EXPECT_EQ(FromGrpc(daemon_->stub()->CloseSession(&ctx, c, &cr)).code(),
              absl::StatusCode::kNotFound);
  }
  {
    v1::ReturnRequest ret;
    ret.set_session_id(r->id);
    ret.set_token(r->token);
    for (int i = 0; i < 100000; ++i) ret.add_chunk_ids(1000000 + i);
    v1::ReturnResponse rr;
    grpc::ClientContext ctx;
    EXPECT_EQ(FromGrpc(daemon_->stub()->Return(&ctx, ret, &rr)).code(),
              absl::StatusCode::kInvalidArgument);
  }
  // Version 0 (a client that predates versioning).
  {
    v1::OpenSessionRequest o;
    o.set_pid(::getpid());
    v1::OpenSessionResponse orr;
    grpc::ClientContext ctx;
    absl::Status s = FromGrpc(daemon_->stub()->OpenSession(&ctx, o, &orr));
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(s.message(), HasSubstr("client speaks protocol 0"));
  }
  ExpectHealthy();
}

TEST_F(Adversarial, ALeaseNeverClaimedComesBackWhenItsClientGoes) {
  absl::StatusOr<Raw> r = Open();
  ASSERT_OK(r);
  absl::StatusOr<v1::LeaseResponse> l = Lease(*r, 0, 5);
  ASSERT_OK(l);
  r->fd.Reset();  // vanish between the lease and the claim
  ASSERT_OK(daemon_->WaitFor(
      [](const v1::StatusResponse& s) {
        return s.sessions_size() == 0 && s.devices(0).leased_chunks() == 0;
      },
      kPatience));
  ExpectHealthy();
}

TEST_F(Adversarial, AClientKilledWhileItsLeaseWaitsLosesNothing) {
  // The lease must still be waiting when its client is killed, however
  // slow this machine: a long reclaim timeout.
  StartWith({"--capacity=10MiB", "--reclaim_timeout=60s"});
  // A holder of most of the lake that never answers pressure: its Watch
  // stream is open but never read.
  absl::StatusOr<Raw> holder = Open();
  ASSERT_OK(holder);
  absl::StatusOr<v1::LeaseResponse> held = Lease(*holder, 0, 4);
  ASSERT_OK(held);
  ASSERT_OK(ClaimAll(*holder, held->lease_id()));
  grpc::ClientContext watch_ctx;
  v1::WatchRequest wreq;
  wreq.set_session_id(holder->id);
  wreq.set_token(holder->token);
  std::unique_ptr<grpc::ClientReader<v1::PressureRequest>> watch =
      daemon_->stub()->Watch(&watch_ctx, wreq);
  ASSERT_OK(daemon_->WaitFor(
      [](const v1::StatusResponse& s) {
        return s.sessions_size() == 1 && s.sessions(0).watching();
      },
      kPatience));

  absl::StatusOr<std::unique_ptr<ClientProcess>> c =
      ClientProcess::Start(daemon_->socket(), {"--name=doomed"});
  ASSERT_OK(c);
  std::thread waiter([&] {
    // Blocks in the lease; ends when the process is killed.
    (*c)->Command("acquire 0 2").IgnoreError();
  });
  // Until its lease waits: the holder was asked to give memory back.
  absl::StatusOr<v1::StatusResponse> st = daemon_->WaitFor(
      [](const v1::StatusResponse& s) {
        return s.sessions_size() == 2 && s.pressure_requests_sent() > 0;
      },
      kPatience);
  ASSERT_OK(st);
  ::kill((*c)->pid(), SIGKILL);
  waiter.join();
  (*c)->Kill(SIGKILL);
  // The killed session ends at once, its waiting lease fails, and only the
  // holder's four chunks are leased.
  // At once, not after the 60 s reclaim timeout: the patience is shorter.
  st = daemon_->WaitFor(
      [](const v1::StatusResponse& s) { return s.sessions_size() == 1; },
      kPatience);
  ASSERT_OK(st);
  EXPECT_EQ(st->devices(0).leased_chunks(), 4u);
  EXPECT_EQ(st->devices(0).creating_bytes(), 0u);
  ASSERT_OK(daemon_->CheckBooks());

  // Breaking the holder's Watch stream ends its session too; as its process
  // (this test) still runs and received its chunks, they stay leased to it
  // rather than going to someone else while it may still use them.
  watch_ctx.TryCancel();
  watch->Finish().ok();
  st = daemon_->WaitFor(
      [](const v1::StatusResponse& s) {
        return s.sessions_size() == 1 && s.sessions(0).ending();
      },
      kPatience);
  ASSERT_OK(st);
  EXPECT_EQ(st->sessions(0).end_reason(), "its Watch stream broke");
  EXPECT_EQ(st->devices(0).leased_chunks(), 4u);
  EXPECT_THAT(daemon_->Log(),
              HasSubstr("its 4 chunks stay leased until process"));
  // Its fd connection was closed by the daemon.
  EXPECT_TRUE(ClosedByPeer(holder->fd.get(), kPatience));
  ExpectHealthy();
}

TEST_F(Adversarial, ThousandsOfSessions) {
  // All of this test's sessions are root's.
  StartWith({"--capacity=1GiB", "--max_sessions_per_uid=4096",
             // One process, thousands of Watch streams on one connection.
             "--max_streams_per_connection=4096",
             "--max_grpc_connections_per_uid=4096"});
  rlimit rl;
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &rl), 0);
  rl.rlim_cur = rl.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &rl);
  const int n = std::min<int>(3000, static_cast<int>(rl.rlim_cur) - 200);
  ASSERT_GE(n, 1000) << "RLIMIT_NOFILE too low for this test";
  std::vector<Raw> sessions;
  sessions.reserve(n);
  const absl::Time start = absl::Now();
  for (int i = 0; i < n; ++i) {
    absl::StatusOr<Raw> r = Open();
    ASSERT_OK(r) << " at session " << i;
    sessions.push_back(*std::move(r));
  }
  // Some of them lease, and a hundred watch.
  for (int i = 0; i < n; i += 20) {
    absl::StatusOr<v1::LeaseResponse> l = Lease(sessions[i], 0, 1);
    ASSERT_OK(l);
    ASSERT_OK(ClaimAll(sessions[i], l->lease_id()));
  }
  std::vector<std::unique_ptr<grpc::ClientContext>> ctxs;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::PressureRequest>>> watches;
  for (int i = 0; i < 100; ++i) {
    ctxs.push_back(std::make_unique<grpc::ClientContext>());
    // A guard: the daemon must finish these streams itself.
    ctxs.back()->set_deadline(
        absl::ToChronoTime(absl::Now() + testing::Scaled(absl::Seconds(30))));
    v1::WatchRequest w;
    w.set_session_id(sessions[i].id);
    w.set_token(sessions[i].token);
    watches.push_back(daemon_->stub()->Watch(ctxs.back().get(), w));
  }
  absl::StatusOr<v1::StatusResponse> st = daemon_->Status();
  ASSERT_OK(st);
  EXPECT_EQ(st->sessions_size(), n);
  EXPECT_EQ(st->devices(0).leased_chunks(), static_cast<uint64_t>(n / 20));
  ASSERT_OK(daemon_->CheckBooks());
  // They all go away at once: those holding chunks say they are done
  // (otherwise their chunks would wait for this process to exit), the
  // rest just drop their connections.
  for (int i = 0; i < n; i += 20) ASSERT_OK(Close(sessions[i]));
  sessions.clear();
  st = daemon_->WaitFor(
      [](const v1::StatusResponse& s) {
        return s.sessions_size() == 0 && s.devices(0).leased_chunks() == 0;
      },
      testing::Scaled(absl::Seconds(10)));
  ASSERT_OK(st);
  // The daemon finished every Watch stream when its session ended.
  for (auto& w : watches) {
    v1::PressureRequest p;
    int messages = 0;
    while (w->Read(&p)) ++messages;
    EXPECT_EQ(messages, 1);  // the hello
    grpc::Status s = w->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::CANCELLED);
    EXPECT_THAT(s.error_message(), HasSubstr("session ended"));
  }
  std::cerr << n << " sessions opened, used and ended in "
            << absl::Now() - start << "\n";
  ExpectHealthy();
}

}  // namespace
}  // namespace testing
}  // namespace gmlake
