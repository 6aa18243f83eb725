// Copyright 2026 The GMLake Authors.
//
// A relay between gmlaked's gRPC server and its clients, for kernels whose
// gRPC socket cannot refuse descriptors (no SO_PASSRIGHTS, before Linux
// 6.16).
//
// gRPC reads its connections with plain reads: a descriptor a client sends
// with any byte (SCM_RIGHTS) is dropped by the kernel, and so closed, on
// gRPC's own thread, and a TCP socket with SO_LINGER and a full send queue
// makes that close wait for as long as the client chose (issue 20 §A).
// So gRPC is given one end of a socketpair instead of the client's
// connection, and one relay thread copies bytes between the two: it reads
// the client with recvmsg and room for control messages, so that any
// descriptor arrives here, is handed to CloseUntrusted (linger off, the
// detached closer) and the connection is dropped. Only bytes reach gRPC.
//
// The relay never blocks: every socket is non-blocking, one epoll thread
// serves all connections, and each direction holds at most one read's
// worth of bytes (kRelayChunk) that its reader has not taken yet; until
// those are written, that side is not read (backpressure, as a slow peer's
// own socket buffer fills). Nothing is buffered while bytes flow.
//
// Peer credentials: the socketpair's SO_PEERCRED names gmlaked, so the
// acceptor records the client's (read from the accepted socket) under the
// descriptor it gives gRPC (GrpcPeerCredentials::Record).
//
// What remains: at gmlaked's descriptor limit the kernel cannot install a
// received descriptor and closes it itself, on the relay's thread.

#ifndef GMLAKE_DAEMON_GRPC_RELAY_H_
#define GMLAKE_DAEMON_GRPC_RELAY_H_

#include <sys/epoll.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/fd_passing.h"
#include "common/mutex.h"
#include "common/unique_fd.h"
#include "daemon/log.h"

namespace gmlake {

// The most bytes one direction of one connection holds (one read).
inline constexpr size_t kRelayChunk = 64 << 10;

class GrpcRelay {
 public:
  // Starts the relay thread.
  static absl::StatusOr<std::unique_ptr<GrpcRelay>> Start();
  // Stop().
  ~GrpcRelay();
  GrpcRelay(const GrpcRelay&) = delete;
  GrpcRelay& operator=(const GrpcRelay&) = delete;

  // Relays `client` (an accepted connection of `peer`) and returns the
  // descriptor to serve in its place: the other end of a socketpair,
  // non-blocking and close-on-exec. On failure `client` is closed
  // (CloseUntrusted).
  absl::StatusOr<UniqueFd> Add(UniqueFd client, const PeerCredentials& peer);

  // Ends the thread and every relayed connection (clients' sockets go to
  // CloseUntrusted). Idempotent.
  void Stop();

  // Connections relayed now; descriptors received from clients (all
  // closed, their connections dropped).
  size_t connections() const;
  uint64_t descriptors_refused() const;

 private:
  // One direction: bytes read from one socket not yet written to the
  // other.
  struct Pending {
    std::string bytes;
    size_t sent = 0;
    bool empty() const { return sent == bytes.size(); }
  };
  struct Conn {
    UniqueFd client;
    UniqueFd grpc;  // our end of the socketpair
    PeerCredentials peer;
    bool client_readable = false, client_writable = false;
    bool grpc_readable = false, grpc_writable = false;
    // Hung up (or failed): what it still sends is read, but what it is
    // owed is not waited for.
    bool client_gone = false, grpc_gone = false;
    Pending to_grpc, to_client;
    uint64_t moved = 0;  // bytes read and written so far
  };
  enum class Step { kGoOn, kDrop };

  explicit GrpcRelay(UniqueFd epoll, UniqueFd wake);
  void Loop();
  // Marks the connection an epoll event is for as ready to read or write
  // (or gone), and adds it to `ready`; false for the wake-up event.
  bool NoteEvent(const epoll_event& event, std::vector<uint64_t>* ready);
  // Pumps each of `ready` (sorted, once each) up to kRoundsPerWakeup times;
  // returns those with more to move.
  std::vector<uint64_t> PumpReady(std::vector<uint64_t> ready);
  // At the end: every connection, and those not yet taken, closed.
  void DropAll();
  void TakeNew();
  // Moves bytes both ways while the sockets let it; kDrop when the
  // connection is over.
  Step Pump(Conn* c);
  // Reads the client into c->to_grpc (recvmsg: descriptors end it).
  Step ReadClient(Conn* c);
  Step ReadGrpc(Conn* c);
  // Writes what `p` holds to `fd`; kDrop on a broken socket.
  static Step Flush(int fd, Pending* p, bool* writable, uint64_t* moved);
  // Keeps the part of `n` bytes of scratch_ that `fd` did not take.
  Step Forward(int fd, size_t n, Pending* p, bool* writable);
  void Drop(uint64_t id);

  UniqueFd epoll_;
  UniqueFd wake_;  // eventfd: new connections, Stop
  std::thread thread_;
  bool stopped_ = false;
  // Owned by the relay thread.
  absl::flat_hash_map<uint64_t, std::unique_ptr<Conn>> conns_;
  std::vector<char> scratch_;
  LogRateLimit log_limit_{absl::Seconds(1)};

  mutable Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::vector<std::pair<uint64_t, std::unique_ptr<Conn>>> incoming_
      ABSL_GUARDED_BY(mu_);
  size_t connections_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t descriptors_refused_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gmlake

#endif  // GMLAKE_DAEMON_GRPC_RELAY_H_
