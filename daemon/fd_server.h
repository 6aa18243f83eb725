// Copyright 2026 The GMLake Authors.
//
// FdServer: gmlaked's descriptor socket (fd.sock). One thread with epoll
// serves every connection; each message is an FdRequest framed by
// common/fd_passing.h, each answer an FdReply (with descriptors for claims).
//
// After a restart, a client shows the chunks it still holds with an adopt
// request: their descriptors ride on it (the only request that may carry
// any), and the Lake adopts them into its session (daemon/adopt_policy.h).
//
// A connection is anonymous until it binds a session: the daemon reads the
// peer's pid/uid/gid with SO_PEERCRED, the Lake checks them against the
// session, and from then on the connection belongs to the session and lives
// as long as it does. Either end going away ends the other: the connection
// closing ends the session, and a session ending elsewhere (Watch stream
// broken, process gone, CloseSession) closes the connection.
//
// The loop never blocks on a client. It reads a message only once all of
// it is in the socket buffer (FIONREAD against the peeked header). Replies
// go to a queue per connection that is flushed without blocking as the
// client reads; a connection whose oldest queued reply has waited
// send_timeout in all is dropped, one with max_queued_reply_bytes queued or
// a claim being sent is not read from (so a client that does not read
// cannot make the daemon buffer without bound), and a claim's descriptors
// are made batch by batch as the queue drains. Each wakeup serves at most a few
// requests per connection, so one busy client delays the others by little, and
// housekeeping runs on time. Garbage, oversized messages, descriptors sent
// to the daemon, partial messages that stall, unbound connections that
// linger or keep sending binds that are refused are answered with an error
// where possible and closed; none of them leaks a descriptor or a chunk.

#ifndef GMLAKE_DAEMON_FD_SERVER_H_
#define GMLAKE_DAEMON_FD_SERVER_H_

#include <sys/epoll.h>
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <set>
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
#include "daemon/log.h"
#include "proto/gmlake.pb.h"

namespace gmlake {

struct FdServerOptions {
  std::string path;
  // Permissions of the socket file (clients of every uid connect).
  mode_t mode = 0666;
  // A client that leaves a reply unread this long in all is dropped.
  absl::Duration send_timeout = absl::Seconds(2);
  // A message that stays incomplete this long drops its connection.
  absl::Duration partial_timeout = absl::Seconds(2);
  // Connections that bind no session within this are closed.
  absl::Duration bind_timeout = absl::Seconds(10);
  // Beyond this many connections, new ones are closed at once.
  size_t max_connections = 16384;
  // Descriptors per reply message (at most kMaxFdsPerGroup: one sendmsg).
  size_t fds_per_reply = kMaxFdsPerGroup;
  // Requests served per connection per wakeup of the loop.
  int requests_per_wakeup = 8;
  // Reply bytes a connection may have queued before the daemon stops
  // reading its requests (and making its claim's next batch).
  size_t max_queued_reply_bytes = 16 << 10;
  // Binds refused on one connection before it is dropped.
  int max_refused_binds = 3;
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
  // A claim whose descriptors are being sent, a batch at a time.
  struct ClaimInProgress {
    uint64_t lease = 0;
    std::vector<uint64_t> ids;
    size_t done = 0;
  };

  struct Conn {
    uint64_t serial = 0;
    UniqueFd sock;
    PeerCredentials peer;
    uint64_t session = 0;  // 0 until bound
    absl::Time accepted;
    absl::Time partial_since = absl::InfiniteFuture();
    FrameSendQueue out;
    std::unique_ptr<ClaimInProgress> claim;
    int refused_binds = 0;
  };

  // What serving a connection's requests came to.
  enum class Served {
    kIdle,     // nothing more queued
    kMore,     // requests left: serve again next round
    kBlocked,  // replies or a claim pending: resumes when the queue drains
    kClose,    // close the connection (reason in *why)
  };

  FdServer(Lake* lake, FdServerOptions options, UniqueFd listener,
           UniqueFd wake, UniqueFd epoll);
  void Loop();
  // One epoll event of Loop's round: the listener, the wake-up, or a
  // connection (writable: Pump; readable: ready_; hung up: served, closed).
  void HandleEvent(const epoll_event& event);
  // One round over ready_: a few requests of each connection served.
  void ServeRound();
  void AcceptAll();
  // At the descriptor limit: refuses one connection with the spare
  // descriptor, pauses accepting for a while, logs (rate-limited).
  void OutOfDescriptorsWhileAccepting(int err);
  // Watches the listener again once the pause is over.
  void ResumeAccepting();
  // Tells `sock` why (if it reads at once) and closes it.
  void Refuse(UniqueFd sock, const absl::Status& why);
  // Serves up to requests_per_wakeup complete requests queued on `c`.
  Served ServeSome(Conn* c, std::string* why);
  // Serves one request; false to close the connection.
  bool Serve(Conn* c, ReceivedMessage* msg, std::string* why);
  // OK if `c` is bound to `session`: FailedPrecondition when unbound,
  // PermissionDenied when bound to another; `doing` names the request.
  static absl::Status CheckBoundTo(const Conn& c, uint64_t session,
                                   absl::string_view doing);
  bool ServeBind(Conn* c, const v1::FdRequest& req, std::string* why);
  // Adopts the chunks behind `fds` into the connection's session (after a
  // restart: Lake::Adopt); the reply carries their new ids.
  bool ServeAdopt(Conn* c, const v1::FdRequest& req, std::vector<UniqueFd> fds,
                  std::string* why);
  // Queues a reply and sends what the socket takes; false to close.
  bool Reply(Conn* c, const v1::FdReply& reply, std::string* why);
  bool ReplyStatus(Conn* c, const absl::Status& status, std::string* why);
  // Sends what is queued for `c` and makes the next batches of its claim
  // while the queue has room; false to close.
  bool Pump(Conn* c, std::string* why);
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
  // Connections with requests to serve in the next round (ordered, so every
  // connection gets its turn).
  std::set<uint64_t> ready_;
  uint64_t next_serial_ = 2;  // 0: listener, 1: wake
  absl::Time last_housekeeping_;
  // Given up at EMFILE to accept a connection and refuse it (else it
  // would stay in the backlog and wake the loop at once, forever).
  UniqueFd spare_;
  absl::Time accept_paused_until_ = absl::InfinitePast();
  uint64_t refused_for_descriptors_ = 0;
  LogRateLimit accept_log_{absl::Seconds(1)};

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
