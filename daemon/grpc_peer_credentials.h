// Copyright 2026 The GMLake Authors.
//
// Who is calling, on gmlaked's gRPC socket.
//
// gRPC over a Unix socket tells a handler only a peer string, and Debian's
// gRPC has no credentials type that carries SO_PEERCRED. So gmlaked accepts
// the gRPC socket's connections itself (GrpcUnixAcceptor): it reads each
// connection's SO_PEERCRED (the kernel's word on pid/uid/gid, as of the
// connect), records it by descriptor number (GrpcPeerCredentials), and only
// then hands the connection to the grpc::Server
// (grpc::AddInsecureChannelFromFd). gRPC names such a connection's peer
// "fd:<descriptor>", which leads a handler back to the record.
//
// Why a descriptor number identifies one connection for as long as a call
// on it runs: gRPC closes a connection's descriptor only when its transport
// is destroyed, and every call holds its transport. The kernel can hand the
// same number to a new connection only after that close, and the acceptor
// records the new connection's credentials before gRPC sees any call on
// it. A peer string that is not "fd:<n>" of a recorded connection (an
// in-process channel, a future gRPC that names peers otherwise) gives no
// credentials: callers are then unknown, and every check that needs a uid
// refuses (fails closed).

#ifndef GMLAKE_DAEMON_GRPC_PEER_CREDENTIALS_H_
#define GMLAKE_DAEMON_GRPC_PEER_CREDENTIALS_H_

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/fd_passing.h"
#include "common/mutex.h"
#include "common/unique_fd.h"
#include "daemon/grpc_relay.h"
#include "daemon/http2_refusal.h"
#include "daemon/log.h"
#include "grpcpp/grpcpp.h"

namespace gmlake {

// The credentials of the gRPC connections a GrpcUnixAcceptor accepted.
// Thread-safe.
class GrpcPeerCredentials {
 public:
  // Records the credentials of a connection whose descriptor is `fd`,
  // replacing those of an earlier connection that had the same number.
  void Record(int fd, const PeerCredentials& peer);
  // Connections recorded for `uid` that are still open, and in all. gRPC
  // closes connections without telling: one is open while its descriptor
  // number still names the socket recorded (same inode). Records of
  // closed ones are dropped on the way.
  size_t OpenConnectionsOf(uid_t uid);
  size_t OpenConnections();
  // The credentials behind a gRPC peer string ("fd:12"); nullopt for any
  // other peer.
  std::optional<PeerCredentials> Lookup(absl::string_view grpc_peer) const;
  // Connections recorded (including closed ones not yet replaced).
  size_t size() const;

 private:
  struct Entry {
    PeerCredentials peer;
    dev_t dev = 0;
    ino_t ino = 0;
  };
  // Whether `fd` still is the socket of `e`.
  static bool StillOpen(int fd, const Entry& e);
  void ForgetLocked(int fd) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable Mutex mu_;
  absl::flat_hash_map<int, Entry> by_fd_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uid_t, absl::flat_hash_set<int>> by_uid_
      ABSL_GUARDED_BY(mu_);
};

// Limits of the gRPC socket, against a client that opens connections
// without end (each costs gmlaked a descriptor and gRPC's buffers).
struct GrpcAcceptorLimits {
  // Open connections of one uid; the next is refused.
  size_t max_connections_per_uid = 64;
  // Open connections in all.
  size_t max_connections = 1024;
};

// How the gRPC socket keeps clients' descriptors from gRPC (grpc_relay.h):
// the kernel refuses them (SO_PASSRIGHTS, Linux 6.16), a relay takes them,
// or the first that works.
enum class GrpcFdGuard { kAuto, kPassRights, kProxy };
// "auto", "passrights", "proxy"; InvalidArgument naming them otherwise.
absl::StatusOr<GrpcFdGuard> ParseGrpcFdGuard(absl::string_view text);

// Accepts connections on a listening Unix socket and serves them with a
// grpc::Server built without listening ports, recording each connection's
// credentials first.
class GrpcUnixAcceptor {
 public:
  // Starts the accepting thread. `server` and `peers` must outlive the
  // acceptor; `listener` comes from ListenUnix.
  // Descriptors sent on the listener's connections are refused by the
  // kernel (RefuseDescriptors) or, where it cannot (kAuto) or when asked
  // (kProxy), taken by a GrpcRelay in front of every connection; kPassRights
  // fails where the kernel cannot.
  static absl::StatusOr<std::unique_ptr<GrpcUnixAcceptor>> Start(
      grpc::Server* server, UniqueFd listener, GrpcPeerCredentials* peers,
      GrpcAcceptorLimits limits = {}, GrpcFdGuard guard = GrpcFdGuard::kAuto);
  // Stop(), then ends the relay's connections: destroy it once the server
  // has shut down.
  ~GrpcUnixAcceptor();
  GrpcUnixAcceptor(const GrpcUnixAcceptor&) = delete;
  GrpcUnixAcceptor& operator=(const GrpcUnixAcceptor&) = delete;

  // Stops accepting (connections handed over already stay with the
  // server) and closes the listening socket. Idempotent.
  void Stop();

  // Connections handed to the server so far, and refused (over a limit,
  // out of descriptors).
  uint64_t accepted() const;
  uint64_t refused() const;
  // The relay in front of the connections; null when the kernel refuses
  // descriptors.
  const GrpcRelay* relay() const { return relay_.get(); }

 private:
  GrpcUnixAcceptor(grpc::Server* server, UniqueFd listener, UniqueFd wake,
                   GrpcPeerCredentials* peers, GrpcAcceptorLimits limits,
                   std::unique_ptr<GrpcRelay> relay);
  void Loop();
  // Accepts every pending connection; false once the listener failed.
  bool AcceptPending();
  // Why a connection of `peer` is refused, or "" to serve it.
  std::string OverLimit(const PeerCredentials& peer);
  // Tells the client why in an HTTP/2 GOAWAY (gRPC shows its text) and
  // closes the connection: a second later if `park` (so that the client
  // reads it), at once otherwise (out of descriptors).
  void Refuse(UniqueFd sock, const std::string& why, bool park = true);
  // At the descriptor limit: refuses one connection with the spare
  // descriptor; false when accepting should pause.
  void OutOfDescriptors(int err);
  // A refused connection kept until its first call is answered.
  struct Parked {
    absl::Time until;
    UniqueFd sock;  // invalid once closed
    std::string why;
    FirstStreamFinder finder;
    bool answered = false;
  };
  // Reads what a parked connection sent; answers its first call.
  void ServeParked(Parked* p);
  // Closes the refused connections kept long enough; the poll timeout
  // until the next one is due (-1: none).
  int ExpireParked();

  static constexpr size_t kMaxParked = 64;
  static constexpr absl::Duration kParkFor = absl::Seconds(1);

  grpc::Server* const server_;
  UniqueFd listener_;
  UniqueFd wake_;  // eventfd: Stop
  GrpcPeerCredentials* const peers_;
  const GrpcAcceptorLimits limits_;
  std::unique_ptr<GrpcRelay> relay_;
  // Owned by the accepting thread.
  UniqueFd spare_;  // given up at EMFILE to accept and refuse
  // Refused connections, half-closed, until they are closed.
  std::deque<Parked> parked_;
  LogRateLimit log_limit_{absl::Seconds(1)};
  std::thread thread_;
  bool stopped_ = false;
  mutable Mutex mu_;
  uint64_t accepted_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t refused_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gmlake

#endif  // GMLAKE_DAEMON_GRPC_PEER_CREDENTIALS_H_
