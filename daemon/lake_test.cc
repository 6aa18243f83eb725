// Copyright 2026 The GMLake Authors.
//
// The Lake's books against the host backend: real memfd chunks, real
// descriptors. Identities are given directly here (the fd server takes them
// from SO_PEERCRED); the integration tests cover the sockets.

#include "daemon/lake.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/mutex.h"
#include "common/vmm.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gmlake {
namespace {

using ::testing::HasSubstr;

constexpr size_t kChunk = 2 << 20;

std::unique_ptr<VmmBackend> HostBackendOrDie(int devices = 1) {
  BackendOptions o;
  o.kind = "host";
  o.host_devices = devices;
  o.host_capacity_bytes = size_t{1} << 30;
  absl::StatusOr<std::unique_ptr<VmmBackend>> b = CreateBackend(o);
  EXPECT_TRUE(b.ok()) << b.status();
  return *std::move(b);
}

LakeOptions Options(uint64_t capacity_chunks, int devices = 1) {
  LakeOptions o;
  for (int i = 0; i < devices; ++i) {
    o.devices.push_back({kChunk, capacity_chunks * kChunk, 0});
  }
  // Pressure is answered from other threads: a busy machine must not turn a
  // late answer into a failed lease. Tests of the timeout set it short.
  o.reclaim_timeout = absl::Seconds(60);
  o.fd_socket_path = "/test/fd.sock";
  return o;
}

struct Books {
  uint64_t created = 0, leased = 0, free = 0, scrubbing = 0;
  size_t sessions = 0;
};

Books GetBooks(const Lake& lake, int device = 0) {
  v1::StatusResponse st;
  lake.FillStatus(&st);
  const v1::DeviceStatus& d = st.devices(device);
  // The invariant every test relies on.
  EXPECT_EQ(d.created_chunks(),
            d.free_chunks() + d.leased_chunks() + d.scrubbing_chunks());
  return {d.created_chunks(), d.leased_chunks(), d.free_chunks(),
          d.scrubbing_chunks(), static_cast<size_t>(st.sessions_size())};
}

// Records pressure requests; optionally runs a reaction on another thread
// (as a client would, after its Watch stream delivers the request). The
// reactions call the lake, so they end before it does: LakeTest's sinks are
// awaited in TearDown (the lake drops its sinks only while it shuts down).
class RecordingSink : public PressureSink {
 public:
  explicit RecordingSink(std::function<void(const Pressure&)> react = nullptr)
      : react_(std::move(react)) {}
  ~RecordingSink() override { AwaitReactions(); }
  // Waits for every reaction started so far.
  void AwaitReactions() {
    std::vector<std::thread> started;
    {
      MutexLock l(&mu_);
      started.swap(threads_);
    }
    for (std::thread& t : started) t.join();
  }
  void Send(const Pressure& p) override {
    MutexLock l(&mu_);
    got_.push_back(p);
    if (react_) threads_.emplace_back(react_, p);
  }
  void Close(const absl::Status& why) override {
    MutexLock l(&mu_);
    closed_ = why;
  }
  std::vector<Pressure> got() {
    MutexLock l(&mu_);
    return got_;
  }
  absl::Status closed() {
    MutexLock l(&mu_);
    return closed_;
  }

 private:
  std::function<void(const Pressure&)> react_;
  Mutex mu_;
  std::vector<Pressure> got_;
  absl::Status closed_ = absl::OkStatus();
  std::vector<std::thread> threads_;
};

class LakeTest : public ::testing::Test {
 public:  // the helpers below use it too
  // A sink whose reactions end before the lake (issue 16).
  std::shared_ptr<RecordingSink> MakeSink(
      std::function<void(const Pressure&)> react = nullptr) {
    sinks_.push_back(std::make_shared<RecordingSink>(std::move(react)));
    return sinks_.back();
  }
  void TearDown() override {
    for (const std::shared_ptr<RecordingSink>& s : sinks_) s->AwaitReactions();
  }
  void Make(LakeOptions options, int devices = 1) {
    backend_ = HostBackendOrDie(devices);
    absl::StatusOr<std::unique_ptr<Lake>> lake =
        Lake::Create(backend_.get(), std::move(options));
    ASSERT_TRUE(lake.ok()) << lake.status();
    lake_ = *std::move(lake);
  }
  // Opens and binds a session as `uid`.
  SessionTicket Open(uid_t uid, const std::string& name = "t",
                     std::function<void()> on_end = nullptr) {
    absl::StatusOr<SessionTicket> t = lake_->OpenSession(::getpid(), name);
    EXPECT_TRUE(t.ok()) << t.status();
    absl::Status b =
        lake_->BindSession(t->id, t->token, {::getpid(), uid, uid}, on_end);
    EXPECT_TRUE(b.ok()) << b;
    return *t;
  }
  // Reads the first bytes of a chunk leased to `t`, through a fresh import
  // of its descriptor (as a client would see it).
  std::vector<uint8_t> Peek(const SessionTicket& t, uint64_t chunk,
                            size_t n = 64) {
    absl::StatusOr<std::vector<UniqueFd>> fds =
        lake_->DupChunkFds(t.id, {chunk});
    EXPECT_TRUE(fds.ok()) << fds.status();
    std::vector<uint8_t> out(n, 0xEE);
    if (!fds.ok()) return out;
    absl::StatusOr<ChunkHandle> h =
        backend_->ImportChunk((*fds)[0].get(), 0, kChunk);
    EXPECT_TRUE(h.ok()) << h.status();
    Chunk owned(backend_.get(), *h, 0, kChunk);
    absl::StatusOr<VirtualRange> r =
        VirtualRange::Reserve(backend_.get(), kChunk);
    EXPECT_TRUE(r.ok());
    const int devs[] = {0};
    absl::StatusOr<Mapping> m =
        Mapping::Map(backend_.get(), r->base(), kChunk, *h, devs);
    EXPECT_TRUE(m.ok()) << m.status();
    EXPECT_TRUE(backend_->CopyToHost(out.data(), r->base(), n).ok());
    return out;
  }
  void Poke(const SessionTicket& t, uint64_t chunk, uint8_t value) {
    absl::StatusOr<std::vector<UniqueFd>> fds =
        lake_->DupChunkFds(t.id, {chunk});
    ASSERT_TRUE(fds.ok()) << fds.status();
    absl::StatusOr<ChunkHandle> h =
        backend_->ImportChunk((*fds)[0].get(), 0, kChunk);
    ASSERT_TRUE(h.ok());
    Chunk owned(backend_.get(), *h, 0, kChunk);
    absl::StatusOr<VirtualRange> r =
        VirtualRange::Reserve(backend_.get(), kChunk);
    ASSERT_TRUE(r.ok());
    const int devs[] = {0};
    absl::StatusOr<Mapping> m =
        Mapping::Map(backend_.get(), r->base(), kChunk, *h, devs);
    ASSERT_TRUE(m.ok());
    ASSERT_TRUE(backend_->Fill(r->base(), value, kChunk).ok());
  }

  std::unique_ptr<VmmBackend> backend_;
  std::unique_ptr<Lake> lake_;
  std::vector<std::shared_ptr<RecordingSink>> sinks_;
};

TEST_F(LakeTest, LeaseClaimReturnBalanceTheBooks) {
  Make(Options(8));
  SessionTicket a = Open(1000);
  EXPECT_EQ(GetBooks(*lake_).created, 0u);

  absl::StatusOr<LeaseGrant> g = lake_->Lease(a.id, a.token, 0, 3);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->chunk_ids.size(), 3u);
  EXPECT_EQ(g->chunk_size, kChunk);
  Books b = GetBooks(*lake_);
  EXPECT_EQ(b.created, 3u);
  EXPECT_EQ(b.leased, 3u);
  EXPECT_EQ(b.free, 0u);

  absl::StatusOr<std::vector<uint64_t>> ids =
      lake_->Claim(a.id, a.token, g->lease_id);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, g->chunk_ids);
  absl::StatusOr<std::vector<UniqueFd>> fds = lake_->DupChunkFds(a.id, *ids);
  ASSERT_TRUE(fds.ok());
  for (const UniqueFd& fd : *fds) EXPECT_TRUE(fd.valid());
  // A lease is claimed once.
  EXPECT_EQ(lake_->Claim(a.id, a.token, g->lease_id).status().code(),
            absl::StatusCode::kNotFound);

  absl::StatusOr<uint64_t> back =
      lake_->Return(a.id, a.token, {g->chunk_ids[0], g->chunk_ids[1]});
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, 2 * kChunk);
  b = GetBooks(*lake_);
  EXPECT_EQ(b.leased, 1u);
  EXPECT_EQ(b.free, 2u);

  // The next lease reuses free chunks before creating.
  g = lake_->Lease(a.id, a.token, 0, 4);
  ASSERT_TRUE(g.ok()) << g.status();
  b = GetBooks(*lake_);
  EXPECT_EQ(b.created, 5u);
  EXPECT_EQ(b.leased, 5u);

  absl::StatusOr<uint64_t> closed = lake_->CloseSession(a.id, a.token);
  ASSERT_TRUE(closed.ok());
  EXPECT_EQ(*closed, 5 * kChunk);
  b = GetBooks(*lake_);
  EXPECT_EQ(b.free, 5u);
  EXPECT_EQ(b.sessions, 0u);
}

TEST_F(LakeTest, SessionsMustBeBoundAndAuthenticated) {
  Make(Options(4));
  absl::StatusOr<SessionTicket> t = lake_->OpenSession(::getpid(), "x");
  ASSERT_TRUE(t.ok());
  absl::StatusOr<LeaseGrant> g = lake_->Lease(t->id, t->token, 0, 1);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(g.status().message(), HasSubstr("not bound"));

  EXPECT_EQ(lake_->Lease(t->id, "wrong", 0, 1).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(lake_->Lease(t->id + 100, t->token, 0, 1).status().code(),
            absl::StatusCode::kNotFound);
  // The fd-socket peer must be the process that opened the session.
  absl::Status bind =
      lake_->BindSession(t->id, t->token, {::getpid() + 1, 0, 0}, nullptr);
  EXPECT_EQ(bind.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(bind.message(), HasSubstr("opened for pid"));
  ASSERT_TRUE(
      lake_->BindSession(t->id, t->token, {::getpid(), 5, 5}, nullptr).ok());
  EXPECT_EQ(
      lake_->BindSession(t->id, t->token, {::getpid(), 5, 5}, nullptr).code(),
      absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(lake_->Lease(t->id, t->token, 0, 1).ok());
  EXPECT_EQ(lake_->Lease(t->id, t->token, 3, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(lake_->Lease(t->id, t->token, 0, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(lake_->OpenSession(0, "bad").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(LakeTest, QuotasNameTheFlag) {
  LakeOptions o = Options(64);
  o.uid_quota_bytes = 10 * kChunk;
  o.session_quota_bytes = 6 * kChunk;
  Make(std::move(o));
  SessionTicket a = Open(1000);
  SessionTicket b = Open(1000);
  ASSERT_TRUE(lake_->Lease(a.id, a.token, 0, 5).ok());
  absl::StatusOr<LeaseGrant> g = lake_->Lease(a.id, a.token, 0, 2);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(g.status().message(), HasSubstr("would put session 1 (t, pid"));
  EXPECT_THAT(g.status().message(),
              HasSubstr("at 14.00 MiB, over its quota "
                        "of 12.00 MiB (--session_quota)"));
  ASSERT_TRUE(lake_->Lease(b.id, b.token, 0, 4).ok());
  g = lake_->Lease(b.id, b.token, 0, 2);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(g.status().message(),
              HasSubstr("lease of 4.00 MiB would put uid 1000 at 22.00 MiB, "
                        "over its quota of 20.00 MiB (--uid_quota)"));
  // Another uid has its own quota.
  SessionTicket c = Open(2000);
  EXPECT_TRUE(lake_->Lease(c.id, c.token, 0, 6).ok());
  // Returning makes room again.
  ASSERT_TRUE(lake_->CloseSession(a.id, a.token).ok());
  EXPECT_TRUE(lake_->Lease(b.id, b.token, 0, 2).ok());
  // Failed leases left nothing behind.
  Books books = GetBooks(*lake_);
  EXPECT_EQ(books.leased, 12u);
}

TEST_F(LakeTest, FullLakeWithNobodyToAskFailsAtOnce) {
  // "At once": no pressure sent and no wait for answers, which would take
  // the reclaim timeout, long enough here that a busy machine is no excuse.
  LakeOptions o = Options(4);
  o.reclaim_timeout = absl::Seconds(60);
  Make(std::move(o));
  SessionTicket a = Open(1000);
  absl::StatusOr<LeaseGrant> g = lake_->Lease(a.id, a.token, 0, 5);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(g.status().message(), HasSubstr("whole capacity"));
  ASSERT_TRUE(lake_->Lease(a.id, a.token, 0, 4).ok());
  const absl::Time start = absl::Now();
  g = lake_->Lease(a.id, a.token, 0, 1);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(g.status().message(), HasSubstr("no other session holds"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  v1::StatusResponse st;
  lake_->FillStatus(&st);
  EXPECT_EQ(st.pressure_requests_sent(), 0u);
}

TEST_F(LakeTest, PressureMakesAnIdleSessionReturn) {
  Make(Options(4));
  SessionTicket idle = Open(1000, "idle");
  absl::StatusOr<LeaseGrant> held = lake_->Lease(idle.id, idle.token, 0, 4);
  ASSERT_TRUE(held.ok());
  std::vector<uint64_t> ids = held->chunk_ids;
  Notification answered;
  // The idle client answers like DaemonChunkSource: returns what it was
  // asked for, then reports its usage.
  auto sink = MakeSink([&](const Pressure& p) {
    const size_t n = p.bytes / kChunk;
    std::vector<uint64_t> give(ids.begin(), ids.begin() + n);
    EXPECT_TRUE(lake_->Return(idle.id, idle.token, give).ok());
    DeviceUsageReport u{0, 0, (4 - n) * kChunk};
    EXPECT_TRUE(lake_->ReportUsage(idle.id, idle.token, {u}).ok());
    answered.Notify();
  });
  ASSERT_TRUE(lake_->AttachWatcher(idle.id, idle.token, sink).ok());
  DeviceUsageReport u{0, 0, 4 * kChunk};
  ASSERT_TRUE(lake_->ReportUsage(idle.id, idle.token, {u}).ok());

  SessionTicket busy = Open(1000, "busy");
  absl::StatusOr<LeaseGrant> g = lake_->Lease(busy.id, busy.token, 0, 3);
  ASSERT_TRUE(g.ok()) << g.status();
  answered.WaitForNotification();
  ASSERT_EQ(sink->got().size(), 1u);
  EXPECT_EQ(sink->got()[0].bytes, 3 * kChunk);
  EXPECT_THAT(sink->got()[0].reason, HasSubstr("busy"));
  Books b = GetBooks(*lake_);
  EXPECT_EQ(b.leased, 4u);
  EXPECT_EQ(b.created, 4u);
  v1::StatusResponse st;
  lake_->FillStatus(&st);
  EXPECT_EQ(st.pressure_requests_sent(), 1u);
}

TEST_F(LakeTest, PressureIgnoredFailsAfterTheTimeout) {
  LakeOptions o = Options(2);
  o.reclaim_timeout = absl::Milliseconds(300);
  Make(std::move(o));
  SessionTicket hog = Open(1000, "hog");
  ASSERT_TRUE(lake_->Lease(hog.id, hog.token, 0, 2).ok());
  auto silent = MakeSink();
  ASSERT_TRUE(lake_->AttachWatcher(hog.id, hog.token, silent).ok());
  SessionTicket other = Open(1001, "other");
  const absl::Time start = absl::Now();
  absl::StatusOr<LeaseGrant> g = lake_->Lease(other.id, other.token, 0, 1);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(g.status().message(), HasSubstr("--reclaim_timeout"));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(290));
  EXPECT_EQ(silent->got().size(), 1u);
  EXPECT_EQ(GetBooks(*lake_).leased, 2u);
  // A new watcher replaces the silent one, whose stream is closed.
  auto next = MakeSink();
  ASSERT_TRUE(lake_->AttachWatcher(hog.id, hog.token, next).ok());
  EXPECT_FALSE(silent->closed().ok());
}

// A session that answers "nothing to give" ends the wait early: the lease
// fails with that reason long before the (long) reclaim timeout.
TEST_F(LakeTest, PressureAnsweredWithNothingEndsTheWaitEarly) {
  Make(Options(2));
  SessionTicket hog = Open(1000, "hog");
  ASSERT_TRUE(lake_->Lease(hog.id, hog.token, 0, 2).ok());
  auto refuses = MakeSink([&](const Pressure&) {
    DeviceUsageReport u{0, 2 * kChunk, 0};
    EXPECT_TRUE(lake_->ReportUsage(hog.id, hog.token, {u}).ok());
  });
  ASSERT_TRUE(lake_->AttachWatcher(hog.id, hog.token, refuses).ok());
  SessionTicket other = Open(1001, "other");
  const absl::Time start = absl::Now();
  absl::StatusOr<LeaseGrant> g = lake_->Lease(other.id, other.token, 0, 1);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(g.status().message(), HasSubstr("they returned less"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  EXPECT_EQ(refuses->got().size(), 1u);
  EXPECT_EQ(GetBooks(*lake_).leased, 2u);
}

TEST_F(LakeTest, CrossUidChunksAreZeroedSameUidKept) {
  Make(Options(1));
  SessionTicket a = Open(1000);
  absl::StatusOr<LeaseGrant> g = lake_->Lease(a.id, a.token, 0, 1);
  ASSERT_TRUE(g.ok());
  const uint64_t chunk = g->chunk_ids[0];
  Poke(a, chunk, 0xAB);
  ASSERT_TRUE(lake_->Return(a.id, a.token, {chunk}).ok());

  // Same uid: no scrub, the bytes are still there.
  SessionTicket a2 = Open(1000);
  g = lake_->Lease(a2.id, a2.token, 0, 1);
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g->chunk_ids[0], chunk);
  EXPECT_EQ(Peek(a2, chunk)[0], 0xAB);
  ASSERT_TRUE(lake_->CloseSession(a2.id, a2.token).ok());

  // Another uid: zeroed first.
  SessionTicket b = Open(2000);
  g = lake_->Lease(b.id, b.token, 0, 1);
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g->chunk_ids[0], chunk);
  EXPECT_EQ(Peek(b, chunk), std::vector<uint8_t>(64, 0));
  v1::StatusResponse st;
  lake_->FillStatus(&st);
  EXPECT_EQ(st.chunks_scrubbed(), 1u);
}

TEST_F(LakeTest, ScrubAlwaysAndNever) {
  for (ScrubPolicy policy : {ScrubPolicy::kAlways, ScrubPolicy::kNever}) {
    LakeOptions o = Options(1);
    o.scrub = policy;
    Make(std::move(o));
    SessionTicket a = Open(1000);
    absl::StatusOr<LeaseGrant> g = lake_->Lease(a.id, a.token, 0, 1);
    ASSERT_TRUE(g.ok());
    Poke(a, g->chunk_ids[0], 0x5A);
    ASSERT_TRUE(lake_->CloseSession(a.id, a.token).ok());
    SessionTicket next = Open(policy == ScrubPolicy::kAlways ? 1000 : 3000);
    g = lake_->Lease(next.id, next.token, 0, 1);
    ASSERT_TRUE(g.ok());
    EXPECT_EQ(Peek(next, g->chunk_ids[0])[10],
              policy == ScrubPolicy::kAlways ? 0 : 0x5A)
        << ScrubPolicyName(policy);
    lake_.reset();
  }
}

TEST_F(LakeTest, ForeignAndUnknownIdsAreRefusedWithoutSideEffects) {
  Make(Options(8));
  SessionTicket a = Open(1000);
  SessionTicket b = Open(1000);
  absl::StatusOr<LeaseGrant> ga = lake_->Lease(a.id, a.token, 0, 2);
  absl::StatusOr<LeaseGrant> gb = lake_->Lease(b.id, b.token, 0, 2);
  ASSERT_TRUE(ga.ok() && gb.ok());

  absl::StatusOr<std::vector<uint64_t>> c =
      lake_->Claim(b.id, b.token, ga->lease_id);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(c.status().message(), HasSubstr("another session"));
  c = lake_->Claim(a.id, a.token, 999999);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  // a's lease is still claimable by a.
  EXPECT_TRUE(lake_->Claim(a.id, a.token, ga->lease_id).ok());

  absl::StatusOr<uint64_t> r =
      lake_->Return(a.id, a.token, {ga->chunk_ids[0], gb->chunk_ids[0]});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("nothing was returned"));
  r = lake_->Return(a.id, a.token, {ga->chunk_ids[0], ga->chunk_ids[0]});
  EXPECT_THAT(r.status().message(), HasSubstr("listed twice"));
  r = lake_->Return(a.id, a.token, {424242});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GetBooks(*lake_).leased, 4u);
  EXPECT_EQ(lake_->DupChunkFds(a.id, {gb->chunk_ids[0]}).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(LakeTest, EndingASessionRunsItsHooksAndFreesItsChunks) {
  Make(Options(8));
  std::atomic<int> ended{0};
  SessionTicket a = Open(1000, "a", [&] { ++ended; });
  auto sink = MakeSink();
  ASSERT_TRUE(lake_->AttachWatcher(a.id, a.token, sink).ok());
  ASSERT_TRUE(lake_->Lease(a.id, a.token, 0, 3).ok());
  EXPECT_EQ(lake_->EndSession(a.id, "test"), 3 * kChunk);
  EXPECT_EQ(ended.load(), 1);
  EXPECT_EQ(sink->closed().code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(sink->closed().message(), HasSubstr("test"));
  EXPECT_EQ(lake_->EndSession(a.id, "again"), 0u);
  EXPECT_EQ(ended.load(), 1);
  Books b = GetBooks(*lake_);
  EXPECT_EQ(b.free, 3u);
  EXPECT_EQ(b.sessions, 0u);

  // A broken Watch stream ends its session too.
  SessionTicket c = Open(1000);
  auto sink2 = MakeSink();
  ASSERT_TRUE(lake_->AttachWatcher(c.id, c.token, sink2).ok());
  ASSERT_TRUE(lake_->Lease(c.id, c.token, 0, 2).ok());
  lake_->WatcherGone(c.id, sink.get());  // not its sink: ignored
  EXPECT_EQ(GetBooks(*lake_).sessions, 1u);
  lake_->WatcherGone(c.id, sink2.get());
  b = GetBooks(*lake_);
  EXPECT_EQ(b.sessions, 0u);
  EXPECT_EQ(b.leased, 0u);
}

TEST_F(LakeTest, ChunksOfASessionEndedWhileItsProcessRunsWaitForItsExit) {
  Make(Options(8));
  // A real process that keeps running until told.
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(go[1]);
    char c;
    [[maybe_unused]] ssize_t n = ::read(go[0], &c, 1);
    ::_exit(0);
  }
  ::close(go[0]);
  absl::StatusOr<SessionTicket> t = lake_->OpenSession(child, "alive");
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(
      lake_->BindSession(t->id, t->token, {child, 1000, 1000}, nullptr).ok());
  absl::StatusOr<LeaseGrant> claimed = lake_->Lease(t->id, t->token, 0, 3);
  ASSERT_TRUE(claimed.ok());
  ASSERT_TRUE(lake_->Claim(t->id, t->token, claimed->lease_id).ok());
  ASSERT_TRUE(lake_->Lease(t->id, t->token, 0, 2).ok());  // never claimed

  // Its Watch stream broke, say: the process may still map the 3 chunks it
  // received, so they stay leased; the 2 it never received go back.
  EXPECT_EQ(lake_->EndSession(t->id, "its Watch stream broke"), 2 * kChunk);
  v1::StatusResponse st;
  lake_->FillStatus(&st);
  ASSERT_EQ(st.sessions_size(), 1);
  EXPECT_TRUE(st.sessions(0).ending());
  EXPECT_EQ(st.sessions(0).end_reason(), "its Watch stream broke");
  EXPECT_EQ(st.sessions(0).leased_chunks(), 3u);
  Books b = GetBooks(*lake_);
  EXPECT_EQ(b.leased, 3u);
  EXPECT_EQ(b.free, 2u);
  // The session is gone for its client.
  EXPECT_EQ(lake_->Lease(t->id, t->token, 0, 1).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(lake_->CheckLiveness(), 0);
  EXPECT_EQ(GetBooks(*lake_).leased, 3u);
  // Once the process exits, they go back.
  ::close(go[1]);
  int status;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  lake_->CheckLiveness();
  b = GetBooks(*lake_);
  EXPECT_EQ(b.leased, 0u);
  EXPECT_EQ(b.free, 5u);
  EXPECT_EQ(b.sessions, 0u);

  // A client that closes its session says it is done: no wait.
  SessionTicket me = Open(1000);
  absl::StatusOr<LeaseGrant> g = lake_->Lease(me.id, me.token, 0, 2);
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(lake_->Claim(me.id, me.token, g->lease_id).ok());
  EXPECT_EQ(*lake_->CloseSession(me.id, me.token), 2 * kChunk);
  EXPECT_EQ(GetBooks(*lake_).leased, 0u);
}

TEST_F(LakeTest, LivenessEndsDeadProcessesUnboundSessionsAndOldLeases) {
  // Timeouts long enough that the first check below comes before them even
  // on a busy machine, short enough to wait out.
  const absl::Duration timeout = absl::Seconds(2);
  LakeOptions o = Options(8);
  o.bind_timeout = timeout;
  o.claim_timeout = timeout;
  Make(std::move(o));
  // A real process that exits when we close its pipe.
  int exit_pipe[2];
  ASSERT_EQ(::pipe(exit_pipe), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(exit_pipe[1]);
    char c;
    while (::read(exit_pipe[0], &c, 1) > 0) {
    }
    ::_exit(0);
  }
  ::close(exit_pipe[0]);
  absl::StatusOr<SessionTicket> t = lake_->OpenSession(child, "child");
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(
      lake_->BindSession(t->id, t->token, {child, 1000, 1000}, nullptr).ok());
  absl::StatusOr<LeaseGrant> child_lease = lake_->Lease(t->id, t->token, 0, 2);
  ASSERT_TRUE(child_lease.ok());
  ASSERT_TRUE(lake_->Claim(t->id, t->token, child_lease->lease_id).ok());
  absl::StatusOr<SessionTicket> unbound = lake_->OpenSession(::getpid(), "u");
  ASSERT_TRUE(unbound.ok());
  SessionTicket me = Open(1000);
  absl::StatusOr<LeaseGrant> g = lake_->Lease(me.id, me.token, 0, 1);
  ASSERT_TRUE(g.ok());

  EXPECT_EQ(lake_->CheckLiveness(), 0);
  absl::SleepFor(timeout + absl::Milliseconds(100));
  // The unbound session is dropped and my unclaimed lease goes back.
  EXPECT_EQ(lake_->CheckLiveness(), 1);
  EXPECT_EQ(GetBooks(*lake_).leased, 2u);
  EXPECT_EQ(lake_->Claim(me.id, me.token, g->lease_id).status().code(),
            absl::StatusCode::kNotFound);
  ::close(exit_pipe[1]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_EQ(lake_->CheckLiveness(), 1);
  Books b = GetBooks(*lake_);
  EXPECT_EQ(b.leased, 0u);
  EXPECT_EQ(b.free, 3u);
  EXPECT_EQ(b.sessions, 1u);
}

TEST_F(LakeTest, TrimReleasesFreeChunksAndPrecreate) {
  LakeOptions o = Options(8);
  o.devices[0].precreate_bytes = 5 * kChunk;
  Make(std::move(o));
  Books b = GetBooks(*lake_);
  EXPECT_EQ(b.created, 5u);
  EXPECT_EQ(b.free, 5u);
  SessionTicket a = Open(1000);
  ASSERT_TRUE(lake_->Lease(a.id, a.token, 0, 2).ok());
  EXPECT_EQ(lake_->Trim(0, kChunk),
            std::make_pair(uint64_t{kChunk}, uint64_t{1}));
  EXPECT_EQ(lake_->Trim(-1, 0),
            std::make_pair(uint64_t{2 * kChunk}, uint64_t{2}));
  b = GetBooks(*lake_);
  EXPECT_EQ(b.created, 2u);
  EXPECT_EQ(b.free, 0u);
  EXPECT_EQ(b.leased, 2u);
  // Capacity freed by the trim can be created again.
  EXPECT_TRUE(lake_->Lease(a.id, a.token, 0, 6).ok());
}

TEST_F(LakeTest, TrimZeroesChunksThatHeldDataWithZeroOnRelease) {
  LakeOptions o = Options(2);
  o.zero_on_release = true;
  Make(o);
  SessionTicket a = Open(1000);
  absl::StatusOr<LeaseGrant> g = lake_->Lease(a.id, a.token, 0, 1);
  ASSERT_TRUE(g.ok());
  const uint64_t chunk = g->chunk_ids[0];
  Poke(a, chunk, 0xAB);
  // Keep a view of the chunk's memory past its release.
  absl::StatusOr<std::vector<UniqueFd>> fds = lake_->DupChunkFds(a.id, {chunk});
  ASSERT_TRUE(fds.ok());
  absl::StatusOr<ChunkHandle> h =
      backend_->ImportChunk((*fds)[0].get(), 0, kChunk);
  ASSERT_TRUE(h.ok());
  Chunk view(backend_.get(), *h, 0, kChunk);
  absl::StatusOr<VirtualRange> r =
      VirtualRange::Reserve(backend_.get(), kChunk);
  ASSERT_TRUE(r.ok());
  const int devs[] = {0};
  absl::StatusOr<Mapping> m =
      Mapping::Map(backend_.get(), r->base(), kChunk, *h, devs);
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE(lake_->Return(a.id, a.token, {chunk}).ok());
  uint8_t byte = 0;
  ASSERT_TRUE(backend_->CopyToHost(&byte, r->base() + 100, 1).ok());
  EXPECT_EQ(byte, 0xAB);
  EXPECT_EQ(lake_->Trim(-1, 0).second, 1u);
  ASSERT_TRUE(backend_->CopyToHost(&byte, r->base() + 100, 1).ok());
  EXPECT_EQ(byte, 0);
}

TEST_F(LakeTest, BadOptionsAreRefused) {
  backend_ = HostBackendOrDie();
  LakeOptions o = Options(4);
  o.devices[0].chunk_size = 3 << 20;
  EXPECT_THAT(Lake::Create(backend_.get(), o).status().message(),
              HasSubstr("--chunk_size"));
  o = Options(4);
  o.devices[0].capacity_bytes = 1 << 20;
  EXPECT_THAT(Lake::Create(backend_.get(), o).status().message(),
              HasSubstr("--capacity"));
  o = Options(4, 2);
  EXPECT_FALSE(Lake::Create(backend_.get(), o).ok());
}

TEST_F(LakeTest, ConcurrentLeasesAndReturnsKeepTheBooks) {
  Make(Options(32));
  std::vector<std::thread> threads;
  std::atomic<int> served{0};
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      SessionTicket s = Open(1000 + t % 3);
      std::mt19937 rng(t);
      std::vector<uint64_t> mine;
      for (int i = 0; i < 200; ++i) {
        if (rng() % 2 == 0 || mine.empty()) {
          absl::StatusOr<LeaseGrant> g =
              lake_->Lease(s.id, s.token, 0, 1 + rng() % 4);
          if (g.ok()) {
            ++served;
            mine.insert(mine.end(), g->chunk_ids.begin(), g->chunk_ids.end());
          }
        } else {
          const size_t n = 1 + rng() % mine.size();
          std::vector<uint64_t> give(mine.end() - n, mine.end());
          mine.resize(mine.size() - n);
          EXPECT_TRUE(lake_->Return(s.id, s.token, give).ok());
        }
      }
      if (t % 2 == 0) {
        EXPECT_TRUE(lake_->CloseSession(s.id, s.token).ok());
      } else {
        lake_->EndSession(s.id, "done");
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_GT(served.load(), 100);
  Books b = GetBooks(*lake_);
  EXPECT_EQ(b.leased, 0u);
  EXPECT_EQ(b.scrubbing, 0u);
  EXPECT_EQ(b.free, b.created);
  EXPECT_LE(b.created, 32u);
}

TEST_F(LakeTest, ShutdownFailsNewWorkAndEndsSessions) {
  Make(Options(4));
  std::atomic<int> ended{0};
  SessionTicket a = Open(1000, "a", [&] { ++ended; });
  ASSERT_TRUE(lake_->Lease(a.id, a.token, 0, 1).ok());
  lake_->Shutdown();
  EXPECT_EQ(ended.load(), 1);
  EXPECT_EQ(lake_->OpenSession(::getpid(), "late").status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(GetBooks(*lake_).leased, 0u);
}

// Holds every lease that must zero chunks at the gate until Open: the test
// acts while the lease is in flight.
class ScrubGate {
 public:
  void Install(LakeOptions* o) {
    o->testonly_before_lease_scrub = [this] {
      reached_.Notify();
      open_.WaitForNotification();
    };
  }
  void WaitReached() { reached_.WaitForNotification(); }
  void Open() { open_.Notify(); }

 private:
  Notification reached_, open_;
};

// A lake of 16 chunks: 8 fresh and 8 last held by uid 2001, so that a lease
// of all 16 by uid 2000 reserves 8 and zeroes 8 (and waits at the gate).
void MakeHalfDirty(LakeTest* t, ScrubGate* gate) {
  LakeOptions o = Options(16);
  o.devices[0].precreate_bytes = 16 * kChunk;
  gate->Install(&o);
  t->Make(std::move(o));
  SessionTicket warm = t->Open(2001, "warm");
  ASSERT_TRUE(t->lake_->Lease(warm.id, warm.token, 0, 8).ok());
  ASSERT_TRUE(t->lake_->CloseSession(warm.id, warm.token).ok());
}

TEST_F(LakeTest, ALeaseInFlightKeepsItsChunksFromItsSessionsEnd) {
  ScrubGate gate;
  MakeHalfDirty(this, &gate);
  SessionTicket a = Open(2000, "a");
  absl::StatusOr<LeaseGrant> ga;
  std::thread lease([&] { ga = lake_->Lease(a.id, a.token, 0, 16); });
  gate.WaitReached();
  Books b = GetBooks(*lake_);
  EXPECT_EQ(b.leased, 8u);  // reserved, shown as leased
  EXPECT_EQ(b.scrubbing, 8u);
  // The session ends mid-lease: nothing of the lease comes free.
  EXPECT_EQ(*lake_->CloseSession(a.id, a.token), 0u);
  EXPECT_EQ(GetBooks(*lake_).free, 0u);
  SessionTicket other = Open(2002, "other");
  EXPECT_EQ(lake_->Lease(other.id, other.token, 0, 4).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(lake_->Trim(-1, 0).second, 0u);
  gate.Open();
  lease.join();
  EXPECT_EQ(ga.status().code(), absl::StatusCode::kAborted);
  b = GetBooks(*lake_);
  EXPECT_EQ(b.free, 16u);
  EXPECT_EQ(b.leased, 0u);
  // The zeroed ones are fresh again: another uid gets all 16 unzeroed-free.
  absl::StatusOr<LeaseGrant> g = lake_->Lease(other.id, other.token, 0, 8);
  ASSERT_TRUE(g.ok()) << g.status();
  v1::StatusResponse st;
  lake_->FillStatus(&st);
  EXPECT_EQ(st.chunks_scrubbed(), 0u);
}

TEST_F(LakeTest, ChunksOfALeaseInFlightCannotBeReturnedOrTrimmed) {
  ScrubGate gate;
  MakeHalfDirty(this, &gate);
  SessionTicket a = Open(2000, "a");
  absl::StatusOr<LeaseGrant> ga;
  std::thread lease([&] { ga = lake_->Lease(a.id, a.token, 0, 16); });
  gate.WaitReached();
  for (uint64_t id = 1; id <= 16; ++id) {
    absl::StatusOr<uint64_t> r = lake_->Return(a.id, a.token, {id});
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr("still being served"));
  }
  EXPECT_EQ(lake_->Trim(-1, 0).second, 0u);
  gate.Open();
  lease.join();
  ASSERT_TRUE(ga.ok()) << ga.status();
  EXPECT_EQ(ga->chunk_ids.size(), 16u);
  Books b = GetBooks(*lake_);
  EXPECT_EQ(b.leased, 16u);
  v1::StatusResponse st;
  lake_->FillStatus(&st);
  ASSERT_EQ(st.sessions_size(), 1);
  EXPECT_EQ(st.sessions(0).leased_chunks(), 16u);
  EXPECT_EQ(st.sessions(0).leased_bytes(), 16 * kChunk);
  ASSERT_TRUE(lake_->Claim(a.id, a.token, ga->lease_id).ok());
  EXPECT_TRUE(lake_->DupChunkFds(a.id, ga->chunk_ids).ok());
  EXPECT_EQ(*lake_->CloseSession(a.id, a.token), 16 * kChunk);
  EXPECT_EQ(GetBooks(*lake_).free, 16u);
}

TEST_F(LakeTest, QuotasCountLeasesInFlight) {
  ScrubGate gate;
  LakeOptions o = Options(16);
  o.devices[0].precreate_bytes = 16 * kChunk;
  o.uid_quota_bytes = 10 * kChunk;
  gate.Install(&o);
  Make(std::move(o));
  SessionTicket warm = Open(2001, "warm");
  ASSERT_TRUE(lake_->Lease(warm.id, warm.token, 0, 8).ok());
  ASSERT_TRUE(lake_->CloseSession(warm.id, warm.token).ok());
  SessionTicket a = Open(2000, "a");
  absl::StatusOr<LeaseGrant> ga;
  std::thread lease([&] { ga = lake_->Lease(a.id, a.token, 0, 10); });
  gate.WaitReached();
  // The lease in flight counts against the uid, also once its session is
  // gone, until it is put back.
  SessionTicket a2 = Open(2000, "a2");
  EXPECT_THAT(lake_->Lease(a2.id, a2.token, 0, 1).status().message(),
              HasSubstr("--uid_quota"));
  ASSERT_TRUE(lake_->CloseSession(a.id, a.token).ok());
  EXPECT_THAT(lake_->Lease(a2.id, a2.token, 0, 1).status().message(),
              HasSubstr("--uid_quota"));
  gate.Open();
  lease.join();
  EXPECT_FALSE(ga.ok());
  EXPECT_TRUE(lake_->Lease(a2.id, a2.token, 0, 10).ok());
}

TEST_F(LakeTest, SessionsPerUidAndUnboundSessionsAreCapped) {
  LakeOptions o = Options(8);
  o.max_sessions_per_uid = 2;
  o.max_unbound_sessions = 2;
  o.unbound_eviction_age = absl::Milliseconds(50);
  Make(std::move(o));
  Open(1000);
  Open(1000);
  absl::StatusOr<SessionTicket> third = lake_->OpenSession(::getpid(), "3");
  ASSERT_TRUE(third.ok());
  absl::Status b = lake_->BindSession(third->id, third->token,
                                      {::getpid(), 1000, 1000}, nullptr);
  EXPECT_EQ(b.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(b.message(), HasSubstr("uid 1000 already has 2 sessions"));
  EXPECT_THAT(b.message(), HasSubstr("--max_sessions_per_uid"));
  // The refused session is gone, and another uid is not affected.
  EXPECT_EQ(lake_->Authenticate(third->id, third->token).code(),
            absl::StatusCode::kNotFound);
  Open(2000);

  // Unbound: two wait, a third is refused until the oldest has waited long.
  absl::StatusOr<SessionTicket> u1 = lake_->OpenSession(::getpid(), "u1");
  absl::StatusOr<SessionTicket> u2 = lake_->OpenSession(::getpid(), "u2");
  ASSERT_TRUE(u1.ok() && u2.ok());
  absl::StatusOr<SessionTicket> u3 = lake_->OpenSession(::getpid(), "u3");
  EXPECT_EQ(u3.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(u3.status().message(), HasSubstr("--max_unbound_sessions"));
  absl::SleepFor(absl::Milliseconds(60));
  u3 = lake_->OpenSession(::getpid(), "u3");
  ASSERT_TRUE(u3.ok()) << u3.status();
  EXPECT_EQ(lake_->Authenticate(u1->id, u1->token).code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(lake_->Authenticate(u2->id, u2->token).ok());
  // Binding frees its place.
  EXPECT_TRUE(
      lake_->BindSession(u2->id, u2->token, {::getpid(), 3000, 3000}, nullptr)
          .ok());
  EXPECT_TRUE(lake_->OpenSession(::getpid(), "u4").ok());
}

TEST_F(LakeTest, WaitingLeasesAreCappedPerUidAndInAll) {
  LakeOptions o = Options(2);
  o.reclaim_timeout = absl::Seconds(30);  // they wait until the hog leaves
  o.max_waiting_leases = 2;
  o.max_waiting_leases_per_uid = 1;
  Make(std::move(o));
  SessionTicket hog = Open(1000, "hog");
  ASSERT_TRUE(lake_->Lease(hog.id, hog.token, 0, 2).ok());
  auto silent = MakeSink();
  ASSERT_TRUE(lake_->AttachWatcher(hog.id, hog.token, silent).ok());
  SessionTicket a = Open(2000, "a"), a2 = Open(2000, "a2");
  SessionTicket b = Open(3000, "b"), c = Open(4000, "c");
  std::vector<std::thread> waiting;
  std::atomic<int> aborted{0};
  for (const SessionTicket* t : {&a, &b}) {
    waiting.emplace_back([&, t] {
      absl::StatusOr<LeaseGrant> g = lake_->Lease(t->id, t->token, 0, 1);
      aborted += g.status().code() == absl::StatusCode::kAborted;
    });
  }
  // Both wait once the hog has been asked twice.
  for (;;) {
    if (silent->got().size() == 2) break;
    absl::SleepFor(absl::Milliseconds(1));
  }
  absl::StatusOr<LeaseGrant> g = lake_->Lease(a2.id, a2.token, 0, 1);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(g.status().message(),
              HasSubstr("1 leases of uid 2000 already wait for memory"));
  EXPECT_THAT(g.status().message(), HasSubstr("--max_waiting_leases_per_uid"));
  g = lake_->Lease(c.id, c.token, 0, 1);
  EXPECT_THAT(g.status().message(),
              HasSubstr("2 leases already wait for memory, gmlaked's limit "
                        "(--max_waiting_leases)"));
  // They end with their sessions; the places are free again.
  lake_->EndSession(a.id, "test");
  lake_->EndSession(b.id, "test");
  for (std::thread& t : waiting) t.join();
  EXPECT_EQ(aborted.load(), 2);
  ASSERT_TRUE(lake_->CloseSession(hog.id, hog.token).ok());
  EXPECT_TRUE(lake_->Lease(a2.id, a2.token, 0, 1).ok());
}

// A session's answer to one pressure request must not count as its answer
// to a later one. The idle session here answers the first request late
// (after its chunks came back, as DaemonChunkSource does: Return, then
// ReportUsage), while a second lease is already waiting on it: that lease
// used to take the late answer for its own, find itself short, and fail
// with "they returned less" although the idle session was about to give.
TEST_F(LakeTest, ALateAnswerToAnEarlierRequestIsNotTakenForTheNext) {
  LakeOptions o = Options(4);
  o.reclaim_timeout = absl::Seconds(30);
  Make(std::move(o));
  SessionTicket idle = Open(1000, "idle");
  absl::StatusOr<LeaseGrant> held = lake_->Lease(idle.id, idle.token, 0, 4);
  ASSERT_TRUE(held.ok());
  auto sink = MakeSink();  // answers by hand below
  ASSERT_TRUE(lake_->AttachWatcher(idle.id, idle.token, sink).ok());
  auto wait_requests = [&](size_t n) {
    while (sink->got().size() < n) absl::SleepFor(absl::Milliseconds(1));
  };
  SessionTicket busy = Open(1000, "busy");
  absl::StatusOr<LeaseGrant> first, second;
  std::thread one([&] { first = lake_->Lease(busy.id, busy.token, 0, 1); });
  wait_requests(1);
  ASSERT_TRUE(lake_->Return(idle.id, idle.token, {held->chunk_ids[0]}).ok());
  one.join();
  ASSERT_TRUE(first.ok()) << first.status();
  // The second lease asks again before the answer to the first arrives.
  std::thread two([&] { second = lake_->Lease(busy.id, busy.token, 0, 1); });
  wait_requests(2);
  DeviceUsageReport u{0, 3 * kChunk, 0};
  ASSERT_TRUE(lake_->ReportUsage(idle.id, idle.token, {u}).ok());  // late
  // Still waiting for the answer to its own request, which gives.
  absl::SleepFor(absl::Milliseconds(20));
  ASSERT_TRUE(lake_->Return(idle.id, idle.token, {held->chunk_ids[1]}).ok());
  two.join();
  EXPECT_TRUE(second.ok()) << second.status();
}

}  // namespace
}  // namespace gmlake

namespace gmlake {
namespace {

// --prefer_reclaim: a growing lease first takes back what an idle session
// caches, so the lake creates only what it did not give, although it has
// room. Returns the chunks created and the pressure requests the idle
// session got.
std::pair<uint64_t, size_t> GrowBesideAnIdleSession(LakeTest* t, bool prefer) {
  LakeOptions o = Options(16);
  o.prefer_reclaim = prefer;
  t->Make(o);
  Lake* lake = t->lake_.get();
  SessionTicket idle = t->Open(1000, "idle");
  absl::StatusOr<LeaseGrant> held = lake->Lease(idle.id, idle.token, 0, 4);
  EXPECT_TRUE(held.ok());
  auto ids = std::make_shared<std::vector<uint64_t>>(held->chunk_ids);
  auto answered = std::make_shared<Notification>();
  auto sink = t->MakeSink([=](const Pressure& p) {
    const size_t n = std::min<size_t>(p.bytes / kChunk, ids->size());
    std::vector<uint64_t> give(ids->begin(), ids->begin() + n);
    ids->erase(ids->begin(), ids->begin() + n);
    EXPECT_TRUE(lake->Return(idle.id, idle.token, give).ok());
    DeviceUsageReport u{0, 0, ids->size() * kChunk};
    EXPECT_TRUE(lake->ReportUsage(idle.id, idle.token, {u}).ok());
    answered->Notify();
  });
  EXPECT_TRUE(lake->AttachWatcher(idle.id, idle.token, sink).ok());
  DeviceUsageReport u{0, 0, 4 * kChunk};  // all cached, none used
  EXPECT_TRUE(lake->ReportUsage(idle.id, idle.token, {u}).ok());
  SessionTicket busy = t->Open(1000, "busy");
  absl::StatusOr<LeaseGrant> g = lake->Lease(busy.id, busy.token, 0, 6);
  EXPECT_TRUE(g.ok()) << g.status();
  if (prefer) answered->WaitForNotification();
  return {GetBooks(*lake).created, sink->got().size()};
}

TEST_F(LakeTest, WithoutPreferReclaimAGrowingLeaseCreates) {
  auto [created, asked] = GrowBesideAnIdleSession(this, false);
  EXPECT_EQ(created, 10u);  // 4 idle + 6 new
  EXPECT_EQ(asked, 0u);
}

TEST_F(LakeTest, PreferReclaimTakesBackCachedMemoryBeforeCreating) {
  auto [created, asked] = GrowBesideAnIdleSession(this, true);
  EXPECT_EQ(created, 6u);  // the idle session's 4 came back, 2 new
  EXPECT_EQ(asked, 1u);
}

}  // namespace
}  // namespace gmlake
