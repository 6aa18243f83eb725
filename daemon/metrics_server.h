// Copyright 2026 The GMLake Authors.
//
// MetricsServer: a minimal HTTP/1.x server for Prometheus scrapes
// (--metrics_address). One thread, one connection at a time, every
// connection closed after one answer:
//
//   GET /metrics   200, text/plain; version=0.0.4 (the exposition format)
//   GET /          200, a line pointing at /metrics
//   HEAD           the same headers, no body
//   other paths    404; other methods 405; unreadable requests 400
//
// A client gets `io_timeout` to send its request and take the answer, so a
// stalled or hostile client delays the next scrape by at most that, and
// never touches the lake: rendering (Lake::FillStatus) happens only for a
// complete GET /metrics. Off by default; bind it to loopback or a
// monitoring network, it has no authentication.

#ifndef GMLAKE_DAEMON_METRICS_SERVER_H_
#define GMLAKE_DAEMON_METRICS_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/unique_fd.h"

namespace gmlake {

struct MetricsServerOptions {
  // "host:port", "[v6 address]:port" or ":port" (every address); port 0
  // picks a free one (see port()).
  std::string address;
  absl::Duration io_timeout = absl::Seconds(2);
  // Requests larger than this are refused (400).
  size_t max_request_bytes = 8192;
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
  void Serve();
  void Handle(UniqueFd connection);

  MetricsServerOptions options_;
  std::function<std::string()> render_;
  UniqueFd listener_;
  UniqueFd wake_read_, wake_write_;  // a pipe: Stop wakes the poll
  std::thread thread_;
  int port_ = 0;
  std::string url_;
};

}  // namespace gmlake

#endif  // GMLAKE_DAEMON_METRICS_SERVER_H_
