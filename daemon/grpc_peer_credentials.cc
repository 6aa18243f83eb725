// Copyright 2026 The GMLake Authors.

#include "daemon/grpc_peer_credentials.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "daemon/log.h"
#include "grpcpp/server_posix.h"

namespace gmlake {

void GrpcPeerCredentials::Record(int fd, const PeerCredentials& peer) {
  MutexLock l(&mu_);
  by_fd_[fd] = peer;
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
  return it->second;
}

size_t GrpcPeerCredentials::size() const {
  MutexLock l(&mu_);
  return by_fd_.size();
}

absl::StatusOr<std::unique_ptr<GrpcUnixAcceptor>> GrpcUnixAcceptor::Start(
    grpc::Server* server, UniqueFd listener, GrpcPeerCredentials* peers) {
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
  UniqueFd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) {
    return absl::InternalError(absl::StrCat("eventfd: ", std::strerror(errno)));
  }
  std::unique_ptr<GrpcUnixAcceptor> a(new GrpcUnixAcceptor(
      server, std::move(listener), std::move(wake), peers));
  a->thread_ = std::thread([p = a.get()] { p->Loop(); });
  return a;
}

GrpcUnixAcceptor::GrpcUnixAcceptor(grpc::Server* server, UniqueFd listener,
                                   UniqueFd wake, GrpcPeerCredentials* peers)
    : server_(server),
      listener_(std::move(listener)),
      wake_(std::move(wake)),
      peers_(peers) {}

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
        // Out of descriptors: the connection waits in the backlog; try
        // again a little later rather than spin.
        Logf("gRPC socket: accept: %s", std::strerror(err));
        ::usleep(10000);
        return true;
      }
      Logf("gRPC socket: accept: %s; accepting stops", std::strerror(err));
      return false;
    }
    absl::StatusOr<PeerCredentials> peer = GetPeerCredentials(sock.get());
    if (!peer.ok()) {
      Logf("gRPC socket: a connection without credentials: %s",
           peer.status().ToString());
      continue;  // closes it
    }
    // Recorded before gRPC can read a call from it.
    peers_->Record(sock.get(), *peer);
    grpc::AddInsecureChannelFromFd(server_, sock.Release());
    MutexLock l(&mu_);
    ++accepted_;
  }
}

}  // namespace gmlake
