// Copyright 2026 The GMLake Authors.

#include "daemon/log.h"

#include <unistd.h>

#include <atomic>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace gmlake {
namespace {
std::atomic<bool> verbose{false};
}  // namespace

void LogLine(absl::string_view line) {
  std::string text =
      absl::StrCat(absl::FormatTime("%Y-%m-%d %H:%M:%E3S", absl::Now(),
                                    absl::LocalTimeZone()),
                   " gmlaked: ", line, "\n");
  // One write(2) per line, so lines of different threads do not interleave.
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n =
        ::write(STDERR_FILENO, text.data() + done, text.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
}

void SetVerboseLog(bool v) { verbose.store(v, std::memory_order_relaxed); }
bool VerboseLog() { return verbose.load(std::memory_order_relaxed); }

}  // namespace gmlake
