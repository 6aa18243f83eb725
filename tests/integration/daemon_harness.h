// Copyright 2026 The GMLake Authors.
//
// Test harness for gmlaked: starts the real daemon (fork+exec of the
// Bazel-built binary) on sockets in a short temporary directory, talks to it
// over gRPC, checks its books, and drives real client processes
// (tests/integration/lake_client_main.cc) line by line over pipes.

#ifndef GMLAKE_TESTS_INTEGRATION_DAEMON_HARNESS_H_
#define GMLAKE_TESTS_INTEGRATION_DAEMON_HARNESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/unique_fd.h"
#include "grpcpp/grpcpp.h"
#include "proto/gmlake.grpc.pb.h"
#include "tests/send_with_fd.h"  // the harness's tests send with it
#include "tests/test_paths.h"

namespace gmlake {
namespace testing {

// How long a test waits for what should happen soon (a session ending, a
// connection closing, a client answering): only a hang uses it up, so a
// busy machine never fails a test by being slow.
constexpr absl::Duration kPatience = absl::Seconds(30);

// A running gmlaked.
class Daemon {
 public:
  // Starts gmlaked --backend=host --release_idle=0 with `flags` added (a
  // flag given again wins), on sockets in a new
  // directory under /tmp (mode 0755, so clients of other uids can reach
  // it), and waits until it answers Status.
  static absl::StatusOr<std::unique_ptr<Daemon>> Start(
      const std::vector<std::string>& flags);
  // SIGTERM, then SIGKILL if it does not exit within 5 s; removes the
  // directory.
  ~Daemon();

  pid_t pid() const { return pid_; }
  const std::string& dir() const { return dir_; }
  const std::string& socket() const { return socket_; }
  const std::string& fd_socket() const { return fd_socket_; }
  v1::Lake::Stub* stub() { return stub_.get(); }

  absl::StatusOr<v1::StatusResponse> Status();
  // Checks the books: per device created = free + leased + scrubbing, and
  // the sessions' leased bytes add up to the devices' leased bytes.
  absl::Status CheckBooks();
  // Polls Status until `pred` holds or `timeout` passes.
  absl::StatusOr<v1::StatusResponse> WaitFor(
      const std::function<bool(const v1::StatusResponse&)>& pred,
      absl::Duration timeout);
  // Everything the daemon wrote to stderr so far.
  std::string Log() const;
  // Sends `sig` and waits for the exit; returns the exit code (or 128+sig).
  absl::StatusOr<int> Stop(int sig, absl::Duration timeout);
  // After Stop: starts gmlaked again with the same flags on the same
  // sockets (as systemd's Restart= does), and waits until it answers.
  absl::Status Restart();
  bool running() const { return pid_ > 0; }

 private:
  Daemon() = default;
  // Spawns argv_ and waits for an answer.
  absl::Status Launch();
  std::vector<std::string> argv_;
  pid_t pid_ = -1;
  std::string dir_, socket_, fd_socket_, log_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Lake::Stub> stub_;
};

// A lake_client process. Each command is one line; each answer one line,
// "ok ..." (returned without "ok") or "err CODE message" (returned as an
// error status of that code).
class ClientProcess {
 public:
  // Starts the client on `socket` with `flags`; waits for its first line
  // ("ready <session>" or the connect error, returned as a status).
  static absl::StatusOr<std::unique_ptr<ClientProcess>> Start(
      const std::string& socket, const std::vector<std::string>& flags);
  // The same with another client binary of this package speaking the same
  // line protocol, e.g. "tests/integration/raw_client".
  static absl::StatusOr<std::unique_ptr<ClientProcess>> StartBinary(
      const std::string& runfile, const std::string& socket,
      const std::vector<std::string>& flags);
  // Kills (SIGKILL) and reaps it if still running.
  ~ClientProcess();

  absl::StatusOr<std::string> Command(
      const std::string& line, absl::Duration timeout = absl::Seconds(20));
  // Command in two halves, for a command whose answer comes later.
  absl::Status Send(const std::string& line);
  absl::StatusOr<std::string> Receive(
      absl::Duration timeout = absl::Seconds(20));
  pid_t pid() const { return pid_; }
  uint64_t session() const { return session_; }
  // Sends `sig` and reaps the process.
  void Kill(int sig);
  // Sends "quit" and waits for a clean exit; returns the exit code.
  absl::StatusOr<int> Quit();

 private:
  ClientProcess() = default;
  absl::StatusOr<std::string> ReadLine(absl::Duration timeout);
  pid_t pid_ = -1;
  UniqueFd in_, out_;
  std::string buffer_;
  uint64_t session_ = 0;
};

// What a finished command printed, and how it ended.
struct CommandResult {
  int exit_code = -1;  // 128+signal if killed
  std::string out;
  std::string err;
};
// Runs `argv` (argv[0] a path) to completion, capturing its output; kills
// it after `timeout`.
absl::StatusOr<CommandResult> RunCommand(
    const std::vector<std::string>& argv,
    absl::Duration timeout = absl::Seconds(20));

// A TCP socket on loopback whose last close waits `linger_seconds`
// (SO_LINGER set, its send queue full, its peer, kept here, never reads):
// a descriptor a hostile client passes to make its closer block.
struct LingeringSocket {
  UniqueFd listener, peer, sock;
};
LingeringSocket MakeLingeringSocket(int linger_seconds);

// Parses "err CODE message" / "ok rest" lines.
absl::StatusOr<std::string> ParseAnswer(const std::string& line);

inline absl::Status StatusOf(const absl::Status& s) { return s; }
template <typename T>
absl::Status StatusOf(const absl::StatusOr<T>& s) {
  return s.status();
}

// Fails the test with the status when `expr` is not OK; more text may be
// streamed after it.
#define ASSERT_OK(expr)                                                     \
  if (const absl::Status _s = ::gmlake::testing::StatusOf(expr); _s.ok()) { \
  } else                                                                    \
    FAIL() << #expr << ": " << _s

}  // namespace testing
}  // namespace gmlake

#endif  // GMLAKE_TESTS_INTEGRATION_DAEMON_HARNESS_H_
