// Copyright 2026 The GMLake Authors.

#include "daemon/service_notifier.h"

#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace gmlake {

ServiceNotifier ServiceNotifier::FromEnvironment() {
  ServiceNotifier n;
  const char* watchdog_usec = std::getenv("WATCHDOG_USEC");
  const char* watchdog_pid = std::getenv("WATCHDOG_PID");
  uint64_t usec = 0, pid = 0;
  // WATCHDOG_PID, when set, names the process the watchdog is meant for: a
  // child that inherited the variable must not answer for its parent.
  const bool ours =
      watchdog_pid == nullptr || (absl::SimpleAtoi(watchdog_pid, &pid) &&
                                  pid == static_cast<uint64_t>(::getpid()));
  if (watchdog_usec != nullptr && ours &&
      absl::SimpleAtoi(watchdog_usec, &usec) && usec > 0) {
    n.watchdog_ = absl::Microseconds(usec);
  }

  const char* path = std::getenv("NOTIFY_SOCKET");
  if (path == nullptr || path[0] == '\0') return n;
  n.path_ = path;
  n.address_.sun_family = AF_UNIX;
  const size_t len = std::strlen(path);
  if ((path[0] != '/' && path[0] != '@') ||
      len > sizeof(n.address_.sun_path) - (path[0] == '/' ? 1 : 0)) {
    n.status_ = absl::InvalidArgumentError(absl::StrCat(
        "NOTIFY_SOCKET=", path,
        " is neither an absolute socket path nor an @abstract name that "
        "fits in sockaddr_un: systemd will not learn that gmlaked is ready"));
    return n;
  }
  std::memcpy(n.address_.sun_path, path, len);
  // "@name": the abstract namespace, where the name starts with a NUL and
  // the length, not a terminator, ends it.
  if (path[0] == '@') n.address_.sun_path[0] = '\0';
  n.address_length_ =
      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + len);
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    n.status_ = absl::UnavailableError(absl::StrCat(
        "a socket for NOTIFY_SOCKET=", path, ": ", std::strerror(errno)));
    return n;
  }
  n.socket_.Reset(fd);
  return n;
}

absl::Status ServiceNotifier::Notify(absl::string_view state) const {
  if (!status_.ok()) return status_;
  if (!socket_.valid()) return absl::OkStatus();
  for (;;) {
    const ssize_t n =
        ::sendto(socket_.get(), state.data(), state.size(), MSG_NOSIGNAL,
                 reinterpret_cast<const sockaddr*>(&address_), address_length_);
    if (n == static_cast<ssize_t>(state.size())) return absl::OkStatus();
    if (n < 0 && errno == EINTR) continue;
    return absl::UnavailableError(
        absl::StrCat("telling systemd '", state.substr(0, state.find('\n')),
                     "' through NOTIFY_SOCKET=", path_, ": ",
                     n < 0 ? std::strerror(errno) : "short send"));
  }
}

}  // namespace gmlake
