// Copyright 2026 The GMLake Authors.
//
// DaemonProcess: a gmlaked of a tool's own (the lake-share and hand-off
// benchmarks), started as a child on sockets in a fresh folder, waited for
// until its Status answers, and stopped with SIGTERM when destroyed.

#ifndef GMLAKE_TOOLS_DAEMON_PROCESS_H_
#define GMLAKE_TOOLS_DAEMON_PROCESS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/gmlake.grpc.pb.h"
#include "tools/subprocess.h"

namespace gmlake {

// gmlaked's Status, with a deadline of `timeout`.
absl::StatusOr<v1::StatusResponse> DaemonStatus(
    v1::Lake::Stub* stub, absl::Duration timeout = absl::Seconds(5));

// Where gmlaked is: `given` if set, else beside `self` (a binary of tools/),
// else in ../daemon/ as Bazel lays it out.
std::string FindGmlaked(const std::string& given, const std::string& self);

class DaemonProcess {
 public:
  // Starts `gmlaked` with --socket and --fd_socket in a new folder under
  // /tmp, then `flags`, and waits up to `ready_timeout` for its Status.
  static absl::StatusOr<std::unique_ptr<DaemonProcess>> Start(
      const std::string& gmlaked, const std::vector<std::string>& flags,
      absl::Duration ready_timeout = absl::Seconds(60));
  // SIGTERM (SIGKILL after 10 s), then removes the sockets and the folder.
  ~DaemonProcess();
  DaemonProcess(const DaemonProcess&) = delete;
  DaemonProcess& operator=(const DaemonProcess&) = delete;

  const std::string& socket() const { return socket_; }
  v1::Lake::Stub* stub() { return stub_.get(); }
  absl::StatusOr<v1::StatusResponse> Status() { return DaemonStatus(stub()); }

 private:
  DaemonProcess() = default;
  std::string dir_;
  std::string socket_;
  std::unique_ptr<Subprocess> child_;
  std::unique_ptr<v1::Lake::Stub> stub_;
};

}  // namespace gmlake

#endif  // GMLAKE_TOOLS_DAEMON_PROCESS_H_
