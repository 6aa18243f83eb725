// Copyright 2026 The GMLake Authors.
//
// Subprocess: a child started with fork+exec (never a bare fork: a process
// that initialised CUDA cannot use it in a forked child), talked to line by
// line over its stdin/stdout.

#ifndef GMLAKE_TOOLS_SUBPROCESS_H_
#define GMLAKE_TOOLS_SUBPROCESS_H_

#include <sys/types.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace gmlake {

class Subprocess {
 public:
  // Starts argv[0] (a path) with `argv`. With `pipes`, the child's stdin
  // and stdout are pipes to this process; else it inherits both. stderr is
  // always inherited.
  static absl::StatusOr<std::unique_ptr<Subprocess>> Start(
      const std::vector<std::string>& argv, bool pipes);
  // Kills (SIGKILL) and reaps the child if it is still running.
  ~Subprocess();

  pid_t pid() const { return pid_; }
  // Writes one line (a newline is added).
  absl::Status Send(const std::string& line);
  // Reads one line (without its newline); Unavailable at end of output.
  absl::StatusOr<std::string> ReadLine();
  // Sends `sig` and waits up to `timeout` for the exit; then SIGKILL.
  // Returns the exit code, or 128 + the signal that ended it.
  absl::StatusOr<int> Stop(int sig, absl::Duration timeout);
  // Waits for the exit without signalling.
  absl::StatusOr<int> Wait(absl::Duration timeout);

 private:
  Subprocess() = default;
  pid_t pid_ = -1;
  int to_child_ = -1;
  FILE* from_child_ = nullptr;
};

}  // namespace gmlake

#endif  // GMLAKE_TOOLS_SUBPROCESS_H_
