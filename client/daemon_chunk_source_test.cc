// Copyright 2026 The GMLake Authors.
//
// DaemonChunkSource in this process against a real gmlaked (started with
// fork+exec by the harness, host backend): real leases, real descriptors,
// real memory shared with the daemon.

#include "client/daemon_chunk_source.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/fd_passing.h"
#include "common/fd_usage.h"
#include "common/mutex.h"
#include "common/vmm.h"
#include "common/vmm_books.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/daemon_harness.h"

namespace gmlake {
namespace {

using testing::Daemon;
using ::testing::HasSubstr;

constexpr uint64_t kChunk = 2 << 20;

class DaemonChunkSourceTest : public ::testing::Test {
 public:
  void Start(const std::vector<std::string>& flags) {
    absl::StatusOr<std::unique_ptr<Daemon>> d = Daemon::Start(flags);
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = *std::move(d);
  }
  std::unique_ptr<DaemonChunkSource> Connect(
      uint64_t watermark = 0, const std::string& name = "t",
      absl::Duration reconnect = absl::Milliseconds(100),
      std::optional<bool> keep_descriptors = std::nullopt,
      bool make_chunks = false) {
    DaemonSourceOptions o;
    o.keep_descriptors = keep_descriptors;
    // Most of these tests follow chunks gmlaked made through its books and
    // descriptors; chunks the process makes have lake_client_made_test,
    // daemon_growth_test and the restart below.
    o.make_chunks = make_chunks;
    o.socket_path = daemon_->socket();
    o.name = name;
    o.idle_watermark_bytes = watermark;
    o.reconnect_interval = reconnect;
    // These tests count chunks lease by lease; leasing ahead has
    // client/daemon_growth_test.cc.
    o.lease_ahead_max = 0;
    absl::StatusOr<std::unique_ptr<DaemonChunkSource>> s =
        DaemonChunkSource::Connect(o);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *std::move(s) : nullptr;
  }
  // Writes `value` over the chunks (or checks that they hold it).
  static absl::Status Touch(DaemonChunkSource* src,
                            const std::vector<ChunkHandle>& hs, uint8_t value,
                            bool check) {
    VmmBackend* b = src->backend();
    absl::StatusOr<VirtualRange> r =
        VirtualRange::Reserve(b, hs.size() * kChunk);
    if (!r.ok()) return r.status();
    std::vector<Mapping> maps;
    const int devs[] = {0};
    for (size_t i = 0; i < hs.size(); ++i) {
      absl::StatusOr<Mapping> m =
          Mapping::Map(b, r->base() + i * kChunk, kChunk, hs[i], devs);
      if (!m.ok()) return m.status();
      maps.push_back(*std::move(m));
    }
    if (!check) return b->Fill(r->base(), value, hs.size() * kChunk);
    std::vector<uint8_t> buf(hs.size() * kChunk);
    absl::Status s = b->CopyToHost(buf.data(), r->base(), buf.size());
    if (!s.ok()) return s;
    for (uint8_t v : buf) {
      if (v != value) return absl::DataLossError("unexpected byte");
    }
    return absl::OkStatus();
  }
  // Kills gmlaked (-9), starts it again, and waits until `s` reconnected.
  void RestartAndWaitForReconnection(DaemonChunkSource* s) {
    ASSERT_TRUE(daemon_->Stop(SIGKILL, absl::Seconds(5)).ok());
    ASSERT_TRUE(daemon_->Restart().ok()) << daemon_->Log();
    const absl::Time deadline = absl::Now() + testing::kPatience;
    while (s->reconnections() == 0 && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    ASSERT_EQ(s->reconnections(), 1u);
  }
  uint64_t SessionChunks(uint64_t session) {
    absl::StatusOr<v1::StatusResponse> st = daemon_->Status();
    EXPECT_TRUE(st.ok());
    for (const auto& s : st->sessions()) {
      if (s.session_id() == session) return s.leased_chunks();
    }
    return ~0ull;
  }

  std::unique_ptr<Daemon> daemon_;
};

TEST(DaemonChunkSourceConnect, NoDaemonIsNotFoundAtOnce) {
  DaemonSourceOptions o;
  o.lease_ahead_max = 0;  // chunks counted lease by lease
  o.socket_path = "/tmp/gml.none/gmlaked.sock";
  // "At once": without waiting out the connect timeout, which is long
  // enough that no busy machine could be mistaken for it.
  o.connect_timeout = absl::Seconds(60);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<DaemonChunkSource>> s =
      DaemonChunkSource::Connect(o);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.status().message(), HasSubstr("gmlaked is not running"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
}

TEST(DaemonChunkSourceConnect, StaleSocketIsUnavailableQuickly) {
  char dir[] = "/tmp/gml.XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string path = absl::StrCat(dir, "/gmlaked.sock");
  {
    absl::StatusOr<UniqueFd> l = ListenUnix(path);
    ASSERT_TRUE(l.ok());
  }  // closed: the file stays, nobody listens
  DaemonSourceOptions o;
  o.lease_ahead_max = 0;  // chunks counted lease by lease
  o.socket_path = path;
  o.connect_timeout = absl::Milliseconds(300);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<DaemonChunkSource>> s =
      DaemonChunkSource::Connect(o);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.status().message(), HasSubstr("cannot connect to gmlaked"));
  // It gives up after the connect timeout, with a margin for a busy
  // machine (it would otherwise wait forever).
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  ::unlink(path.c_str());
  ::rmdir(dir);
}

TEST_F(DaemonChunkSourceTest, AcquiredChunksAreTheLakesMemory) {
  Start({"--capacity=16MiB"});
  std::unique_ptr<DaemonChunkSource> a = Connect();
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->name(), "daemon");
  EXPECT_EQ(a->chunk_size(0), kChunk);
  EXPECT_EQ(a->capacity_bytes(0), 16 * kChunk / 2);
  EXPECT_THAT(a->Describe(), HasSubstr(daemon_->socket()));
  EXPECT_EQ(a->backend()->name(), "host");
  absl::StatusOr<std::vector<ChunkHandle>> hs = a->Acquire(0, 8);
  ASSERT_TRUE(hs.ok()) << hs.status();
  ASSERT_EQ(hs->size(), 8u);
  EXPECT_EQ(SessionChunks(a->session_id()), 8u);
  ASSERT_TRUE(Touch(a.get(), *hs, 0x3C, false).ok());
  a->Return(0, *hs);
  EXPECT_EQ(SessionChunks(a->session_id()), 0u);

  // Another session of the same uid gets the same memory back (no scrub
  // within a uid): the bytes went through the daemon's chunks.
  std::unique_ptr<DaemonChunkSource> b = Connect();
  hs = b->Acquire(0, 8);
  ASSERT_TRUE(hs.ok()) << hs.status();
  EXPECT_TRUE(Touch(b.get(), *hs, 0x3C, true).ok());
  absl::StatusOr<std::vector<ChunkHandle>> more = b->Acquire(0, 1);
  EXPECT_EQ(more.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(more.status().message(), HasSubstr("no other session holds"));
  b->Return(0, *hs);
  EXPECT_TRUE(daemon_->CheckBooks().ok());
}

TEST_F(DaemonChunkSourceTest, IdleWatermarkKeepsChunksForReuse) {
  Start({"--capacity=32MiB"});
  std::unique_ptr<DaemonChunkSource> s = Connect(2 * kChunk);
  absl::StatusOr<std::vector<ChunkHandle>> hs = s->Acquire(0, 5);
  ASSERT_TRUE(hs.ok());
  s->Return(0, *hs);
  EXPECT_EQ(s->held_chunks(0), 0u);
  EXPECT_EQ(s->idle_chunks(0), 2u);
  EXPECT_EQ(SessionChunks(s->session_id()), 2u);
  const uint64_t served = daemon_->Status()->leases_served();
  // Served from the idle ones: no lease.
  hs = s->Acquire(0, 2);
  ASSERT_TRUE(hs.ok());
  EXPECT_EQ(daemon_->Status()->leases_served(), served);
  EXPECT_EQ(s->idle_chunks(0), 0u);
  // Idle ones plus a lease for the rest.
  s->Return(0, *hs);
  hs = s->Acquire(0, 3);
  ASSERT_TRUE(hs.ok());
  EXPECT_EQ(daemon_->Status()->leases_served(), served + 1);
  EXPECT_EQ(SessionChunks(s->session_id()), 3u);
  s->Return(0, *hs);
  EXPECT_EQ(s->ReleaseKept(0), 2 * kChunk);
  EXPECT_EQ(SessionChunks(s->session_id()), 0u);
  // Handles this source never gave out are ignored.
  s->Return(0, {ChunkHandle{12345}});
  EXPECT_TRUE(daemon_->CheckBooks().ok());
}

TEST_F(DaemonChunkSourceTest, PressureCallsTheReclaimHandler) {
  Start({"--capacity=16MiB"});
  std::unique_ptr<DaemonChunkSource> idle = Connect(0, "idle");
  std::unique_ptr<DaemonChunkSource> busy = Connect(0, "busy");
  absl::StatusOr<std::vector<ChunkHandle>> held = idle->Acquire(0, 8);
  ASSERT_TRUE(held.ok());
  std::vector<ChunkHandle> mine = *held;
  std::atomic<uint64_t> asked{0};
  DaemonChunkSource* raw = idle.get();
  Mutex mu;
  // The handler stays in the middle of its answer (chunks given back, the
  // answer not finished) until the checks below are done: what it gave must
  // already be counted, since the busy lease may go on (and its caller read
  // the counters) as soon as gmlaked has the chunks.
  Notification checked;
  idle->SetReclaimHandler([&](int device, uint64_t bytes) -> uint64_t {
    EXPECT_EQ(device, 0);
    asked += bytes;
    std::vector<ChunkHandle> give;
    {
      MutexLock l(&mu);
      while (!mine.empty() && give.size() * kChunk < bytes) {
        give.push_back(mine.back());
        mine.pop_back();
      }
    }
    raw->Return(0, give);
    checked.WaitForNotification();
    return give.size() * kChunk;
  });
  absl::StatusOr<std::vector<ChunkHandle>> got = busy->Acquire(0, 3);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(asked.load(), 3 * kChunk);
  EXPECT_EQ(idle->pressure_requests(), 1u);
  // The busy lease completes as soon as the daemon has the chunks back,
  // while the idle side's handler is still in its answer: they are counted
  // already.
  EXPECT_EQ(idle->pressure_bytes_returned(), 3 * kChunk);
  EXPECT_EQ(idle->held_chunks(0), 5u);
  EXPECT_EQ(SessionChunks(idle->session_id()), 5u);
  checked.Notify();
  busy->Return(0, *got);
  {
    MutexLock l(&mu);
    idle->Return(0, mine);
  }
  EXPECT_TRUE(daemon_->CheckBooks().ok());
}

// The Allocator's destructor clears its handler and then destroys what the
// handler uses; a call already running on the Watch thread must have ended
// by the time SetReclaimHandler returns, or it runs into freed memory.
TEST_F(DaemonChunkSourceTest, SetReclaimHandlerWaitsForTheCallInProgress) {
  Start({"--capacity=16MiB"});
  std::unique_ptr<DaemonChunkSource> idle = Connect(0, "idle");
  std::unique_ptr<DaemonChunkSource> busy = Connect(0, "busy");
  absl::StatusOr<std::vector<ChunkHandle>> held = idle->Acquire(0, 8);
  ASSERT_TRUE(held.ok());
  std::vector<ChunkHandle> keep(held->begin(), held->begin() + 5);
  std::vector<ChunkHandle> give(held->begin() + 5, held->end());
  DaemonChunkSource* raw = idle.get();
  Notification inside;
  std::atomic<bool> finished{false};
  idle->SetReclaimHandler([&](int, uint64_t) -> uint64_t {
    raw->Return(0, give);
    inside.Notify();
    absl::SleepFor(absl::Milliseconds(300));
    finished = true;
    return give.size() * kChunk;
  });
  std::thread lease([&] {
    absl::StatusOr<std::vector<ChunkHandle>> got = busy->Acquire(0, 3);
    ASSERT_TRUE(got.ok()) << got.status();
    busy->Return(0, *got);
  });
  inside.WaitForNotification();
  idle->SetReclaimHandler(nullptr);
  EXPECT_TRUE(finished.load())
      << "SetReclaimHandler returned while the old handler still ran";
  lease.join();
  idle->Return(0, keep);
  EXPECT_TRUE(daemon_->CheckBooks().ok());
}

TEST_F(DaemonChunkSourceTest, SetCapacityLimitsThisProcess) {
  Start({"--capacity=32MiB"});
  std::unique_ptr<DaemonChunkSource> s = Connect();
  ASSERT_TRUE(s->SetCapacity(0, 4 * kChunk).ok());
  EXPECT_EQ(s->capacity_bytes(0), 4 * kChunk);
  EXPECT_FALSE(s->SetCapacity(3, 1).ok());
  absl::StatusOr<std::vector<ChunkHandle>> hs = s->Acquire(0, 3);
  ASSERT_TRUE(hs.ok());
  absl::StatusOr<std::vector<ChunkHandle>> more = s->Acquire(0, 2);
  EXPECT_EQ(more.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(more.status().message(), HasSubstr("(SetCapacity)"));
  EXPECT_EQ(s->Acquire(1, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  s->Return(0, *hs);
}

TEST_F(DaemonChunkSourceTest, WhenTheDaemonGoesTheProcessKeepsWhatItHolds) {
  Start({"--capacity=16MiB"});
  // Without reconnecting: the source stays without a daemon.
  std::unique_ptr<DaemonChunkSource> s =
      Connect(kChunk, "t", absl::ZeroDuration());
  absl::StatusOr<std::vector<ChunkHandle>> hs = s->Acquire(0, 3);
  ASSERT_TRUE(hs.ok());
  ASSERT_TRUE(Touch(s.get(), *hs, 0x61, false).ok());
  s->Return(0, {(*hs)[2]});  // kept idle (watermark: one chunk)
  hs->pop_back();
  ASSERT_TRUE(daemon_->Stop(SIGKILL, absl::Seconds(5)).ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (s->daemon_status().ok() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(s->daemon_status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s->Describe(), HasSubstr("[gone]"));
  // Still readable, and the idle chunk still serves one Acquire.
  EXPECT_TRUE(Touch(s.get(), *hs, 0x61, true).ok());
  absl::StatusOr<std::vector<ChunkHandle>> one = s->Acquire(0, 1);
  ASSERT_TRUE(one.ok()) << one.status();
  absl::StatusOr<std::vector<ChunkHandle>> more = s->Acquire(0, 1);
  EXPECT_EQ(more.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(more.status().message(), HasSubstr("is gone"));
  EXPECT_THAT(more.status().message(),
              HasSubstr("cannot lease more until it restarts"));
  s->Return(0, *hs);
  s->Return(0, *one);
  EXPECT_FALSE(s->ReportUsage().ok());
}

// gmlaked killed and started again on the same sockets (what systemd's
// Restart= does): the source reconnects by itself, shows the new daemon the
// chunks it holds, which counts them again, and leases on.
// With `keep_descriptors`, the source shows the chunks by the descriptors it
// received (what it must do on the cuda backend, whose driver will not
// export an imported handle again); without, it exports them anew.
// With `make_chunks`, the chunks are the process's own (no descriptor came
// to keep): it exports them to show them.
void RestartAndAdopt(DaemonChunkSourceTest* t, bool keep_descriptors,
                     bool make_chunks = false) {
  // No idle release: what is free once the session ends stays to be
  // counted (with no session open it would go back at the next wake).
  t->Start({"--capacity=16MiB", "--release_idle=0"});
  std::unique_ptr<DaemonChunkSource> s = t->Connect(
      kChunk, "t", absl::Milliseconds(100), keep_descriptors, make_chunks);
  absl::StatusOr<std::vector<ChunkHandle>> hs = s->Acquire(0, 3);
  ASSERT_TRUE(hs.ok());
  ASSERT_TRUE(DaemonChunkSourceTest::Touch(s.get(), *hs, 0x61, false).ok());
  s->Return(0, {(*hs)[2]});  // kept idle (watermark: one chunk)
  hs->pop_back();
  const uint64_t exports_before =
      s->backend()->call_stats().Count(VmmCall::kExport);
  ASSERT_TRUE(t->daemon_->Stop(SIGKILL, absl::Seconds(5)).ok());
  const absl::Time deadline = absl::Now() + testing::kPatience;
  while (s->daemon_status().ok() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(s->daemon_status().code(), absl::StatusCode::kUnavailable);
  // A lease while the daemon is down waits for it.
  absl::StatusOr<std::vector<ChunkHandle>> waited;
  std::thread acquire([&] { waited = s->Acquire(0, 2); });
  ASSERT_TRUE(t->daemon_->Restart().ok()) << t->daemon_->Log();
  acquire.join();
  ASSERT_TRUE(waited.ok()) << waited.status();
  EXPECT_TRUE(s->daemon_status().ok());
  EXPECT_EQ(s->reconnections(), 1u);
  EXPECT_EQ(s->chunks_readopted(), 3u);
  EXPECT_EQ(s->backend()->call_stats().Count(VmmCall::kExport) - exports_before,
            keep_descriptors && !make_chunks ? 0u : 3u);
  // The new daemon counts all four: three adopted (one of them idle here,
  // now handed out again) and one it made.
  absl::StatusOr<v1::StatusResponse> st = t->daemon_->Status();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->devices(0).created_chunks(), 4u);
  EXPECT_EQ(t->SessionChunks(s->session_id()), 4u);
  EXPECT_TRUE(t->daemon_->CheckBooks().ok()) << t->daemon_->CheckBooks();
  EXPECT_TRUE(DaemonChunkSourceTest::Touch(s.get(), *hs, 0x61, true).ok());
  s->Return(0, *hs);
  s->Return(0, *waited);
  s.reset();
  // Adopted chunks went back to the driver, not to the lake; the one the
  // daemon made is free (one the process made went with it).
  st = t->daemon_->WaitFor(
      [](const v1::StatusResponse& r) { return r.sessions_size() == 0; },
      testing::kPatience);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->devices(0).created_chunks(), make_chunks ? 0u : 1u);
  EXPECT_EQ(st->devices(0).free_chunks(), make_chunks ? 0u : 1u);
  EXPECT_THAT(t->daemon_->Log(), HasSubstr("adopted 3 chunks"));
}

TEST_F(DaemonChunkSourceTest, AfterARestartTheSourceReconnectsAndIsAdopted) {
  RestartAndAdopt(this, /*keep_descriptors=*/false);
}

TEST_F(DaemonChunkSourceTest, AfterARestartKeptDescriptorsShowTheChunks) {
  RestartAndAdopt(this, /*keep_descriptors=*/true);
}

TEST_F(DaemonChunkSourceTest, AfterARestartChunksTheProcessMadeAreAdopted) {
  RestartAndAdopt(this, /*keep_descriptors=*/true, /*make_chunks=*/true);
}

// A large AcquireBytes is leased in large chunks (client/chunk_sizing.h),
// in one lease; returned, they are found again by the next; after a
// restart they are shown with their sizes and adopted as they are.
TEST_F(DaemonChunkSourceTest, LargeRequestsAreLeasedInLargeChunks) {
  Start({"--capacity=512MiB"});
  DaemonSourceOptions o;
  o.lease_ahead_max = 0;  // chunks counted lease by lease
  o.socket_path = daemon_->socket();
  o.name = "large";
  o.chunks.large_chunk = uint64_t{1} << 30;
  absl::StatusOr<std::unique_ptr<DaemonChunkSource>> made =
      DaemonChunkSource::Connect(o);
  ASSERT_TRUE(made.ok()) << made.status();
  DaemonChunkSource* s = made->get();
  constexpr uint64_t kBytes = uint64_t{512} << 20;
  constexpr uint64_t kLarge = uint64_t{8} << 20;  // 512 MiB / 64, a power of 2
  absl::StatusOr<std::vector<SizedChunk>> got = s->AcquireBytes(0, kBytes);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 64u);
  for (const SizedChunk& c : *got) ASSERT_EQ(c.size, kLarge);
  // Real memory of that size: the last byte of each is this process's.
  VmmBackend* b = s->backend();
  const int devs[] = {0};
  for (const SizedChunk& c : {got->front(), got->back()}) {
    absl::StatusOr<VirtualRange> r = VirtualRange::Reserve(b, c.size);
    ASSERT_TRUE(r.ok());
    absl::StatusOr<Mapping> m =
        Mapping::Map(b, r->base(), c.size, c.handle, devs);
    ASSERT_TRUE(m.ok()) << m.status();
    ASSERT_TRUE(b->Fill(r->base() + c.size - 4096, 0x5A, 4096).ok());
  }
  absl::StatusOr<v1::StatusResponse> st = daemon_->Status();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->leases_served(), 1u);
  EXPECT_EQ(st->devices(0).created_chunks(), 64u);
  EXPECT_EQ(st->devices(0).leased_bytes(), kBytes);
  EXPECT_EQ(SessionChunks(s->session_id()), 64u);
  // Back to gmlaked (no watermark), then found again: nothing created.
  s->ReturnSized(0, *got);
  got = s->AcquireBytes(0, kBytes);
  ASSERT_TRUE(got.ok()) << got.status();
  st = daemon_->Status();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->devices(0).created_chunks(), 64u);
  EXPECT_EQ(st->recycled_bytes(), 0u);
  // Restarted, gmlaked is shown each chunk with its size.
  ASSERT_NO_FATAL_FAILURE(RestartAndWaitForReconnection(s));
  EXPECT_EQ(s->chunks_readopted(), 64u);
  st = daemon_->Status();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->devices(0).created_chunks(), 64u);
  EXPECT_EQ(st->devices(0).leased_bytes(), kBytes);
  EXPECT_TRUE(daemon_->CheckBooks().ok()) << daemon_->CheckBooks();
  s->ReturnSized(0, *got);
  made->reset();
}

// Lowers this process's soft RLIMIT_NOFILE to `open now + room` until it
// goes out of scope (gmlaked, started by fork+exec, raises its own).
class FewDescriptors {
 public:
  explicit FewDescriptors(uint64_t room) {
    ::getrlimit(RLIMIT_NOFILE, &saved_);
    rlimit low = saved_;
    low.rlim_cur = CurrentFdUsage().open + room;
    EXPECT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  }
  ~FewDescriptors() { ::setrlimit(RLIMIT_NOFILE, &saved_); }

 private:
  rlimit saved_{};
};

// A process near its descriptor limit: the descriptors it keeps for
// re-adoption never take the room the rest of it needs. (On a GPU an
// imported chunk costs no descriptor, and a lease of 20,480 chunks once
// held all their descriptors at once, past the limit: the lease failed and
// the session was lost.) On the host backend each import holds one too.
TEST_F(DaemonChunkSourceTest, KeptDescriptorsLeaveTheProcessRoom) {
  Start({"--capacity=1GiB"});
  std::unique_ptr<DaemonChunkSource> s =
      Connect(0, "few fds", absl::Milliseconds(100), /*keep=*/true);
  ASSERT_NE(s, nullptr);
  absl::StatusOr<std::vector<ChunkHandle>> hs;
  {
    // Two batches of descriptors (253 + 47): room for the 300 imports, a
    // batch in flight and a few more; not for keeping the first batch too.
    FewDescriptors few(300 + 253 + 40);
    hs = s->Acquire(0, 300);
    ASSERT_TRUE(hs.ok()) << hs.status();
    EXPECT_TRUE(s->daemon_status().ok()) << s->daemon_status();
    EXPECT_LT(s->kept_descriptors(), 150u);
  }
  s->Return(0, *hs);
  EXPECT_EQ(s->kept_descriptors(), 0u);
}

// An import that fails part-way through a lease (here for want of
// descriptors) gives the whole lease back and reads the rest of its
// descriptors, so that the fd socket stays in step: the next lease is
// served and the session lives.
TEST_F(DaemonChunkSourceTest, AnImportThatFailsMidLeaseKeepsTheSession) {
  Start({"--capacity=1GiB"});
  std::unique_ptr<DaemonChunkSource> s =
      Connect(0, "mid-lease", absl::Milliseconds(100), /*keep=*/false);
  ASSERT_NE(s, nullptr);
  absl::StatusOr<std::vector<ChunkHandle>> hs;
  {
    // Room for the first batch of 253 descriptors and 20 of its imports,
    // not all 253; the second batch (10) fits once the first has closed.
    FewDescriptors few(253 + 20);
    hs = s->Acquire(0, 263);
  }
  ASSERT_FALSE(hs.ok());
  EXPECT_THAT(std::string(hs.status().message()),
              HasSubstr("importing a chunk from gmlaked"));
  EXPECT_TRUE(daemon_->CheckBooks().ok()) << daemon_->CheckBooks();
  absl::StatusOr<std::vector<ChunkHandle>> again = s->Acquire(0, 263);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(s->daemon_status().ok()) << s->daemon_status();
  // Some of them, written and read back through a mapping.
  const std::vector<ChunkHandle> past(again->begin() + 16, again->begin() + 32);
  ASSERT_TRUE(Touch(s.get(), past, 0x5a, false).ok());
  EXPECT_TRUE(Touch(s.get(), past, 0x5a, true).ok());
  s->Return(0, *again);
  EXPECT_TRUE(daemon_->CheckBooks().ok()) << daemon_->CheckBooks();
}

// Showing a restarted gmlaked what it holds exports descriptors in
// batches that fit the room the process has, not all at once.
TEST_F(DaemonChunkSourceTest, ReadoptionFitsInTheDescriptorsLeft) {
  Start({"--capacity=512MiB"});
  std::unique_ptr<DaemonChunkSource> s = Connect();
  ASSERT_NE(s, nullptr);
  absl::StatusOr<std::vector<ChunkHandle>> hs = s->Acquire(0, 96);
  ASSERT_TRUE(hs.ok()) << hs.status();
  {
    FewDescriptors few(48);  // fewer than the 96 exports at once
    ASSERT_NO_FATAL_FAILURE(RestartAndWaitForReconnection(s.get()));
    EXPECT_EQ(s->chunks_readopted(), 96u);
  }
  absl::StatusOr<v1::StatusResponse> st = daemon_->Status();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->devices(0).created_chunks(), 96u);
  s->Return(0, *hs);
}

TEST_F(DaemonChunkSourceTest, VersionMismatchAndSessionEnd) {
  Start({"--capacity=16MiB"});
  DaemonSourceOptions o;
  o.lease_ahead_max = 0;  // chunks counted lease by lease
  o.socket_path = daemon_->socket();
  o.protocol_version = 7;
  absl::StatusOr<std::unique_ptr<DaemonChunkSource>> bad =
      DaemonChunkSource::Connect(o);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(bad.status().message(),
              HasSubstr("client speaks protocol 7, gmlaked speaks 1"));
  std::unique_ptr<DaemonChunkSource> s = Connect();
  ASSERT_TRUE(s->Acquire(0, 2).ok());
  s->NoteUsage(0, kChunk, kChunk);
  ASSERT_TRUE(s->ReportUsage().ok());
  absl::StatusOr<v1::StatusResponse> st = daemon_->Status();
  ASSERT_EQ(st->sessions_size(), 1);
  ASSERT_EQ(st->sessions(0).usage_size(), 1);
  EXPECT_EQ(st->sessions(0).usage(0).used_bytes(), kChunk);
  EXPECT_EQ(st->sessions(0).usage(0).cached_bytes(), kChunk);
  // Destroying the source closes the session at once (chunks it still
  // held go back with it).
  s.reset();
  st = daemon_->Status();
  EXPECT_EQ(st->sessions_size(), 0);
  EXPECT_EQ(st->devices(0).leased_chunks(), 0u);
}

// A host backend seeing the node's emulated devices `nodes`, in that order
// (what GMLAKE_HOST_VISIBLE_DEVICES gives a process).
std::unique_ptr<VmmBackend> SeeingNodeDevices(const std::vector<int>& nodes) {
  BackendOptions bo;
  bo.kind = "host";
  for (int n : nodes) bo.host_uuids.push_back(EmulatedDeviceUuid(n));
  absl::StatusOr<std::unique_ptr<VmmBackend>> b = CreateBackend(bo);
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? *std::move(b) : nullptr;
}

uint64_t LeasedOn(const v1::StatusResponse& st, uint64_t session, int device) {
  for (const auto& s : st.sessions()) {
    if (s.session_id() != session) continue;
    for (const auto& l : s.leased()) {
      if (l.device() == device) return l.chunks();
    }
  }
  return 0;
}

// Devices are matched by UUID, not number (issue 11): a process that sees
// the node's devices 2, 0 and 7 as its 0, 1 and 2 (CUDA_VISIBLE_DEVICES=2,0,7)
// leases on gmlaked's devices 2 and 0, and device 7, which gmlaked does not
// serve, gets a clear answer and never a chunk size of 0.
TEST_F(DaemonChunkSourceTest, DevicesAreMatchedByUuid) {
  Start({"--capacity=16MiB", "--host_devices=3"});
  std::unique_ptr<VmmBackend> local = SeeingNodeDevices({2, 0, 7});
  DaemonSourceOptions o;
  o.lease_ahead_max = 0;  // chunks counted lease by lease
  o.socket_path = daemon_->socket();
  o.backend = local.get();
  absl::StatusOr<std::unique_ptr<DaemonChunkSource>> made =
      DaemonChunkSource::Connect(o);
  ASSERT_TRUE(made.ok()) << made.status();
  DaemonChunkSource* s = made->get();
  EXPECT_TRUE(s->serves(0));
  EXPECT_TRUE(s->serves(1));
  EXPECT_FALSE(s->serves(2));
  absl::StatusOr<std::vector<ChunkHandle>> on2 = s->Acquire(0, 3);
  ASSERT_TRUE(on2.ok()) << on2.status();
  absl::StatusOr<std::vector<ChunkHandle>> on0 = s->Acquire(1, 2);
  ASSERT_TRUE(on0.ok()) << on0.status();
  absl::StatusOr<v1::StatusResponse> st = daemon_->Status();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(LeasedOn(*st, s->session_id(), 2), 3u);
  EXPECT_EQ(LeasedOn(*st, s->session_id(), 0), 2u);
  EXPECT_EQ(LeasedOn(*st, s->session_id(), 1), 0u);
  EXPECT_TRUE(Touch(s, *on2, 0x42, false).ok());
  // Usage goes to gmlaked under its own numbers.
  s->NoteUsage(0, kChunk, 2 * kChunk);
  ASSERT_TRUE(s->ReportUsage().ok());
  st = daemon_->Status();
  bool reported = false;
  for (const auto& u : st->sessions(0).usage()) {
    if (u.device() == 2) {
      reported = true;
      EXPECT_EQ(u.used_bytes(), kChunk);
    }
    EXPECT_NE(u.device(), 7);
  }
  EXPECT_TRUE(reported);
  // The device gmlaked does not serve.
  EXPECT_EQ(s->chunk_size(2), kChunk);
  absl::StatusOr<std::vector<ChunkHandle>> none = s->Acquire(2, 1);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(none.status().message(), HasSubstr(EmulatedDeviceUuid(7)));
  EXPECT_THAT(none.status().message(), HasSubstr("does not serve"));
  EXPECT_THAT(s->Describe(), HasSubstr("not served"));
  s->Return(0, *on2);
  s->Return(1, *on0);
  EXPECT_TRUE(daemon_->CheckBooks().ok());
  made->reset();
}

// Pressure on gmlaked's device 1 reaches the handler as the client's number
// for it.
TEST_F(DaemonChunkSourceTest, PressureComesUnderTheClientsDeviceNumber) {
  Start({"--capacity=16MiB", "--host_devices=2"});
  std::unique_ptr<VmmBackend> local = SeeingNodeDevices({1});
  DaemonSourceOptions o;
  o.lease_ahead_max = 0;  // chunks counted lease by lease
  o.socket_path = daemon_->socket();
  o.backend = local.get();
  o.name = "idle";
  absl::StatusOr<std::unique_ptr<DaemonChunkSource>> idle =
      DaemonChunkSource::Connect(o);
  ASSERT_TRUE(idle.ok()) << idle.status();
  std::unique_ptr<DaemonChunkSource> busy = Connect(0, "busy");
  absl::StatusOr<std::vector<ChunkHandle>> held = (*idle)->Acquire(0, 8);
  ASSERT_TRUE(held.ok()) << held.status();
  std::vector<int> asked_for;
  DaemonChunkSource* raw = idle->get();
  Mutex mu;
  (*idle)->SetReclaimHandler([&](int device, uint64_t bytes) -> uint64_t {
    MutexLock l(&mu);
    asked_for.push_back(device);
    std::vector<ChunkHandle> give;
    while (!held->empty() && give.size() * kChunk < bytes) {
      give.push_back(held->back());
      held->pop_back();
    }
    raw->Return(device, give);
    return give.size() * kChunk;
  });
  absl::StatusOr<std::vector<ChunkHandle>> got = busy->Acquire(1, 3);
  ASSERT_TRUE(got.ok()) << got.status();
  {
    MutexLock l(&mu);
    EXPECT_EQ(asked_for, std::vector<int>{0});
  }
  busy->Return(1, *got);
  (*idle)->Return(0, *held);
  EXPECT_TRUE(daemon_->CheckBooks().ok());
}

// A process that sees none of gmlaked's devices cannot use it, and says
// which devices are which.
TEST_F(DaemonChunkSourceTest, NoDeviceInCommonIsRefusedWithTheUuids) {
  Start({"--capacity=16MiB", "--host_devices=2"});
  std::unique_ptr<VmmBackend> local = SeeingNodeDevices({4});
  DaemonSourceOptions o;
  o.lease_ahead_max = 0;  // chunks counted lease by lease
  o.socket_path = daemon_->socket();
  o.backend = local.get();
  absl::StatusOr<std::unique_ptr<DaemonChunkSource>> s =
      DaemonChunkSource::Connect(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.status().message(), HasSubstr(EmulatedDeviceUuid(4)));
  EXPECT_THAT(s.status().message(), HasSubstr(EmulatedDeviceUuid(1)));
  EXPECT_THAT(s.status().message(), HasSubstr("CUDA_VISIBLE_DEVICES"));
}

}  // namespace
}  // namespace gmlake
