// Copyright 2026 The GMLake Authors.

#include "common/fd_passing.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/fd_usage.h"

namespace gmlake {
namespace {

std::string Errno(int err) { return std::strerror(err); }

// A control buffer for up to `fds` descriptors (plus room for credentials,
// should the socket have SO_PASSCRED set), aligned for cmsghdr.
class ControlBuffer {
 public:
  explicit ControlBuffer(size_t fds) {
    if (fds == 0) return;
    size_ = CMSG_SPACE(fds * sizeof(int)) + CMSG_SPACE(sizeof(ucred));
    words_.resize((size_ + sizeof(uint64_t) - 1) / sizeof(uint64_t));
  }
  void* data() { return size_ == 0 ? nullptr : words_.data(); }
  size_t size() const { return size_; }

 private:
  std::vector<uint64_t> words_;
  size_t size_ = 0;
};

// After EAGAIN: waits on a non-blocking socket; on a blocking one EAGAIN
// means SO_RCVTIMEO/SO_SNDTIMEO expired.
absl::Status WaitReady(int sock, int16_t events) {
  const int flags = fcntl(sock, F_GETFL);
  if (flags < 0 || (flags & O_NONBLOCK) == 0) {
    return absl::DeadlineExceededError(
        absl::StrCat(events == POLLIN ? "receiving" : "sending",
                     " on the socket timed out (SO_RCVTIMEO / SO_SNDTIMEO)"));
  }
  pollfd p{sock, events, 0};
  while (poll(&p, 1, -1) < 0) {
    if (errno != EINTR) {
      return absl::InternalError(absl::StrCat("poll: ", Errno(errno)));
    }
  }
  return absl::OkStatus();
}

absl::Status SendError(int err) {
  switch (err) {
    case EPIPE:
    case ECONNRESET:
    case ENOTCONN:
      return absl::UnavailableError(absl::StrCat(
          "peer closed the connection while sending (", Errno(err), ")"));
    case EBADF:
    case ENOTSOCK:
      return absl::InvalidArgumentError(
          absl::StrCat("sendmsg: ", Errno(err), " (not an open socket)"));
    case ETOOMANYREFS:
      return absl::ResourceExhaustedError(absl::StrCat(
          "sendmsg: ", Errno(err),
          " (too many descriptors in flight; the receiver is not reading)"));
    default:
      return absl::InternalError(absl::StrCat("sendmsg: ", Errno(err)));
  }
}

// Sends all of `data`, with `fds` attached to its first byte.
absl::Status SendPart(int sock, const uint8_t* data, size_t size,
                      absl::Span<const int> fds) {
  ControlBuffer control(fds.size());
  bool fds_sent = fds.empty();
  size_t sent = 0;
  while (sent < size) {
    iovec iov{const_cast<uint8_t*>(data + sent), size - sent};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (!fds_sent) {
      msg.msg_control = control.data();
      msg.msg_controllen = CMSG_SPACE(fds.size() * sizeof(int));
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(fds.size() * sizeof(int));
      std::memcpy(CMSG_DATA(c), fds.data(), fds.size() * sizeof(int));
    }
    const ssize_t n = sendmsg(sock, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      if (err == EAGAIN || err == EWOULDBLOCK) {
        if (absl::Status s = WaitReady(sock, POLLOUT); !s.ok()) return s;
        continue;
      }
      return SendError(err);
    }
    fds_sent = true;
    sent += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

// Reads exact lengths of one message, collecting the descriptors that come
// with them into `fds` (owned at once, so every error path closes them).
class Reader {
 public:
  Reader(int sock, size_t max_fds_per_read, std::vector<UniqueFd>* fds)
      : sock_(sock),
        max_fds_per_read_(max_fds_per_read),
        control_(max_fds_per_read),
        fds_(fds) {}

  // The message's full length, once the header has told it.
  void set_total(size_t total) { total_ = total; }

  absl::Status Read(uint8_t* dst, size_t len) {
    size_t got = 0;
    while (got < len) {
      iovec iov{dst + got, len - got};
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control_.data();
      msg.msg_controllen = control_.size();
      const ssize_t n = recvmsg(sock_, &msg, MSG_CMSG_CLOEXEC);
      if (n < 0) {
        const int err = errno;
        if (err == EINTR) continue;
        if (err == EAGAIN || err == EWOULDBLOCK) {
          if (absl::Status s = WaitReady(sock_, POLLIN); !s.ok()) return s;
          continue;
        }
        if (err == ECONNRESET) return Closed();
        return absl::InternalError(absl::StrCat("recvmsg: ", Errno(err)));
      }
      const size_t before = fds_->size();
      TakeFds(&msg);
      if (msg.msg_flags & MSG_CTRUNC) {
        // Fewer than the buffer holds: the kernel could not install them.
        if (fds_->size() - before < max_fds_per_read_) return OutOfFds();
        return absl::ResourceExhaustedError(absl::StrCat(
            "the peer sent more descriptors than this receiver accepts "
            "(MSG_CTRUNC); the ",
            fds_->size(), " that arrived were closed"));
      }
      if (msg.msg_flags & MSG_TRUNC) {
        return absl::DataLossError(
            "a record was longer than the message framing expects: the peer "
            "does not speak gmlake's descriptor protocol");
      }
      if (n == 0) return Closed();
      got += static_cast<size_t>(n);
      done_ += static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }

 private:
  void TakeFds(msghdr* msg) {
    for (cmsghdr* c = CMSG_FIRSTHDR(msg); c != nullptr;
         c = CMSG_NXTHDR(msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < n; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        fds_->emplace_back(fd);
      }
    }
  }

  absl::Status OutOfFds() const {
    const FdUsage usage = CurrentFdUsage();
    return absl::ResourceExhaustedError(absl::StrCat(
        "this process is out of file descriptors (", usage.open,
        " open, RLIMIT_NOFILE ", usage.limit,
        "): the peer's descriptors could not all be received (MSG_CTRUNC), "
        "and the ",
        fds_->size(),
        " that arrived were closed; raise the limit (ulimit -n, or "
        "LimitNOFILE= for a systemd service) or use larger chunks"));
  }

  absl::Status Closed() const {
    if (done_ == 0) return absl::UnavailableError("peer closed the connection");
    if (total_ == 0) {
      return absl::UnavailableError(
          absl::StrCat("peer closed the connection after ", done_, " of the ",
                       kFdFrameHeaderSize, " header bytes of a message"));
    }
    return absl::UnavailableError(
        absl::StrCat("peer closed the connection after ", done_, " of ", total_,
                     " bytes of a message"));
  }

  const int sock_;
  const size_t max_fds_per_read_;
  ControlBuffer control_;
  std::vector<UniqueFd>* fds_;
  size_t done_ = 0;
  size_t total_ = 0;
};

size_t Groups(size_t fds) {
  return (fds + kMaxFdsPerGroup - 1) / kMaxFdsPerGroup;
}

// The parts one message is sent in, each with the descriptors riding on its
// first byte: the header (with the first group), a carrier byte per further
// group, the payload. Descriptors are given as indexes [begin, end) into
// the caller's list.
struct FramePart {
  std::string bytes;
  size_t fds_begin = 0, fds_end = 0;
};

absl::StatusOr<std::vector<FramePart>> FrameParts(absl::string_view payload,
                                                  size_t fd_count) {
  if (payload.size() > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SendFds: payload of ", payload.size(), " bytes is over 4 GiB"));
  }
  if (fd_count > kMaxFdsPerMessage) {
    return absl::InvalidArgumentError(
        absl::StrCat("SendFds: ", fd_count, " descriptors; at most ",
                     kMaxFdsPerMessage, " per message"));
  }
  std::vector<FramePart> parts;
  const uint32_t fields[3] = {kFdFrameMagic,
                              static_cast<uint32_t>(payload.size()),
                              static_cast<uint32_t>(fd_count)};
  static_assert(sizeof(fields) == kFdFrameHeaderSize);
  FramePart header;
  header.bytes.assign(reinterpret_cast<const char*>(fields), sizeof(fields));
  header.fds_end = std::min(fd_count, kMaxFdsPerGroup);
  parts.push_back(std::move(header));
  for (size_t g = 1; g < Groups(fd_count); ++g) {
    FramePart carrier;
    carrier.bytes.assign(1, '\0');
    carrier.fds_begin = g * kMaxFdsPerGroup;
    carrier.fds_end = std::min(fd_count, (g + 1) * kMaxFdsPerGroup);
    parts.push_back(std::move(carrier));
  }
  if (!payload.empty()) {
    FramePart body;
    body.bytes.assign(payload.data(), payload.size());
    parts.push_back(std::move(body));
  }
  return parts;
}

absl::StatusOr<sockaddr_un> UnixAddress(const std::string& path) {
  if (path.empty() || path.size() > kMaxUnixPathLength) {
    return absl::InvalidArgumentError(absl::StrCat(
        "socket path '", path, "' is ", path.size(),
        " bytes; a Unix socket address holds 1 to ", kMaxUnixPathLength,
        ": use a shorter directory (e.g. under /run or /tmp)"));
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  return addr;
}

}  // namespace

absl::Status SendFds(int sock, absl::Span<const uint8_t> payload,
                     absl::Span<const int> fds) {
  return SendFds(
      sock,
      absl::string_view(reinterpret_cast<const char*>(payload.data()),
                        payload.size()),
      fds);
}

absl::Status SendFds(int sock, absl::string_view payload,
                     absl::Span<const int> fds) {
  absl::StatusOr<std::vector<FramePart>> parts =
      FrameParts(payload, fds.size());
  if (!parts.ok()) return parts.status();
  // Checked up front: a bad descriptor found by sendmsg halfway through a
  // message would leave the stream out of step.
  for (int fd : fds) {
    if (fd < 0 || fcntl(fd, F_GETFD) < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("SendFds: descriptor ", fd, " is not open"));
    }
  }
  for (const FramePart& part : *parts) {
    absl::Status s =
        SendPart(sock, reinterpret_cast<const uint8_t*>(part.bytes.data()),
                 part.bytes.size(),
                 fds.subspan(part.fds_begin, part.fds_end - part.fds_begin));
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status FrameSendQueue::Push(absl::string_view payload,
                                  std::vector<UniqueFd> fds) {
  absl::StatusOr<std::vector<FramePart>> parts =
      FrameParts(payload, fds.size());
  if (!parts.ok()) return parts.status();
  const absl::Time now = absl::Now();
  for (FramePart& p : *parts) {
    Part part;
    bytes_ += p.bytes.size();
    part.bytes = std::move(p.bytes);
    for (size_t i = p.fds_begin; i < p.fds_end; ++i) {
      part.fds.push_back(std::move(fds[i]));
    }
    part.queued = now;
    parts_.push_back(std::move(part));
  }
  return absl::OkStatus();
}

absl::Status FrameSendQueue::Flush(int sock) {
  while (!parts_.empty()) {
    Part& p = parts_.front();
    iovec iov{p.bytes.data() + p.sent, p.bytes.size() - p.sent};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    ControlBuffer control(p.sent == 0 ? p.fds.size() : 0);
    if (p.sent == 0 && !p.fds.empty()) {
      msg.msg_control = control.data();
      msg.msg_controllen = CMSG_SPACE(p.fds.size() * sizeof(int));
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(p.fds.size() * sizeof(int));
      for (size_t i = 0; i < p.fds.size(); ++i) {
        const int fd = p.fds[i].get();
        std::memcpy(CMSG_DATA(c) + i * sizeof(int), &fd, sizeof(int));
      }
    }
    const ssize_t n = sendmsg(sock, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      if (err == EAGAIN || err == EWOULDBLOCK) return absl::OkStatus();
      return SendError(err);
    }
    // The descriptors went with the first byte sent: ours close now.
    p.fds.clear();
    p.sent += static_cast<size_t>(n);
    bytes_ -= static_cast<size_t>(n);
    if (p.sent == p.bytes.size()) parts_.pop_front();
  }
  return absl::OkStatus();
}

absl::Time FrameSendQueue::oldest_queued() const {
  return parts_.empty() ? absl::InfiniteFuture() : parts_.front().queued;
}

size_t FrameHeader::wire_bytes() const {
  const size_t groups = Groups(fd_count);
  return kFdFrameHeaderSize + (groups > 0 ? groups - 1 : 0) + payload_bytes;
}

FrameHeader DecodeFrameHeader(const uint8_t (&bytes)[kFdFrameHeaderSize]) {
  uint32_t fields[3];
  std::memcpy(fields, bytes, sizeof(fields));
  return FrameHeader{fields[0], fields[1], fields[2]};
}

absl::StatusOr<FrameQueued> PeekFrame(int sock, size_t max_payload) {
  int avail = 0;
  if (ioctl(sock, FIONREAD, &avail) != 0) {
    return absl::InternalError(absl::StrCat("FIONREAD: ", Errno(errno)));
  }
  uint8_t header[kFdFrameHeaderSize];
  const ssize_t peeked =
      recv(sock, header, sizeof(header), MSG_PEEK | MSG_DONTWAIT);
  if (peeked == 0) return FrameQueued::kPeerClosed;
  if (peeked < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      return FrameQueued::kNothing;
    }
    if (errno == ECONNRESET) return FrameQueued::kPeerClosed;
    return absl::InternalError(absl::StrCat("recv: ", Errno(errno)));
  }
  const size_t queued = static_cast<size_t>(avail);
  if (static_cast<size_t>(peeked) < sizeof(header)) {
    // A short peek with enough bytes queued means descriptors split the
    // header: not this framing, and RecvFds says so at once.
    return queued >= sizeof(header) ? FrameQueued::kWhole : FrameQueued::kPart;
  }
  const FrameHeader h = DecodeFrameHeader(header);
  if (!h.magic_ok() || h.payload_bytes > max_payload) {
    return FrameQueued::kWhole;  // RecvFds refuses it on the header alone
  }
  return queued >= h.wire_bytes() ? FrameQueued::kWhole : FrameQueued::kPart;
}

namespace {
// RecvFds into `out`: on an error, the descriptors that arrived are left in
// out.fds.
absl::Status RecvFdsInto(int sock, size_t max_payload, size_t max_fds,
                         ReceivedMessage& out) {
  Reader reader(sock, std::min(max_fds, kMaxFdsPerGroup), &out.fds);
  uint8_t header[kFdFrameHeaderSize];
  if (absl::Status s = reader.Read(header, sizeof(header)); !s.ok()) return s;
  const FrameHeader h = DecodeFrameHeader(header);
  const uint32_t magic = h.magic;
  const size_t payload_size = h.payload_bytes;
  const size_t fd_count = h.fd_count;
  if (!h.magic_ok()) {
    return absl::DataLossError(absl::StrCat(
        "bad message header (starts 0x", absl::Hex(magic, absl::kZeroPad8),
        ", expected 0x", absl::Hex(kFdFrameMagic, absl::kZeroPad8),
        "): the peer does not speak gmlake's descriptor protocol, or the "
        "stream is out of step"));
  }
  if (fd_count > max_fds) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "message carries ", fd_count, " descriptors, more than the ", max_fds,
        " this receiver accepts; the ", out.fds.size(),
        " that arrived were closed"));
  }
  if (payload_size > max_payload) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "message announces ", payload_size, " payload bytes, more than the ",
        max_payload, " this receiver accepts"));
  }
  const size_t groups = Groups(fd_count);
  reader.set_total(h.wire_bytes());
  auto expect_fds = [&](size_t expected,
                        absl::string_view where) -> absl::Status {
    if (out.fds.size() == expected) return absl::OkStatus();
    return absl::DataLossError(
        absl::StrCat("message announces ", fd_count, " descriptors but ",
                     out.fds.size(), " had arrived ", where, " instead of ",
                     expected, "; they were closed"));
  };
  if (absl::Status s =
          expect_fds(std::min(fd_count, kMaxFdsPerGroup), "with the header");
      !s.ok()) {
    return s;
  }
  for (size_t g = 1; g < groups; ++g) {
    uint8_t carrier;
    if (absl::Status s = reader.Read(&carrier, 1); !s.ok()) return s;
    if (absl::Status s =
            expect_fds(std::min(fd_count, (g + 1) * kMaxFdsPerGroup),
                       absl::StrCat("with group ", g + 1));
        !s.ok()) {
      return s;
    }
  }
  out.payload.resize(payload_size);
  if (absl::Status s = reader.Read(
          reinterpret_cast<uint8_t*>(out.payload.data()), payload_size);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = expect_fds(fd_count, "by the end of the payload");
      !s.ok()) {
    return s;
  }
  return absl::OkStatus();
}
}  // namespace

absl::StatusOr<ReceivedMessage> RecvFds(int sock, size_t max_payload,
                                        size_t max_fds,
                                        std::vector<UniqueFd>* arrived) {
  ReceivedMessage out;
  absl::Status s = RecvFdsInto(sock, max_payload, max_fds, out);
  if (s.ok()) return out;
  if (arrived != nullptr) {
    for (UniqueFd& fd : out.fds) arrived->push_back(std::move(fd));
  }
  return s;
}

absl::StatusOr<PeerCredentials> GetPeerCredentials(int sock) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("SO_PEERCRED on descriptor ", sock, ": ", Errno(errno),
                     " (a connected Unix socket is needed)"));
  }
  PeerCredentials out;
  out.pid = cred.pid;
  out.uid = cred.uid;
  out.gid = cred.gid;
  return out;
}

absl::StatusOr<UniqueFd> ListenUnix(const std::string& path, mode_t mode,
                                    int backlog) {
  absl::StatusOr<sockaddr_un> addr = UnixAddress(path);
  if (!addr.ok()) return addr.status();
  const sockaddr* sa = reinterpret_cast<const sockaddr*>(&*addr);
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat(
          path, " exists and is not a socket; refusing to replace it"));
    }
    // A socket file nobody listens on is left over from a process that
    // died: remove it. One somebody listens on is not ours to take.
    UniqueFd probe(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!probe.valid()) {
      return absl::InternalError(absl::StrCat("socket: ", Errno(errno)));
    }
    if (connect(probe.get(), sa, sizeof(sockaddr_un)) == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("another process is already listening at ", path,
                       "; stop it or use another path"));
    }
    const int err = errno;
    if (err != ECONNREFUSED) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot tell whether ", path,
                       " is in use (connect: ", Errno(err), ")"));
    }
    if (unlink(path.c_str()) != 0 && errno != ENOENT) {
      return absl::PermissionDeniedError(absl::StrCat(
          "cannot remove the stale socket ", path, ": ", Errno(errno)));
    }
  }
  UniqueFd sock(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!sock.valid()) {
    return absl::InternalError(absl::StrCat("socket: ", Errno(errno)));
  }
  if (bind(sock.get(), sa, sizeof(sockaddr_un)) != 0) {
    const int err = errno;
    const std::string msg =
        absl::StrCat("cannot bind a Unix socket at ", path, ": ", Errno(err));
    if (err == ENOENT) {
      return absl::FailedPreconditionError(
          absl::StrCat(msg, "; does its directory exist?"));
    }
    if (err == EACCES) return absl::PermissionDeniedError(msg);
    return absl::FailedPreconditionError(msg);
  }
  if (chmod(path.c_str(), mode) != 0) {
    const int err = errno;
    unlink(path.c_str());
    return absl::InternalError(absl::StrCat("chmod ", path, ": ", Errno(err)));
  }
  if (listen(sock.get(), backlog) != 0) {
    const int err = errno;
    unlink(path.c_str());
    return absl::InternalError(
        absl::StrCat("listen on ", path, ": ", Errno(err)));
  }
  return sock;
}

absl::StatusOr<UniqueFd> AcceptUnix(int listen_sock) {
  while (true) {
    const int fd = accept4(listen_sock, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) return UniqueFd(fd);
    const int err = errno;
    if (err == EINTR || err == ECONNABORTED) continue;
    if (err == EAGAIN || err == EWOULDBLOCK) {
      return absl::UnavailableError("accept: no connection is pending");
    }
    if (err == EMFILE || err == ENFILE) {
      return absl::ResourceExhaustedError(
          absl::StrCat("accept: ", Errno(err), "; raise RLIMIT_NOFILE"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("accept on descriptor ", listen_sock, ": ", Errno(err)));
  }
}

absl::StatusOr<UniqueFd> ConnectUnix(const std::string& path,
                                     absl::string_view peer_name) {
  absl::StatusOr<sockaddr_un> addr = UnixAddress(path);
  if (!addr.ok()) return addr.status();
  UniqueFd sock(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!sock.valid()) {
    return absl::InternalError(absl::StrCat("socket: ", Errno(errno)));
  }
  if (connect(sock.get(), reinterpret_cast<const sockaddr*>(&*addr),
              sizeof(sockaddr_un)) != 0) {
    const int err = errno;
    const std::string msg = absl::StrCat("cannot connect to ", peer_name,
                                         " at ", path, ": ", Errno(err));
    if (err == EACCES || err == EPERM) {
      return absl::PermissionDeniedError(
          absl::StrCat(msg, "; check the socket's permissions and owner"));
    }
    return absl::UnavailableError(
        absl::StrCat(msg, "; is ", peer_name, " running?"));
  }
  return sock;
}

}  // namespace gmlake
