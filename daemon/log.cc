// Copyright 2026 The GMLake Authors.

#include "daemon/log.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace gmlake {
namespace {

std::atomic<bool> verbose{false};
// -1: not chosen yet; else a LogFormat.
std::atomic<int> format_chosen{-1};

}  // namespace

std::string FormatLogLine(LogFormat format, LogPriority priority,
                          absl::string_view now_text, absl::string_view line) {
  if (format == LogFormat::kJournal) {
    // journald takes the priority from the prefix and the identifier and
    // time from the unit; a line holding a newline would become two
    // entries, the second at the default priority, so newlines go.
    std::string text = absl::StrCat("<", static_cast<int>(priority), ">", line);
    for (size_t i = 3; i < text.size(); ++i) {
      if (text[i] == '\n') text[i] = ' ';
    }
    text += '\n';
    return text;
  }
  return absl::StrCat(now_text, " gmlaked: ", line, "\n");
}

LogFormat DetectLogFormat(int fd) {
  const char* stream = std::getenv("JOURNAL_STREAM");
  if (stream == nullptr) return LogFormat::kTimestamped;
  std::pair<std::string, std::string> parts =
      absl::StrSplit(stream, absl::MaxSplits(':', 1));
  uint64_t dev = 0, ino = 0;
  if (!absl::SimpleAtoi(parts.first, &dev) ||
      !absl::SimpleAtoi(parts.second, &ino)) {
    return LogFormat::kTimestamped;
  }
  // The variable is inherited by children whose stderr may be elsewhere
  // (a shell redirecting it): only the stream itself counts.
  struct stat st {};
  if (::fstat(fd, &st) != 0) return LogFormat::kTimestamped;
  return static_cast<uint64_t>(st.st_dev) == dev &&
                 static_cast<uint64_t>(st.st_ino) == ino
             ? LogFormat::kJournal
             : LogFormat::kTimestamped;
}

LogFormat CurrentLogFormat() {
  int f = format_chosen.load(std::memory_order_acquire);
  if (f < 0) {
    f = static_cast<int>(DetectLogFormat(STDERR_FILENO));
    int expected = -1;
    if (!format_chosen.compare_exchange_strong(expected, f)) f = expected;
  }
  return static_cast<LogFormat>(f);
}

void SetLogFormat(LogFormat format) {
  format_chosen.store(static_cast<int>(format), std::memory_order_release);
}

void LogLine(LogPriority priority, absl::string_view line) {
  const LogFormat format = CurrentLogFormat();
  const std::string text =
      FormatLogLine(format, priority,
                    format == LogFormat::kJournal
                        ? ""
                        : absl::FormatTime("%Y-%m-%d %H:%M:%E3S", absl::Now(),
                                           absl::LocalTimeZone()),
                    line);
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n =
        ::write(STDERR_FILENO, text.data() + done, text.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
}

void LogLine(absl::string_view line) { LogLine(LogPriority::kInfo, line); }

void SetVerboseLog(bool v) { verbose.store(v, std::memory_order_relaxed); }
bool VerboseLog() { return verbose.load(std::memory_order_relaxed); }

bool LogRateLimit::AllowAt(absl::Time now, uint64_t* left_out) {
  if (now - last_ < period_) {
    ++left_out_;
    return false;
  }
  last_ = now;
  *left_out = left_out_;
  left_out_ = 0;
  return true;
}

}  // namespace gmlake
