// Copyright 2026 The GMLake Authors.
//
// MetricsServer: a minimal HTTP/1.x server for Prometheus scrapes
// (--metrics_address). One thread serving every connection at once
// (poll), every connection closed after one answer:
//
//   GET /metrics   200, text/plain; version=0.0.4 (the exposition format)
//   GET /          200, a line pointing at /metrics
//   HEAD           the same headers, no body
//   other paths    404; other methods 405; unreadable requests 400
//
// A client gets `io_timeout` to send its request and take the answer; a
// stalled or hostile client holds only its own connection, never delays
// another's scrape (beyond max_connections, the oldest is dropped), and
// never touches the lake: rendering (Lake::FillStatus) happens only for a
// complete GET /metrics. Off by default; bind it to loopback or a
// monitoring network, it has no authentication.

#ifndef GMLAKE_DAEMON_METRICS_SERVER_H_
#define GMLAKE_DAEMON_METRICS_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/unique_fd.h"
#include "daemon/log.h"

namespace gmlake {

struct MetricsServerOptions {
  // "host:port", "[v6 address]:port" or ":port" (every address); port 0
  // picks a free one (see port()).
  std::string address;
  absl::Duration io_timeout = absl::Seconds(2);
  // Requests larger than this are refused (400).
  size_t max_request_bytes = 8192;
  // Connections served at once; a new one beyond them drops the oldest.
  size_t max_connections = 64;
};

class MetricsServer {
 public:
  // Listens and starts serving; `render` returns the body of /metrics and
  // is called on the server's thread. InvalidArgument for an address that
  // does not parse, Unavailable if it cannot be bound (in use, not ours).
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      MetricsServerOptions options, std::function<std::string()> render);
  // Stop().
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Stops the thread and closes the socket. Idempotent.
  void Stop();

  // The port it listens on, and where to scrape ("http://host:port/metrics",
  // with the address as bound).
  int port() const { return port_; }
  const std::string& url() const { return url_; }

  // The answer to one request (the bytes up to the blank line), with
  // `render` called only when the body is needed. Exposed for tests.
  static std::string Respond(absl::string_view request,
                             const std::function<std::string()>& render);

 private:
  MetricsServer() = default;
  // One connection being served.
  struct Conn {
    UniqueFd sock;  // invalid once done
    absl::Time deadline;
    std::string request;
    bool answering = false;
    std::string answer;
    size_t sent = 0;
  };
  void Serve();
  void Accept(std::vector<Conn>* conns);
  // Reads or sends what the socket allows; closes the connection when done
  // or failed.
  void Advance(Conn* c);

  MetricsServerOptions options_;
  std::function<std::string()> render_;
  UniqueFd listener_;
  UniqueFd wake_read_, wake_write_;  // a pipe: Stop wakes the poll
  std::thread thread_;
  int port_ = 0;
  std::string url_;
  LogRateLimit accept_log_{absl::Seconds(1)};
};

}  // namespace gmlake

#endif  // GMLAKE_DAEMON_METRICS_SERVER_H_
