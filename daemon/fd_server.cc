// Copyright 2026 The GMLake Authors.

#include "daemon/fd_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/mutex.h"
#include "daemon/log.h"
#include "daemon/untrusted_fd.h"
#include "proto/gmlake.pb.h"

namespace gmlake {
namespace {

constexpr uint64_t kListenerSerial = 0;
constexpr uint64_t kWakeSerial = 1;
constexpr absl::Duration kHousekeepingPeriod = absl::Milliseconds(200);
// After running out of descriptors, accepting pauses this long.
constexpr absl::Duration kAcceptBackoff = absl::Milliseconds(100);

UniqueFd OpenSpare() {
  return UniqueFd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
}

bool OutOfDescriptors(int err) {
  return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM;
}

}  // namespace

absl::StatusOr<std::unique_ptr<FdServer>> FdServer::Start(
    Lake* lake, FdServerOptions options) {
  options.fds_per_reply =
      std::max<size_t>(1, std::min(options.fds_per_reply, kMaxFdsPerGroup));
  absl::StatusOr<UniqueFd> listener = ListenUnix(options.path, options.mode);
  if (!listener.ok()) return listener.status();
  // The listener is non-blocking so that AcceptAll can drain it.
  ::fcntl(listener->get(), F_SETFL,
          ::fcntl(listener->get(), F_GETFL) | O_NONBLOCK);
  UniqueFd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  UniqueFd epoll(::epoll_create1(EPOLL_CLOEXEC));
  if (!wake.valid() || !epoll.valid()) {
    ::unlink(options.path.c_str());
    return absl::InternalError(
        absl::StrCat("eventfd/epoll_create1: ", std::strerror(errno)));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenerSerial;
  ::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, listener->get(), &ev);
  ev.data.u64 = kWakeSerial;
  ::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, wake.get(), &ev);
  std::unique_ptr<FdServer> server(
      new FdServer(lake, std::move(options), *std::move(listener),
                   std::move(wake), std::move(epoll)));
  server->thread_ = std::thread([s = server.get()] { s->Loop(); });
  return server;
}

FdServer::FdServer(Lake* lake, FdServerOptions options, UniqueFd listener,
                   UniqueFd wake, UniqueFd epoll)
    : lake_(lake),
      options_(std::move(options)),
      listener_(std::move(listener)),
      wake_(std::move(wake)),
      epoll_(std::move(epoll)),
      last_housekeeping_(absl::Now()),
      spare_(OpenSpare()),
      hook_target_(std::make_shared<HookTarget>()) {
  MutexLock l(&hook_target_->mu);
  hook_target_->server = this;
}

FdServer::~FdServer() { Stop(); }

void FdServer::Stop() {
  if (stopped_) return;
  stopped_ = true;
  {
    MutexLock l(&hook_target_->mu);
    hook_target_->server = nullptr;
  }
  {
    MutexLock l(&mu_);
    stopping_ = true;
  }
  Wake();
  if (thread_.joinable()) thread_.join();
  // A connection's unread messages may carry a client's descriptors, whose
  // close could block: SIGTERM must not wait on them.
  for (auto& [serial, c] : conns_) CloseUntrusted(std::move(c->sock));
  conns_.clear();
  listener_.Reset();
  ::unlink(options_.path.c_str());
}

void FdServer::Wake() {
  const uint64_t one = 1;
  // A full eventfd counter still wakes the loop: the result can be ignored.
  [[maybe_unused]] ssize_t n = ::write(wake_.get(), &one, sizeof(one));
}

void FdServer::SessionEnded(uint64_t serial) {
  {
    MutexLock l(&mu_);
    ended_.push_back(serial);
  }
  Wake();
}

void FdServer::Loop() {
  constexpr int kMaxEvents = 64;
  epoll_event events[kMaxEvents];
  for (;;) {
    // With requests left over from the last round, only look for news.
    const int timeout =
        ready_.empty()
            ? static_cast<int>(absl::ToInt64Milliseconds(kHousekeepingPeriod))
            : 0;
    const int n = ::epoll_wait(epoll_.get(), events, kMaxEvents, timeout);
    if (n < 0 && errno != EINTR) {
      Errorf("fd socket: epoll_wait: %s; serving stops", std::strerror(errno));
      return;
    }
    std::vector<uint64_t> ended;
    {
      MutexLock l(&mu_);
      if (stopping_) return;
      ended.swap(ended_);
    }
    for (uint64_t serial : ended) Close(serial, "", /*end_session=*/false);
    for (int i = 0; i < n; ++i) HandleEvent(events[i]);
    ServeRound();
    if (absl::Now() - last_housekeeping_ >= kHousekeepingPeriod) {
      Housekeeping();
    }
  }
}

void FdServer::HandleEvent(const epoll_event& event) {
  const uint64_t serial = event.data.u64;
  if (serial == kListenerSerial) {
    AcceptAll();
    return;
  }
  if (serial == kWakeSerial) {
    uint64_t count;
    [[maybe_unused]] ssize_t r = ::read(wake_.get(), &count, sizeof(count));
    return;
  }
  auto it = conns_.find(serial);
  if (it == conns_.end()) return;  // closed earlier in this round
  Conn* c = it->second.get();
  std::string why;
  if (event.events & EPOLLOUT) {
    // The client read: send more, then maybe read its next requests.
    if (!Pump(c, &why)) {
      Close(serial, why, /*end_session=*/true);
      return;
    }
  }
  if (event.events & (EPOLLIN | EPOLLRDHUP)) ready_.insert(serial);
  if (event.events & (EPOLLHUP | EPOLLERR)) {
    // Gone both ways: serve what it sent (a Return may be in it), then
    // close.
    if (ServeSome(c, &why) != Served::kClose) why = "the connection failed";
    Close(serial, why, /*end_session=*/true);
  }
}

void FdServer::ServeRound() {
  // Each ready connection gets a few requests served.
  std::vector<uint64_t> round(ready_.begin(), ready_.end());
  ready_.clear();
  for (uint64_t serial : round) {
    auto it = conns_.find(serial);
    if (it == conns_.end()) continue;
    std::string why;
    switch (ServeSome(it->second.get(), &why)) {
      case Served::kMore:
        ready_.insert(serial);
        break;
      case Served::kClose:
        Close(serial, why, /*end_session=*/true);
        break;
      case Served::kIdle:
      case Served::kBlocked:
        break;
    }
  }
}

void FdServer::Refuse(UniqueFd sock, const absl::Status& why) {
  // One try, without waiting: a client that does not read misses the
  // reason, not its turn.
  v1::FdReply reply;
  reply.set_code(static_cast<int>(why.code()));
  reply.set_message(std::string(why.message()));
  reply.set_last(true);
  FrameSendQueue out;
  if (out.Push(reply.SerializeAsString(), {}).ok()) {
    out.Flush(sock.get()).IgnoreError();
  }
  CloseUntrusted(std::move(sock));
}

void FdServer::OutOfDescriptorsWhileAccepting(int err) {
  // The classic reserve descriptor: give it up to take the connection and
  // tell it why, rather than leave it in the backlog to wake us again.
  if (spare_.valid()) {
    spare_.Reset();
    UniqueFd sock(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (sock.valid()) {
      Refuse(std::move(sock),
             absl::ResourceExhaustedError(absl::StrCat(
                 "gmlaked is out of descriptors (", std::strerror(err),
                 "; its RLIMIT_NOFILE is reached); try again later, or raise "
                 "LimitNOFILE= of gmlaked.service")));
      ++refused_for_descriptors_;
    }
    // Back once the closer thread has closed the refused one.
    spare_ = OpenSpare();
  }
  // Stop watching the listener for a while: epoll would wake us at once.
  epoll_event ev{};
  ev.data.u64 = kListenerSerial;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, listener_.get(), &ev);
  accept_paused_until_ = absl::Now() + kAcceptBackoff;
  uint64_t left_out = 0;
  if (accept_log_.Allow(&left_out)) {
    Warnf(
        "fd socket: accept: %s; refusing new connections for %s "
        "(%d refused so far; %d lines like this left out)",
        std::strerror(err), absl::FormatDuration(kAcceptBackoff),
        refused_for_descriptors_, left_out);
  }
}

void FdServer::ResumeAccepting() {
  if (accept_paused_until_ == absl::InfinitePast() ||
      absl::Now() < accept_paused_until_) {
    return;
  }
  accept_paused_until_ = absl::InfinitePast();
  if (!spare_.valid()) spare_ = OpenSpare();
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenerSerial;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, listener_.get(), &ev);
}

void FdServer::AcceptAll() {
  for (;;) {
    UniqueFd sock(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!sock.valid()) {
      const int err = errno;
      if (err == EINTR || err == ECONNABORTED) continue;
      if (OutOfDescriptors(err)) {
        OutOfDescriptorsWhileAccepting(err);
      } else if (err != EAGAIN && err != EWOULDBLOCK) {
        uint64_t left_out = 0;
        if (accept_log_.Allow(&left_out)) {
          Warnf("fd socket: accept: %s (%d lines like this left out)",
                std::strerror(err), left_out);
        }
      }
      return;
    }
    if (conns_.size() >= options_.max_connections) {
      uint64_t left_out = 0;
      if (accept_log_.Allow(&left_out)) {
        Warnf(
            "fd socket: %d connections already, the limit; refusing one (%d "
            "lines like this left out)",
            conns_.size(), left_out);
      }
      Refuse(std::move(sock),
             absl::ResourceExhaustedError(absl::StrCat(
                 "gmlaked's fd socket has ", conns_.size(),
                 " connections, its limit; close some and try again")));
      continue;
    }
    absl::StatusOr<PeerCredentials> peer = GetPeerCredentials(sock.get());
    if (!peer.ok()) {
      Warnf("fd socket: a connection without credentials: %s",
            peer.status().ToString());
      CloseUntrusted(std::move(sock));
      continue;
    }
    // Reads start only on a complete message, so they never wait; the
    // timeout is a guard. Sends never wait (FrameSendQueue).
    const timeval rcv = absl::ToTimeval(absl::Seconds(1));
    ::setsockopt(sock.get(), SOL_SOCKET, SO_RCVTIMEO, &rcv, sizeof(rcv));
    auto c = std::make_unique<Conn>();
    c->serial = next_serial_++;
    c->sock = std::move(sock);
    c->peer = *peer;
    c->accepted = absl::Now();
    epoll_event ev{};
    // Edge-triggered: a partial message does not wake the loop again until
    // more bytes arrive, and EPOLLOUT comes when a full socket has room.
    ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
    ev.data.u64 = c->serial;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, c->sock.get(), &ev) != 0) {
      Errorf("fd socket: epoll_ctl: %s", std::strerror(errno));
      CloseUntrusted(std::move(c->sock));
      continue;
    }
    const uint64_t serial = c->serial;
    conns_[serial] = std::move(c);
    // Anything already queued was announced before we watched the socket.
    ready_.insert(serial);
  }
}

FdServer::Served FdServer::ServeSome(Conn* c, std::string* why) {
  for (int served = 0; served < options_.requests_per_wakeup; ++served) {
    // Replies the client has not taken, or a claim still being sent: its
    // next requests wait in the socket.
    if (c->claim != nullptr ||
        c->out.bytes() > options_.max_queued_reply_bytes) {
      return Served::kBlocked;
    }
    // Only a whole message is read: the loop never waits on a client.
    absl::StatusOr<FrameQueued> queued =
        PeekFrame(c->sock.get(), kMaxFdRequestBytes);
    if (!queued.ok()) {
      *why = std::string(queued.status().message());
      return Served::kClose;
    }
    if (*queued == FrameQueued::kPeerClosed) {
      *why = "the client closed the connection";
      return Served::kClose;
    }
    if (*queued == FrameQueued::kNothing) return Served::kIdle;
    if (*queued == FrameQueued::kPart) {
      if (c->partial_since == absl::InfiniteFuture()) {
        c->partial_since = absl::Now();
      }
      // A peer that hung up will never complete it.
      pollfd p{c->sock.get(), POLLRDHUP, 0};
      if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP))) {
        *why = "the client closed the connection in the middle of a message";
        return Served::kClose;
      }
      return Served::kIdle;
    }
    c->partial_since = absl::InfiniteFuture();
    std::vector<UniqueFd> arrived;
    absl::StatusOr<ReceivedMessage> msg =
        RecvFds(c->sock.get(), kMaxFdRequestBytes, kMaxFdsPerGroup, &arrived);
    if (!msg.ok()) {
      CloseUntrusted(std::move(arrived));
      // The stream is out of step: say why, then close.
      std::string unused;
      ReplyStatus(c,
                  absl::InvalidArgumentError(absl::StrCat(
                      "unreadable message on gmlaked's fd socket: ",
                      msg.status().message())),
                  &unused);
      *why = absl::StrCat("unreadable message: ", msg.status().message());
      return Served::kClose;
    }
    if (!Serve(c, &*msg, why)) return Served::kClose;
  }
  return Served::kMore;
}

bool FdServer::Reply(Conn* c, const v1::FdReply& reply, std::string* why) {
  absl::Status s = c->out.Push(reply.SerializeAsString(), {});
  if (s.ok()) s = c->out.Flush(c->sock.get());
  if (!s.ok()) {
    *why = absl::StrCat("replying failed: ", s.message());
    return false;
  }
  return true;
}

bool FdServer::ReplyStatus(Conn* c, const absl::Status& status,
                           std::string* why) {
  v1::FdReply reply;
  reply.set_code(static_cast<int>(status.code()));
  reply.set_message(std::string(status.message()));
  reply.set_last(true);
  return Reply(c, reply, why);
}

bool FdServer::Serve(Conn* c, ReceivedMessage* msg, std::string* why) {
  v1::FdRequest req;
  const bool parsed = req.ParseFromString(msg->payload);
  if (!msg->fds.empty() && !(parsed && req.has_adopt())) {
    // Closed where a close that blocks harms nobody; the stream is still in
    // step.
    const size_t n = msg->fds.size();
    CloseUntrusted(std::move(msg->fds));
    return ReplyStatus(c,
                       absl::InvalidArgumentError(absl::StrFormat(
                           "gmlaked takes descriptors only with an adopt "
                           "request; the %d sent were closed",
                           n)),
                       why);
  }
  if (!parsed) {
    const bool bound = c->session != 0;
    bool ok = ReplyStatus(
        c,
        absl::InvalidArgumentError(
            "not an FdRequest (gmlake.v1) message; is the client speaking "
            "gmlaked's fd-socket protocol?"),
        why);
    if (!bound) *why = "garbage from an unbound connection";
    return ok && bound;
  }
  switch (req.kind_case()) {
    case v1::FdRequest::kBind:
      return ServeBind(c, req, why);
    case v1::FdRequest::kClaim: {
      if (absl::Status s =
              CheckBoundTo(*c, req.session_id(), "claiming a lease");
          !s.ok()) {
        return ReplyStatus(c, s, why);
      }
      absl::StatusOr<std::vector<uint64_t>> ids =
          lake_->Claim(req.session_id(), req.token(), req.claim().lease_id());
      if (!ids.ok()) return ReplyStatus(c, ids.status(), why);
      // The batches are made and queued as the client takes them.
      c->claim = std::make_unique<ClaimInProgress>();
      c->claim->lease = req.claim().lease_id();
      c->claim->ids = *std::move(ids);
      return Pump(c, why);
    }
    case v1::FdRequest::kAdopt:
      return ServeAdopt(c, req, std::move(msg->fds), why);
    default:
      return ReplyStatus(
          c,
          absl::InvalidArgumentError(
              "an FdRequest with neither bind nor claim (nor adopt)"),
          why);
  }
}

absl::Status FdServer::CheckBoundTo(const Conn& c, uint64_t session,
                                    absl::string_view doing) {
  if (c.session == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("bind a session on this connection before ", doing));
  }
  if (session != c.session) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "this connection is bound to session %d, not %d", c.session, session));
  }
  return absl::OkStatus();
}

bool FdServer::ServeAdopt(Conn* c, const v1::FdRequest& req,
                          std::vector<UniqueFd> fds, std::string* why) {
  // The client's descriptors close on the closer thread, whatever happens.
  struct CloseLater {
    std::vector<UniqueFd>* fds;
    ~CloseLater() { CloseUntrusted(std::move(*fds)); }
  } close_later{&fds};
  if (absl::Status s = CheckBoundTo(*c, req.session_id(), "adopting chunks");
      !s.ok()) {
    return ReplyStatus(c, s, why);
  }
  // Only kinds whose close never waits on a client reach the Lake.
  if (absl::Status s = CheckChunkDescriptors(fds); !s.ok()) {
    return ReplyStatus(c, s, why);
  }
  const std::vector<uint64_t> previous(req.adopt().previous_chunk_ids().begin(),
                                       req.adopt().previous_chunk_ids().end());
  // What was adopted the daemon imported and holds: the descriptors close
  // when this returns.
  const std::vector<uint64_t> sizes(req.adopt().chunk_bytes().begin(),
                                    req.adopt().chunk_bytes().end());
  absl::StatusOr<std::vector<uint64_t>> ids =
      lake_->Adopt(req.session_id(), req.token(), req.adopt().device(),
                   previous, fds, sizes);
  if (!ids.ok()) return ReplyStatus(c, ids.status(), why);
  v1::FdReply reply;
  for (uint64_t id : *ids) reply.add_chunk_ids(id);
  reply.set_last(true);
  return Reply(c, reply, why);
}

bool FdServer::ServeBind(Conn* c, const v1::FdRequest& req, std::string* why) {
  if (c->session != 0) {
    return ReplyStatus(
        c,
        absl::FailedPreconditionError(absl::StrFormat(
            "this connection is bound to session %d already", c->session)),
        why);
  }
  std::weak_ptr<HookTarget> target = hook_target_;
  const uint64_t serial = c->serial;
  absl::Status s = lake_->BindSession(
      req.session_id(), req.token(),
      PeerIdentity{c->peer.pid, c->peer.uid, c->peer.gid}, [target, serial] {
        std::shared_ptr<HookTarget> t = target.lock();
        if (t == nullptr) return;
        MutexLock l(&t->mu);
        if (t->server != nullptr) t->server->SessionEnded(serial);
      });
  if (s.ok()) {
    c->session = req.session_id();
    return ReplyStatus(c, s, why);
  }
  if (!ReplyStatus(c, s, why)) return false;
  // A client that keeps guessing is not one that lost its way.
  if (++c->refused_binds >= options_.max_refused_binds) {
    *why = absl::StrCat(c->refused_binds,
                        " binds refused (the last: ", s.message(), ")");
    Warnf("fd socket: dropping a connection of pid %d uid %d: %s", c->peer.pid,
          c->peer.uid, *why);
    return false;
  }
  return true;
}

bool FdServer::Pump(Conn* c, std::string* why) {
  for (;;) {
    absl::Status s = c->out.Flush(c->sock.get());
    if (!s.ok()) {
      *why = absl::StrCat("sending replies failed: ", s.message());
      return false;
    }
    ClaimInProgress* claim = c->claim.get();
    if (claim == nullptr || c->out.bytes() > options_.max_queued_reply_bytes) {
      break;
    }
    // The claim's next batch: duplicated only now, so a client that does
    // not read holds no more of the daemon's descriptors than one batch.
    const size_t n =
        std::min(options_.fds_per_reply, claim->ids.size() - claim->done);
    absl::Span<const uint64_t> batch(claim->ids.data() + claim->done, n);
    absl::StatusOr<std::vector<UniqueFd>> fds =
        lake_->DupChunkFds(c->session, batch);
    v1::FdReply reply;
    reply.set_lease_id(claim->lease);
    if (!fds.ok()) {
      reply.set_code(static_cast<int>(fds.status().code()));
      reply.set_message(std::string(fds.status().message()));
      reply.set_last(true);
      c->claim.reset();
      s = c->out.Push(reply.SerializeAsString(), {});
    } else {
      claim->done += n;
      for (uint64_t id : batch) reply.add_chunk_ids(id);
      reply.set_last(claim->done == claim->ids.size());
      if (reply.last()) c->claim.reset();
      s = c->out.Push(reply.SerializeAsString(), *std::move(fds));
    }
    if (!s.ok()) {
      *why = absl::StrCat("queueing a claim's reply failed: ", s.message());
      return false;
    }
  }
  // Room again: the requests it sent meanwhile can be served.
  if (c->claim == nullptr &&
      c->out.bytes() <= options_.max_queued_reply_bytes) {
    ready_.insert(c->serial);
  }
  return true;
}

void FdServer::Close(uint64_t serial, absl::string_view why, bool end_session) {
  auto it = conns_.find(serial);
  if (it == conns_.end()) return;
  std::unique_ptr<Conn> c = std::move(it->second);
  conns_.erase(it);
  ready_.erase(serial);
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, c->sock.get(), nullptr);
  // Its unread messages may carry descriptors whose close blocks.
  CloseUntrusted(std::move(c->sock));
  if (c->session != 0 && end_session) {
    lake_->EndSession(
        c->session,
        absl::StrCat("its fd-socket connection closed (", why, ")"));
  } else if (c->session == 0 && !why.empty()) {
    VLogf("fd socket: closed an unbound connection of pid %d: %s", c->peer.pid,
          why);
  }
}

void FdServer::Housekeeping() {
  const absl::Time now = absl::Now();
  last_housekeeping_ = now;
  ResumeAccepting();
  std::vector<std::pair<uint64_t, std::string>> drop;
  for (const auto& [serial, c] : conns_) {
    if (now - c->out.oldest_queued() > options_.send_timeout) {
      drop.emplace_back(
          serial, absl::StrCat("it left a reply unread for ",
                               absl::FormatDuration(options_.send_timeout)));
    } else if (now - c->partial_since > options_.partial_timeout) {
      drop.emplace_back(
          serial, absl::StrCat("a message stayed incomplete for ",
                               absl::FormatDuration(options_.partial_timeout)));
    } else if (c->session == 0 && now - c->accepted > options_.bind_timeout) {
      drop.emplace_back(serial, "no session was bound on it in time");
    }
  }
  for (const auto& [serial, why] : drop) {
    auto it = conns_.find(serial);
    if (it != conns_.end()) {
      Warnf("fd socket: dropping a connection of pid %d%s: %s",
            it->second->peer.pid,
            it->second->session == 0
                ? ""
                : absl::StrCat(" (session ", it->second->session, ")"),
            why);
    }
    Close(serial, why, /*end_session=*/true);
  }
}

}  // namespace gmlake
