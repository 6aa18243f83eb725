// Copyright 2026 The GMLake Authors.

#include "daemon/process_watch.h"

#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace gmlake {

ProcessWatch ProcessWatch::Start(pid_t pid) {
  ProcessWatch w;
  w.pid_ = pid;
#ifdef SYS_pidfd_open
  const long fd = ::syscall(SYS_pidfd_open, pid, 0);
  if (fd >= 0) {
    w.pidfd_.Reset(static_cast<int>(fd));
    return w;
  }
#endif
  w.start_time_ = ProcessStartTime(pid);
  return w;
}

bool ProcessWatch::Alive() const {
  if (pidfd_.valid()) {
    pollfd p{pidfd_.get(), POLLIN, 0};
    return ::poll(&p, 1, 0) == 0;
  }
  if (pid_ <= 0 || start_time_ == 0) return false;
  return ProcessStartTime(pid_) == start_time_;
}

uint64_t ProcessStartTime(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!in || !std::getline(in, line)) return 0;
  return StartTimeFromStat(line);
}

uint64_t StartTimeFromStat(absl::string_view line) {
  const size_t close = line.rfind(')');
  if (close == absl::string_view::npos) return 0;
  // Fields 3.. after the name; the start time is field 22, the 20th.
  std::vector<absl::string_view> fields =
      absl::StrSplit(line.substr(close + 1), ' ', absl::SkipEmpty());
  uint64_t start = 0;
  if (fields.size() < 20 || !absl::SimpleAtoi(fields[19], &start)) return 0;
  return start;
}

}  // namespace gmlake
