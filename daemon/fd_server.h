// Copyright 2026 The GMLake Authors.
//
// FdServer: gmlaked's descriptor socket (fd.sock). One thread with epoll
// serves every connection; each message is an FdRequest framed by
// common/fd_passing.h, each answer an FdReply (with descriptors for claims).
//
// A connection is anonymous until it binds a session: the daemon reads the
// peer's pid/uid/gid with SO_PEERCRED, the Lake checks them against the
// session, and from then on the connection belongs to the session and lives
// as long as it does. Either end going away ends the other: the connection
// closing ends the session, and a session ending elsewhere (Watch stream
// broken, process gone, CloseSession) closes the connection.
//
// The loop never blocks on a client: it reads a message only once all of
// it is in the socket buffer (FIONREAD against the peeked header), and
// sends have a timeout (a client that does not read is dropped). Garbage,
// oversized messages, descriptors sent to the daemon, partial messages that
// stall and unbound connections that linger are answered with an error
// where possible and closed; none of them leaks a descriptor or a chunk.

#ifndef GMLAKE_DAEMON_FD_SERVER_H_
#define GMLAKE_DAEMON_FD_SERVER_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/fd_passing.h"
#include "common/mutex.h"
#include "common/unique_fd.h"
#include "daemon/lake.h"

namespace gmlake {

struct FdServerOptions {
  std::string path;
  // Permissions of the socket file (clients of every uid connect).
  mode_t mode = 0666;
  // A client that does not take a reply within this is dropped.
  absl::Duration send_timeout = absl::Seconds(2);
  // A message that stays incomplete this long drops its connection.
  absl::Duration partial_timeout = absl::Seconds(2);
  // Connections that bind no session within this are closed.
  absl::Duration bind_timeout = absl::Seconds(10);
  // Beyond this many connections, new ones are closed at once.
  size_t max_connections = 16384;
  // Descriptors per reply message (at most kMaxFdsPerGroup: one sendmsg).
  size_t fds_per_reply = kMaxFdsPerGroup;
};

// Largest FdRequest payload the daemon reads.
inline constexpr size_t kMaxFdRequestBytes = 4096;

class FdServer {
 public:
  // Listens on options.path (removing a stale socket file) and starts the
  // serving thread. FailedPrecondition if another gmlaked listens there.
  static absl::StatusOr<std::unique_ptr<FdServer>> Start(
      Lake* lake, FdServerOptions options);
  // Stop().
  ~FdServer();
  FdServer(const FdServer&) = delete;
  FdServer& operator=(const FdServer&) = delete;

  // Stops the thread, closes every connection (without ending sessions:
  // the Lake does that itself at shutdown) and removes the socket file.
  // Idempotent.
  void Stop();

  const std::string& path() const { return options_.path; }

 private:
  struct Conn {
    uint64_t serial = 0;
    UniqueFd sock;
    PeerCredentials peer;
    uint64_t session = 0;  // 0 until bound
    absl::Time accepted;
    absl::Time partial_since = absl::InfiniteFuture();
  };

  FdServer(Lake* lake, FdServerOptions options, UniqueFd listener,
           UniqueFd wake, UniqueFd epoll);
  void Loop();
  void AcceptAll();
  // Reads and serves every complete message queued on `c`. Returns false
  // when the connection must close (the reason in *why).
  bool ServeReadable(Conn* c, std::string* why);
  // Serves one request; false to close the connection.
  bool Serve(Conn* c, const ReceivedMessage& msg, std::string* why);
  bool Reply(Conn* c, const absl::Status& status, std::string* why);
  bool ServeClaim(Conn* c, uint64_t session, const std::string& token,
                  uint64_t lease, std::string* why);
  void Close(uint64_t serial, absl::string_view why, bool end_session);
  void Housekeeping();
  // Called by the Lake when a bound session ends: closes its connection.
  void SessionEnded(uint64_t serial);
  void Wake();

  Lake* const lake_;
  const FdServerOptions options_;
  UniqueFd listener_;
  UniqueFd wake_;  // eventfd: Stop and ended sessions
  UniqueFd epoll_;
  std::thread thread_;
  bool stopped_ = false;

  // Owned by the loop thread.
  absl::flat_hash_map<uint64_t, std::unique_ptr<Conn>> conns_;
  uint64_t next_serial_ = 2;  // 0: listener, 1: wake
  absl::Time last_housekeeping_;

  // Shared with the end-of-session hooks the Lake holds, which may outlive
  // this server: they reach it only while `server` is set.
  struct HookTarget {
    Mutex mu;
    FdServer* server ABSL_GUARDED_BY(mu) = nullptr;
  };
  std::shared_ptr<HookTarget> hook_target_;

  Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<uint64_t> ended_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gmlake

#endif  // GMLAKE_DAEMON_FD_SERVER_H_
