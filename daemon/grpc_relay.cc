// Copyright 2026 The GMLake Authors.

#include "daemon/grpc_relay.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/untrusted_fd.h"

namespace gmlake {
namespace {

constexpr uint64_t kWakeId = 0;
// Rounds of Pump per connection per wakeup, so that one busy connection
// cannot keep the relay from the others; the rest waits for the next one.
constexpr int kRoundsPerWakeup = 8;
constexpr size_t kScmMaxFd = 253;  // SCM_MAX_FD

uint64_t Key(uint64_t id, bool grpc_side) { return id << 1 | grpc_side; }

bool Retry(int err) { return err == EINTR; }
bool WouldBlock(int err) { return err == EAGAIN || err == EWOULDBLOCK; }

}  // namespace

absl::StatusOr<std::unique_ptr<GrpcRelay>> GrpcRelay::Start() {
  UniqueFd epoll(::epoll_create1(EPOLL_CLOEXEC));
  UniqueFd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!epoll.valid() || !wake.valid()) {
    return absl::InternalError(
        absl::StrCat("gRPC relay: epoll/eventfd: ", std::strerror(errno)));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeId;
  if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, wake.get(), &ev) != 0) {
    return absl::InternalError(
        absl::StrCat("gRPC relay: epoll_ctl: ", std::strerror(errno)));
  }
  std::unique_ptr<GrpcRelay> r(
      new GrpcRelay(std::move(epoll), std::move(wake)));
  r->thread_ = std::thread([p = r.get()] { p->Loop(); });
  return r;
}

GrpcRelay::GrpcRelay(UniqueFd epoll, UniqueFd wake)
    : epoll_(std::move(epoll)), wake_(std::move(wake)), scratch_(kRelayChunk) {}

GrpcRelay::~GrpcRelay() { Stop(); }

void GrpcRelay::Stop() {
  if (stopped_) return;
  stopped_ = true;
  {
    MutexLock l(&mu_);
    stopping_ = true;
  }
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_.get(), &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
}

size_t GrpcRelay::connections() const {
  MutexLock l(&mu_);
  return connections_;
}

uint64_t GrpcRelay::descriptors_refused() const {
  MutexLock l(&mu_);
  return descriptors_refused_;
}

absl::StatusOr<UniqueFd> GrpcRelay::Add(UniqueFd client,
                                        const PeerCredentials& peer) {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0,
                   pair) != 0) {
    const int err = errno;
    CloseUntrusted(std::move(client));
    return absl::ResourceExhaustedError(
        absl::StrCat("gRPC relay: socketpair: ", std::strerror(err)));
  }
  auto c = std::make_unique<Conn>();
  c->client = std::move(client);
  c->grpc.Reset(pair[0]);
  c->peer = peer;
  UniqueFd served(pair[1]);
  {
    MutexLock l(&mu_);
    if (stopping_) {
      CloseUntrusted(std::move(c->client));
      return absl::UnavailableError("gmlaked is stopping");
    }
    incoming_.emplace_back(next_id_++, std::move(c));
    ++connections_;
  }
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_.get(), &one, sizeof(one));
  return served;
}

void GrpcRelay::TakeNew() {
  uint64_t count;
  [[maybe_unused]] ssize_t n = ::read(wake_.get(), &count, sizeof(count));
  std::vector<std::pair<uint64_t, std::unique_ptr<Conn>>> taken;
  {
    MutexLock l(&mu_);
    taken.swap(incoming_);
  }
  for (auto& [id, c] : taken) {
    // Edge-triggered: the flags in Conn remember what each socket allows
    // until a call says EAGAIN.
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
    ev.data.u64 = Key(id, false);
    const bool ok =
        ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, c->client.get(), &ev) == 0;
    ev.data.u64 = Key(id, true);
    if (!ok ||
        ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, c->grpc.get(), &ev) != 0) {
      Warnf("gRPC relay: epoll_ctl: %s; a connection is dropped",
            std::strerror(errno));
      conns_.emplace(id, std::move(c));
      Drop(id);
      continue;
    }
    conns_.emplace(id, std::move(c));
  }
}

void GrpcRelay::Loop() {
  constexpr int kEvents = 64;
  epoll_event events[kEvents];
  std::vector<uint64_t> ready;
  for (;;) {
    const int n =
        ::epoll_wait(epoll_.get(), events, kEvents, ready.empty() ? -1 : 0);
    if (n < 0 && errno != EINTR) {
      Errorf("gRPC relay: epoll_wait: %s; relaying stops",
             std::strerror(errno));
      break;
    }
    bool woke = false;
    for (int i = 0; i < n; ++i) woke |= !NoteEvent(events[i], &ready);
    if (woke) {
      {
        MutexLock l(&mu_);
        if (stopping_) break;
      }
      TakeNew();
    }
    ready = PumpReady(std::move(ready));
  }
  DropAll();
}

bool GrpcRelay::NoteEvent(const epoll_event& event,
                          std::vector<uint64_t>* ready) {
  const uint64_t key = event.data.u64;
  if (key == kWakeId) return false;
  auto it = conns_.find(key >> 1);
  if (it == conns_.end()) return true;
  Conn* c = it->second.get();
  const uint32_t e = event.events;
  // Errors and hang-ups are found by the next read or write.
  const bool in = e & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR);
  const bool out = e & (EPOLLOUT | EPOLLHUP | EPOLLERR);
  const bool gone = e & (EPOLLRDHUP | EPOLLHUP | EPOLLERR);
  if (key & 1) {
    c->grpc_readable |= in;
    c->grpc_writable |= out;
    c->grpc_gone |= gone;
  } else {
    c->client_readable |= in;
    c->client_writable |= out;
    c->client_gone |= gone;
  }
  ready->push_back(key >> 1);
  return true;
}

std::vector<uint64_t> GrpcRelay::PumpReady(std::vector<uint64_t> ready) {
  // Each connection pumped once per wakeup, however many events it had.
  std::sort(ready.begin(), ready.end());
  ready.erase(std::unique(ready.begin(), ready.end()), ready.end());
  std::vector<uint64_t> again;
  for (uint64_t id : ready) {
    auto it = conns_.find(id);
    if (it == conns_.end()) continue;
    Conn* c = it->second.get();
    bool more = false;
    for (int round = 0; round < kRoundsPerWakeup; ++round) {
      const uint64_t before = c->moved;
      if (Pump(c) == Step::kDrop) {
        Drop(id);
        c = nullptr;
        break;
      }
      more = c->moved != before;
      if (!more) break;
    }
    if (c != nullptr && more) again.push_back(id);
  }
  return again;
}

void GrpcRelay::DropAll() {
  std::vector<uint64_t> ids;
  for (const auto& [id, c] : conns_) ids.push_back(id);
  for (uint64_t id : ids) Drop(id);
  MutexLock l(&mu_);
  for (auto& [id, c] : incoming_) CloseUntrusted(std::move(c->client));
  connections_ -= incoming_.size();
  incoming_.clear();
}

GrpcRelay::Step GrpcRelay::Pump(Conn* c) {
  if (Flush(c->grpc.get(), &c->to_grpc, &c->grpc_writable, &c->moved) ==
          Step::kDrop ||
      Flush(c->client.get(), &c->to_client, &c->client_writable, &c->moved) ==
          Step::kDrop) {
    return Step::kDrop;
  }
  // One side gone while the other does not take what it said last: that
  // is not waited for (a client that does not read holds nothing of
  // gmlaked's once gRPC let go of it).
  if ((c->grpc_gone && !c->to_client.empty()) ||
      (c->client_gone && !c->to_grpc.empty())) {
    return Step::kDrop;
  }
  // A side is read only once what it sent before is gone (backpressure).
  if (c->to_grpc.empty() && c->client_readable &&
      ReadClient(c) == Step::kDrop) {
    return Step::kDrop;
  }
  if (c->to_client.empty() && c->grpc_readable && ReadGrpc(c) == Step::kDrop) {
    return Step::kDrop;
  }
  return Step::kGoOn;
}

GrpcRelay::Step GrpcRelay::ReadClient(Conn* c) {
  alignas(cmsghdr) char control[CMSG_SPACE(kScmMaxFd * sizeof(int))];
  iovec iov{scratch_.data(), scratch_.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = ::recvmsg(c->client.get(), &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  } while (n < 0 && Retry(errno));
  if (n < 0) {
    if (WouldBlock(errno)) {
      c->client_readable = false;
      return Step::kGoOn;
    }
    return Step::kDrop;
  }
  // Any descriptor: closed where its close harms nobody, and the
  // connection with it (a gRPC client never sends one).
  std::vector<UniqueFd> fds;
  for (cmsghdr* m = CMSG_FIRSTHDR(&msg); m != nullptr;
       m = CMSG_NXTHDR(&msg, m)) {
    if (m->cmsg_level != SOL_SOCKET || m->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (m->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t k = 0; k < count; ++k) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(m) + k * sizeof(int), sizeof(int));
      fds.emplace_back(fd);
    }
  }
  if (!fds.empty() || (msg.msg_flags & MSG_CTRUNC) != 0) {
    const size_t count = fds.size();
    CloseUntrusted(std::move(fds));
    {
      MutexLock l(&mu_);
      descriptors_refused_ += count;
    }
    uint64_t left_out = 0;
    if (log_limit_.Allow(&left_out)) {
      Warnf(
          "gRPC socket: pid %d (uid %d) sent %d descriptors; they were "
          "closed and the connection dropped (%d lines like this left out)",
          c->peer.pid, c->peer.uid, count, left_out);
    }
    return Step::kDrop;
  }
  if (n == 0) return Step::kDrop;  // the client is gone
  c->moved += static_cast<uint64_t>(n);
  return Forward(c->grpc.get(), static_cast<size_t>(n), &c->to_grpc,
                 &c->grpc_writable);
}

GrpcRelay::Step GrpcRelay::ReadGrpc(Conn* c) {
  ssize_t n;
  do {
    n = ::recv(c->grpc.get(), scratch_.data(), scratch_.size(), MSG_DONTWAIT);
  } while (n < 0 && Retry(errno));
  if (n < 0) {
    if (WouldBlock(errno)) {
      c->grpc_readable = false;
      return Step::kGoOn;
    }
    return Step::kDrop;
  }
  // gRPC closed the connection (idle, shut down): so does the client's
  // end, once what gRPC said last is handed on (one try: a client that
  // does not read holds nothing of gmlaked's after this).
  if (n == 0) return Step::kDrop;
  c->moved += static_cast<uint64_t>(n);
  return Forward(c->client.get(), static_cast<size_t>(n), &c->to_client,
                 &c->client_writable);
}

GrpcRelay::Step GrpcRelay::Forward(int fd, size_t n, Pending* p,
                                   bool* writable) {
  size_t sent = 0;
  while (*writable && sent < n) {
    const ssize_t w = ::send(fd, scratch_.data() + sent, n - sent,
                             MSG_DONTWAIT | MSG_NOSIGNAL);
    if (w > 0) {
      sent += static_cast<size_t>(w);
    } else if (w == 0 || WouldBlock(errno)) {
      *writable = false;
    } else if (!Retry(errno)) {
      return Step::kDrop;
    }
  }
  if (sent < n) {
    p->bytes.assign(scratch_.data() + sent, n - sent);
    p->sent = 0;
  }
  return Step::kGoOn;
}

GrpcRelay::Step GrpcRelay::Flush(int fd, Pending* p, bool* writable,
                                 uint64_t* moved) {
  while (!p->empty() && *writable) {
    const ssize_t w =
        ::send(fd, p->bytes.data() + p->sent, p->bytes.size() - p->sent,
               MSG_DONTWAIT | MSG_NOSIGNAL);
    if (w > 0) {
      p->sent += static_cast<size_t>(w);
      *moved += static_cast<uint64_t>(w);
    } else if (w == 0 || WouldBlock(errno)) {
      *writable = false;
    } else if (!Retry(errno)) {
      return Step::kDrop;
    }
  }
  // Held only while a peer is behind.
  if (p->empty() && !p->bytes.empty()) {
    std::string().swap(p->bytes);
    p->sent = 0;
  }
  return Step::kGoOn;
}

void GrpcRelay::Drop(uint64_t id) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  std::unique_ptr<Conn> c = std::move(it->second);
  conns_.erase(it);
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, c->client.get(), nullptr);
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, c->grpc.get(), nullptr);
  // Ours: carries only gRPC's bytes, and closes at once.
  c->grpc.Reset();
  // The client's: its unread messages may still carry descriptors.
  CloseUntrusted(std::move(c->client));
  MutexLock l(&mu_);
  --connections_;
}

}  // namespace gmlake
