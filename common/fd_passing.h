// Copyright 2026 The GMLake Authors.
//
// Passing file descriptors between processes over a Unix socket.
//
// gmlaked exports physical chunks as descriptors and hands them to clients;
// gRPC cannot carry descriptors, so they travel beside it on a plain AF_UNIX
// socket with sendmsg/recvmsg and SCM_RIGHTS. This file frames such messages
// (a payload plus any number of descriptors) so that partial reads, closed
// peers, garbage on the socket and truncated descriptor lists all come back
// as errors, and no descriptor is ever leaked on any path.
//
// Wire format of one message (host byte order: both ends are on one host):
//
//   header   12 bytes: magic "GMFD" (kFdFrameMagic), payload length (u32),
//            descriptor count (u32). The first group of up to
//            kMaxFdsPerGroup descriptors rides on the header's first byte.
//   carriers one byte per further group of descriptors, each sent with its
//            group (the kernel passes at most SCM_MAX_FD = 253 descriptors
//            per sendmsg).
//   payload  the payload bytes.
//
// Each part is sent and read with exact lengths, so the framing works on
// SOCK_STREAM and SOCK_SEQPACKET sockets alike. After any error from
// RecvFds the stream may be out of step: close the connection.
//
// Blocking: both calls block until the whole message is sent or received,
// also on non-blocking sockets (they poll). On a blocking socket with
// SO_RCVTIMEO/SO_SNDTIMEO, a timeout is DeadlineExceeded.

#ifndef GMLAKE_COMMON_FD_PASSING_H_
#define GMLAKE_COMMON_FD_PASSING_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/unique_fd.h"

namespace gmlake {

// "GMFD" read as a little-endian u32: the first 4 bytes of every message.
inline constexpr uint32_t kFdFrameMagic = 0x44464D47;
// Bytes of the message header.
inline constexpr size_t kFdFrameHeaderSize = 12;
// Descriptors per sendmsg (the kernel's SCM_MAX_FD).
inline constexpr size_t kMaxFdsPerGroup = 253;
// Descriptors per message that SendFds accepts.
inline constexpr size_t kMaxFdsPerMessage = 65536;
// The longest path a Unix socket address holds (sun_path less its NUL).
inline constexpr size_t kMaxUnixPathLength = 107;

// What a message's header announces.
struct FrameHeader {
  uint32_t magic = 0;
  uint32_t payload_bytes = 0;
  uint32_t fd_count = 0;
  bool magic_ok() const { return magic == kFdFrameMagic; }
  // Bytes of the whole message on the wire: header, carriers, payload.
  size_t wire_bytes() const;
};
FrameHeader DecodeFrameHeader(const uint8_t (&bytes)[kFdFrameHeaderSize]);

// How much of the next message is queued on a socket, for a receiver that
// must never wait on a partial one (gmlaked's single fd-socket thread).
enum class FrameQueued {
  kNothing,     // no bytes
  kPart,        // part of a message: RecvFds would wait for the rest
  kWhole,       // RecvFds will not wait: a whole message, or a header it
                // refuses at once (bad magic, payload over max_payload)
  kPeerClosed,  // the peer closed the connection and nothing is queued
};
// Peeks (MSG_PEEK | MSG_DONTWAIT, FIONREAD); reads nothing. Errors are the
// socket's.
absl::StatusOr<FrameQueued> PeekFrame(int sock, size_t max_payload);

// Sends one message: `payload` (at most 4 GiB - 1 bytes) and duplicates of
// `fds` (at most kMaxFdsPerMessage; the caller keeps its own). Unavailable
// when the peer has closed the connection (no SIGPIPE is raised),
// InvalidArgument for a descriptor that is not open or a message too large.
absl::Status SendFds(int sock, absl::Span<const uint8_t> payload,
                     absl::Span<const int> fds);
// The same with a text payload.
absl::Status SendFds(int sock, absl::string_view payload,
                     absl::Span<const int> fds);

// Messages for a sender that must never block on its peer (gmlaked's
// descriptor socket, one thread for every client). Push queues a message in
// the wire format above; Flush sends what the socket takes now (MSG_DONTWAIT)
// and keeps the rest, descriptors included, for the next call. Not
// thread-safe.
class FrameSendQueue {
 public:
  // Queues one message; the queue owns `fds` until they are sent (or the
  // queue is destroyed). InvalidArgument for a message SendFds refuses.
  absl::Status Push(absl::string_view payload, std::vector<UniqueFd> fds);
  // Sends until the queue is empty or the socket is full; OK in both cases.
  // Unavailable when the peer has closed the connection, other errors as
  // SendFds; the stream is then out of step.
  absl::Status Flush(int sock);
  bool empty() const { return parts_.empty(); }
  // Bytes queued and not yet sent.
  size_t bytes() const { return bytes_; }
  // When the oldest message not yet wholly sent was queued (InfiniteFuture
  // when empty): how long the peer has kept it waiting.
  absl::Time oldest_queued() const;

 private:
  struct Part {
    std::string bytes;
    std::vector<UniqueFd> fds;  // ride on the part's first byte
    size_t sent = 0;
    absl::Time queued;
  };
  std::deque<Part> parts_;
  size_t bytes_ = 0;
};

// A message from RecvFds. The descriptors are close-on-exec and owned here.
struct ReceivedMessage {
  std::string payload;
  std::vector<UniqueFd> fds;
};

// Receives one whole message of at most `max_payload` payload bytes and
// `max_fds` descriptors. Errors (every descriptor that arrived is closed):
//   Unavailable        the peer closed the connection ("peer closed the
//                      connection after 3 of 120 bytes of a message"), or
//                      before a message began.
//   ResourceExhausted  the message is larger than the limits (checked on the
//                      header, before anything is allocated), or the
//                      descriptors did not fit (MSG_CTRUNC).
//   DataLoss           not a message of this protocol (bad magic), or the
//                      descriptors that arrived do not match the header.
//   DeadlineExceeded   SO_RCVTIMEO expired.
// With `arrived`, the descriptors that arrived before an error are moved
// there instead of being closed (a daemon closes a client's descriptors on
// a thread where a close that blocks harms nobody: daemon/untrusted_fd.h).
absl::StatusOr<ReceivedMessage> RecvFds(
    int sock, size_t max_payload, size_t max_fds,
    std::vector<UniqueFd>* arrived = nullptr);

// Who is at the other end of a connected Unix socket (SO_PEERCRED): the
// process that connected (or created the socket pair), as of that moment.
struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};
absl::StatusOr<PeerCredentials> GetPeerCredentials(int sock);

// --- Socket helpers
// -----------------------------------------------------------

// Binds and listens on a SOCK_STREAM Unix socket at `path` (close-on-exec),
// with the socket file's permissions set to `mode`. A stale socket file (one
// nobody listens on) is removed first; FailedPrecondition if another process
// is listening there or `path` exists and is not a socket, InvalidArgument if
// `path` is longer than kMaxUnixPathLength. The caller removes the file when
// done. Note: the file exists with the umask's permissions for a moment
// before the chmod; keep the socket in a directory only the right users can
// enter.
absl::StatusOr<UniqueFd> ListenUnix(const std::string& path, mode_t mode = 0600,
                                    int backlog = 128);

// Accepts one connection on a socket from ListenUnix (close-on-exec),
// retrying on EINTR.
absl::StatusOr<UniqueFd> AcceptUnix(int listen_sock);

// Connects a SOCK_STREAM socket (close-on-exec) to `path`. Unavailable with
// e.g. "cannot connect to gmlaked at /run/gmlake/fd.sock: No such file or
// directory; is gmlaked running?" (`peer_name` names the server),
// PermissionDenied when the socket's permissions forbid it, InvalidArgument
// for a path longer than kMaxUnixPathLength.
absl::StatusOr<UniqueFd> ConnectUnix(const std::string& path,
                                     absl::string_view peer_name = "gmlaked");

}  // namespace gmlake

#endif  // GMLAKE_COMMON_FD_PASSING_H_
