// Copyright 2026 The GMLake Authors.

#include "tools/daemon_process.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"

namespace gmlake {

absl::StatusOr<v1::StatusResponse> DaemonStatus(v1::Lake::Stub* stub,
                                                absl::Duration timeout) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   absl::ToChronoMilliseconds(timeout));
  v1::StatusRequest req;
  v1::StatusResponse resp;
  grpc::Status s = stub->Status(&ctx, req, &resp);
  if (!s.ok()) {
    return absl::UnavailableError(
        absl::StrCat("gmlaked Status: ", s.error_message()));
  }
  return resp;
}

std::string FindGmlaked(const std::string& given, const std::string& self) {
  if (!given.empty()) return given;
  const size_t slash = self.find_last_of('/');
  const std::string dir =
      slash == std::string::npos ? "." : self.substr(0, slash);
  if (::access((dir + "/gmlaked").c_str(), X_OK) == 0) return dir + "/gmlaked";
  return dir + "/../daemon/gmlaked";
}

absl::StatusOr<std::unique_ptr<DaemonProcess>> DaemonProcess::Start(
    const std::string& gmlaked, const std::vector<std::string>& flags,
    absl::Duration ready_timeout) {
  std::unique_ptr<DaemonProcess> d(new DaemonProcess());
  char tmpl[] = "/tmp/gml.XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) {
    return absl::InternalError("mkdtemp /tmp/gml.XXXXXX failed");
  }
  d->dir_ = tmpl;
  d->socket_ = d->dir_ + "/gmlaked.sock";
  std::vector<std::string> argv = {gmlaked, "--socket=" + d->socket_,
                                   "--fd_socket=" + d->dir_ + "/fd.sock"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  absl::StatusOr<std::unique_ptr<Subprocess>> child =
      Subprocess::Start(argv, /*pipes=*/false);
  if (!child.ok()) {
    return absl::Status(child.status().code(),
                        absl::StrCat("starting gmlaked (", gmlaked,
                                     "): ", child.status().message(),
                                     " (pass --gmlaked=PATH)"));
  }
  d->child_ = *std::move(child);
  // A generous wait: gmlaked starts in well under a second on an idle
  // machine, but a busy one may take many times that. The channel is made
  // once the socket exists: one made before backs off its reconnection
  // for seconds after the first refusal.
  const absl::Time deadline = absl::Now() + ready_timeout;
  // A gmlaked that refused its flags is gone at once: said so then, not
  // after the whole wait.
  auto gone = [&]() -> absl::Status {
    absl::StatusOr<int> code = d->child_->Wait(absl::ZeroDuration());
    if (!code.ok()) return absl::OkStatus();  // still running
    return absl::FailedPreconditionError(
        absl::StrCat("gmlaked (", gmlaked, ") exited with status ", *code,
                     " before it answered (see its log above)"));
  };
  struct stat st;
  while (::stat(d->socket_.c_str(), &st) != 0 && absl::Now() < deadline) {
    if (absl::Status g = gone(); !g.ok()) return g;
    absl::SleepFor(absl::Milliseconds(10));
  }
  d->stub_ = v1::Lake::NewStub(grpc::CreateChannel(
      "unix:" + d->socket_, grpc::InsecureChannelCredentials()));
  absl::StatusOr<v1::StatusResponse> status = d->Status();
  while (!status.ok() && absl::Now() < deadline) {
    if (absl::Status g = gone(); !g.ok()) return g;
    absl::SleepFor(absl::Milliseconds(20));
    status = d->Status();
  }
  if (!status.ok()) {
    return absl::UnavailableError(
        absl::StrCat("gmlaked at ", d->socket_, " did not answer within ",
                     absl::FormatDuration(ready_timeout), ": ",
                     status.status().message(), " (see its log above)"));
  }
  return d;
}

DaemonProcess::~DaemonProcess() {
  if (child_ != nullptr) child_->Stop(SIGTERM, absl::Seconds(10)).IgnoreError();
  ::unlink(socket_.c_str());
  ::unlink((dir_ + "/fd.sock").c_str());
  ::rmdir(dir_.c_str());
}

}  // namespace gmlake
