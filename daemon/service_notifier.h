// Copyright 2026 The GMLake Authors.
//
// ServiceNotifier: tells systemd (Type=notify) how gmlaked is doing, with
// the sd_notify(3) datagram protocol: "READY=1" once both sockets serve,
// "STATUS=..." lines that `systemctl status gmlaked` shows, "STOPPING=1",
// and "WATCHDOG=1" keep-alives when the unit sets WatchdogSec=.
//
// We speak the protocol ourselves instead of linking libsystemd: it is one
// sendto(2) of "KEY=VALUE" lines to the AF_UNIX datagram socket named by
// $NOTIFY_SOCKET (a path, or "@name" in the abstract namespace), a stable,
// documented interface. gmlaked then needs no libsystemd-dev to build and
// no libsystemd.so where it runs (the GPU bundle, containers without
// systemd), and behaves the same with or without a service manager.

#ifndef GMLAKE_DAEMON_SERVICE_NOTIFIER_H_
#define GMLAKE_DAEMON_SERVICE_NOTIFIER_H_

#include <sys/socket.h>
#include <sys/un.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/unique_fd.h"

namespace gmlake {

class ServiceNotifier {
 public:
  // From $NOTIFY_SOCKET and $WATCHDOG_USEC/$WATCHDOG_PID. Without
  // NOTIFY_SOCKET (no service manager, or Type=simple) every Notify is a
  // no-op that succeeds. A NOTIFY_SOCKET it cannot use is reported by
  // status(), and Notify returns that error.
  static ServiceNotifier FromEnvironment();

  ServiceNotifier(ServiceNotifier&&) = default;
  ServiceNotifier& operator=(ServiceNotifier&&) = default;

  // Whether a service manager listens.
  bool enabled() const { return socket_.valid(); }
  // Why NOTIFY_SOCKET could not be used (OK when it can, or is unset).
  const absl::Status& status() const { return status_; }
  // How often systemd expects WATCHDOG=1 (WatchdogSec=), or zero.
  absl::Duration watchdog_interval() const { return watchdog_; }

  // Sends newline-separated assignments, e.g. "READY=1\nSTATUS=serving".
  absl::Status Notify(absl::string_view state) const;

 private:
  ServiceNotifier() = default;

  UniqueFd socket_;
  sockaddr_un address_{};
  socklen_t address_length_ = 0;
  std::string path_;  // as given, for messages
  absl::Status status_;
  absl::Duration watchdog_ = absl::ZeroDuration();
};

}  // namespace gmlake

#endif  // GMLAKE_DAEMON_SERVICE_NOTIFIER_H_
