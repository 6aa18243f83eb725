// Copyright 2026 The GMLake Authors.

#include "tests/vmm_conformance.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/types/span.h"
#include "common/fd_passing.h"
#include "common/unique_fd.h"
#include "gmock/gmock.h"
#include "tests/vmm_peer_protocol.h"

namespace gmlake {

VmmConformanceBackend ConformanceBackend(absl::string_view kind,
                                         size_t host_capacity_bytes) {
  VmmConformanceBackend b;
  b.name = std::string(kind);
  b.peer_kind = std::string(kind);
  BackendOptions options;
  options.kind = std::string(kind);
  const bool emulated = kind == "host" || kind == "accounting";
  if (emulated) {
    options.host_capacity_bytes = host_capacity_bytes;
    b.capacity_bytes = host_capacity_bytes;
    b.import_checks_size = true;
  }
  b.make = [options] { return CreateBackend(options); };
  return b;
}

std::string VmmConformanceTestName(
    const ::testing::TestParamInfo<VmmConformanceBackend>& info) {
  return info.param.name;
}

void VmmConformanceTest::SetUp() {
  absl::StatusOr<std::unique_ptr<VmmBackend>> b = GetParam().make();
  ASSERT_TRUE(b.ok()) << "cannot make the " << GetParam().name
                      << " backend: " << b.status();
  backend_ = *std::move(b);
  granularity_ = backend_->granularity(0);
}

void VmmConformanceTest::TearDown() { backend_.reset(); }

namespace {

using ::testing::HasSubstr;

absl::Status StatusOf(const absl::Status& s) { return s; }
template <typename T>
absl::Status StatusOf(const absl::StatusOr<T>& s) {
  return s.status();
}

// The call must fail with exactly this code (the contract in
// common/vmm_books.h).
#define EXPECT_CODE(expected, expr)                       \
  do {                                                    \
    const absl::Status status_ = StatusOf(expr);          \
    EXPECT_EQ(status_.code(), absl::StatusCode::expected) \
        << #expr << "\n  returned: " << status_;          \
  } while (0)

// Writes Pattern(seed) at `at`, as if the bytes sat at `offset` of a view.
void WritePattern(VmmBackend* b, DevicePtr at, uint32_t seed, uint64_t offset,
                  size_t len) {
  const std::vector<uint8_t> data = Pattern(seed, offset, len);
  ASSERT_TRUE(b->CopyFromHost(at, data.data(), len).ok());
}

// "" when `at` holds Pattern(seed) for offsets [offset, offset+len).
std::string CheckPattern(VmmBackend* b, DevicePtr at, uint32_t seed,
                         uint64_t offset, size_t len) {
  std::vector<uint8_t> data(len);
  absl::Status s = b->CopyToHost(data.data(), at, len);
  if (!s.ok()) return s.ToString();
  return PatternMismatch(data, seed, offset);
}

// --- The peer process
// -----------------------------------------------------------

// Where the vmm_peer binary is, or "".
std::string FindPeer() {
  if (const char* p = std::getenv("GMLAKE_VMM_PEER"); p != nullptr && *p) {
    return p;
  }
  if (const char* srcdir = std::getenv("TEST_SRCDIR")) {
    const char* ws = std::getenv("TEST_WORKSPACE");
    const std::string path = absl::StrCat(
        srcdir, "/", ws != nullptr ? ws : "gmlake", "/tests/vmm_peer");
    if (access(path.c_str(), X_OK) == 0) return path;
  }
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    std::string path(self, n);
    path = path.substr(0, path.rfind('/') + 1) + "vmm_peer";
    if (access(path.c_str(), X_OK) == 0) return path;
  }
  return "";
}

// A vmm_peer started with fork+exec, commanded over a socket pair. Killed
// (by its pid) if the test ends before it exits.
class PeerProcess {
 public:
  static absl::StatusOr<std::unique_ptr<PeerProcess>> Start(
      const std::string& binary, const std::string& kind) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
      return absl::InternalError("socketpair failed");
    }
    UniqueFd ours(sv[0]), theirs(sv[1]);
    // Everything the child needs is made before fork: after it, only
    // async-signal-safe calls.
    const std::string backend_arg = "--backend=" + kind;
    const std::string fd_arg = absl::StrCat("--fd=", theirs.get());
    std::vector<char*> argv = {const_cast<char*>(binary.c_str()),
                               const_cast<char*>(backend_arg.c_str()),
                               const_cast<char*>(fd_arg.c_str()), nullptr};
    const pid_t pid = fork();
    if (pid < 0) return absl::InternalError("fork failed");
    if (pid == 0) {
      fcntl(theirs.get(), F_SETFD, 0);  // let the socket survive exec
      execv(binary.c_str(), argv.data());
      _exit(127);
    }
    theirs.Reset();
    // A hung peer fails the test instead of hanging it.
    timeval tv{60, 0};
    setsockopt(ours.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return std::unique_ptr<PeerProcess>(new PeerProcess(pid, std::move(ours)));
  }

  ~PeerProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  // Sends a command (with descriptors) and returns the peer's reply.
  std::string Command(const std::string& cmd, absl::Span<const int> fds = {}) {
    absl::Status s = SendFds(sock_.get(), cmd, fds);
    if (!s.ok()) return absl::StrCat("(send failed: ", s.ToString(), ")");
    absl::StatusOr<ReceivedMessage> reply =
        RecvFds(sock_.get(), kPeerMaxPayload, 0);
    if (!reply.ok()) {
      return absl::StrCat("(no reply: ", reply.status().ToString(), ")");
    }
    return reply->payload;
  }

  // Waits for the peer to exit; its exit status, or -1 if a signal ended it.
  int Wait() {
    int status = 0;
    const pid_t pid = std::exchange(pid_, -1);
    if (waitpid(pid, &status, 0) != pid) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  PeerProcess(pid_t pid, UniqueFd sock) : pid_(pid), sock_(std::move(sock)) {}
  pid_t pid_;
  UniqueFd sock_;
};

}  // namespace

// --- Tests
// ------------------------------------------------------------------------

TEST_P(VmmConformanceTest, DescribesItself) {
  EXPECT_FALSE(backend()->name().empty());
  EXPECT_FALSE(backend()->Describe().empty());
  EXPECT_GE(backend()->device_count(), 1);
  EXPECT_GT(g(), 0u);
  EXPECT_EQ(g() & (g() - 1), 0u) << "granularity is not a power of two";
  RecordProperty("backend", backend()->Describe());
}

TEST_P(VmmConformanceTest, CreateMapAccessWriteRead) {
  absl::StatusOr<Chunk> chunk = Chunk::Create(backend(), 0, 2 * g());
  ASSERT_TRUE(chunk.ok()) << chunk.status();
  absl::StatusOr<VirtualRange> range =
      VirtualRange::Reserve(backend(), 2 * g());
  ASSERT_TRUE(range.ok()) << range.status();
  EXPECT_EQ(range->base() % g(), 0u);
  const DevicePtr at = range->base();
  ASSERT_TRUE(backend()->Map(at, 2 * g(), chunk->handle()).ok());
  ASSERT_TRUE(backend()->SetAccess(at, 2 * g(), {0}).ok());
  if (backend()->has_memory()) {
    WritePattern(backend(), at, 7, 0, 2 * g());
    EXPECT_EQ(CheckPattern(backend(), at, 7, 0, 2 * g()), "");
    // A fill in the middle changes exactly its bytes.
    ASSERT_TRUE(backend()->Fill(at + 12345, 0xAB, 1000).ok());
    std::vector<uint8_t> around(1002);
    ASSERT_TRUE(backend()->CopyToHost(around.data(), at + 12344, 1002).ok());
    EXPECT_EQ(around[0], PatternByte(7, 12344));
    EXPECT_EQ(around[1], 0xAB);
    EXPECT_EQ(around[1000], 0xAB);
    EXPECT_EQ(around[1001], PatternByte(7, 12345 + 1000));
  }
  ASSERT_TRUE(backend()->Unmap(at, 2 * g()).ok());
}

// Two chunks side by side in one range make one contiguous view; a write
// across the seam lands in both, as each chunk's own mapping shows.
TEST_P(VmmConformanceTest, StitchedChunksAcrossTheSeam) {
  absl::StatusOr<Chunk> a = Chunk::Create(backend(), 0, g());
  absl::StatusOr<Chunk> b = Chunk::Create(backend(), 0, g());
  ASSERT_TRUE(a.ok() && b.ok());
  absl::StatusOr<VirtualRange> view = VirtualRange::Reserve(backend(), 2 * g());
  absl::StatusOr<VirtualRange> own_a = VirtualRange::Reserve(backend(), g());
  absl::StatusOr<VirtualRange> own_b = VirtualRange::Reserve(backend(), g());
  ASSERT_TRUE(view.ok() && own_a.ok() && own_b.ok());
  ASSERT_TRUE(backend()->Map(view->base(), g(), a->handle()).ok());
  ASSERT_TRUE(backend()->Map(view->base() + g(), g(), b->handle()).ok());
  // One SetAccess over both chunks.
  ASSERT_TRUE(backend()->SetAccess(view->base(), 2 * g(), {0}).ok());
  // The same chunks mapped a second time each, at their own addresses.
  absl::StatusOr<Mapping> ma =
      Mapping::Map(backend(), own_a->base(), g(), a->handle(), {0});
  absl::StatusOr<Mapping> mb =
      Mapping::Map(backend(), own_b->base(), g(), b->handle(), {0});
  ASSERT_TRUE(ma.ok()) << ma.status();
  ASSERT_TRUE(mb.ok()) << mb.status();
  if (backend()->has_memory()) {
    WritePattern(backend(), view->base(), 5, 0, 2 * g());
    EXPECT_EQ(CheckPattern(backend(), own_a->base(), 5, 0, g()), "");
    EXPECT_EQ(CheckPattern(backend(), own_b->base(), 5, g(), g()), "");
    // Across the seam only.
    const size_t half = 3 * 4096 + 17;
    WritePattern(backend(), view->base() + g() - half, 6, g() - half, 2 * half);
    EXPECT_EQ(CheckPattern(backend(), own_a->base() + g() - half, 6, g() - half,
                           half),
              "");
    EXPECT_EQ(CheckPattern(backend(), own_b->base(), 6, g(), half), "");
    EXPECT_EQ(CheckPattern(backend(), own_a->base(), 5, 0, g() - half), "");
    // And back: a write through one chunk's own mapping shows in the view.
    WritePattern(backend(), own_b->base(), 8, g(), g());
    EXPECT_EQ(CheckPattern(backend(), view->base() + g(), 8, g(), g()), "");
  }
  ASSERT_TRUE(backend()->Unmap(view->base(), 2 * g()).ok());
}

// A chunk exported here, its descriptor sent to another process (started
// with fork+exec), imported and mapped there: each sees the other's writes.
TEST_P(VmmConformanceTest, SharedWithAnotherProcess) {
  if (!backend()->has_memory()) GTEST_SKIP() << "no memory to share";
  if (GetParam().peer_kind.empty()) GTEST_SKIP() << "no peer kind given";
  const std::string peer_binary = FindPeer();
  ASSERT_FALSE(peer_binary.empty())
      << "vmm_peer not found: set GMLAKE_VMM_PEER, run under Bazel with "
         "data = [\"//tests:vmm_peer\"], or put it next to the test binary";
  absl::StatusOr<Chunk> a = Chunk::Create(backend(), 0, g());
  absl::StatusOr<Chunk> b = Chunk::Create(backend(), 0, g());
  ASSERT_TRUE(a.ok() && b.ok());
  absl::StatusOr<VirtualRange> ra = VirtualRange::Reserve(backend(), g());
  absl::StatusOr<VirtualRange> rb = VirtualRange::Reserve(backend(), g());
  ASSERT_TRUE(ra.ok() && rb.ok());
  absl::StatusOr<Mapping> ma =
      Mapping::Map(backend(), ra->base(), g(), a->handle(), {0});
  absl::StatusOr<Mapping> mb =
      Mapping::Map(backend(), rb->base(), g(), b->handle(), {0});
  ASSERT_TRUE(ma.ok() && mb.ok());
  // The peer stitches a then b into one view of 2g bytes; the patterns use
  // the view's offsets.
  WritePattern(backend(), ra->base(), 1, 0, g());
  WritePattern(backend(), rb->base(), 1, g(), g());
  absl::StatusOr<UniqueFd> fa = backend()->ExportChunk(a->handle());
  absl::StatusOr<UniqueFd> fb = backend()->ExportChunk(b->handle());
  ASSERT_TRUE(fa.ok()) << fa.status();
  ASSERT_TRUE(fb.ok()) << fb.status();

  absl::StatusOr<std::unique_ptr<PeerProcess>> peer =
      PeerProcess::Start(peer_binary, GetParam().peer_kind);
  ASSERT_TRUE(peer.ok()) << peer.status();
  PeerProcess& p = **peer;
  ASSERT_EQ(p.Command(absl::StrCat("import 0 ", g()), {fa->get(), fb->get()}),
            "ok 2")
      << "peer: " << peer_binary;
  // The imports live on without the descriptors.
  fa->Reset();
  fb->Reset();
  EXPECT_EQ(p.Command(absl::StrCat("check 1 0 ", 2 * g())), "ok");

  // The peer writes across its seam; we see it through each chunk.
  const size_t half = 64 * 1024;
  EXPECT_EQ(p.Command(absl::StrCat("write 2 ", g() - half, " ", 2 * half)),
            "ok");
  EXPECT_EQ(
      CheckPattern(backend(), ra->base() + g() - half, 2, g() - half, half),
      "");
  EXPECT_EQ(CheckPattern(backend(), rb->base(), 2, g(), half), "");
  EXPECT_EQ(CheckPattern(backend(), ra->base(), 1, 0, g() - half), "");

  // We write again; the peer, still mapped, sees it.
  WritePattern(backend(), ra->base(), 3, 0, g());
  WritePattern(backend(), rb->base(), 3, g(), g());
  EXPECT_EQ(p.Command(absl::StrCat("check 3 0 ", 2 * g())), "ok");
  EXPECT_THAT(p.Command(absl::StrCat("check 1 0 ", g())),
              HasSubstr("error"));  // the peer really compares

  EXPECT_EQ(p.Command("exit"), "ok");
  EXPECT_EQ(p.Wait(), 0);
  // Our chunks are untouched by the peer's exit.
  EXPECT_EQ(CheckPattern(backend(), rb->base(), 3, g(), g()), "");
}

// Unmapped and mapped again elsewhere: the data is intact, and access must
// be given again (writing before that fails cleanly).
TEST_P(VmmConformanceTest, UnmapAndRemapElsewhere) {
  absl::StatusOr<Chunk> c = Chunk::Create(backend(), 0, g());
  absl::StatusOr<VirtualRange> first = VirtualRange::Reserve(backend(), g());
  absl::StatusOr<VirtualRange> second =
      VirtualRange::Reserve(backend(), 3 * g());
  ASSERT_TRUE(c.ok() && first.ok() && second.ok());
  ASSERT_TRUE(backend()->Map(first->base(), g(), c->handle()).ok());
  ASSERT_TRUE(backend()->SetAccess(first->base(), g(), {0}).ok());
  const bool memory = backend()->has_memory();
  if (memory) WritePattern(backend(), first->base(), 9, 0, g());
  ASSERT_TRUE(backend()->Unmap(first->base(), g()).ok());
  uint8_t byte = 0;
  if (memory) {
    EXPECT_CODE(kFailedPrecondition, backend()->Fill(first->base(), 1, 1));
    EXPECT_CODE(kFailedPrecondition,
                backend()->CopyToHost(&byte, first->base(), 1));
  }
  const DevicePtr at = second->base() + g();
  ASSERT_TRUE(backend()->Map(at, g(), c->handle()).ok());
  if (memory) {
    // Mapped, but no access yet.
    EXPECT_CODE(kFailedPrecondition, backend()->Fill(at, 1, 16));
    EXPECT_CODE(kFailedPrecondition, backend()->CopyFromHost(at, &byte, 1));
    EXPECT_CODE(kFailedPrecondition, backend()->CopyToHost(&byte, at, 1));
  }
  ASSERT_TRUE(backend()->SetAccess(at, g(), {0}).ok());
  if (memory) {
    EXPECT_EQ(CheckPattern(backend(), at, 9, 0, g()), "");
    // A copy that runs off the mapping into unmapped space fails whole.
    std::vector<uint8_t> buf(2 * g());
    EXPECT_CODE(kFailedPrecondition,
                backend()->CopyToHost(buf.data(), at, 2 * g()));
    EXPECT_CODE(kFailedPrecondition,
                backend()->CopyToHost(buf.data(), second->base(), 2 * g()));
  }
  ASSERT_TRUE(backend()->Unmap(at, g()).ok());
}

// Released while mapped: the memory lives on until unmapped, as with the
// driver; the handle is gone at once.
TEST_P(VmmConformanceTest, ReleaseWhileMapped) {
  absl::StatusOr<ChunkHandle> c = backend()->CreateChunk(0, g());
  absl::StatusOr<VirtualRange> r = VirtualRange::Reserve(backend(), 2 * g());
  ASSERT_TRUE(c.ok() && r.ok());
  ASSERT_TRUE(backend()->Map(r->base(), g(), *c).ok());
  ASSERT_TRUE(backend()->SetAccess(r->base(), g(), {0}).ok());
  if (backend()->has_memory()) WritePattern(backend(), r->base(), 11, 0, g());
  ASSERT_TRUE(backend()->ReleaseChunk(*c).ok());
  if (backend()->has_memory()) {
    EXPECT_EQ(CheckPattern(backend(), r->base(), 11, 0, g()), "");
  }
  EXPECT_CODE(kNotFound, backend()->ReleaseChunk(*c));
  EXPECT_CODE(kNotFound, backend()->Map(r->base() + g(), g(), *c));
  EXPECT_CODE(kNotFound, backend()->ExportChunk(*c));
  ASSERT_TRUE(backend()->Unmap(r->base(), g()).ok());
}

TEST_P(VmmConformanceTest, OutOfMemoryAtCapacity) {
  const size_t capacity = GetParam().capacity_bytes;
  if (capacity == 0) GTEST_SKIP() << "capacity unknown or too costly to fill";
  const size_t n = capacity / g();
  std::vector<Chunk> chunks;
  for (size_t i = 0; i < n; ++i) {
    absl::StatusOr<Chunk> c = Chunk::Create(backend(), 0, g());
    ASSERT_TRUE(c.ok()) << "chunk " << i << " of " << n << ": " << c.status();
    chunks.push_back(*std::move(c));
  }
  absl::StatusOr<ChunkHandle> over = backend()->CreateChunk(0, g());
  EXPECT_CODE(kResourceExhausted, over);
  EXPECT_THAT(std::string(over.status().message()), HasSubstr("out of memory"));
  // Imports count against the exporter: one still fits when we are full.
  absl::StatusOr<UniqueFd> fd = backend()->ExportChunk(chunks[0].handle());
  ASSERT_TRUE(fd.ok()) << fd.status();
  absl::StatusOr<ChunkHandle> imported =
      backend()->ImportChunk(fd->get(), 0, g());
  ASSERT_TRUE(imported.ok()) << imported.status();
  EXPECT_TRUE(backend()->ReleaseChunk(*imported).ok());
  // Releasing gives the room back.
  ASSERT_TRUE(chunks.back().Reset().ok());
  absl::StatusOr<Chunk> again = Chunk::Create(backend(), 0, g());
  EXPECT_TRUE(again.ok()) << again.status();
  EXPECT_CODE(kResourceExhausted, backend()->CreateChunk(0, g()));
}

TEST_P(VmmConformanceTest, BadChunkArguments) {
  const int devices = backend()->device_count();
  EXPECT_CODE(kInvalidArgument, backend()->CreateChunk(0, 0));
  EXPECT_CODE(kInvalidArgument, backend()->CreateChunk(0, g() + 4096));
  EXPECT_CODE(kInvalidArgument, backend()->CreateChunk(0, g() / 2));
  EXPECT_CODE(kInvalidArgument, backend()->CreateChunk(-1, g()));
  EXPECT_CODE(kInvalidArgument, backend()->CreateChunk(devices, g()));
  absl::StatusOr<ChunkHandle> c = backend()->CreateChunk(0, g());
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(backend()->ReleaseChunk(*c).ok());
  EXPECT_CODE(kNotFound, backend()->ReleaseChunk(*c));
  EXPECT_CODE(kNotFound, backend()->ReleaseChunk(0));
  EXPECT_CODE(kNotFound, backend()->ExportChunk(0));
}

TEST_P(VmmConformanceTest, BadRangeArguments) {
  EXPECT_CODE(kInvalidArgument, backend()->ReserveRange(0));
  EXPECT_CODE(kInvalidArgument, backend()->ReserveRange(g() / 2));
  EXPECT_CODE(kInvalidArgument, backend()->ReserveRange(g() + 4096));
  EXPECT_CODE(kInvalidArgument, backend()->ReserveRange(g(), 3 * g()));
  absl::StatusOr<DevicePtr> r = backend()->ReserveRange(2 * g(), 4 * g());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r % (4 * g()), 0u) << "alignment not honoured";
  EXPECT_CODE(kInvalidArgument, backend()->FreeRange(*r, g()));
  EXPECT_CODE(kNotFound, backend()->FreeRange(*r + g(), g()));
  absl::StatusOr<ChunkHandle> c = backend()->CreateChunk(0, g());
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(backend()->Map(*r + g(), g(), *c).ok());
  EXPECT_CODE(kFailedPrecondition, backend()->FreeRange(*r, 2 * g()));
  ASSERT_TRUE(backend()->Unmap(*r + g(), g()).ok());
  EXPECT_TRUE(backend()->FreeRange(*r, 2 * g()).ok());
  EXPECT_CODE(kNotFound, backend()->FreeRange(*r, 2 * g()));
  EXPECT_TRUE(backend()->ReleaseChunk(*c).ok());
}

TEST_P(VmmConformanceTest, BadMapArguments) {
  const int devices = backend()->device_count();
  absl::StatusOr<VirtualRange> r = VirtualRange::Reserve(backend(), 4 * g());
  absl::StatusOr<Chunk> c1 = Chunk::Create(backend(), 0, g());
  absl::StatusOr<Chunk> c2 = Chunk::Create(backend(), 0, 2 * g());
  ASSERT_TRUE(r.ok() && c1.ok() && c2.ok());
  const DevicePtr base = r->base();
  const ChunkHandle h1 = c1->handle(), h2 = c2->handle();

  // Where nothing is reserved (a range freed a moment ago).
  absl::StatusOr<DevicePtr> gone = backend()->ReserveRange(g());
  ASSERT_TRUE(gone.ok());
  ASSERT_TRUE(backend()->FreeRange(*gone, g()).ok());
  EXPECT_CODE(kInvalidArgument, backend()->Map(*gone, g(), h1));
  // Unaligned, past the end, straddling the end, the wrong size.
  EXPECT_CODE(kInvalidArgument, backend()->Map(base + 4096, g(), h1));
  EXPECT_CODE(kInvalidArgument, backend()->Map(base + 4 * g(), g(), h1));
  EXPECT_CODE(kInvalidArgument, backend()->Map(base + 3 * g(), 2 * g(), h2));
  EXPECT_CODE(kInvalidArgument, backend()->Map(base, 2 * g(), h1));
  EXPECT_CODE(kNotFound, backend()->Map(base, g(), 0));

  // [c1][c2 c2][  ]
  ASSERT_TRUE(backend()->Map(base, g(), h1).ok());
  EXPECT_CODE(kFailedPrecondition, backend()->Map(base, g(), h1));
  EXPECT_CODE(kFailedPrecondition, backend()->Map(base, 2 * g(), h2));
  ASSERT_TRUE(backend()->Map(base + g(), 2 * g(), h2).ok());
  EXPECT_CODE(kFailedPrecondition, backend()->Map(base + 2 * g(), g(), h1));

  EXPECT_CODE(kFailedPrecondition, backend()->Unmap(base + 3 * g(), g()));
  EXPECT_CODE(kInvalidArgument, backend()->Unmap(base + 2 * g(), g()));
  EXPECT_CODE(kInvalidArgument, backend()->Unmap(base + g(), g()));
  EXPECT_CODE(kInvalidArgument, backend()->Unmap(base, 0));
  EXPECT_CODE(kFailedPrecondition, backend()->Unmap(base, 4 * g()));

  EXPECT_CODE(kFailedPrecondition,
              backend()->SetAccess(base + 3 * g(), g(), {0}));
  EXPECT_CODE(kInvalidArgument, backend()->SetAccess(base, g(), {}));
  EXPECT_CODE(kInvalidArgument, backend()->SetAccess(base, g(), {devices}));
  if (backend()->has_memory()) {
    // Mapped without access, and not mapped at all.
    EXPECT_CODE(kFailedPrecondition, backend()->Fill(base, 0, g()));
    EXPECT_CODE(kFailedPrecondition, backend()->Fill(base + 3 * g(), 0, 1));
    EXPECT_CODE(kFailedPrecondition, backend()->Fill(*gone, 0, 1));
  }
  ASSERT_TRUE(backend()->SetAccess(base, 3 * g(), {0}).ok());
  if (backend()->has_memory()) {
    EXPECT_TRUE(backend()->Fill(base, 0, 3 * g()).ok());
    EXPECT_CODE(kFailedPrecondition, backend()->Fill(base, 0, 3 * g() + 1));
  }

  EXPECT_CODE(kFailedPrecondition, backend()->FreeRange(base, 4 * g()));
  // One call unmaps both chunks.
  ASSERT_TRUE(backend()->Unmap(base, 3 * g()).ok());
  EXPECT_CODE(kFailedPrecondition, backend()->Unmap(base, g()));
}

TEST_P(VmmConformanceTest, ImportOfBadDescriptors) {
  EXPECT_CODE(kInvalidArgument, backend()->ImportChunk(-1, 0, g()));
  int pipes[2];
  ASSERT_EQ(pipe2(pipes, O_CLOEXEC), 0);
  UniqueFd read_end(pipes[0]), write_end(pipes[1]);
  EXPECT_CODE(kInvalidArgument, backend()->ImportChunk(read_end.get(), 0, g()));
  UniqueFd closed(dup(read_end.get()));
  const int closed_number = closed.get();
  closed.Reset();
  EXPECT_CODE(kInvalidArgument, backend()->ImportChunk(closed_number, 0, g()));

  absl::StatusOr<Chunk> c = Chunk::Create(backend(), 0, g());
  ASSERT_TRUE(c.ok());
  absl::StatusOr<UniqueFd> fd = backend()->ExportChunk(c->handle());
  ASSERT_TRUE(fd.ok()) << fd.status();
  EXPECT_CODE(kInvalidArgument, backend()->ImportChunk(fd->get(), 0, 0));
  EXPECT_CODE(kInvalidArgument, backend()->ImportChunk(
                                    fd->get(), backend()->device_count(), g()));
  if (GetParam().import_checks_size) {
    EXPECT_CODE(kInvalidArgument,
                backend()->ImportChunk(fd->get(), 0, 2 * g()));
  }
  // The good import works, and the caller keeps its descriptor.
  absl::StatusOr<ChunkHandle> ok = backend()->ImportChunk(fd->get(), 0, g());
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_GE(fcntl(fd->get(), F_GETFD), 0);
  EXPECT_TRUE(backend()->ReleaseChunk(*ok).ok());
}

TEST_P(VmmConformanceTest, Events) {
  absl::StatusOr<EventHandle> e = backend()->CreateEvent(0);
  ASSERT_TRUE(e.ok()) << e.status();
  absl::StatusOr<bool> done = backend()->QueryEvent(*e);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_TRUE(*done) << "an event never recorded is complete";
  ASSERT_TRUE(backend()->RecordEvent(*e, 0).ok());
  // A stream may wait for it on the device, the host going on at once.
  ASSERT_TRUE(backend()->WaitEventOnStream(0, *e).ok());
  ASSERT_TRUE(backend()->SyncEvent(*e).ok());
  done = backend()->QueryEvent(*e);
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(*done);
  ASSERT_TRUE(backend()->DestroyEvent(*e).ok());
  EXPECT_CODE(kNotFound, backend()->DestroyEvent(*e));
  EXPECT_CODE(kNotFound, backend()->RecordEvent(*e, 0));
  EXPECT_CODE(kNotFound, backend()->QueryEvent(*e));
  EXPECT_CODE(kNotFound, backend()->SyncEvent(*e));
  EXPECT_CODE(kNotFound, backend()->WaitEventOnStream(0, *e));
  EXPECT_CODE(kInvalidArgument, backend()->CreateEvent(-1));
  EXPECT_CODE(kInvalidArgument,
              backend()->CreateEvent(backend()->device_count()));
}

// Every call through the public methods is counted once, failed or not.
TEST_P(VmmConformanceTest, CallCountersCountTheCallsMade) {
  const VmmCallSnapshot before = backend()->call_stats();
  absl::StatusOr<ChunkHandle> a = backend()->CreateChunk(0, g());
  absl::StatusOr<ChunkHandle> b = backend()->CreateChunk(0, g());
  absl::StatusOr<DevicePtr> r = backend()->ReserveRange(2 * g());
  ASSERT_TRUE(a.ok() && b.ok() && r.ok());
  ASSERT_TRUE(backend()->Map(*r, g(), *a).ok());
  ASSERT_TRUE(backend()->Map(*r + g(), g(), *b).ok());
  EXPECT_FALSE(backend()->Map(*r, g(), *b).ok());  // counted too
  ASSERT_TRUE(backend()->SetAccess(*r, 2 * g(), {0}).ok());
  ASSERT_TRUE(backend()->Unmap(*r, 2 * g()).ok());
  ASSERT_TRUE(backend()->FreeRange(*r, 2 * g()).ok());
  absl::StatusOr<UniqueFd> fd = backend()->ExportChunk(*a);
  ASSERT_TRUE(fd.ok()) << fd.status();
  absl::StatusOr<ChunkHandle> imported =
      backend()->ImportChunk(fd->get(), 0, g());
  ASSERT_TRUE(imported.ok()) << imported.status();
  for (ChunkHandle h : {*a, *b, *imported}) {
    ASSERT_TRUE(backend()->ReleaseChunk(h).ok());
  }
  absl::StatusOr<EventHandle> e = backend()->CreateEvent(0);
  ASSERT_TRUE(e.ok());
  ASSERT_TRUE(backend()->RecordEvent(*e, 0).ok());
  ASSERT_TRUE(backend()->QueryEvent(*e).ok());
  ASSERT_TRUE(backend()->SyncEvent(*e).ok());
  ASSERT_TRUE(backend()->WaitEventOnStream(0, *e).ok());
  ASSERT_TRUE(backend()->DestroyEvent(*e).ok());
  const VmmCallSnapshot d = backend()->call_stats() - before;

  EXPECT_EQ(d.Count(VmmCall::kCreate), 2u);
  EXPECT_EQ(d.Count(VmmCall::kReserve), 1u);
  EXPECT_EQ(d.Count(VmmCall::kMap), 3u);
  EXPECT_EQ(d.Count(VmmCall::kSetAccess), 1u);
  EXPECT_EQ(d.Count(VmmCall::kUnmap), 1u);
  EXPECT_EQ(d.Count(VmmCall::kFree), 1u);
  EXPECT_EQ(d.Count(VmmCall::kExport), 1u);
  EXPECT_EQ(d.Count(VmmCall::kImport), 1u);
  EXPECT_EQ(d.Count(VmmCall::kRelease), 3u);
  for (VmmCall c :
       {VmmCall::kEventCreate, VmmCall::kEventRecord, VmmCall::kEventQuery,
        VmmCall::kEventSync, VmmCall::kStreamWait, VmmCall::kEventDestroy}) {
    EXPECT_EQ(d.Count(c), 1u) << VmmCallName(c);
  }
  EXPECT_EQ(d.MemoryCalls(), 14u);
  EXPECT_EQ(d.TotalCalls(), 20u);
  EXPECT_GT(d.TotalNanos(), 0u);
  // Mean microseconds per call, for the GPU run's report.
  for (VmmCall c :
       {VmmCall::kCreate, VmmCall::kExport, VmmCall::kImport, VmmCall::kMap,
        VmmCall::kSetAccess, VmmCall::kUnmap, VmmCall::kRelease}) {
    RecordProperty(absl::StrCat("us_", VmmCallName(c)),
                   absl::StrFormat("%.1f", d.Nanos(c) / 1e3 / d.Count(c)));
  }
}

// With several devices: a chunk on another device, and access for all.
TEST_P(VmmConformanceTest, SecondDevice) {
  const int devices = backend()->device_count();
  if (devices < 2) GTEST_SKIP() << "one device";
  const size_t g1 = backend()->granularity(1);
  absl::StatusOr<Chunk> c = Chunk::Create(backend(), 1, g1);
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<VirtualRange> r = VirtualRange::Reserve(backend(), g1);
  ASSERT_TRUE(r.ok());
  std::vector<int> all;
  for (int d = 0; d < devices; ++d) all.push_back(d);
  absl::StatusOr<Mapping> m =
      Mapping::Map(backend(), r->base(), g1, c->handle(), all);
  ASSERT_TRUE(m.ok()) << m.status();
  if (backend()->has_memory()) {
    WritePattern(backend(), r->base(), 12, 0, g1);
    EXPECT_EQ(CheckPattern(backend(), r->base(), 12, 0, g1), "");
  }
}

}  // namespace gmlake
