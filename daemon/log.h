// Copyright 2026 The GMLake Authors.
//
// gmlaked's log: one line per event on stderr, with a timestamp, so that
// journald (or a test) can read it. Abseil 20220623 has no logging library.

#ifndef GMLAKE_DAEMON_LOG_H_
#define GMLAKE_DAEMON_LOG_H_

#include <string>

#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace gmlake {

// Writes "2026-01-02 03:04:05.678 gmlaked: <line>\n" to stderr atomically.
void LogLine(absl::string_view line);

// Whether per-session events (open, bind, lease) are logged; ends of
// sessions, failures and start-up lines always are.
void SetVerboseLog(bool verbose);
bool VerboseLog();

template <typename... Args>
void Logf(const absl::FormatSpec<Args...>& format, const Args&... args) {
  LogLine(absl::StrFormat(format, args...));
}

template <typename... Args>
void VLogf(const absl::FormatSpec<Args...>& format, const Args&... args) {
  if (VerboseLog()) LogLine(absl::StrFormat(format, args...));
}

}  // namespace gmlake

#endif  // GMLAKE_DAEMON_LOG_H_
