// Copyright 2026 The GMLake Authors.
//
// Fuzzes gmlaked's descriptor socket (daemon/fd_server.h) in-process: a real
// Lake on the host backend, a real FdServer on a real socket, and a script
// of client actions read from the input: binds, claims and adopts with
// right and wrong sessions, tokens, leases and chunk sizes, framed garbage,
// raw bytes,
// descriptors sent to the daemon, reconnects, and leases, returns and
// session ends made beside it on the Lake. Afterwards the server must have
// closed the connection (no hang), the books must balance, and once the
// server and the lake are gone no descriptor may be left open.

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/fd_passing.h"
#include "common/host_backend.h"
#include "common/unique_fd.h"
#include "daemon/fd_server.h"
#include "daemon/lake.h"
#include "daemon/log.h"
#include "proto/gmlake.pb.h"
#include "tests/fuzz/fuzz_input.h"

namespace gmlake {
namespace fuzz {
namespace {

constexpr size_t kChunk = 64 << 10;
constexpr int kMaxOps = 64;

VmmBackend* Backend() {
  static VmmBackend* backend = [] {
    HostBackend::Options o;
    o.capacity_bytes = 64 << 20;
    o.granularity = kChunk;
    absl::StatusOr<std::unique_ptr<HostBackend>> b = HostBackend::Create(o);
    FUZZ_CHECK(b.ok(), "host backend: %s", b.status().ToString().c_str());
    return b->release();
  }();
  return backend;
}

const std::string& SocketPath() {
  static const std::string path = [] {
    // Not named by the pid: runs in sandboxes of their own pid namespace
    // (bazel test --runs_per_test) share pids, and met at one socket.
    char dir[] = "/tmp/gmlfz.XXXXXX";
    FUZZ_CHECK(::mkdtemp(dir) != nullptr, "mkdtemp: %s", std::strerror(errno));
    return std::string(dir) + "/fd.sock";
  }();
  return path;
}

class Script {
 public:
  Script(FuzzInput* in, Lake* lake) : in_(in), lake_(lake) {
    for (pid_t pid : {::getpid(), ::getppid()}) {
      absl::StatusOr<SessionTicket> t = lake_->OpenSession(pid, "fuzz");
      FUZZ_CHECK(t.ok(), "OpenSession: %s", t.status().ToString().c_str());
      sessions_.push_back(*t);
    }
  }

  void Run() {
    Connect();
    for (int op = 0; op < kMaxOps && !in_->empty(); ++op) {
      Step(in_->Byte() % 10);
    }
    Drain();
  }

 private:
  void Connect() {
    absl::StatusOr<UniqueFd> s = ConnectUnix(SocketPath());
    FUZZ_CHECK(s.ok(), "connect: %s", s.status().ToString().c_str());
    sock_ = *std::move(s);
    broken_ = false;
  }

  // Half-closes and reads every reply until the server closes: a server
  // that does neither within 20 s is stuck.
  void Drain() {
    ::shutdown(sock_.get(), SHUT_WR);
    for (;;) {
      // libFuzzer's timers interrupt poll (EINTR): wait to a deadline.
      const absl::Time deadline = absl::Now() + absl::Seconds(20);
      int ready;
      do {
        pollfd p{sock_.get(), POLLIN, 0};
        ready = ::poll(&p, 1, 100);
      } while (ready <= 0 && absl::Now() < deadline);
      FUZZ_CHECK(ready == 1,
                 "the fd socket neither answered nor closed in 20 s");
      absl::StatusOr<ReceivedMessage> m =
          RecvFds(sock_.get(), 64 << 10, kMaxFdsPerGroup);
      if (!m.ok()) break;
      v1::FdReply reply;
      FUZZ_CHECK(reply.ParseFromString(m->payload), "a reply that is not one");
      FUZZ_CHECK(static_cast<size_t>(reply.chunk_ids_size()) == m->fds.size(),
                 "%d chunk ids with %zu descriptors", reply.chunk_ids_size(),
                 m->fds.size());
    }
    sock_.Reset();
  }

  const SessionTicket& PickSession() {
    return sessions_[in_->Byte() % sessions_.size()];
  }

  void Send(const std::string& payload, int fds) {
    const int dev_null = DevNull();
    if (broken_) return;
    std::vector<int> attach(fds, dev_null);
    broken_ = !SendFds(sock_.get(), payload, attach).ok();
  }

  // A request of `session` (or a made-up id) with its token (or a wrong,
  // empty or made-up one).
  v1::FdRequest Request() {
    v1::FdRequest req;
    const uint8_t how = in_->Byte();
    const SessionTicket& s = PickSession();
    req.set_session_id((how & 3) == 3 ? in_->U64() : s.id);
    std::string token = s.token;
    switch ((how >> 2) & 3) {
      case 1:
        token[0] ^= 1;
        break;
      case 2:
        token.clear();
        break;
      case 3:
        token = in_->Bytes(40);
        break;
    }
    req.set_token(token);
    return req;
  }

  void Step(int op) {
    switch (op) {
      case 0: {  // bind
        v1::FdRequest req = Request();
        req.mutable_bind();
        Send(req.SerializeAsString(), 0);
        break;
      }
      case 1: {  // claim: the last lease, or a made-up one
        v1::FdRequest req = Request();
        req.mutable_claim()->set_lease_id(in_->Byte() % 2 ? in_->U64()
                                                          : last_lease_);
        Send(req.SerializeAsString(), 0);
        break;
      }
      case 2: {  // a lease beside the socket (works once bound)
        const SessionTicket& s = PickSession();
        absl::StatusOr<LeaseGrant> g =
            lake_->Lease(s.id, s.token, 0, in_->Byte() % 4 + 1);
        if (g.ok()) {
          last_lease_ = g->lease_id;
          last_chunks_ = g->chunk_ids;
          last_owner_ = s;
        }
        break;
      }
      case 3:  // the last lease's chunks go back, claimed or not
        lake_->Return(last_owner_.id, last_owner_.token, last_chunks_)
            .IgnoreError();
        break;
      case 4: {  // a framed payload of anything, perhaps with descriptors
        const std::string payload = in_->Bytes(600);
        Send(payload, in_->Byte() % 3);
        break;
      }
      case 5: {  // bytes without framing
        const std::string raw = in_->Bytes(600);
        if (!broken_ && !raw.empty()) {
          broken_ = ::send(sock_.get(), raw.data(), raw.size(), MSG_NOSIGNAL) !=
                    static_cast<ssize_t>(raw.size());
        }
        break;
      }
      case 6:  // a new connection
        Drain();
        Connect();
        break;
      case 7: {  // the session ends beside the socket
        const SessionTicket& s = PickSession();
        if (in_->Byte() % 2) {
          lake_->CloseSession(s.id, s.token).IgnoreError();
        } else {
          lake_->EndSession(s.id, "fuzz");
        }
        break;
      }
      case 8:
        lake_->CheckLiveness();
        break;
      case 9:
        Adopt();
        break;
    }
  }

  // An adopt request (a client after a restart) with chunk sizes from the
  // input: the unit, twice it, odd, huge or none; and descriptors of the
  // last lease's chunks (which the daemon holds already) or of /dev/null.
  void Adopt() {
    v1::FdRequest req = Request();
    v1::AdoptRequest* adopt = req.mutable_adopt();
    adopt->set_device(in_->Byte() % 2);
    const int n = in_->Byte() % 4;
    constexpr uint64_t kSizes[] = {kChunk, 2 * kChunk, 3, uint64_t{1} << 62};
    const bool sized = in_->Byte() % 2;
    for (int i = 0; i < n; ++i) {
      adopt->add_previous_chunk_ids(i + 1);
      if (sized) adopt->add_chunk_bytes(kSizes[in_->Byte() % 4]);
    }
    std::vector<UniqueFd> owned;
    if (in_->Byte() % 2 && !last_chunks_.empty()) {
      absl::StatusOr<std::vector<UniqueFd>> fds =
          lake_->DupChunkFds(last_owner_.id, last_chunks_);
      if (fds.ok()) owned = *std::move(fds);
    }
    std::vector<int> attach;
    for (int i = 0; i < n; ++i) {
      attach.push_back(static_cast<size_t>(i) < owned.size() ? owned[i].get()
                                                             : DevNull());
    }
    if (!broken_)
      broken_ = !SendFds(sock_.get(), req.SerializeAsString(), attach).ok();
  }

  FuzzInput* const in_;
  Lake* const lake_;
  std::vector<SessionTicket> sessions_;
  UniqueFd sock_;
  bool broken_ = false;
  uint64_t last_lease_ = 0;
  std::vector<uint64_t> last_chunks_;
  SessionTicket last_owner_;
};

void CheckBooks(const Lake& lake) {
  v1::StatusResponse st;
  lake.FillStatus(&st);
  for (const v1::DeviceStatus& d : st.devices()) {
    FUZZ_CHECK(
        d.created_chunks() ==
            d.free_chunks() + d.leased_chunks() + d.scrubbing_chunks(),
        "device %d: created %lu != free %lu + leased %lu + scrubbing %lu",
        d.device(), d.created_chunks(), d.free_chunks(), d.leased_chunks(),
        d.scrubbing_chunks());
  }
}

}  // namespace
}  // namespace fuzz
}  // namespace gmlake

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gmlake;  // NOLINT
  VmmBackend* backend = fuzz::Backend();
  fuzz::DevNull();
  const int before = fuzz::OpenFdCount();
  {
    LakeOptions o;
    o.devices.push_back({fuzz::kChunk, 16 * fuzz::kChunk, 0});
    o.reclaim_timeout = absl::Milliseconds(1);
    o.fd_socket_path = fuzz::SocketPath();
    absl::StatusOr<std::unique_ptr<Lake>> lake = Lake::Create(backend, o);
    FUZZ_CHECK(lake.ok(), "Lake::Create: %s", lake.status().ToString().c_str());
    FdServerOptions fo;
    fo.path = fuzz::SocketPath();
    fo.mode = 0600;
    absl::StatusOr<std::unique_ptr<FdServer>> server =
        FdServer::Start(lake->get(), fo);
    FUZZ_CHECK(server.ok(), "FdServer::Start: %s",
               server.status().ToString().c_str());
    fuzz::FuzzInput in(data, size);
    fuzz::Script(&in, lake->get()).Run();
    (*server)->Stop();
    fuzz::CheckBooks(**lake);
  }
  const int after = fuzz::OpenFdCount();
  FUZZ_CHECK(after == before, "%d descriptors open after the input, %d before",
             after, before);
  return 0;
}
