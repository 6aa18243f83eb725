// Copyright 2026 The GMLake Authors.
//
// Chaos, bounded in time (GMLAKE_CHAOS_SECONDS, 45 by default): 10 client
// processes at four uids replay random slices of the shipped traces
// (trace_client, sizes / 64) against one gmlaked whose lake holds their
// slices' live peaks but not what their allocators would cache, beside an
// honest session holding half the lake as cache, so that pressure never
// stops. Meanwhile a
// driver loop kills random clients with -9 (starting others in their place),
// kills gmlaked with -9 and starts it again twice (the clients reconnect
// and are adopted), sends garbage to both sockets, opens sessions it
// drops, sends descriptors whose close blocks (a lingering TCP socket) to
// both sockets and floods the gRPC socket past its per-uid connection
// limit; and a lying session (issue 20 §D: it holds one chunk, reports
// 1 TiB cached and answers pressure at once with nothing, or never; a new
// one after each restart, the two ways in turn) sits among the clients.
// At the end, asserted:
//   * created = leased + free + scrubbing on every device;
//   * no chunk was ever held by two live processes at once, from the
//     clients' own records (memfd inodes, held intervals);
//   * every client not killed finished its slice, with no error;
//   * gmlaked's open descriptors are back to its baseline (/proc/PID/fd)
//     once the clients are gone and the lake trimmed;
//   * a killed client's memory was back in the lake within 1 s;
//   * no zeroing skipped across uids: each client checks that every block
//     it gets starts with zero or its own uid's tag (trace_client --tag).
// It prints a table of what it did and what held.

#include <dirent.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/bytes.h"
#include "common/fd_passing.h"
#include "common/unique_fd.h"
#include "gtest/gtest.h"
#include "proto/protocol.h"
#include "tests/integration/daemon_harness.h"
#include "tools/trace.h"

namespace gmlake {
namespace testing {
namespace {

constexpr uint64_t kScale = 64;
constexpr uint64_t kChunk = 2 << 20;
constexpr int kClients = 10;
const char* const kTraces[] = {"llama1b_lora_ckpt", "llama1b_infer",
                               "llama1b_full_ckpt", "llama1b_full_offload",
                               "llama1b_fsdp2"};

double ChaosSeconds() {
  const char* s = std::getenv("GMLAKE_CHAOS_SECONDS");
  double v = 45;
  // Unset or no number: the default.
  if (s == nullptr || !absl::SimpleAtod(s, &v)) v = 45;
  return std::max(10.0, v);
}

// The most bytes live at once in events [begin, end) of `t`, at kScale.
uint64_t SlicePeak(const Trace& t, size_t begin, size_t end) {
  std::vector<uint64_t> live(t.num_ids, 0);
  uint64_t now = 0, peak = 0;
  for (size_t i = begin; i < end; ++i) {
    const TraceEvent& e = t.events[i];
    if (e.alloc) {
      live[e.id] =
          std::max<uint64_t>(512, ((e.size / kScale + 511) / 512) * 512);
      now += live[e.id];
      peak = std::max(peak, now);
    } else {
      now -= live[e.id];
      live[e.id] = 0;
    }
  }
  return peak;
}

struct Slice {
  std::string trace;
  double begin = 0, end = 0;
  uint64_t peak = 0;
};

struct Client {
  std::unique_ptr<ClientProcess> proc;
  Slice slice;
  int uid = -1;
  bool killed = false;
  std::string outcome;  // "done ..." or the error
};

// What the driver did and saw.
struct Tally {
  int kills = 0, restarts = 0, started = 0;
  int garbage_fd = 0, garbage_grpc = 0, sessions_dropped = 0, liars = 0;
  int lingering_sent = 0, connection_floods = 0;
  uint64_t leases = 0, pressure_rounds = 0, zeroed_bytes = 0;
  absl::Duration slowest_kill_back;
};

int OpenDescriptors(pid_t pid) {
  DIR* d = ::opendir(absl::StrCat("/proc/", pid, "/fd").c_str());
  if (d == nullptr) return -1;
  int n = 0;
  while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
  ::closedir(d);
  return n;
}

class Chaos : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* seed = std::getenv("GMLAKE_CHAOS_SEED");
    seed_ = seed != nullptr
                ? std::strtoul(seed, nullptr, 10)
                : static_cast<uint32_t>(absl::ToUnixMicros(absl::Now()));
    rng_.seed(seed_);
    // Clients at other uids read the traces and write their records here
    // (the runfiles live where only root may look).
    char dir[] = "/tmp/gml.chaos.XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    tmp_ = dir;
    ::chmod(dir, 0777);
    for (const char* name : kTraces) {
      absl::StatusOr<Trace> t = LoadTrace(ShippedTracePath(name));
      ASSERT_TRUE(t.ok()) << t.status();
      traces_[name] = *std::move(t);
      const std::string copy = TracePath(name);
      std::ifstream in(ShippedTracePath(name), std::ios::binary);
      std::ofstream out(copy, std::ios::binary);
      out << in.rdbuf();
      out.close();
      ::chmod(copy.c_str(), 0644);
    }
  }

  void TearDown() override {
    for (const char* name : kTraces) ::unlink(TracePath(name).c_str());
    for (const std::string& r : records_) ::unlink(r.c_str());
    ::rmdir(tmp_.c_str());
  }

  std::string TracePath(const std::string& name) const {
    return absl::StrCat(tmp_, "/", name, ".trace.gz");
  }

  Slice RandomSlice() {
    Slice s;
    s.trace = kTraces[rng_() % std::size(kTraces)];
    const Trace& t = traces_[s.trace];
    s.begin = std::uniform_real_distribution<double>(0, 0.8)(rng_);
    s.end = s.begin + 0.12;
    s.peak = SlicePeak(t, static_cast<size_t>(s.begin * t.events.size()),
                       static_cast<size_t>(s.end * t.events.size()));
    return s;
  }

  void StartClient(int index, double seconds) {
    Client& c = clients_[index];
    c = Client();
    c.slice = slices_[index];
    if (::getuid() == 0) c.uid = 2000 + index % 4;
    const std::string records =
        absl::StrCat(tmp_, "/chaos_records_", index, "_", tally_.started);
    records_.push_back(records);
    std::vector<std::string> flags = {"--trace=" + TracePath(c.slice.trace),
                                      absl::StrCat("--begin=", c.slice.begin),
                                      absl::StrCat("--end=", c.slice.end),
                                      absl::StrCat("--scale=", kScale),
                                      absl::StrCat("--duration_s=", seconds),
                                      "--event_sleep_us=300",
                                      "--progress_every=0",
                                      "--tag",
                                      "--records=" + records,
                                      "--record_every=2000",
                                      absl::StrCat("--uid=", c.uid)};
    absl::StatusOr<std::unique_ptr<ClientProcess>> p =
        ClientProcess::StartBinary("tests/integration/trace_client",
                                   daemon_->socket(), flags);
    ASSERT_TRUE(p.ok()) << p.status() << "\n" << daemon_->Log();
    c.proc = *std::move(p);
    ++tally_.started;
  }

  // Adds the daemon's counters to the tally (before it is killed).
  void Count() {
    absl::StatusOr<v1::StatusResponse> st = daemon_->Status();
    if (!st.ok()) return;
    tally_.leases += st->leases_served();
    tally_.pressure_rounds += st->pressure_rounds();
    tally_.zeroed_bytes += st->zeroed_bytes();
  }

  void KillRandomClient(double seconds_left) {
    const int i = static_cast<int>(rng_() % kClients);
    Client& c = clients_[i];
    const pid_t pid = c.proc->pid();
    c.proc->Kill(SIGKILL);
    c.killed = true;
    ++tally_.kills;
    const absl::Time killed = absl::Now();
    // Its memory back in the lake: no session of its pid holds anything.
    absl::StatusOr<v1::StatusResponse> st = daemon_->WaitFor(
        [pid](const v1::StatusResponse& r) {
          for (const v1::SessionStatus& s : r.sessions()) {
            if (s.pid() == pid && s.leased_chunks() > 0) return false;
          }
          return true;
        },
        absl::Seconds(1));
    EXPECT_TRUE(st.ok()) << "the memory of killed client " << pid
                         << " was not back within 1 s: " << st.status();
    tally_.slowest_kill_back =
        std::max(tally_.slowest_kill_back, absl::Now() - killed);
    killed_.push_back(std::move(c));
    // Another process replays the same slice (the lake was sized for it).
    StartClient(i, std::max(5.0, seconds_left));
  }

  void RestartDaemon() {
    Count();
    ASSERT_TRUE(daemon_->Stop(SIGKILL, absl::Seconds(10)).ok());
    absl::SleepFor(absl::Milliseconds(200));
    absl::Status s = daemon_->Restart();
    ASSERT_TRUE(s.ok()) << s << daemon_->Log();
    ++tally_.restarts;
    StartLiar();  // the last one's session went with the daemon
  }

  // An honest session holding half the lake as cache, which it gives back
  // when asked (lake_client --reclaim): however little the slices' allocators
  // cache beyond their live peaks, growth soon needs pressure. Without it,
  // some seeds never ran short (GMLAKE_CHAOS_SEED=2240146316: 0 rounds in
  // 80-83 leases, three runs of three). Its session goes on through
  // gmlaked's restarts (adopted, as the clients' are).
  void StartHolder(uint64_t capacity) {
    absl::StatusOr<std::unique_ptr<ClientProcess>> h = ClientProcess::Start(
        daemon_->socket(),
        {"--name=holder", "--reclaim",
         absl::StrCat("--uid=", ::getuid() == 0 ? 2005 : -1)});
    ASSERT_TRUE(h.ok()) << h.status();
    holder_ = *std::move(h);
    const uint64_t chunks = capacity / kChunk / 2;
    ASSERT_TRUE(holder_->Command(absl::StrCat("acquire 0 ", chunks)).ok());
    ASSERT_TRUE(
        holder_->Command(absl::StrCat("report 0 0 ", chunks * kChunk)).ok());
  }

  // A session that claims 1 TiB of cache beside its one chunk and answers
  // pressure with nothing ("nothing") or not at all ("silent"), in turns.
  // Its lease may fail while the lake is full; it lies all the same.
  void StartLiar() {
    if (liar_ != nullptr) liar_->Kill(SIGKILL);
    absl::StatusOr<std::unique_ptr<ClientProcess>> l =
        ClientProcess::StartBinary(
            "tests/integration/raw_client", daemon_->socket(),
            {"--name=liar",
             absl::StrCat("--uid=", ::getuid() == 0 ? 2004 : -1)});
    ASSERT_TRUE(l.ok()) << l.status();
    liar_ = *std::move(l);
    liar_->Command("lease 0 1").IgnoreError();
    const char* mode = tally_.liars % 2 == 0 ? "nothing" : "silent";
    ASSERT_TRUE(liar_->Command(absl::StrCat("watch ", mode)).ok());
    ASSERT_TRUE(
        liar_->Command(absl::StrCat("usage 0 0 ", uint64_t{1} << 40)).ok());
    ++tally_.liars;
  }

  void SendGarbage() {
    std::string junk(1 + rng_() % 300, '\0');
    for (char& ch : junk) ch = static_cast<char>(rng_());
    if (absl::StatusOr<UniqueFd> fd = ConnectUnix(daemon_->fd_socket());
        fd.ok()) {
      if (rng_() % 2 == 0) {
        SendFds(fd->get(), junk, {}).IgnoreError();  // a frame of junk
      } else {
        [[maybe_unused]] ssize_t n = ::write(fd->get(), junk.data(),
                                             junk.size());  // no frame
      }
      ++tally_.garbage_fd;
    }
    if (absl::StatusOr<UniqueFd> g = ConnectUnix(daemon_->socket()); g.ok()) {
      [[maybe_unused]] ssize_t n = ::write(g->get(), junk.data(), junk.size());
      ++tally_.garbage_grpc;
    }
  }

  // A descriptor whose last close blocks for a few seconds, sent on both
  // sockets (issue 20 A): gmlaked must neither wait on it nor leak it.
  void SendLingeringDescriptor() {
    LingeringSocket l = MakeLingeringSocket(3);
    if (absl::StatusOr<UniqueFd> fd = ConnectUnix(daemon_->fd_socket());
        fd.ok()) {
      // A frame of junk carrying it, or half a frame that stalls.
      const uint32_t header[3] = {kFdFrameMagic, 64, 1};
      SendWithFd(fd->get(),
                 std::string(reinterpret_cast<const char*>(header),
                             rng_() % 2 == 0 ? sizeof(header) : 4),
                 l.sock.get());
    }
    if (absl::StatusOr<UniqueFd> g = ConnectUnix(daemon_->socket()); g.ok()) {
      SendWithFd(g->get(), "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
                 l.sock.get());  // refused by the kernel
    }
    // Ours closes without the wait; gmlaked's copies are its own.
    const linger off{0, 0};
    ::setsockopt(l.sock.get(), SOL_SOCKET, SO_LINGER, &off, sizeof(off));
    lingering_.push_back(std::move(l));  // the peers stay open a while
    if (lingering_.size() > 8) lingering_.erase(lingering_.begin());
    ++tally_.lingering_sent;
  }

  // More gRPC connections than --max_grpc_connections_per_uid, held for a
  // moment (issue 20 C): the excess is refused, the clients go on.
  void FloodConnections() {
    flood_.clear();
    for (int i = 0; i < 48; ++i) {
      absl::StatusOr<UniqueFd> g = ConnectUnix(daemon_->socket());
      if (g.ok()) flood_.push_back(*std::move(g));
    }
    ++tally_.connection_floods;
  }

  void OpenAndDropSession() {
    v1::OpenSessionRequest req;
    req.set_pid(::getpid());
    req.set_name("chaos-drop");
    req.set_protocol_version(ProtocolVersion());
    v1::OpenSessionResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    if (!daemon_->stub()->OpenSession(&ctx, req, &resp).ok()) return;
    ++tally_.sessions_dropped;
    if (rng_() % 2 == 0) return;  // never bound: the bind timeout ends it
    absl::StatusOr<UniqueFd> fd = ConnectUnix(resp.fd_socket());
    if (!fd.ok()) return;
    v1::FdRequest b;
    b.set_session_id(resp.session_id());
    b.set_token(resp.token());
    b.mutable_bind();
    SendFds(fd->get(), b.SerializeAsString(), {}).IgnoreError();
    // Dropped: the connection closes, which ends the session.
  }

  // No inode held by two processes over overlapping intervals.
  int CheckRecords(uint64_t* chunks_seen) {
    // (pid, handle, inode) -> [first, last] seen held
    std::map<std::tuple<int64_t, uint64_t, uint64_t>,
             std::pair<uint64_t, uint64_t>>
        held;
    for (const std::string& path : records_) {
      std::ifstream in(path);
      int64_t pid;
      uint64_t handle, inode, t;
      while (in >> pid >> handle >> inode >> t) {
        auto [it, fresh] = held.try_emplace({pid, handle, inode}, t, t);
        if (!fresh) {
          it->second.first = std::min(it->second.first, t);
          it->second.second = std::max(it->second.second, t);
        }
      }
    }
    std::map<uint64_t, std::vector<std::tuple<uint64_t, uint64_t, int64_t>>>
        by_inode;
    for (const auto& [key, span] : held) {
      by_inode[std::get<2>(key)].push_back(
          {span.first, span.second, std::get<0>(key)});
    }
    *chunks_seen = by_inode.size();
    int overlaps = 0;
    for (auto& [inode, spans] : by_inode) {
      std::sort(spans.begin(), spans.end());
      for (size_t i = 1; i < spans.size(); ++i) {
        for (size_t j = 0; j < i; ++j) {
          if (std::get<2>(spans[j]) != std::get<2>(spans[i]) &&
              std::get<1>(spans[j]) >= std::get<0>(spans[i])) {
            ADD_FAILURE() << "chunk (inode " << inode << ") held by pids "
                          << std::get<2>(spans[j]) << " and "
                          << std::get<2>(spans[i]) << " at once";
            ++overlaps;
          }
        }
      }
    }
    return overlaps;
  }

  uint32_t seed_ = 0;
  std::mt19937 rng_;
  std::map<std::string, Trace> traces_;
  std::string tmp_;
  std::unique_ptr<Daemon> daemon_;
  Slice slices_[kClients];
  Client clients_[kClients];
  std::vector<Client> killed_;
  std::unique_ptr<ClientProcess> liar_;
  std::unique_ptr<ClientProcess> holder_;
  std::vector<std::string> records_;
  std::vector<LingeringSocket> lingering_;
  std::vector<UniqueFd> flood_;
  Tally tally_;
};

TEST_F(Chaos, KillsRestartsGarbageAndDroppedSessionsUnderConstantPressure) {
  const double seconds = ChaosSeconds();
  uint64_t sum = 0;
  for (Slice& s : slices_) {
    s = RandomSlice();
    sum += s.peak;
  }
  // The slices' live peaks summed, and 2 chunks each: every client fits
  // even when all peak at once, but not what their allocators would cache
  // on their own, nor beside the holder's cache, so pressure never stops
  // (pressure rounds below).
  const uint64_t capacity =
      ((sum + kClients * 2 * kChunk + kChunk - 1) / kChunk) * kChunk +
      kChunk;  // the liar's
  absl::StatusOr<std::unique_ptr<Daemon>> d = Daemon::Start(
      {absl::StrCat("--capacity=", capacity), "--reclaim_timeout=5s",
       "--bind_timeout=2s", "--release_idle=0",
       // The driver (root) floods beyond it; the clients (a connection
       // each, at other uids) stay below.
       "--max_grpc_connections_per_uid=32"});
  ASSERT_TRUE(d.ok()) << d.status();
  daemon_ = *std::move(d);
  const int baseline_fds = OpenDescriptors(daemon_->pid());
  StartLiar();
  if (::testing::Test::HasFatalFailure()) return;
  StartHolder(capacity);
  if (::testing::Test::HasFatalFailure()) return;
  for (int i = 0; i < kClients; ++i) StartClient(i, seconds);

  const absl::Time start = absl::Now();
  const absl::Time end = start + absl::Seconds(seconds);
  const absl::Duration kill_every = absl::Seconds(seconds / 7);
  absl::Time next_kill = start + kill_every;
  const absl::Time restarts[] = {start + absl::Seconds(seconds / 3),
                                 start + absl::Seconds(seconds * 2 / 3)};
  int restarts_done = 0;
  while (absl::Now() < end) {
    const double left = absl::ToDoubleSeconds(end - absl::Now());
    if (restarts_done < 2 && absl::Now() >= restarts[restarts_done]) {
      RestartDaemon();
      ++restarts_done;
    } else if (absl::Now() >= next_kill) {
      KillRandomClient(left);
      next_kill += kill_every;
    }
    if (::testing::Test::HasFatalFailure()) return;
    SendGarbage();
    if (rng_() % 3 == 0) OpenAndDropSession();
    if (rng_() % 20 == 0) SendLingeringDescriptor();
    if (rng_() % 40 == 0) FloodConnections();
    if (rng_() % 10 == 0) flood_.clear();
    absl::SleepFor(absl::Milliseconds(50));
  }
  flood_.clear();
  lingering_.clear();
  Count();

  // Every client not killed finishes its slice.
  int finished = 0;
  for (Client& c : clients_) {
    absl::StatusOr<std::string> done = c.proc->Receive(absl::Seconds(120));
    c.outcome = done.ok() ? *done : done.status().ToString();
    EXPECT_TRUE(done.ok() && absl::StartsWith(*done, "done "))
        << c.slice.trace << " [" << c.slice.begin << ", " << c.slice.end
        << ") at uid " << c.uid << ": " << c.outcome << "\n"
        << daemon_->Log().substr(std::max<size_t>(daemon_->Log().size(), 4000) -
                                 4000);
    finished += done.ok() && absl::StartsWith(*done, "done ");
    if (done.ok()) c.proc->Quit().IgnoreError();
  }
  // The liar lied to the end; it and the holder leave with the others.
  if (liar_ != nullptr) liar_->Quit().IgnoreError();
  if (holder_ != nullptr) holder_->Quit().IgnoreError();
  // Everyone gone: the books balance, and with the free chunks trimmed the
  // daemon holds the descriptors it started with.
  absl::StatusOr<v1::StatusResponse> idle = daemon_->WaitFor(
      [](const v1::StatusResponse& r) { return r.sessions_size() == 0; },
      kPatience);
  ASSERT_TRUE(idle.ok()) << idle.status();
  absl::Status books = daemon_->CheckBooks();
  EXPECT_TRUE(books.ok()) << books;
  {
    v1::TrimRequest req;
    req.set_device(-1);
    v1::TrimResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(daemon_->stub()->Trim(&ctx, req, &resp).ok());
  }
  const int end_fds = OpenDescriptors(daemon_->pid());
  EXPECT_EQ(end_fds, baseline_fds) << "gmlaked's descriptors";
  uint64_t chunks_seen = 0;
  const int overlaps = CheckRecords(&chunks_seen);

  std::printf(
      "\nchaos: %.0f s, seed %u, %d clients at %s, lake %s (the slices' "
      "peaks sum to %s)\n",
      seconds, seed_, kClients, ::getuid() == 0 ? "uids 2000-2003" : "one uid",
      FormatBytes(capacity).c_str(), FormatBytes(sum).c_str());
  std::printf("  %-40s %s\n", "what it did", "");
  std::printf("  %-40s %d\n", "clients started", tally_.started);
  std::printf("  %-40s %d\n", "clients killed (-9)", tally_.kills);
  std::printf("  %-40s %d\n", "lingering descriptors sent",
              tally_.lingering_sent);
  std::printf("  %-40s %d\n", "gRPC connection floods",
              tally_.connection_floods);
  std::printf("  %-40s %d\n", "gmlaked killed (-9) and restarted",
              tally_.restarts);
  std::printf("  %-40s %d fd socket, %d gRPC socket\n", "garbage sent",
              tally_.garbage_fd, tally_.garbage_grpc);
  std::printf("  %-40s %d\n", "sessions opened and dropped",
              tally_.sessions_dropped);
  std::printf("  %-40s %d\n", "lying sessions (1 TiB claimed)", tally_.liars);
  std::printf("  %-40s %llu\n", "leases served",
              static_cast<unsigned long long>(tally_.leases));
  std::printf("  %-40s %llu\n", "pressure rounds",
              static_cast<unsigned long long>(tally_.pressure_rounds));
  std::printf("  %-40s %llu MiB\n", "zeroed for another uid",
              static_cast<unsigned long long>(tally_.zeroed_bytes >> 20));
  std::printf("  %-40s %s\n", "what held", "");
  std::printf("  %-40s %s\n", "books balance at the end",
              books.ok() ? "yes" : std::string(books.message()).c_str());
  std::printf("  %-40s %s (%llu chunks seen)\n",
              "no chunk held by two processes at once",
              overlaps == 0 ? "yes" : "NO",
              static_cast<unsigned long long>(chunks_seen));
  std::printf("  %-40s %d of %d\n", "clients not killed that finished",
              finished, kClients);
  std::printf("  %-40s %d now, %d at start\n", "gmlaked's descriptors", end_fds,
              baseline_fds);
  std::printf("  %-40s slowest %s\n", "killed clients' memory back",
              absl::FormatDuration(tally_.slowest_kill_back).c_str());
  std::printf("  %-40s %s\n", "zeroing across uids (clients' tag checks)",
              finished == kClients ? "never skipped" : "see the failures");
  EXPECT_GE(tally_.pressure_rounds, 1u) << "no pressure: the lake is too big";
  EXPECT_EQ(tally_.restarts, 2);
}

}  // namespace
}  // namespace testing
}  // namespace gmlake
