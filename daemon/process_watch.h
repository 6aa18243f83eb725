// Copyright 2026 The GMLake Authors.
//
// ProcessWatch: whether the process a session was bound to still runs,
// also once its pid has been reused. Where the kernel has pidfd_open
// (Linux 5.3), a pidfd that becomes readable when the process exits;
// elsewhere the process's start time (field 22 of /proc/<pid>/stat, in
// clock ticks since boot), read at bind and compared later: a new process
// with the same pid starts later.

#ifndef GMLAKE_DAEMON_PROCESS_WATCH_H_
#define GMLAKE_DAEMON_PROCESS_WATCH_H_

#include <sys/types.h>

#include <cstdint>

#include "absl/strings/string_view.h"
#include "common/unique_fd.h"

namespace gmlake {

class ProcessWatch {
 public:
  // Watches nothing: Alive() is false.
  ProcessWatch() = default;
  // Starts watching `pid` as it is now (a pid that does not exist is
  // watched as gone).
  static ProcessWatch Start(pid_t pid);

  ProcessWatch(ProcessWatch&&) = default;
  ProcessWatch& operator=(ProcessWatch&&) = default;

  pid_t pid() const { return pid_; }
  // Whether the process still runs (never blocks).
  bool Alive() const;
  // The pidfd, to poll many at once for POLLIN (the exit); -1 without one
  // (ask Alive()).
  int pidfd() const { return pidfd_.get(); }

 private:
  pid_t pid_ = 0;
  UniqueFd pidfd_;
  uint64_t start_time_ = 0;  // without a pidfd
};

// The start time of `pid` (field 22 of /proc/<pid>/stat), or 0 if there is
// no such process.
uint64_t ProcessStartTime(pid_t pid);

// Field 22 of a /proc/<pid>/stat line, or 0 if the line is not one. The
// command name (field 2) is in parentheses and may hold spaces and
// parentheses itself: the fields after it start after the last ')'.
uint64_t StartTimeFromStat(absl::string_view line);

}  // namespace gmlake

#endif  // GMLAKE_DAEMON_PROCESS_WATCH_H_
