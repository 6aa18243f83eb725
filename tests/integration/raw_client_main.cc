// Copyright 2026 The GMLake Authors.
//
// raw_client: a client process of gmlaked that speaks the protocol by hand
// (gRPC + the fd socket, no DaemonChunkSource), for tests that must do what
// a well-behaved client never would: return chunks of a lease still being
// served, close its session in the middle of a lease, shrink a chunk's
// memfd. It drops to --uid first (so SO_PEERCRED sees that uid), opens and
// binds a session, prints "ready <session>" (or "err <code> <message>" and
// exits 1), then serves one command per line on stdin, answering one line
// each on stdout:
//
//   lease D N          Lease + claim; keeps the descriptors -> ok <lease> <ids>
//   lease_async D N    starts a Lease RPC in the background -> ok
//   lease_wait         its result, claimed if it succeeded  -> ok <lease> <ids>
//   return ID...       Return these chunk ids               -> ok <bytes>
//   return_held        Return every chunk held here         -> ok <bytes>
//   fill B             write byte B over every held chunk   -> ok
//   check B            every byte of every held chunk is B  -> ok | err
//   count B            chunks held whose first byte is B    -> ok <n>
//   truncate ID SIZE   ftruncate that chunk's memfd         -> ok | err
//   close              CloseSession                         -> ok <bytes>
//   token              this session's token, in hex          -> ok <hex>
//   impersonate S T    later gRPC calls (lease, return, usage, close) name
//                      session S with token T, another's    -> ok
//   usage              ReportUsage with no figures          -> ok
//   usage D U C        ReportUsage of U used and C cached bytes on device D,
//                      whatever it holds (a liar's report)  -> ok
//   watch MODE         opens a Watch stream (returns once its hello came)
//                      and answers each request in the background: MODE
//                      nothing: at once, returning nothing (a ReportUsage
//                      of the last figures reported); silent: never
//                                                          -> ok
//   watch_status       -> ok <requests received>
//   flood N KIND       in the background, sends N requests that are refused
//                      (KIND bind: binds with a wrong token on a new
//                      connection; claim: claims of an unknown lease on the
//                      bound one) and reads the replies at 256 bytes/s
//                                                          -> ok
//   flood_status       -> ok <sent> <bytes read> <open|closed>
//   lease_many N D C   starts N Lease RPCs of C chunks at once, each on its
//                      own thread (never claimed)              -> ok
//   lease_many_status  -> ok <answered so far>
//   lease_many_wait    -> ok <granted> <refused> <refused for waiting too
//                         many (--max_waiting_leases*)>
//   health_watches N C opens N health Watch streams (grpc.health.v1), C to
//                      a connection of their own, and waits for each to
//                      answer or fail; those answered stay open
//                                  -> ok <answered> <refused> <a refusal>
//   health_watches_end cancels them                        -> ok
//   quit               exit 0 (the session ends with the process)
//
// --rpc_timeout bounds each call's own time: OpenSession (with the
// connection), Lease, Return and each fd-socket reply (bind, claim).
//
// Held chunks are mapped with mmap, as an attacker would map a memfd.

#include <grp.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/fd_passing.h"
#include "common/mutex.h"
#include "common/unique_fd.h"
#include "grpcpp/grpcpp.h"
#include "proto/gmlake.grpc.pb.h"
#include "proto/health.grpc.pb.h"
#include "proto/protocol.h"

ABSL_FLAG(std::string, socket, "", "gmlaked's gRPC socket.");
ABSL_FLAG(absl::Duration, rpc_timeout, absl::ZeroDuration(),
          "Deadline of each call (0: 10 s, leases 60 s).");
ABSL_FLAG(std::string, name, "raw_client", "Session name.");
ABSL_FLAG(int, uid, -1, "Drop to this uid (and gid) before connecting.");

namespace gmlake {
namespace {

void Answer(const absl::StatusOr<std::string>& r) {
  if (r.ok()) {
    std::cout << (r->empty() ? "ok" : "ok " + *r) << std::endl;
    return;
  }
  std::string msg(r.status().message());
  for (char& c : msg) {
    if (c == '\n') c = ' ';
  }
  std::cout << "err " << static_cast<int>(r.status().code()) << " " << msg
            << std::endl;
}

// Now plus --rpc_timeout, or `otherwise` where it is 0.
std::chrono::system_clock::time_point Deadline(absl::Duration otherwise) {
  const absl::Duration t = absl::GetFlag(FLAGS_rpc_timeout);
  return absl::ToChronoTime(absl::Now() +
                            (t > absl::ZeroDuration() ? t : otherwise));
}

class RawClient {
 public:
  absl::Status Connect(const std::string& socket, const std::string& name) {
    socket_ = socket;
    channel_ = grpc::CreateChannel("unix:" + socket,
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::Lake::NewStub(channel_);
    v1::OpenSessionRequest req;
    req.set_pid(::getpid());
    req.set_name(name);
    req.set_protocol_version(ProtocolVersion());
    v1::OpenSessionResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline(absl::Seconds(10)));
    absl::Status s = FromGrpc(stub_->OpenSession(&ctx, req, &resp));
    if (!s.ok()) return s;
    session_ = resp.session_id();
    token_ = resp.token();
    chunk_size_ = resp.devices(0).chunk_size();
    fd_path_ = resp.fd_socket();
    absl::StatusOr<UniqueFd> fd = ConnectUnix(resp.fd_socket());
    if (!fd.ok()) return fd.status();
    fd_ = *std::move(fd);
    const absl::Duration wait =
        absl::GetFlag(FLAGS_rpc_timeout) > absl::ZeroDuration()
            ? absl::GetFlag(FLAGS_rpc_timeout)
            : absl::Seconds(10);
    const timeval tv = absl::ToTimeval(wait);
    ::setsockopt(fd_.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    v1::FdRequest bind;
    bind.set_session_id(session_);
    bind.set_token(token_);
    bind.mutable_bind();
    absl::StatusOr<v1::FdReply> reply = Exchange(bind, nullptr);
    if (!reply.ok()) return reply.status();
    return ReplyStatus(*reply);
  }

  uint64_t session() const { return session_; }

  absl::StatusOr<std::string> Serve(const std::vector<std::string>& w) {
    auto arg = [&](size_t i) -> uint64_t {
      uint64_t v = 0;
      // A word that is no number reads as 0.
      if (i >= w.size() || !absl::SimpleAtoi(w[i], &v)) return uint64_t{0};
      return v;
    };
    const std::string& cmd = w[0];
    if (cmd == "lease") {
      absl::StatusOr<v1::LeaseResponse> l =
          Lease(static_cast<int>(arg(1)), arg(2));
      if (!l.ok()) return l.status();
      return ClaimAndMap(*l);
    }
    if (cmd == "lease_async") {
      if (pending_.joinable()) {
        return absl::FailedPreconditionError("a lease is pending already");
      }
      const int device = static_cast<int>(arg(1));
      const uint64_t count = arg(2);
      pending_result_ = absl::UnknownError("not done");
      pending_ = std::thread(
          [this, device, count] { pending_result_ = Lease(device, count); });
      return std::string();
    }
    if (cmd == "lease_wait") {
      if (!pending_.joinable()) {
        return absl::FailedPreconditionError("no lease is pending");
      }
      pending_.join();
      if (!pending_result_.ok()) return pending_result_.status();
      return ClaimAndMap(*pending_result_);
    }
    if (cmd == "return" || cmd == "return_held") {
      std::vector<uint64_t> ids;
      if (cmd == "return") {
        for (size_t i = 1; i < w.size(); ++i) ids.push_back(arg(i));
      } else {
        for (const auto& [id, chunk] : held_) ids.push_back(id);
      }
      v1::ReturnRequest req;
      req.set_session_id(session_);
      req.set_token(token_);
      for (uint64_t id : ids) req.add_chunk_ids(id);
      v1::ReturnResponse resp;
      grpc::ClientContext ctx;
      ctx.set_deadline(Deadline(absl::Seconds(60)));
      absl::Status s = FromGrpc(stub_->Return(&ctx, req, &resp));
      if (!s.ok()) return s;
      for (uint64_t id : ids) Drop(id);
      return absl::StrCat(resp.returned_bytes());
    }
    if (cmd == "fill" || cmd == "check" || cmd == "count") {
      const uint8_t value = static_cast<uint8_t>(arg(1));
      uint64_t matching = 0;
      for (auto& [id, chunk] : held_) {
        if (cmd == "fill") {
          std::memset(chunk.base, value, chunk_size_);
        } else if (cmd == "count") {
          matching += chunk.base[0] == value;
        } else {
          for (size_t i = 0; i < chunk_size_; ++i) {
            if (chunk.base[i] != value) {
              return absl::DataLossError(absl::StrCat("chunk ", id, " byte ", i,
                                                      " is ", chunk.base[i],
                                                      ", not ", value));
            }
          }
        }
      }
      return cmd == "count" ? absl::StrCat(matching) : std::string();
    }
    if (cmd == "truncate") {
      auto it = held_.find(arg(1));
      if (it == held_.end()) return absl::NotFoundError("chunk not held");
      if (::ftruncate(it->second.fd.get(), static_cast<off_t>(arg(2))) != 0) {
        return absl::PermissionDeniedError(
            absl::StrCat("ftruncate: ", std::strerror(errno)));
      }
      return std::string();
    }
    // Hex: the token is random bytes, which a line of words cannot carry
    // (a space or newline in it split the answer: issue 16's flake).
    if (cmd == "token") return absl::BytesToHexString(token_);
    if (cmd == "impersonate") {
      if (w.size() != 3) return absl::InvalidArgumentError("impersonate S T");
      session_ = arg(1);
      token_ = absl::HexStringToBytes(w[2]);
      return std::string();
    }
    if (cmd == "usage") {
      if (w.size() == 4) {
        v1::DeviceUsage u;
        u.set_device(static_cast<int>(arg(1)));
        u.set_used_bytes(arg(2));
        u.set_cached_bytes(arg(3));
        MutexLock l(&watch_mu_);
        usage_ = u;
      }
      absl::Status s = SendUsage(w.size() == 4);
      if (!s.ok()) return s;
      return std::string();
    }
    if (cmd == "watch") return Watch(w.size() > 1 ? w[1] : "");
    if (cmd == "watch_status") return absl::StrCat(watch_requests_.load());
    if (cmd == "close") {
      v1::CloseSessionRequest req;
      req.set_session_id(session_);
      req.set_token(token_);
      v1::CloseSessionResponse resp;
      grpc::ClientContext ctx;
      absl::Status s = FromGrpc(stub_->CloseSession(&ctx, req, &resp));
      if (!s.ok()) return s;
      return absl::StrCat(resp.returned_bytes());
    }
    if (cmd == "flood") return Flood(arg(1), w.size() > 2 ? w[2] : "");
    if (cmd == "lease_many") {
      const int device = static_cast<int>(arg(2));
      const uint64_t count = arg(3);
      for (uint64_t i = 0; i < arg(1); ++i) {
        many_.emplace_back([this, device, count] {
          absl::StatusOr<v1::LeaseResponse> l = Lease(device, count);
          if (l.ok()) {
            ++many_granted_;
            return;
          }
          ++many_refused_;
          if (absl::StrContains(l.status().message(), "--max_waiting_leases")) {
            ++many_capped_;
          }
        });
      }
      return std::string();
    }
    if (cmd == "lease_many_status") {
      return absl::StrCat(many_granted_.load() + many_refused_.load());
    }
    if (cmd == "lease_many_wait") {
      for (std::thread& t : many_) t.join();
      many_.clear();
      return absl::StrCat(many_granted_.load(), " ", many_refused_.load(), " ",
                          many_capped_.load());
    }
    if (cmd == "health_watches") return HealthWatches(arg(1), arg(2));
    if (cmd == "health_watches_end") {
      EndHealthWatches();
      return std::string();
    }
    if (cmd == "flood_status") {
      pollfd p{flood_sock_, POLLRDHUP, 0};
      const bool closed =
          flood_sock_ < 0 ||
          (::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP)));
      return absl::StrCat(flood_sent_.load(), " ", flood_read_.load(), " ",
                          closed ? "closed" : "open");
    }
    return absl::InvalidArgumentError(absl::StrCat("unknown command ", cmd));
  }

  void Finish() {
    if (watch_ctx_ != nullptr) watch_ctx_->TryCancel();
    if (watcher_.joinable()) watcher_.join();
    if (pending_.joinable()) pending_.join();
    flood_stop_ = true;
    for (std::thread& t : flood_threads_) t.join();
    for (std::thread& t : many_) t.join();
    EndHealthWatches();
  }

 private:
  absl::StatusOr<std::string> HealthWatches(uint64_t n, uint64_t per_conn) {
    if (!health_threads_.empty()) {
      return absl::FailedPreconditionError("watching health already");
    }
    if (per_conn == 0) return absl::InvalidArgumentError("health_watches N C");
    for (uint64_t i = 0; i < n; i += per_conn) {
      grpc::ChannelArguments args;
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection each
      health_channels_.push_back(grpc::CreateCustomChannel(
          "unix:" + socket_, grpc::InsecureChannelCredentials(), args));
    }
    {
      MutexLock l(&health_mu_);
      health_answered_ = health_refused_ = 0;
      health_refusal_.clear();
    }
    for (uint64_t i = 0; i < n; ++i) {
      health_ctx_.push_back(std::make_unique<grpc::ClientContext>());
      grpc::ClientContext* ctx = health_ctx_.back().get();
      std::shared_ptr<grpc::Channel> channel = health_channels_[i / per_conn];
      health_threads_.emplace_back([this, ctx, channel] {
        auto stub = grpc::health::v1::Health::NewStub(channel);
        grpc::health::v1::HealthCheckRequest req;
        auto reader = stub->Watch(ctx, req);
        grpc::health::v1::HealthCheckResponse r;
        if (reader->Read(&r)) {
          {
            MutexLock l(&health_mu_);
            ++health_answered_;
            health_changed_.SignalAll();
          }
          while (reader->Read(&r)) {
          }
          reader->Finish().IgnoreError();
          return;
        }
        grpc::Status s = reader->Finish();
        MutexLock l(&health_mu_);
        ++health_refused_;
        if (health_refusal_.empty()) health_refusal_ = s.error_message();
        health_changed_.SignalAll();
      });
    }
    MutexLock l(&health_mu_);
    while (health_answered_ + health_refused_ < n) {
      health_changed_.Wait(&health_mu_);
    }
    return absl::StrCat(health_answered_, " ", health_refused_, " ",
                        health_refusal_);
  }

  void EndHealthWatches() {
    for (auto& c : health_ctx_) c->TryCancel();
    for (std::thread& t : health_threads_) t.join();
    health_threads_.clear();
    health_ctx_.clear();
    health_channels_.clear();
  }

  // ReportUsage, with the figures of the last `usage D U C` if `figures`.
  absl::Status SendUsage(bool figures) {
    v1::ReportUsageRequest req;
    req.set_session_id(session_);
    req.set_token(token_);
    if (figures) {
      MutexLock l(&watch_mu_);
      *req.add_usage() = usage_;
    }
    v1::ReportUsageResponse resp;
    grpc::ClientContext ctx;
    return FromGrpc(stub_->ReportUsage(&ctx, req, &resp));
  }

  absl::StatusOr<std::string> Watch(const std::string& mode) {
    if (mode != "nothing" && mode != "silent") {
      return absl::InvalidArgumentError("watch nothing|silent");
    }
    if (watcher_.joinable()) return absl::FailedPreconditionError("watching");
    watch_ctx_ = std::make_unique<grpc::ClientContext>();
    v1::WatchRequest req;
    req.set_session_id(session_);
    req.set_token(token_);
    watch_reader_ = stub_->Watch(watch_ctx_.get(), req);
    v1::PressureRequest hello;
    if (!watch_reader_->Read(&hello)) {
      return FromGrpc(watch_reader_->Finish());
    }
    const bool answer = mode == "nothing";
    watcher_ = std::thread([this, answer] {
      v1::PressureRequest p;
      while (watch_reader_->Read(&p)) {
        if (p.bytes_wanted() == 0) continue;
        ++watch_requests_;
        if (answer) SendUsage(true).IgnoreError();
      }
      watch_reader_->Finish().IgnoreError();
    });
    return std::string();
  }

  Mutex watch_mu_;  // common/mutex.h: seen by ThreadSanitizer
  v1::DeviceUsage usage_ ABSL_GUARDED_BY(watch_mu_);
  std::unique_ptr<grpc::ClientContext> watch_ctx_;
  std::unique_ptr<grpc::ClientReader<v1::PressureRequest>> watch_reader_;
  std::thread watcher_;
  std::atomic<uint64_t> watch_requests_{0};

  struct Held {
    UniqueFd fd;
    uint8_t* base = nullptr;
  };

  absl::StatusOr<v1::LeaseResponse> Lease(int device, uint64_t count) {
    v1::LeaseRequest req;
    req.set_session_id(session_);
    req.set_token(token_);
    req.set_device(device);
    req.set_chunk_count(count);
    v1::LeaseResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline(absl::Seconds(60)));
    absl::Status s = FromGrpc(stub_->Lease(&ctx, req, &resp));
    if (!s.ok()) return s;
    return resp;
  }

  absl::StatusOr<std::string> ClaimAndMap(const v1::LeaseResponse& l) {
    v1::FdRequest req;
    req.set_session_id(session_);
    req.set_token(token_);
    req.mutable_claim()->set_lease_id(l.lease_id());
    absl::Status s = SendFds(fd_.get(), req.SerializeAsString(), {});
    if (!s.ok()) return s;
    for (;;) {
      std::vector<UniqueFd> fds;
      absl::StatusOr<v1::FdReply> reply = ReadReply(&fds);
      if (!reply.ok()) return reply.status();
      if (absl::Status r = ReplyStatus(*reply); !r.ok()) return r;
      if (static_cast<size_t>(reply->chunk_ids_size()) != fds.size()) {
        return absl::DataLossError("ids and descriptors differ in number");
      }
      for (size_t i = 0; i < fds.size(); ++i) {
        void* p = ::mmap(nullptr, chunk_size_, PROT_READ | PROT_WRITE,
                         MAP_SHARED, fds[i].get(), 0);
        if (p == MAP_FAILED) {
          return absl::InternalError(
              absl::StrCat("mmap: ", std::strerror(errno)));
        }
        Held& h = held_[reply->chunk_ids(static_cast<int>(i))];
        h.fd = std::move(fds[i]);
        h.base = static_cast<uint8_t*>(p);
      }
      if (reply->last()) break;
    }
    std::string out = absl::StrCat(l.lease_id());
    for (uint64_t id : l.chunk_ids()) absl::StrAppend(&out, " ", id);
    return out;
  }

  absl::StatusOr<std::string> Flood(uint64_t n, const std::string& kind) {
    if (flood_sock_ >= 0) return absl::FailedPreconditionError("flooding");
    v1::FdRequest req;
    req.set_session_id(session_);
    if (kind == "bind") {
      absl::StatusOr<UniqueFd> fd = ConnectUnix(fd_path_);
      if (!fd.ok()) return fd.status();
      flood_owned_ = *std::move(fd);
      flood_sock_ = flood_owned_.get();
      req.set_token("not the token");
      req.mutable_bind();
    } else if (kind == "claim") {
      flood_sock_ = fd_.get();
      req.set_token(token_);
      req.mutable_claim()->set_lease_id(999999999);
    } else {
      return absl::InvalidArgumentError("flood bind|claim");
    }
    const std::string frame = req.SerializeAsString();
    const int sock = flood_sock_;
    flood_threads_.emplace_back([this, sock, n, frame] {
      for (uint64_t i = 0; i < n && !flood_stop_; ++i) {
        if (!SendFds(sock, frame, {}).ok()) return;
        ++flood_sent_;
      }
    });
    flood_threads_.emplace_back([this, sock] {
      while (!flood_stop_) {
        char buf[256];
        const ssize_t got = ::recv(sock, buf, sizeof(buf), MSG_DONTWAIT);
        if (got == 0) return;
        if (got > 0) flood_read_ += got;
        ::usleep(1000 * 1000);
      }
    });
    return std::string();
  }

  void Drop(uint64_t id) {
    auto it = held_.find(id);
    if (it == held_.end()) return;
    ::munmap(it->second.base, chunk_size_);
    held_.erase(it);
  }

  absl::StatusOr<v1::FdReply> Exchange(const v1::FdRequest& req,
                                       std::vector<UniqueFd>* fds) {
    absl::Status s = SendFds(fd_.get(), req.SerializeAsString(), {});
    if (!s.ok()) return s;
    return ReadReply(fds);
  }

  absl::StatusOr<v1::FdReply> ReadReply(std::vector<UniqueFd>* fds) {
    absl::StatusOr<ReceivedMessage> m =
        RecvFds(fd_.get(), 1 << 20, kMaxFdsPerGroup);
    if (!m.ok()) return m.status();
    v1::FdReply reply;
    if (!reply.ParseFromString(m->payload)) {
      return absl::DataLossError("unparseable FdReply");
    }
    if (fds != nullptr) *fds = std::move(m->fds);
    return reply;
  }

  static absl::Status ReplyStatus(const v1::FdReply& r) {
    if (r.code() == 0) return absl::OkStatus();
    return absl::Status(static_cast<absl::StatusCode>(r.code()), r.message());
  }

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Lake::Stub> stub_;
  std::string socket_;
  std::vector<std::shared_ptr<grpc::Channel>> health_channels_;
  std::vector<std::unique_ptr<grpc::ClientContext>> health_ctx_;
  std::vector<std::thread> health_threads_;
  Mutex health_mu_;
  CondVar health_changed_;
  uint64_t health_answered_ ABSL_GUARDED_BY(health_mu_) = 0;
  uint64_t health_refused_ ABSL_GUARDED_BY(health_mu_) = 0;
  std::string health_refusal_ ABSL_GUARDED_BY(health_mu_);
  uint64_t session_ = 0;
  std::string token_;
  size_t chunk_size_ = 0;
  UniqueFd fd_;
  std::map<uint64_t, Held> held_;
  std::thread pending_;
  absl::StatusOr<v1::LeaseResponse> pending_result_;
  std::string fd_path_;
  UniqueFd flood_owned_;
  int flood_sock_ = -1;
  std::vector<std::thread> flood_threads_;
  std::atomic<bool> flood_stop_{false};
  std::atomic<uint64_t> flood_sent_{0};
  std::atomic<uint64_t> flood_read_{0};
  std::vector<std::thread> many_;
  std::atomic<uint64_t> many_granted_{0};
  std::atomic<uint64_t> many_refused_{0};
  std::atomic<uint64_t> many_capped_{0};
};

int Main() {
  const int uid = absl::GetFlag(FLAGS_uid);
  if (uid >= 0) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(uid) != 0 ||
        ::setuid(uid) != 0) {
      Answer(
          absl::PermissionDeniedError(absl::StrCat("cannot become uid ", uid)));
      return 1;
    }
  }
  RawClient client;
  absl::Status s =
      client.Connect(absl::GetFlag(FLAGS_socket), absl::GetFlag(FLAGS_name));
  if (!s.ok()) {
    Answer(s);
    return 1;
  }
  std::cout << "ready " << client.session() << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::vector<std::string> words =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (words.empty()) continue;
    if (words[0] == "quit") break;
    Answer(client.Serve(words));
  }
  client.Finish();
  Answer(std::string());
  return 0;
}

}  // namespace
}  // namespace gmlake

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return gmlake::Main();
}
