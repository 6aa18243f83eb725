// Copyright 2026 The GMLake Authors.
//
// MetricsServer over real TCP sockets on loopback.

#include "daemon/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/unique_fd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gmlake {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::StartsWith;

UniqueFd Connect(int port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

// Sends `request`, reads until the server closes.
std::string Exchange(int port, const std::string& request) {
  UniqueFd fd = Connect(port);
  EXPECT_EQ(::send(fd.get(), request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  std::string out;
  char buf[4096];
  for (;;) {
    pollfd p{fd.get(), POLLIN, 0};
    if (::poll(&p, 1, 10000) <= 0) break;
    const ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n <= 0) break;
    out.append(buf, n);
  }
  return out;
}

class MetricsServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MetricsServerOptions o;
    o.address = "127.0.0.1:0";
    o.io_timeout = absl::Milliseconds(300);
    absl::StatusOr<std::unique_ptr<MetricsServer>> s =
        MetricsServer::Start(o, [this] {
          ++renders_;
          return std::string("gmlake_up 1\n");
        });
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
  }
  std::atomic<int> renders_{0};
  std::unique_ptr<MetricsServer> server_;
};

TEST_F(MetricsServerTest, ServesTheExpositionFormatAtMetrics) {
  EXPECT_GT(server_->port(), 0);
  EXPECT_EQ(server_->url(),
            absl::StrCat("http://127.0.0.1:", server_->port(), "/metrics"));
  const std::string r =
      Exchange(server_->port(),
               "GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(r, HasSubstr("Content-Type: text/plain; version=0.0.4"));
  EXPECT_THAT(r, HasSubstr("Content-Length: 12\r\n"));
  EXPECT_THAT(r, EndsWith("\r\n\r\ngmlake_up 1\n"));
  EXPECT_EQ(renders_, 1);
  // A query string is fine (Prometheus may add one).
  EXPECT_THAT(Exchange(server_->port(), "GET /metrics?x=1 HTTP/1.0\r\n\r\n"),
              StartsWith("HTTP/1.1 200 OK"));
}

TEST_F(MetricsServerTest, OtherPathsMethodsAndGarbage) {
  EXPECT_THAT(Exchange(server_->port(), "GET /nope HTTP/1.1\r\n\r\n"),
              StartsWith("HTTP/1.1 404 Not Found"));
  const std::string post =
      Exchange(server_->port(), "POST /metrics HTTP/1.1\r\n\r\n");
  EXPECT_THAT(post, StartsWith("HTTP/1.1 405"));
  EXPECT_THAT(post, HasSubstr("Allow: GET, HEAD"));
  EXPECT_THAT(Exchange(server_->port(), "\x01\x02garbage\r\n\r\n"),
              StartsWith("HTTP/1.1 400"));
  // Too large a request.
  EXPECT_THAT(
      Exchange(server_->port(), "GET /metrics HTTP/1.1\r\nX: " +
                                    std::string(20000, 'a') + "\r\n\r\n"),
      StartsWith("HTTP/1.1 400"));
  const std::string head =
      Exchange(server_->port(), "HEAD /metrics HTTP/1.1\r\n\r\n");
  EXPECT_THAT(head, StartsWith("HTTP/1.1 200 OK"));
  EXPECT_THAT(head, EndsWith("\r\n\r\n"));
  EXPECT_THAT(Exchange(server_->port(), "GET / HTTP/1.1\r\n\r\n"),
              HasSubstr("/metrics"));
  // None of these rendered the metrics except HEAD's headers.
  EXPECT_LE(renders_, 1);
}

TEST_F(MetricsServerTest, AStalledClientIsDroppedAndTheNextIsServed) {
  UniqueFd stalled = Connect(server_->port());
  ASSERT_TRUE(::send(stalled.get(), "GET /met", 8, MSG_NOSIGNAL) == 8);
  // Served after the stalled one's io_timeout at the latest.
  EXPECT_THAT(Exchange(server_->port(), "GET /metrics HTTP/1.1\r\n\r\n"),
              StartsWith("HTTP/1.1 200 OK"));
  // The stalled connection was closed without an answer.
  char c;
  pollfd p{stalled.get(), POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 10000), 1);
  EXPECT_EQ(::read(stalled.get(), &c, 1), 0);
}

TEST(MetricsServer, BadAddressesAreClearErrors) {
  auto render = [] { return std::string(); };
  for (const char* bad : {"9478", "localhost:http", ":70000"}) {
    MetricsServerOptions o;
    o.address = bad;
    absl::StatusOr<std::unique_ptr<MetricsServer>> s =
        MetricsServer::Start(o, render);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_THAT(s.status().message(), HasSubstr("--metrics_address=")) << bad;
  }
  // A port taken by another server.
  MetricsServerOptions o;
  o.address = "127.0.0.1:0";
  absl::StatusOr<std::unique_ptr<MetricsServer>> first =
      MetricsServer::Start(o, render);
  ASSERT_TRUE(first.ok());
  o.address = absl::StrCat("127.0.0.1:", (*first)->port());
  absl::StatusOr<std::unique_ptr<MetricsServer>> second =
      MetricsServer::Start(o, render);
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(second.status().message(), HasSubstr("cannot listen"));
}

// Clients that send half a request and wait (a slowloris) hold only their
// own connections: a real scrape is answered while they are still open.
TEST(MetricsServerSlowloris, AScrapeDoesNotWaitOnOtherClients) {
  MetricsServerOptions o;
  o.address = "127.0.0.1:0";
  o.io_timeout = absl::Seconds(60);  // longer than the scrape may wait
  absl::StatusOr<std::unique_ptr<MetricsServer>> s =
      MetricsServer::Start(o, [] { return std::string("gmlake_up 1\n"); });
  ASSERT_TRUE(s.ok()) << s.status();
  std::vector<UniqueFd> slow;
  for (int i = 0; i < 10; ++i) {
    slow.push_back(Connect((*s)->port()));
    const std::string half = "GET /metr";
    ASSERT_EQ(::send(slow.back().get(), half.data(), half.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(half.size()));
  }
  EXPECT_THAT(Exchange((*s)->port(), "GET /metrics HTTP/1.1\r\n\r\n"),
              EndsWith("\r\n\r\ngmlake_up 1\n"));
  // None of them was answered or closed meanwhile.
  for (const UniqueFd& fd : slow) {
    pollfd p{fd.get(), POLLIN, 0};
    EXPECT_EQ(::poll(&p, 1, 0), 0);
  }
  (*s)->Stop();
}

// Beyond max_connections, a newcomer drops the oldest, so connections
// opened without end cannot keep a scrape out.
TEST(MetricsServerSlowloris, TooManyConnectionsDropTheOldest) {
  MetricsServerOptions o;
  o.address = "127.0.0.1:0";
  o.io_timeout = absl::Seconds(60);
  o.max_connections = 4;
  absl::StatusOr<std::unique_ptr<MetricsServer>> s =
      MetricsServer::Start(o, [] { return std::string("gmlake_up 1\n"); });
  ASSERT_TRUE(s.ok()) << s.status();
  std::vector<UniqueFd> slow;
  for (int i = 0; i < 8; ++i) slow.push_back(Connect((*s)->port()));
  EXPECT_THAT(Exchange((*s)->port(), "GET /metrics HTTP/1.1\r\n\r\n"),
              EndsWith("\r\n\r\ngmlake_up 1\n"));
  (*s)->Stop();
}

}  // namespace
}  // namespace gmlake
