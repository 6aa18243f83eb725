// Copyright 2026 The GMLake Authors.

#include "daemon/grpc_peer_credentials.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "daemon/log.h"
#include "daemon/untrusted_fd.h"
#include "grpcpp/server_posix.h"

namespace gmlake {
namespace {

UniqueFd OpenSpare() {
  return UniqueFd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
}

}  // namespace

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
    GrpcAcceptorLimits limits) {
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
  // every connection, even those not yet accepted).
  if (absl::Status s = RefuseDescriptors(listener.get()); !s.ok()) {
    Warnf("gRPC socket: %s", s.message());
  }
  UniqueFd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) {
    return absl::InternalError(absl::StrCat("eventfd: ", std::strerror(errno)));
  }
  std::unique_ptr<GrpcUnixAcceptor> a(new GrpcUnixAcceptor(
      server, std::move(listener), std::move(wake), peers, limits));
  a->thread_ = std::thread([p = a.get()] { p->Loop(); });
  return a;
}

GrpcUnixAcceptor::GrpcUnixAcceptor(grpc::Server* server, UniqueFd listener,
                                   UniqueFd wake, GrpcPeerCredentials* peers,
                                   GrpcAcceptorLimits limits)
    : server_(server),
      listener_(std::move(listener)),
      wake_(std::move(wake)),
      peers_(peers),
      limits_(limits),
      spare_(OpenSpare()) {}

GrpcUnixAcceptor::~GrpcUnixAcceptor() { Stop(); }

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
  for (;;) {
    pollfd p[2] = {{listener_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      Logf("gRPC socket: poll: %s; accepting stops", std::strerror(errno));
      return;
    }
    if (p[1].revents != 0) return;  // Stop
    if (p[0].revents != 0 && !AcceptPending()) return;
  }
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
    // Recorded before gRPC can read a call from it.
    peers_->Record(sock.get(), *peer);
    grpc::AddInsecureChannelFromFd(server_, sock.Release());
    MutexLock l(&mu_);
    ++accepted_;
  }
}

std::string GrpcUnixAcceptor::OverLimit(const PeerCredentials& peer) {
  if (const size_t n = peers_->OpenConnectionsOf(peer.uid);
      n >= limits_.max_connections_per_uid) {
    return absl::StrCat("uid ", peer.uid, " has ", n,
                        " gRPC connections to gmlaked open, the limit "
                        "(--max_grpc_connections_per_uid); close some");
  }
  if (const size_t n = peers_->OpenConnections();
      n >= limits_.max_connections) {
    return absl::StrCat("gmlaked has ", n,
                        " gRPC connections open, the limit "
                        "(--max_grpc_connections); try again later");
  }
  return "";
}

void GrpcUnixAcceptor::Refuse(UniqueFd sock, const std::string& why) {
  {
    MutexLock l(&mu_);
    ++refused_;
  }
  // HTTP/2 (RFC 9113): the server's preface, an empty SETTINGS frame, then
  // GOAWAY (last stream 0, ENHANCE_YOUR_CALM) whose debug data gRPC
  // clients show. One try, without waiting.
  const std::string text = why.substr(0, 512);
  std::string out = {0, 0, 0, 4, 0, 0, 0, 0, 0};
  const uint32_t len = 8 + text.size();
  out += {static_cast<char>(len >> 16),
          static_cast<char>(len >> 8),
          static_cast<char>(len),
          7,
          0,
          0,
          0,
          0,
          0};
  out += {0, 0, 0, 0, 0, 0, 0, 0x0b};
  out += text;
  [[maybe_unused]] ssize_t n =
      ::send(sock.get(), out.data(), out.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  CloseUntrusted(std::move(sock));
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
                          "gmlaked.service"));
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
