// Copyright 2026 The GMLake Authors.

#include "daemon/metrics_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "daemon/log.h"

namespace gmlake {
namespace {

std::string Answer(absl::string_view status, absl::string_view type,
                   absl::string_view body, bool head,
                   absl::string_view extra_headers = "") {
  return absl::StrCat("HTTP/1.1 ", status, "\r\nContent-Type: ", type,
                      "\r\nContent-Length: ", body.size(), "\r\n",
                      extra_headers, "Connection: close\r\n\r\n",
                      head ? "" : body);
}

// Splits "host:port" / "[v6]:port" / ":port".
absl::Status SplitAddress(absl::string_view address, std::string* host,
                          std::string* port) {
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics_address=", address,
                     " has no port: give host:port, [v6]:port or :port"));
  }
  absl::string_view h = address.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') {
    h = h.substr(1, h.size() - 2);
  }
  *host = std::string(h);
  *port = std::string(address.substr(colon + 1));
  int n = 0;
  if (!absl::SimpleAtoi(*port, &n) || n < 0 || n > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics_address=", address, ": '", *port, "' is not a port"));
  }
  return absl::OkStatus();
}

// Waits until `fd` is ready for `events` or `deadline` passes.
}  // namespace

std::string MetricsServer::Respond(absl::string_view request,
                                   const std::function<std::string()>& render) {
  const size_t eol = request.find("\r\n");
  std::vector<absl::string_view> parts =
      absl::StrSplit(request.substr(0, eol), ' ');
  if (parts.size() != 3 || !absl::StartsWith(parts[2], "HTTP/1.")) {
    return Answer("400 Bad Request", "text/plain; charset=utf-8",
                  "gmlaked: not an HTTP/1.x request\n", false);
  }
  const bool head = parts[0] == "HEAD";
  if (parts[0] != "GET" && !head) {
    return Answer("405 Method Not Allowed", "text/plain; charset=utf-8",
                  "gmlaked: only GET and HEAD\n", false,
                  "Allow: GET, HEAD\r\n");
  }
  absl::string_view path = parts[1];
  path = path.substr(0, path.find('?'));
  if (path == "/metrics") {
    return Answer("200 OK", "text/plain; version=0.0.4; charset=utf-8",
                  render(), head);
  }
  if (path == "/") {
    return Answer("200 OK", "text/plain; charset=utf-8",
                  "gmlaked: Prometheus metrics at /metrics\n", head);
  }
  return Answer("404 Not Found", "text/plain; charset=utf-8",
                "gmlaked: nothing here; metrics are at /metrics\n", head);
}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    MetricsServerOptions options, std::function<std::string()> render) {
  std::string host, port;
  absl::Status s = SplitAddress(options.address, &host, &port);
  if (!s.ok()) return s;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const int gai = ::getaddrinfo(host.empty() ? nullptr : host.c_str(),
                                port.c_str(), &hints, &found);
  if (gai != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics_address=", options.address, ": ", ::gai_strerror(gai)));
  }
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  std::string last_error = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    UniqueFd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, 0));
    if (!fd.valid()) {
      last_error = std::strerror(errno);
      continue;
    }
    const int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0 ||
        ::listen(fd.get(), 16) != 0) {
      last_error = std::strerror(errno);
      continue;
    }
    // Non-blocking, so that Accept drains the backlog and returns.
    ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) | O_NONBLOCK);
    server->listener_ = std::move(fd);
    break;
  }
  ::freeaddrinfo(found);
  if (!server->listener_.valid()) {
    return absl::UnavailableError(
        absl::StrCat("--metrics_address=", options.address,
                     ": cannot listen: ", last_error));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  ::getsockname(server->listener_.get(), reinterpret_cast<sockaddr*>(&bound),
                &len);
  char text[INET6_ADDRSTRLEN] = "?";
  if (bound.ss_family == AF_INET6) {
    auto* a6 = reinterpret_cast<sockaddr_in6*>(&bound);
    server->port_ = ntohs(a6->sin6_port);
    ::inet_ntop(AF_INET6, &a6->sin6_addr, text, sizeof(text));
    server->url_ =
        absl::StrCat("http://[", text, "]:", server->port_, "/metrics");
  } else {
    auto* a4 = reinterpret_cast<sockaddr_in*>(&bound);
    server->port_ = ntohs(a4->sin_port);
    ::inet_ntop(AF_INET, &a4->sin_addr, text, sizeof(text));
    server->url_ =
        absl::StrCat("http://", text, ":", server->port_, "/metrics");
  }
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  server->wake_read_.Reset(pipe_fds[0]);
  server->wake_write_.Reset(pipe_fds[1]);
  server->options_ = std::move(options);
  server->render_ = std::move(render);
  server->thread_ = std::thread([s = server.get()] { s->Serve(); });
  return server;
}

MetricsServer::~MetricsServer() { Stop(); }

void MetricsServer::Stop() {
  if (!thread_.joinable()) return;
  const char c = 0;
  while (::write(wake_write_.get(), &c, 1) < 0 && errno == EINTR) {
  }
  thread_.join();
  listener_.Reset();
}

void MetricsServer::Serve() {
  // Every connection at once, each with its own deadline: a scrape never
  // waits on another client (a slowloris holds only its own connection).
  std::vector<Conn> conns;
  for (;;) {
    const absl::Time now = absl::Now();
    // Past its deadline: closed unanswered.
    conns.erase(
        std::remove_if(conns.begin(), conns.end(),
                       [&](const Conn& c) { return c.deadline <= now; }),
        conns.end());
    absl::Time next = absl::InfiniteFuture();
    std::vector<pollfd> p = {{listener_.get(), POLLIN, 0},
                             {wake_read_.get(), POLLIN, 0}};
    for (const Conn& c : conns) {
      p.push_back({c.sock.get(),
                   static_cast<short>(c.answering ? POLLOUT : POLLIN), 0});
      next = std::min(next, c.deadline);
    }
    const int timeout =
        next == absl::InfiniteFuture()
            ? -1
            : static_cast<int>(std::max<int64_t>(
                  1, absl::ToInt64Milliseconds(next - now) + 1));
    if (::poll(p.data(), p.size(), timeout) < 0) {
      if (errno == EINTR) continue;
      Errorf("metrics: poll: %s; metrics are no longer served",
             std::strerror(errno));
      return;
    }
    if (p[1].revents != 0) return;
    // Served in place, then the finished ones dropped.
    for (size_t i = 0; i < conns.size(); ++i) {
      if (p[i + 2].revents != 0) Advance(&conns[i]);
    }
    conns.erase(std::remove_if(conns.begin(), conns.end(),
                               [](const Conn& c) { return !c.sock.valid(); }),
                conns.end());
    if (p[0].revents != 0) Accept(&conns);
  }
}

void MetricsServer::Accept(std::vector<Conn>* conns) {
  for (;;) {
    const int fd = ::accept4(listener_.get(), nullptr, nullptr,
                             SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      // Out of descriptors (EMFILE) must not spin: say so and back off.
      if (errno == EMFILE || errno == ENFILE) {
        uint64_t left_out = 0;
        if (accept_log_.Allow(&left_out)) {
          Warnf(
              "metrics: cannot accept a scrape: %s (%d lines like this "
              "left out)",
              std::strerror(errno), left_out);
        }
        absl::SleepFor(absl::Milliseconds(100));
      }
      return;
    }
    if (conns->size() >= options_.max_connections) {
      // Room for the newcomer at the cost of the oldest: a client that
      // opens connections without end cannot keep a scrape out.
      conns->erase(conns->begin());
    }
    Conn c;
    c.sock.Reset(fd);
    c.deadline = absl::Now() + options_.io_timeout;
    conns->push_back(std::move(c));
  }
}

void MetricsServer::Advance(Conn* c) {
  if (!c->answering) {
    char buf[2048];
    const ssize_t n = ::read(c->sock.get(), buf, sizeof(buf));
    if (n < 0) {
      if (errno != EINTR && errno != EAGAIN) c->sock.Reset();
      return;
    }
    c->request.append(buf, static_cast<size_t>(n));
    if (c->request.size() > options_.max_request_bytes) {
      c->request.clear();  // answered as unreadable
    } else if (n != 0 && c->request.find("\r\n\r\n") == std::string::npos) {
      return;  // the headers go on (a GET has no body)
    }
    c->answer = Respond(c->request, render_);
    c->answering = true;
  }
  while (c->sent < c->answer.size()) {
    const ssize_t n = ::send(c->sock.get(), c->answer.data() + c->sent,
                             c->answer.size() - c->sent, MSG_NOSIGNAL);
    if (n > 0) {
      c->sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    c->sock.Reset();
    return;
  }
  ::shutdown(c->sock.get(), SHUT_WR);
  c->sock.Reset();
}

}  // namespace gmlake
