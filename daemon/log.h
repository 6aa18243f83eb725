// Copyright 2026 The GMLake Authors.
//
// gmlaked's log: one line per event on stderr. Abseil 20220623 has no
// logging library.
//
// Two formats, chosen once from the environment:
//   a terminal, a file, a test:  "2026-01-02 03:04:05.678 gmlaked: <line>"
//   the systemd journal:         "<6><line>"
// systemd sets JOURNAL_STREAM to the device and inode of the stream it
// connected to stderr; when stderr is that stream, each line starts with its
// syslog priority (sd-daemon(3)'s "<N>" prefix), which journald files as
// PRIORITY= and strips, and carries no timestamp of its own (journald stamps
// every line). `journalctl -u gmlaked -p warning` then shows warnings and
// errors only.

#ifndef GMLAKE_DAEMON_LOG_H_
#define GMLAKE_DAEMON_LOG_H_

#include <string>

#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace gmlake {

// syslog priorities (the numbers are syslog's, which journald keeps).
enum class LogPriority {
  kError = 3,    // a request or the daemon failed
  kWarning = 4,  // something an operator should fix (limits, lost chunks)
  kNotice = 5,   // sessions ending with memory, chunks released
  kInfo = 6,     // start-up, configuration, shutdown
  kDebug = 7,    // --verbose: every open, bind, lease and pressure request
};

// The formats above.
enum class LogFormat { kTimestamped, kJournal };

// Writes one line to stderr in one write(2), so that lines of different
// threads do not interleave.
void LogLine(LogPriority priority, absl::string_view line);
// At info priority.
void LogLine(absl::string_view line);

// The text LogLine writes for `line` in `format` at `now_text` (the
// timestamp, used by kTimestamped only). Exposed for tests.
std::string FormatLogLine(LogFormat format, LogPriority priority,
                          absl::string_view now_text, absl::string_view line);

// kJournal when JOURNAL_STREAM names the stream behind `fd`
// ("<st_dev>:<st_ino>", sd_journal_stream_fd(3)), else kTimestamped.
LogFormat DetectLogFormat(int fd);

// The format LogLine uses: detected on stderr at the first line, unless set.
LogFormat CurrentLogFormat();
void SetLogFormat(LogFormat format);

// Whether per-session events (open, bind, lease) are logged; ends of
// sessions, failures and start-up lines always are.
void SetVerboseLog(bool verbose);
bool VerboseLog();

// Lets one recurring line through at most once per `period`, so that an
// event a client can repeat at will (a refused connection, accept failing
// at the descriptor limit) cannot flood the journal. Not thread-safe: one
// per thread or per event source.
class LogRateLimit {
 public:
  explicit LogRateLimit(absl::Duration period) : period_(period) {}
  // True when a line may be logged now; then *left_out is how many were
  // not since the last one that was.
  bool Allow(uint64_t* left_out) { return AllowAt(absl::Now(), left_out); }
  bool AllowAt(absl::Time now, uint64_t* left_out);

 private:
  const absl::Duration period_;
  absl::Time last_ = absl::InfinitePast();
  uint64_t left_out_ = 0;
};

template <typename... Args>
void Logf(const absl::FormatSpec<Args...>& format, const Args&... args) {
  LogLine(LogPriority::kInfo, absl::StrFormat(format, args...));
}

template <typename... Args>
void Noticef(const absl::FormatSpec<Args...>& format, const Args&... args) {
  LogLine(LogPriority::kNotice, absl::StrFormat(format, args...));
}

template <typename... Args>
void Warnf(const absl::FormatSpec<Args...>& format, const Args&... args) {
  LogLine(LogPriority::kWarning, absl::StrFormat(format, args...));
}

template <typename... Args>
void Errorf(const absl::FormatSpec<Args...>& format, const Args&... args) {
  LogLine(LogPriority::kError, absl::StrFormat(format, args...));
}

template <typename... Args>
void VLogf(const absl::FormatSpec<Args...>& format, const Args&... args) {
  if (VerboseLog()) {
    LogLine(LogPriority::kDebug, absl::StrFormat(format, args...));
  }
}

}  // namespace gmlake

#endif  // GMLAKE_DAEMON_LOG_H_
