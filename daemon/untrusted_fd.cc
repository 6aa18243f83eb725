// Copyright 2026 The GMLake Authors.

#include "daemon/untrusted_fd.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/mutex.h"

#ifndef SO_PASSRIGHTS
#define SO_PASSRIGHTS 83  // Linux 6.16 (77cbe1a6d873)
#endif

namespace gmlake {
namespace {

constexpr long kDmaBufMagic = 0x444d4142;  // DMA_BUF_MAGIC, linux/magic.h

void DisarmLinger(int fd) {
  const linger off{0, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &off, sizeof(off));
}

// A Unix socket's unread messages may carry descriptors (SCM_RIGHTS) that
// its close would drop, and whose last close may block (a lingering TCP
// socket in a half-read message). Receives them first, a bounded number,
// turns their linger off and closes them, looking `depth` levels down.
void DrainDescriptors(int fd, int depth) {
  int type = 0, domain = 0;
  socklen_t len = sizeof(type);
  if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0) return;
  len = sizeof(domain);
  if (::getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 ||
      domain != AF_UNIX) {
    return;
  }
  constexpr int kMaxReads = 64;
  constexpr size_t kFdsPerRead = 253;  // SCM_MAX_FD
  alignas(cmsghdr) char control[CMSG_SPACE(kFdsPerRead * sizeof(int))];
  char bytes[4096];
  for (int i = 0; i < kMaxReads; ++i) {
    iovec iov{bytes, sizeof(bytes)};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    if (::recvmsg(fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC) <= 0) return;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr;
         c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t k = 0; k < n; ++k) {
        int got;
        std::memcpy(&got, CMSG_DATA(c) + k * sizeof(int), sizeof(int));
        DisarmLinger(got);
        if (depth > 0) DrainDescriptors(got, depth - 1);
        ::close(got);
      }
    }
  }
}

// One detached thread closing what serving threads must not. Never
// destroyed: at exit, a close still waiting dies with the process.
class Closer {
 public:
  static Closer& Get() {
    static Closer* closer = new Closer();
    return *closer;
  }

  void Close(int fd) {
    MutexLock l(&mu_);
    queue_.push_back(fd);
    queued_.Signal();
  }

  uint64_t pending() {
    MutexLock l(&mu_);
    return queue_.size() + (closing_ ? 1 : 0);
  }

 private:
  Closer() {
    std::thread([this] { Loop(); }).detach();
  }

  void Loop() {
    for (;;) {
      int fd;
      {
        MutexLock l(&mu_);
        closing_ = false;
        while (queue_.empty()) queued_.Wait(&mu_);
        fd = queue_.front();
        queue_.pop_front();
        closing_ = true;
      }
      DrainDescriptors(fd, /*depth=*/1);
      ::close(fd);
    }
  }

  // common/mutex.h's, which ThreadSanitizer sees into (the system's
  // Abseil is not instrumented).
  Mutex mu_;
  CondVar queued_;
  std::deque<int> queue_ ABSL_GUARDED_BY(mu_);
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

absl::Status GetDescriptorFacts(int fd, DescriptorFacts* facts) {
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("fstat of a received descriptor: ", std::strerror(errno)));
  }
  facts->mode = st.st_mode;
  facts->shmem = ::fcntl(fd, F_GET_SEALS) >= 0;
  struct statfs fs;
  facts->dmabuf =
      ::fstatfs(fd, &fs) == 0 && static_cast<long>(fs.f_type) == kDmaBufMagic;
  return absl::OkStatus();
}

std::string DescribeDescriptor(const DescriptorFacts& facts) {
  if (facts.dmabuf) return "a dma-buf";
  switch (facts.mode & S_IFMT) {
    case S_IFSOCK:
      return "a socket";
    case S_IFIFO:
      return "a pipe or FIFO";
    case S_IFDIR:
      return "a directory";
    case S_IFBLK:
      return "a block device";
    case S_IFCHR:
      return "a character device";
    case S_IFLNK:
      return "a symbolic link";
    case S_IFREG:
      return facts.shmem ? "a memfd" : "a regular file that is not a memfd";
    case 0:
      return "an anonymous inode";
    default:
      return "a descriptor of an unknown kind";
  }
}

absl::Status CheckChunkDescriptorKind(const DescriptorFacts& facts) {
  if (facts.dmabuf) return absl::OkStatus();
  switch (facts.mode & S_IFMT) {
    case S_IFREG:
      if (facts.shmem) return absl::OkStatus();
      break;
    case S_IFCHR:  // the CUDA driver's exports
    case 0:        // anonymous inodes
      return absl::OkStatus();
    default:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      DescribeDescriptor(facts),
      " cannot stand for a chunk (gmlaked takes memfds, dma-bufs and the "
      "GPU driver's exports)"));
}

absl::Status CheckChunkDescriptors(absl::Span<const UniqueFd> fds) {
  for (size_t i = 0; i < fds.size(); ++i) {
    DescriptorFacts facts;
    absl::Status s = GetDescriptorFacts(fds[i].get(), &facts);
    if (s.ok()) s = CheckChunkDescriptorKind(facts);
    if (!s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("descriptor ", i + 1, " of ", fds.size(), ": ",
                       s.message(), "; all were closed"));
    }
  }
  return absl::OkStatus();
}

void CloseUntrusted(UniqueFd fd) {
  if (!fd.valid()) return;
  // A lingering socket's last close would wait out its linger: make it
  // return at once (the kernel still sends what is queued, in the
  // background). Harmless for the other kinds, where it fails.
  DisarmLinger(fd.get());
  Closer::Get().Close(fd.Release());
}

void CloseUntrusted(std::vector<UniqueFd> fds) {
  for (UniqueFd& fd : fds) CloseUntrusted(std::move(fd));
}

ssize_t RecvUntrusted(int sock, char* buf, size_t n, size_t* descriptors) {
  constexpr size_t kScmMaxFd = 253;
  alignas(cmsghdr) char control[CMSG_SPACE(kScmMaxFd * sizeof(int))];
  iovec iov{buf, n};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t got;
  do {
    got = ::recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  } while (got < 0 && errno == EINTR);
  size_t count = 0;
  if (got >= 0) {
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr;
         c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < k; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        CloseUntrusted(UniqueFd(fd));
        ++count;
      }
    }
  }
  if (descriptors != nullptr) *descriptors = count;
  return got;
}

uint64_t UntrustedClosesPending() { return Closer::Get().pending(); }

absl::Status RefuseDescriptors(int sock) {
  const int off = 0;
  if (::setsockopt(sock, SOL_SOCKET, SO_PASSRIGHTS, &off, sizeof(off)) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "SO_PASSRIGHTS: ", std::strerror(errno),
        " (Linux 6.16 or later refuses descriptors sent to gmlaked's gRPC "
        "socket; on this kernel a client can send some)"));
  }
  return absl::OkStatus();
}

}  // namespace gmlake
