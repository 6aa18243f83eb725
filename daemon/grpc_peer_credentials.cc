// Copyright 2026 The GMLake Authors.

#include "daemon/grpc_peer_credentials.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "daemon/http2_refusal.h"
#include "daemon/log.h"
#include "daemon/untrusted_fd.h"
#include "grpcpp/server_posix.h"

namespace gmlake {
namespace {

UniqueFd OpenSpare() {
  return UniqueFd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
}

}  // namespace

absl::StatusOr<GrpcFdGuard> ParseGrpcFdGuard(absl::string_view text) {
  if (text == "auto") return GrpcFdGuard::kAuto;
  if (text == "passrights") return GrpcFdGuard::kPassRights;
  if (text == "proxy") return GrpcFdGuard::kProxy;
  return absl::InvalidArgumentError(absl::StrCat(
      "--grpc_fd_guard=", text, ": use auto, passrights or proxy"));
}

void GrpcPeerCredentials::Record(int fd, const PeerCredentials& peer) {
  Entry e;
  e.peer = peer;
  struct stat st;
  if (::fstat(fd, &st) == 0) {
    e.dev = st.st_dev;
    e.ino = st.st_ino;
  }
  MutexLock l(&mu_);
  ForgetLocked(fd);
  by_fd_[fd] = e;
  by_uid_[peer.uid].insert(fd);
}

void GrpcPeerCredentials::ForgetLocked(int fd) {
  auto it = by_fd_.find(fd);
  if (it == by_fd_.end()) return;
  auto u = by_uid_.find(it->second.peer.uid);
  if (u != by_uid_.end()) {
    u->second.erase(fd);
    if (u->second.empty()) by_uid_.erase(u);
  }
  by_fd_.erase(it);
}

bool GrpcPeerCredentials::StillOpen(int fd, const Entry& e) {
  struct stat st;
  return ::fstat(fd, &st) == 0 && st.st_dev == e.dev && st.st_ino == e.ino;
}

size_t GrpcPeerCredentials::OpenConnectionsOf(uid_t uid) {
  MutexLock l(&mu_);
  auto u = by_uid_.find(uid);
  if (u == by_uid_.end()) return 0;
  std::vector<int> closed;
  for (int fd : u->second) {
    if (!StillOpen(fd, by_fd_.at(fd))) closed.push_back(fd);
  }
  const size_t open = u->second.size() - closed.size();
  for (int fd : closed) ForgetLocked(fd);
  return open;
}

size_t GrpcPeerCredentials::OpenConnections() {
  MutexLock l(&mu_);
  std::vector<int> closed;
  for (const auto& [fd, e] : by_fd_) {
    if (!StillOpen(fd, e)) closed.push_back(fd);
  }
  for (int fd : closed) ForgetLocked(fd);
  return by_fd_.size();
}

std::optional<PeerCredentials> GrpcPeerCredentials::Lookup(
    absl::string_view grpc_peer) const {
  // Exactly "fd:" and a descriptor number: anything else is not ours.
  if (!absl::ConsumePrefix(&grpc_peer, "fd:")) return std::nullopt;
  int fd = -1;
  if (grpc_peer.empty() || !absl::SimpleAtoi(grpc_peer, &fd) || fd < 0) {
    return std::nullopt;
  }
  MutexLock l(&mu_);
  auto it = by_fd_.find(fd);
  if (it == by_fd_.end()) return std::nullopt;
  return it->second.peer;
}

size_t GrpcPeerCredentials::size() const {
  MutexLock l(&mu_);
  return by_fd_.size();
}

absl::StatusOr<std::unique_ptr<GrpcUnixAcceptor>> GrpcUnixAcceptor::Start(
    grpc::Server* server, UniqueFd listener, GrpcPeerCredentials* peers,
    GrpcAcceptorLimits limits, GrpcFdGuard guard) {
  if (server == nullptr || !listener.valid() || peers == nullptr) {
    return absl::InvalidArgumentError(
        "GrpcUnixAcceptor needs a server, a listening socket and a registry");
  }
  // Non-blocking, so that AcceptPending drains it and returns.
  if (::fcntl(listener.get(), F_SETFL,
              ::fcntl(listener.get(), F_GETFL) | O_NONBLOCK) != 0) {
    return absl::InternalError(
        absl::StrCat("fcntl on the gRPC socket: ", std::strerror(errno)));
  }
  // gRPC reads its connections itself, with no room for control messages:
  // a descriptor sent on one would be closed in gRPC's thread, whose close
  // a client can make block. The kernel refuses them instead (inherited by
  // every connection, even those not yet accepted), or the relay takes
  // them.
  std::unique_ptr<GrpcRelay> relay;
  if (guard != GrpcFdGuard::kProxy) {
    absl::Status s = RefuseDescriptors(listener.get());
    if (!s.ok() && guard == GrpcFdGuard::kPassRights) {
      return absl::FailedPreconditionError(
          absl::StrCat(s.message(),
                       "; --grpc_fd_guard=auto or proxy relays connections "
                       "instead"));
    }
    if (!s.ok()) {
      Warnf("gRPC socket: %s; relaying every connection instead", s.message());
      guard = GrpcFdGuard::kProxy;
    }
  }
  if (guard == GrpcFdGuard::kProxy) {
    absl::StatusOr<std::unique_ptr<GrpcRelay>> r = GrpcRelay::Start();
    if (!r.ok()) return r.status();
    relay = *std::move(r);
  }
  UniqueFd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) {
    return absl::InternalError(absl::StrCat("eventfd: ", std::strerror(errno)));
  }
  std::unique_ptr<GrpcUnixAcceptor> a(
      new GrpcUnixAcceptor(server, std::move(listener), std::move(wake), peers,
                           limits, std::move(relay)));
  a->thread_ = std::thread([p = a.get()] { p->Loop(); });
  return a;
}

GrpcUnixAcceptor::GrpcUnixAcceptor(grpc::Server* server, UniqueFd listener,
                                   UniqueFd wake, GrpcPeerCredentials* peers,
                                   GrpcAcceptorLimits limits,
                                   std::unique_ptr<GrpcRelay> relay)
    : server_(server),
      listener_(std::move(listener)),
      wake_(std::move(wake)),
      peers_(peers),
      limits_(limits),
      relay_(std::move(relay)),
      spare_(OpenSpare()) {}

GrpcUnixAcceptor::~GrpcUnixAcceptor() {
  Stop();
  if (relay_ != nullptr) relay_->Stop();
}

void GrpcUnixAcceptor::Stop() {
  if (stopped_) return;
  stopped_ = true;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_.get(), &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  listener_.Reset();
}

uint64_t GrpcUnixAcceptor::accepted() const {
  MutexLock l(&mu_);
  return accepted_;
}

uint64_t GrpcUnixAcceptor::refused() const {
  MutexLock l(&mu_);
  return refused_;
}

void GrpcUnixAcceptor::Loop() {
  std::vector<pollfd> p;
  for (;;) {
    const int timeout = ExpireParked();
    p.assign({{listener_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}});
    for (const Parked& k : parked_) {
      p.push_back(
          {k.sock.get(), static_cast<short>(k.answered ? 0 : POLLIN), 0});
    }
    if (::poll(p.data(), p.size(), timeout) < 0) {
      if (errno == EINTR) continue;
      Logf("gRPC socket: poll: %s; accepting stops", std::strerror(errno));
      break;
    }
    if (p[1].revents != 0) break;  // Stop
    // Before accepting, which may add to parked_.
    for (size_t i = 2; i < p.size(); ++i) {
      Parked& k = parked_[i - 2];
      if (k.answered) {
        // The client read the answer and left (or broke): close it now.
        if ((p[i].revents & (POLLHUP | POLLERR)) != 0) {
          CloseUntrusted(std::move(k.sock));
        }
      } else if (p[i].revents != 0) {
        ServeParked(&k);
      }
    }
    if (p[0].revents != 0 && !AcceptPending()) break;
  }
  for (Parked& k : parked_) {
    if (k.sock.valid()) CloseUntrusted(std::move(k.sock));
  }
  parked_.clear();
}

bool GrpcUnixAcceptor::AcceptPending() {
  for (;;) {
    UniqueFd sock(::accept4(listener_.get(), nullptr, nullptr,
                            SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!sock.valid()) {
      const int err = errno;
      if (err == EINTR || err == ECONNABORTED) continue;
      if (err == EAGAIN || err == EWOULDBLOCK) return true;
      if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
        OutOfDescriptors(err);
        return true;
      }
      Logf("gRPC socket: accept: %s; accepting stops", std::strerror(err));
      return false;
    }
    absl::StatusOr<PeerCredentials> peer = GetPeerCredentials(sock.get());
    if (!peer.ok()) {
      Logf("gRPC socket: a connection without credentials: %s",
           peer.status().ToString());
      CloseUntrusted(std::move(sock));
      continue;
    }
    if (std::string why = OverLimit(*peer); !why.empty()) {
      uint64_t left_out = 0;
      if (log_limit_.Allow(&left_out)) {
        Warnf(
            "gRPC socket: refusing a connection of pid %d: %s (%d lines "
            "like this left out)",
            peer->pid, why, left_out);
      }
      Refuse(std::move(sock), why);
      continue;
    }
    if (relay_ != nullptr) {
      // gRPC gets the relay's end; the client's credentials are recorded
      // under it.
      absl::StatusOr<UniqueFd> served = relay_->Add(std::move(sock), *peer);
      if (!served.ok()) {
        uint64_t left_out = 0;
        if (log_limit_.Allow(&left_out)) {
          Warnf(
              "gRPC socket: a connection of pid %d dropped: %s (%d lines "
              "like this left out)",
              peer->pid, served.status().message(), left_out);
        }
        continue;
      }
      sock = *std::move(served);
    }
    // Recorded and counted before gRPC can read a call from it: a caller
    // whose call has been answered must see its connection in accepted().
    peers_->Record(sock.get(), *peer);
    {
      MutexLock l(&mu_);
      ++accepted_;
    }
    grpc::AddInsecureChannelFromFd(server_, sock.Release());
  }
}

std::string GrpcUnixAcceptor::OverLimit(const PeerCredentials& peer) {
  if (const size_t n = peers_->OpenConnectionsOf(peer.uid);
      n >= limits_.max_connections_per_uid) {
    return absl::StrCat("uid ", peer.uid, " has ", n,
                        " gRPC connections to gmlaked open, the limit "
                        "(--max_grpc_connections_per_uid); each client "
                        "session holds one, so it also limits the uid's "
                        "sessions: close some");
  }
  if (const size_t n = peers_->OpenConnections();
      n >= limits_.max_connections) {
    return absl::StrCat("gmlaked has ", n,
                        " gRPC connections open, the limit "
                        "(--max_grpc_connections); try again later");
  }
  return "";
}

namespace {

void SendOnce(int sock, const std::string& bytes) {
  [[maybe_unused]] ssize_t n =
      ::send(sock, bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
}

// Says goodbye (GOAWAY naming no stream) and closes off this thread.
void GoAwayAndClose(UniqueFd sock, const std::string& why) {
  SendOnce(sock.get(), Http2GoAway(0, why));
  ::shutdown(sock.get(), SHUT_WR);
  CloseUntrusted(std::move(sock));
}

}  // namespace

void GrpcUnixAcceptor::Refuse(UniqueFd sock, const std::string& why,
                              bool park) {
  {
    MutexLock l(&mu_);
    ++refused_;
  }
  // HTTP/2 (RFC 9113), one try each, without waiting: the server's
  // preface; then (http2_refusal.h) the client's first call is answered
  // with the reason, so that the client reports it, and a GOAWAY follows.
  SendOnce(sock.get(), Http2ServerPreface());
  if (!park) {
    GoAwayAndClose(std::move(sock), why);
    return;
  }
  // Kept until its call comes, for at most kParkFor, and a bounded
  // number of them: the oldest goes first.
  if (parked_.size() >= kMaxParked) {
    GoAwayAndClose(std::move(parked_.front().sock), parked_.front().why);
    parked_.pop_front();
  }
  Parked p;
  p.until = absl::Now() + kParkFor;
  p.sock = std::move(sock);
  p.why = why;
  parked_.push_back(std::move(p));
}

void GrpcUnixAcceptor::ServeParked(Parked* p) {
  char buf[4096];
  for (int i = 0; i < 16 && p->finder.stream() == 0; ++i) {
    const ssize_t n = RecvUntrusted(p->sock.get(), buf, sizeof(buf), nullptr);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) break;
    p->finder.Feed(absl::string_view(buf, static_cast<size_t>(n)));
    if (p->finder.broken()) break;
  }
  if (const uint32_t stream = p->finder.stream(); stream != 0) {
    SendOnce(
        p->sock.get(),
        Http2SettingsAck() +
            Http2GrpcTrailersOnly(
                stream, static_cast<int>(grpc::RESOURCE_EXHAUSTED), p->why) +
            Http2GoAway(stream, p->why));
    ::shutdown(p->sock.get(), SHUT_WR);
    p->answered = true;  // closed when due, once the client read it
    return;
  }
  // Gone, failed, or not HTTP/2.
  GoAwayAndClose(std::move(p->sock), p->why);
}

int GrpcUnixAcceptor::ExpireParked() {
  const absl::Time now = absl::Now();
  for (auto it = parked_.begin(); it != parked_.end();) {
    if (it->sock.valid() && it->until > now) {
      ++it;
      continue;
    }
    if (it->sock.valid()) {
      if (it->answered) {
        CloseUntrusted(std::move(it->sock));
      } else {
        GoAwayAndClose(std::move(it->sock), it->why);
      }
    }
    it = parked_.erase(it);
  }
  if (parked_.empty()) return -1;
  absl::Time next = absl::InfiniteFuture();
  for (const Parked& p : parked_) next = std::min(next, p.until);
  return static_cast<int>(absl::ToInt64Milliseconds(next - now) + 1);
}

void GrpcUnixAcceptor::OutOfDescriptors(int err) {
  // The classic reserve descriptor: give it up to take one connection and
  // refuse it, rather than leave it in the backlog to wake us at once.
  if (spare_.valid()) {
    spare_.Reset();
    UniqueFd sock(::accept4(listener_.get(), nullptr, nullptr,
                            SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (sock.valid()) {
      Refuse(std::move(sock),
             absl::StrCat("gmlaked is out of descriptors (", std::strerror(err),
                          "); try again later, or raise LimitNOFILE= of "
                          "gmlaked.service"),
             /*park=*/false);
    }
  }
  uint64_t left_out = 0;
  if (log_limit_.Allow(&left_out)) {
    Warnf(
        "gRPC socket: accept: %s; pausing accepting (%d lines like this "
        "left out)",
        std::strerror(err), left_out);
  }
  // A pause, not a spin: the connections wait in the backlog.
  ::usleep(100000);
  if (!spare_.valid()) spare_ = OpenSpare();
}

}  // namespace gmlake
