// Copyright 2026 The GMLake Authors.
//
// The gRPC relay with real sockets: bytes both ways, descriptors refused
// and closed, a stalled peer holding up nobody else.

#include "daemon/grpc_relay.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/unique_fd.h"
#include "daemon/untrusted_fd.h"
#include "gtest/gtest.h"
#include "tests/send_with_fd.h"

namespace gmlake {
namespace {

struct Relayed {
  UniqueFd client;  // the client's end
  UniqueFd served;  // what gRPC would get
};

Relayed Relay(GrpcRelay* relay) {
  int pair[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  UniqueFd accepted(pair[1]);
  ::fcntl(accepted.get(), F_SETFL, O_NONBLOCK);
  Relayed r;
  r.client.Reset(pair[0]);
  absl::StatusOr<UniqueFd> served =
      relay->Add(std::move(accepted), PeerCredentials{1, 2, 3});
  EXPECT_TRUE(served.ok()) << served.status();
  if (served.ok()) r.served = *std::move(served);
  // Blocking, with a generous timeout, for the test's own reads.
  ::fcntl(r.served.get(), F_SETFL, 0);
  const timeval tv{30, 0};
  for (int fd : {r.client.get(), r.served.get()}) {
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  }
  return r;
}

std::string ReadExactly(int fd, size_t n) {
  std::string out(n, '\0');
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::read(fd, out.data() + got, n - got);
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  out.resize(got);
  return out;
}

bool WriteAll(int fd, const std::string& s) {
  size_t sent = 0;
  while (sent < s.size()) {
    const ssize_t w =
        ::send(fd, s.data() + sent, s.size() - sent, MSG_NOSIGNAL);
    if (w <= 0) return false;
    sent += static_cast<size_t>(w);
  }
  return true;
}

std::string Pattern(size_t n, int seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + seed));
  return s;
}

// Read 0 or an error within the sockets' 30 s timeout.
bool SeesEnd(int fd) {
  char c;
  const ssize_t r = ::read(fd, &c, 1);
  return r == 0 || (r < 0 && errno != EAGAIN);
}

TEST(GrpcRelay, CarriesBytesBothWaysWholeAndInOrder) {
  absl::StatusOr<std::unique_ptr<GrpcRelay>> relay = GrpcRelay::Start();
  ASSERT_TRUE(relay.ok()) << relay.status();
  Relayed r = Relay(relay->get());
  EXPECT_EQ((*relay)->connections(), 1u);
  // Much more than a socket buffer and kRelayChunk, both ways at once.
  const std::string up = Pattern(8 << 20, 1), down = Pattern(8 << 20, 2);
  std::string got_up, got_down;
  std::thread writer_up([&] { EXPECT_TRUE(WriteAll(r.client.get(), up)); });
  std::thread writer_down([&] { EXPECT_TRUE(WriteAll(r.served.get(), down)); });
  std::thread reader_up(
      [&] { got_up = ReadExactly(r.served.get(), up.size()); });
  got_down = ReadExactly(r.client.get(), down.size());
  writer_up.join();
  writer_down.join();
  reader_up.join();
  EXPECT_TRUE(got_up == up) << got_up.size();
  EXPECT_TRUE(got_down == down) << got_down.size();
  EXPECT_EQ((*relay)->descriptors_refused(), 0u);
}

TEST(GrpcRelay, EitherEndClosingEndsTheOther) {
  absl::StatusOr<std::unique_ptr<GrpcRelay>> relay = GrpcRelay::Start();
  ASSERT_TRUE(relay.ok());
  Relayed a = Relay(relay->get());
  a.client.Reset();
  EXPECT_TRUE(SeesEnd(a.served.get()));
  Relayed b = Relay(relay->get());
  ASSERT_TRUE(WriteAll(b.served.get(), "bye"));
  b.served.Reset();
  // What gRPC said last still arrives, then the end.
  EXPECT_EQ(ReadExactly(b.client.get(), 3), "bye");
  EXPECT_TRUE(SeesEnd(b.client.get()));
  for (int i = 0; i < 3000 && (*relay)->connections() != 0; ++i) {
    ::usleep(10000);
  }
  EXPECT_EQ((*relay)->connections(), 0u);
}

// A descriptor sent with a byte never reaches the served end: the relay
// closes it (off its own thread) and drops the connection.
TEST(GrpcRelay, RefusesDescriptorsAndClosesThem) {
  absl::StatusOr<std::unique_ptr<GrpcRelay>> relay = GrpcRelay::Start();
  ASSERT_TRUE(relay.ok());
  Relayed r = Relay(relay->get());
  int pipe_fds[2];
  ASSERT_EQ(::pipe2(pipe_fds, O_CLOEXEC), 0);
  UniqueFd read_end(pipe_fds[0]);
  ASSERT_EQ(testing::SendWithFd(r.client.get(), "x", pipe_fds[1]), 0);
  ::close(pipe_fds[1]);
  // The relay's copy was the last write end: closed, the pipe reads EOF.
  pollfd p{read_end.get(), POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 30000), 1);
  char c;
  EXPECT_EQ(::read(read_end.get(), &c, 1), 0);
  // Neither the byte nor anything else reached the served end.
  EXPECT_TRUE(SeesEnd(r.served.get()));
  EXPECT_TRUE(SeesEnd(r.client.get()));
  EXPECT_EQ((*relay)->descriptors_refused(), 1u);
}

// A served end that never reads stops its client's bytes (the client's
// sends block) and nobody else's.
TEST(GrpcRelay, AStalledPeerHoldsUpNobodyElse) {
  absl::StatusOr<std::unique_ptr<GrpcRelay>> relay = GrpcRelay::Start();
  ASSERT_TRUE(relay.ok());
  Relayed stalled = Relay(relay->get());
  ::fcntl(stalled.client.get(), F_SETFL, O_NONBLOCK);
  const std::string block(1 << 16, 'z');
  size_t sent = 0;
  // Until every buffer on the way is full.
  for (int idle = 0; idle < 50;) {
    const ssize_t w =
        ::send(stalled.client.get(), block.data(), block.size(), MSG_NOSIGNAL);
    if (w > 0) {
      sent += static_cast<size_t>(w);
      idle = 0;
    } else {
      ++idle;
      ::usleep(10000);
    }
  }
  EXPECT_GT(sent, 0u);
  Relayed other = Relay(relay->get());
  ASSERT_TRUE(WriteAll(other.client.get(), "ping"));
  EXPECT_EQ(ReadExactly(other.served.get(), 4), "ping");
  ASSERT_TRUE(WriteAll(other.served.get(), "pong"));
  EXPECT_EQ(ReadExactly(other.client.get(), 4), "pong");
  // And the stalled one's bytes all arrive once it is read.
  EXPECT_EQ(ReadExactly(stalled.served.get(), sent).size(), sent);
}

// gRPC lets go of a connection whose client reads nothing while replies
// are still owed to it: the relay lets go too, rather than hold the
// client's socket (no longer counted against its uid) for ever.
TEST(GrpcRelay, AClientThatDoesNotReadIsDroppedOnceGrpcLetsGo) {
  absl::StatusOr<std::unique_ptr<GrpcRelay>> relay = GrpcRelay::Start();
  ASSERT_TRUE(relay.ok());
  Relayed r = Relay(relay->get());
  ::fcntl(r.served.get(), F_SETFL, O_NONBLOCK);
  const std::string block(1 << 16, 'r');
  for (int idle = 0; idle < 50;) {
    if (::send(r.served.get(), block.data(), block.size(), MSG_NOSIGNAL) > 0) {
      idle = 0;
    } else {
      ++idle;
      ::usleep(10000);
    }
  }
  r.served.Reset();
  for (int i = 0; i < 3000 && (*relay)->connections() != 0; ++i) {
    ::usleep(10000);
  }
  EXPECT_EQ((*relay)->connections(), 0u);
}

TEST(GrpcRelay, StopEndsEveryConnection) {
  absl::StatusOr<std::unique_ptr<GrpcRelay>> relay = GrpcRelay::Start();
  ASSERT_TRUE(relay.ok());
  Relayed r = Relay(relay->get());
  (*relay)->Stop();
  EXPECT_TRUE(SeesEnd(r.client.get()));
  EXPECT_TRUE(SeesEnd(r.served.get()));
  EXPECT_EQ((*relay)->connections(), 0u);
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  ::close(pair[0]);
  EXPECT_FALSE((*relay)->Add(UniqueFd(pair[1]), PeerCredentials{}).ok());
}

}  // namespace
}  // namespace gmlake
