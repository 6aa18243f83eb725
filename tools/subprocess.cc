// Copyright 2026 The GMLake Authors.

#include "tools/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace gmlake {

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Start(
    const std::vector<std::string>& argv, bool pipes) {
  if (argv.empty()) return absl::InvalidArgumentError("no program to start");
  if (::access(argv[0].c_str(), X_OK) != 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot run ", argv[0], ": ", std::strerror(errno)));
  }
  int in[2] = {-1, -1}, out[2] = {-1, -1};
  if (pipes && (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0)) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  std::vector<char*> args;
  for (const std::string& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    if (pipes) {
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
    }
    ::execv(args[0], args.data());
    std::fprintf(stderr, "exec %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  auto p = std::unique_ptr<Subprocess>(new Subprocess());
  p->pid_ = pid;
  if (pipes) {
    ::close(in[0]);
    ::close(out[1]);
    p->to_child_ = in[1];
    p->from_child_ = ::fdopen(out[0], "r");
  }
  return p;
}

Subprocess::~Subprocess() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  if (to_child_ >= 0) ::close(to_child_);
  if (from_child_ != nullptr) std::fclose(from_child_);
}

absl::Status Subprocess::Send(const std::string& line) {
  const std::string data = line + "\n";
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n =
        ::write(to_child_, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::UnavailableError(absl::StrCat("writing to process ", pid_,
                                                 ": ", std::strerror(errno)));
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Subprocess::ReadLine() {
  char* line = nullptr;
  size_t cap = 0;
  const ssize_t n = ::getline(&line, &cap, from_child_);
  if (n < 0) {
    std::free(line);
    return absl::UnavailableError(
        absl::StrCat("process ", pid_, " closed its output (did it exit?)"));
  }
  std::string s(line, static_cast<size_t>(n));
  std::free(line);
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

absl::StatusOr<int> Subprocess::Wait(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    if (r < 0) return absl::InternalError(std::strerror(errno));
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("process ", pid_, " did not exit"));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
}

absl::StatusOr<int> Subprocess::Stop(int sig, absl::Duration timeout) {
  if (pid_ <= 0) return 0;
  ::kill(pid_, sig);
  absl::StatusOr<int> code = Wait(timeout);
  if (code.ok()) return code;
  ::kill(pid_, SIGKILL);
  return Wait(absl::Seconds(5));
}

}  // namespace gmlake
