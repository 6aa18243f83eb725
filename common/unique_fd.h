// Copyright 2026 The GMLake Authors.
//
// UniqueFd: a move-only owner of one POSIX file descriptor.

#ifndef GMLAKE_COMMON_UNIQUE_FD_H_
#define GMLAKE_COMMON_UNIQUE_FD_H_

#include <unistd.h>

#include <utility>

namespace gmlake {

// Owns a file descriptor and closes it when destroyed. -1 means "none".
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { Reset(); }

  UniqueFd(UniqueFd&& other) noexcept : fd_(other.Release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) Reset(other.Release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }

  // Gives up ownership without closing; returns the descriptor.
  int Release() { return std::exchange(fd_, -1); }

  // Closes the held descriptor (if any) and takes `fd`.
  void Reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

}  // namespace gmlake

#endif  // GMLAKE_COMMON_UNIQUE_FD_H_
