// Copyright 2026 The GMLake Authors.
//
// Real sockets, real descriptors, real processes. Every test of the fixture
// also checks that the process holds exactly as many descriptors at the end
// as at the start.

#include "common/fd_passing.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/unique_fd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

extern char** environ;

namespace gmlake {
namespace {

using ::testing::HasSubstr;

int CountOpenFds() {
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  int n = 0;
  while (readdir(d) != nullptr) ++n;
  closedir(d);
  return n;
}

// A memfd holding `contents`.
UniqueFd MemfdWith(const std::string& contents) {
  UniqueFd fd(memfd_create("fd_passing_test", MFD_CLOEXEC));
  EXPECT_TRUE(fd.valid());
  EXPECT_EQ(write(fd.get(), contents.data(), contents.size()),
            static_cast<ssize_t>(contents.size()));
  return fd;
}

// `n` memfds holding "x", open while this lives, and their descriptors to
// send.
struct Memfds {
  explicit Memfds(int n) {
    for (int i = 0; i < n; ++i) {
      files.push_back(MemfdWith("x"));
      raw.push_back(files.back().get());
    }
  }
  std::vector<UniqueFd> files;
  std::vector<int> raw;
};

std::string ReadAll(int fd) {
  std::string out(4096, '\0');
  const ssize_t n = pread(fd, out.data(), out.size(), 0);
  out.resize(n < 0 ? 0 : n);
  return out;
}

bool SameFile(int a, int b) {
  struct stat sa {
  }, sb{};
  return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

// Writes `bytes` raw, with `fds` (possibly none) on the first byte.
void RawSend(int sock, const std::string& bytes, std::vector<int> fds = {}) {
  iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  std::vector<uint64_t> control(64);
  if (!fds.empty()) {
    msg.msg_control = control.data();
    msg.msg_controllen = CMSG_SPACE(fds.size() * sizeof(int));
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(fds.size() * sizeof(int));
    std::memcpy(CMSG_DATA(c), fds.data(), fds.size() * sizeof(int));
  }
  ASSERT_EQ(sendmsg(sock, &msg, MSG_NOSIGNAL),
            static_cast<ssize_t>(bytes.size()));
}

std::string Header(uint32_t magic, uint32_t payload, uint32_t fds) {
  const uint32_t fields[3] = {magic, payload, fds};
  return std::string(reinterpret_cast<const char*>(fields), sizeof(fields));
}

class FdPassingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fds_before_ = CountOpenFds();
    MakePair(SOCK_STREAM);
  }
  void TearDown() override {
    a_.Reset();
    b_.Reset();
    EXPECT_EQ(CountOpenFds(), fds_before_) << "descriptors leaked";
  }
  void MakePair(int type) {
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, type | SOCK_CLOEXEC, 0, sv), 0);
    a_.Reset(sv[0]);
    b_.Reset(sv[1]);
  }

  int fds_before_ = 0;
  UniqueFd a_, b_;
};

TEST_F(FdPassingTest, PayloadOnly) {
  ASSERT_TRUE(SendFds(a_.get(), "hello, lake", {}).ok());
  absl::StatusOr<ReceivedMessage> m = RecvFds(b_.get(), 1024, 8);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->payload, "hello, lake");
  EXPECT_TRUE(m->fds.empty());
}

TEST_F(FdPassingTest, EmptyMessage) {
  ASSERT_TRUE(SendFds(a_.get(), "", {}).ok());
  ASSERT_TRUE(SendFds(a_.get(), "next", {}).ok());
  absl::StatusOr<ReceivedMessage> m = RecvFds(b_.get(), 0, 0);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->payload, "");
  m = RecvFds(b_.get(), 16, 0);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->payload, "next");
}

TEST_F(FdPassingTest, DescriptorAndPayload) {
  UniqueFd memfd = MemfdWith("chunk bytes");
  const std::vector<uint8_t> payload = {1, 2, 3, 0, 255};
  ASSERT_TRUE(SendFds(a_.get(), payload, {memfd.get()}).ok());
  absl::StatusOr<ReceivedMessage> m = RecvFds(b_.get(), 64, 4);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->payload, std::string("\1\2\3\0\377", 5));
  ASSERT_EQ(m->fds.size(), 1u);
  EXPECT_NE(m->fds[0].get(), memfd.get());
  EXPECT_TRUE(SameFile(m->fds[0].get(), memfd.get()));
  EXPECT_EQ(ReadAll(m->fds[0].get()), "chunk bytes");
  EXPECT_EQ(fcntl(m->fds[0].get(), F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
}

// More descriptors than one sendmsg may carry (SCM_MAX_FD = 253), in order.
TEST_F(FdPassingTest, ManyDescriptorsInOrder) {
  constexpr int kCount = 600;
  std::vector<UniqueFd> files;
  std::vector<int> raw;
  for (int i = 0; i < kCount; ++i) {
    files.push_back(MemfdWith(absl::StrCat("file ", i)));
    raw.push_back(files.back().get());
  }
  std::thread sender(
      [&] { EXPECT_TRUE(SendFds(a_.get(), "six hundred", raw).ok()); });
  absl::StatusOr<ReceivedMessage> m = RecvFds(b_.get(), 64, kCount);
  sender.join();
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->payload, "six hundred");
  ASSERT_EQ(m->fds.size(), static_cast<size_t>(kCount));
  for (int i = 0; i < kCount; ++i) {
    ASSERT_TRUE(SameFile(m->fds[i].get(), raw[i])) << i;
    ASSERT_EQ(ReadAll(m->fds[i].get()), absl::StrCat("file ", i));
  }
}

TEST_F(FdPassingTest, SeqPacketSockets) {
  MakePair(SOCK_SEQPACKET);
  std::vector<UniqueFd> files;
  std::vector<int> raw;
  for (int i = 0; i < 300; ++i) {
    files.push_back(MemfdWith(absl::StrCat(i)));
    raw.push_back(files.back().get());
  }
  ASSERT_TRUE(SendFds(a_.get(), "first", raw).ok());
  ASSERT_TRUE(SendFds(a_.get(), "second", {}).ok());
  absl::StatusOr<ReceivedMessage> m = RecvFds(b_.get(), 64, 300);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->payload, "first");
  ASSERT_EQ(m->fds.size(), 300u);
  EXPECT_EQ(ReadAll(m->fds[299].get()), "299");
  m = RecvFds(b_.get(), 64, 0);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->payload, "second");
}

// A payload bigger than the socket buffer arrives in many partial reads.
TEST_F(FdPassingTest, LargePayloadInPartialReads) {
  std::vector<uint8_t> payload(8 << 20);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = (i * 131) & 0xff;
  UniqueFd memfd = MemfdWith("x");
  std::thread sender(
      [&] { EXPECT_TRUE(SendFds(a_.get(), payload, {memfd.get()}).ok()); });
  absl::StatusOr<ReceivedMessage> m = RecvFds(b_.get(), payload.size(), 1);
  sender.join();
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->payload.size(), payload.size());
  EXPECT_EQ(0, std::memcmp(m->payload.data(), payload.data(), payload.size()));
  EXPECT_EQ(m->fds.size(), 1u);
}

// A message that trickles in one byte at a time is put together whole.
TEST_F(FdPassingTest, MessageArrivingByteByByte) {
  // Frame a message through one pair, then replay its bytes slowly.
  ASSERT_TRUE(SendFds(a_.get(), "slowly but surely", {}).ok());
  std::string frame(256, '\0');
  const ssize_t n = recv(b_.get(), frame.data(), frame.size(), MSG_DONTWAIT);
  ASSERT_GT(n, 0);
  frame.resize(n);
  std::thread sender([&] {
    for (char c : frame) {
      ASSERT_EQ(write(a_.get(), &c, 1), 1);
      absl::SleepFor(absl::Microseconds(200));
    }
  });
  absl::StatusOr<ReceivedMessage> m = RecvFds(b_.get(), 64, 0);
  sender.join();
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->payload, "slowly but surely");
}

TEST_F(FdPassingTest, NonBlockingSocketWaitsForTheWholeMessage) {
  ASSERT_EQ(fcntl(b_.get(), F_SETFL, fcntl(b_.get(), F_GETFL) | O_NONBLOCK), 0);
  std::thread sender([&] {
    absl::SleepFor(absl::Milliseconds(50));
    EXPECT_TRUE(SendFds(a_.get(), "late", {}).ok());
  });
  absl::StatusOr<ReceivedMessage> m = RecvFds(b_.get(), 64, 0);
  sender.join();
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->payload, "late");
}

TEST_F(FdPassingTest, ReceiveTimeoutIsDeadlineExceeded) {
  timeval tv{0, 50000};
  ASSERT_EQ(setsockopt(b_.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
  absl::StatusOr<ReceivedMessage> m = RecvFds(b_.get(), 64, 0);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kDeadlineExceeded)
      << m.status();
}

TEST_F(FdPassingTest, PeerClosedBeforeAMessage) {
  a_.Reset();
  absl::StatusOr<ReceivedMessage> m = RecvFds(b_.get(), 64, 0);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(m.status().message(), "peer closed the connection");
}

TEST_F(FdPassingTest, PeerClosedInTheHeader) {
  RawSend(a_.get(), Header(kFdFrameMagic, 108, 0).substr(0, 3));
  a_.Reset();
  absl::StatusOr<ReceivedMessage> m = RecvFds(b_.get(), 1024, 0);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(m.status().message()),
              HasSubstr("after 3 of the 12 header bytes"));
}

TEST_F(FdPassingTest, PeerClosedMidPayloadWithDescriptorsClosed) {
  UniqueFd memfd = MemfdWith("abc");
  RawSend(a_.get(), Header(kFdFrameMagic, 108, 1) + "abc", {memfd.get()});
  memfd.Reset();
  a_.Reset();
  absl::StatusOr<ReceivedMessage> m = RecvFds(b_.get(), 1024, 4);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(m.status().message(),
            "peer closed the connection after 15 of 120 bytes of a message");
}

TEST_F(FdPassingTest, GarbageIsRefused) {
  RawSend(a_.get(), "GET / HTTP/1.1\r\nHost: gmlake\r\n\r\n");
  absl::StatusOr<ReceivedMessage> m = RecvFds(b_.get(), 1024, 4);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(m.status().message()),
              HasSubstr("does not speak gmlake's descriptor protocol"));
}

TEST_F(FdPassingTest, OversizedLengthIsRefusedBeforeAllocating) {
  // 4 GiB announced: a receiver that believed it would allocate it (and
  // ASan would report the allocation).
  RawSend(a_.get(), Header(kFdFrameMagic, 0xFFFFFFF0u, 0));
  absl::StatusOr<ReceivedMessage> m = RecvFds(b_.get(), 1 << 20, 4);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(m.status().message()),
              HasSubstr("4294967280 payload bytes, more than the 1048576"));
}

// The receiver allows fewer descriptors than were sent: the kernel truncates
// (MSG_CTRUNC) or the header says too many; RecvFds fails and closes
// whatever did arrive.
TEST_F(FdPassingTest, TruncatedDescriptorsAreClosed) {
  const Memfds memfds(100);
  const std::vector<int>& raw = memfds.raw;
  const int open_with_files = CountOpenFds();
  struct Case {
    size_t max_fds;
    const char* error;
  };
  for (const Case& c :
       {Case{0, "(MSG_CTRUNC); the 0 that arrived"}, Case{2, "(MSG_CTRUNC)"},
        Case{99, "100 descriptors, more than the 99"}}) {
    ASSERT_TRUE(SendFds(a_.get(), "hundred", raw).ok());
    absl::StatusOr<ReceivedMessage> m = RecvFds(b_.get(), 64, c.max_fds);
    EXPECT_EQ(m.status().code(), absl::StatusCode::kResourceExhausted)
        << c.max_fds << ": " << m.status();
    EXPECT_THAT(std::string(m.status().message()), HasSubstr(c.error));
    EXPECT_EQ(CountOpenFds(), open_with_files) << "max_fds " << c.max_fds;
    // The stream is out of step now: start over on a fresh pair.
    MakePair(SOCK_STREAM);
  }
}

// A receiver at its descriptor limit gets MSG_CTRUNC too, though its buffer
// had room: the error names the limit and what to do, not the sender.
TEST_F(FdPassingTest, AReceiverOutOfDescriptorsIsToldSo) {
  const Memfds memfds(20);
  const std::vector<int>& raw = memfds.raw;
  const int open_with_files = CountOpenFds();
  ASSERT_TRUE(SendFds(a_.get(), "twenty", raw).ok());
  rlimit saved;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit low = saved;
  low.rlim_cur = static_cast<rlim_t>(open_with_files + 5);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  absl::StatusOr<ReceivedMessage> m = RecvFds(b_.get(), 64, 64);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kResourceExhausted)
      << m.status();
  EXPECT_THAT(std::string(m.status().message()),
              HasSubstr("out of file descriptors"));
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("RLIMIT_NOFILE"));
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("ulimit -n"));
  EXPECT_EQ(CountOpenFds(), open_with_files);
  MakePair(SOCK_STREAM);  // out of step
}

// More groups than allowed: the first group arrives, then the header says
// too many; nothing stays open here.
TEST_F(FdPassingTest, TooManyDescriptorsOverSeveralGroupsAreClosed) {
  const Memfds memfds(400);
  const std::vector<int>& raw = memfds.raw;
  const int open_with_files = CountOpenFds();
  std::thread sender([&] { SendFds(a_.get(), "", raw).IgnoreError(); });
  absl::StatusOr<ReceivedMessage> m = RecvFds(b_.get(), 64, 300);
  sender.join();
  EXPECT_EQ(m.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(m.status().message()),
              HasSubstr("400 descriptors, more than the 300"));
  EXPECT_EQ(CountOpenFds(), open_with_files);
}

TEST_F(FdPassingTest, DescriptorCountMismatchIsDataLossAndClosed) {
  UniqueFd memfd = MemfdWith("x");
  const int open_with_file = CountOpenFds();
  RawSend(a_.get(), Header(kFdFrameMagic, 0, 2), {memfd.get()});
  absl::StatusOr<ReceivedMessage> m = RecvFds(b_.get(), 64, 4);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kDataLoss) << m.status();
  EXPECT_EQ(CountOpenFds(), open_with_file);
}

TEST_F(FdPassingTest, SendingABadDescriptorSendsNothing) {
  UniqueFd memfd = MemfdWith("x");
  absl::Status s = SendFds(a_.get(), "x", {memfd.get(), 12345});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("descriptor 12345"));
  char c;
  EXPECT_EQ(recv(b_.get(), &c, 1, MSG_DONTWAIT), -1);
  EXPECT_EQ(errno, EAGAIN);
}

TEST_F(FdPassingTest, SendingToAClosedPeerIsUnavailable) {
  b_.Reset();
  // No SIGPIPE: the test would die of it.
  absl::Status s = SendFds(a_.get(), "anyone?", {});
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
}

// The header's format is this file's alone: a receiver that must not wait
// asks PeekFrame whether a whole message is there.
TEST_F(FdPassingTest, PeekFrameSaysWhenAWholeMessageIsQueued) {
  auto peek = [&] { return PeekFrame(b_.get(), 1024); };
  EXPECT_EQ(*peek(), FrameQueued::kNothing);
  // Header, then part of the payload, then the rest.
  const std::string header = Header(kFdFrameMagic, 10, 0);
  uint8_t raw[kFdFrameHeaderSize];
  std::memcpy(raw, header.data(), sizeof(raw));
  const FrameHeader h = DecodeFrameHeader(raw);
  EXPECT_TRUE(h.magic_ok());
  EXPECT_EQ(h.payload_bytes, 10u);
  EXPECT_EQ(h.wire_bytes(), kFdFrameHeaderSize + 10);
  RawSend(a_.get(), header.substr(0, 5));
  EXPECT_EQ(*peek(), FrameQueued::kPart);
  RawSend(a_.get(), header.substr(5) + "01234");
  EXPECT_EQ(*peek(), FrameQueued::kPart);
  RawSend(a_.get(), "56789");
  EXPECT_EQ(*peek(), FrameQueued::kWhole);
  absl::StatusOr<ReceivedMessage> m = RecvFds(b_.get(), 1024, 0);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->payload, "0123456789");
  EXPECT_EQ(*peek(), FrameQueued::kNothing);
  // Descriptor groups add a carrier byte each.
  EXPECT_EQ((FrameHeader{kFdFrameMagic, 3, 600}.wire_bytes()),
            kFdFrameHeaderSize + 2 + 3);
  // Headers RecvFds refuses at once are "whole": it reads and reports them.
  RawSend(a_.get(), Header(0x12345678, 10, 0));
  EXPECT_EQ(*peek(), FrameQueued::kWhole);
  EXPECT_EQ(RecvFds(b_.get(), 1024, 0).status().code(),
            absl::StatusCode::kDataLoss);
  RawSend(a_.get(), Header(kFdFrameMagic, 1 << 20, 0));
  EXPECT_EQ(*peek(), FrameQueued::kWhole);
  a_.Reset();
  // The bytes still queued come first; then the close.
  ASSERT_EQ(RecvFds(b_.get(), 1024, 0).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(*peek(), FrameQueued::kPeerClosed);
}

// The queue never blocks: with the socket full it keeps the rest, and the
// receiver gets every message whole and in order as it reads.
TEST_F(FdPassingTest, SendQueueNeverBlocksAndDeliversInOrder) {
  FrameSendQueue q;
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.oldest_queued(), absl::InfiniteFuture());
  constexpr int kMessages = 200;
  constexpr int kFdsInBig = 300;  // two groups
  const std::string big(64 << 10, 'x');
  for (int i = 0; i < kMessages; ++i) {
    std::vector<UniqueFd> fds;
    if (i % 50 == 7) {
      for (int f = 0; f < kFdsInBig; ++f) {
        fds.push_back(MemfdWith(absl::StrCat(i, ":", f)));
      }
    }
    ASSERT_TRUE(
        q.Push(i % 10 == 3 ? big : absl::StrCat("message ", i), std::move(fds))
            .ok());
  }
  const absl::Time queued = q.oldest_queued();
  EXPECT_NE(queued, absl::InfiniteFuture());
  // Nobody reads yet: Flush returns at once with most still queued.
  ASSERT_TRUE(q.Flush(a_.get()).ok());
  EXPECT_FALSE(q.empty());
  EXPECT_GT(q.bytes(), 0u);
  int got = 0;
  while (got < kMessages) {
    absl::StatusOr<ReceivedMessage> m = RecvFds(b_.get(), 1 << 20, kFdsInBig);
    ASSERT_TRUE(m.ok()) << m.status() << " at message " << got;
    EXPECT_EQ(m->payload, got % 10 == 3 ? big : absl::StrCat("message ", got));
    if (got % 50 == 7) {
      ASSERT_EQ(m->fds.size(), static_cast<size_t>(kFdsInBig));
      EXPECT_EQ(ReadAll(m->fds[kFdsInBig - 1].get()),
                absl::StrCat(got, ":", kFdsInBig - 1));
    } else {
      EXPECT_TRUE(m->fds.empty());
    }
    ++got;
    ASSERT_TRUE(q.Flush(a_.get()).ok());
  }
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.bytes(), 0u);
  // The peer gone: Unavailable, nothing blocks; queued descriptors close
  // with the queue (checked by TearDown).
  std::vector<UniqueFd> one;
  one.push_back(MemfdWith("left"));
  ASSERT_TRUE(q.Push("late", std::move(one)).ok());
  b_.Reset();
  EXPECT_EQ(q.Flush(a_.get()).code(), absl::StatusCode::kUnavailable);
}

TEST_F(FdPassingTest, PeerCredentialsOfASocketPair) {
  absl::StatusOr<PeerCredentials> c = GetPeerCredentials(b_.get());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->pid, getpid());
  EXPECT_EQ(c->uid, getuid());
  EXPECT_EQ(c->gid, getgid());
  int pipes[2];
  ASSERT_EQ(pipe2(pipes, O_CLOEXEC), 0);
  UniqueFd r(pipes[0]), w(pipes[1]);
  EXPECT_FALSE(GetPeerCredentials(r.get()).ok());
}

// --- Listening and connecting
// ---------------------------------------------------

class UnixSocketTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gml.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/fd.sock";
  }
  void TearDown() override {
    unlink(path_.c_str());
    unlink((dir_ + "/plain").c_str());
    rmdir(dir_.c_str());
  }
  std::string dir_, path_;
};

TEST_F(UnixSocketTest, ListenConnectAcceptAndPass) {
  absl::StatusOr<UniqueFd> listener = ListenUnix(path_, 0660);
  ASSERT_TRUE(listener.ok()) << listener.status();
  struct stat st {};
  ASSERT_EQ(stat(path_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  absl::StatusOr<UniqueFd> client = ConnectUnix(path_);
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<UniqueFd> server = AcceptUnix(listener->get());
  ASSERT_TRUE(server.ok()) << server.status();
  UniqueFd memfd = MemfdWith("over the wire");
  ASSERT_TRUE(SendFds(server->get(), "lease", {memfd.get()}).ok());
  absl::StatusOr<ReceivedMessage> m = RecvFds(client->get(), 64, 1);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(ReadAll(m->fds.at(0).get()), "over the wire");
  absl::StatusOr<PeerCredentials> c = GetPeerCredentials(server->get());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->pid, getpid());
}

TEST_F(UnixSocketTest, StaleSocketIsReplacedLiveOneIsNot) {
  {
    // A socket file left behind by a listener that is gone.
    absl::StatusOr<UniqueFd> dead = ListenUnix(path_);
    ASSERT_TRUE(dead.ok());
  }
  absl::StatusOr<UniqueFd> listener = ListenUnix(path_);
  ASSERT_TRUE(listener.ok()) << listener.status();
  absl::StatusOr<UniqueFd> second = ListenUnix(path_);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(second.status().message()),
              HasSubstr("already listening"));
  // The live listener still works.
  EXPECT_TRUE(ConnectUnix(path_).ok());
}

TEST_F(UnixSocketTest, PlainFileIsNotRemoved) {
  const std::string plain = dir_ + "/plain";
  UniqueFd f(open(plain.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600));
  ASSERT_TRUE(f.valid());
  absl::StatusOr<UniqueFd> l = ListenUnix(plain);
  EXPECT_EQ(l.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(access(plain.c_str(), F_OK), 0);
}

TEST_F(UnixSocketTest, ClearErrors) {
  absl::StatusOr<UniqueFd> c = ConnectUnix(path_);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(c.status().message(),
            absl::StrCat("cannot connect to gmlaked at ", path_,
                         ": No such file or directory; is gmlaked running?"));
  const std::string long_path = "/tmp/" + std::string(120, 'x');
  for (absl::Status s :
       {ConnectUnix(long_path).status(), ListenUnix(long_path).status()}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.message()), HasSubstr("1 to 107"));
  }
  absl::StatusOr<UniqueFd> l = ListenUnix(dir_ + "/no/such/dir.sock");
  EXPECT_EQ(l.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(l.status().message()),
              HasSubstr("does its directory exist?"));
}

// The credentials of a connection from another program: this test binary,
// exec'd again, runs only ConnectAndWaitChild below.
TEST_F(UnixSocketTest, PeerCredentialsOfAnotherProcess) {
  absl::StatusOr<UniqueFd> listener = ListenUnix(path_);
  ASSERT_TRUE(listener.ok()) << listener.status();
  const std::string self = "/proc/self/exe";
  const std::string filter =
      "--gtest_filter=UnixSocketChild.ConnectAndWaitChild";
  const std::string env_path = "GMLAKE_FD_TEST_CONNECT=" + path_;
  // The child must not write this test's XML report or shard files.
  std::vector<std::string> env_strings = {env_path};
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    if (absl::StartsWith(kv, "XML_OUTPUT_FILE=") ||
        absl::StartsWith(kv, "GTEST_") || absl::StartsWith(kv, "TEST_")) {
      continue;
    }
    env_strings.push_back(kv);
  }
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<char*> argv = {const_cast<char*>(self.c_str()),
                             const_cast<char*>(filter.c_str()), nullptr};
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    execve(self.c_str(), argv.data(), envp.data());
    _exit(127);
  }
  absl::StatusOr<UniqueFd> conn = AcceptUnix(listener->get());
  ASSERT_TRUE(conn.ok()) << conn.status();
  absl::StatusOr<PeerCredentials> c = GetPeerCredentials(conn->get());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->pid, child);
  EXPECT_NE(c->pid, getpid());
  EXPECT_EQ(c->uid, getuid());
  EXPECT_EQ(c->gid, getgid());
  ASSERT_TRUE(SendFds(conn->get(), "bye", {}).ok());
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST(UnixSocketChild, ConnectAndWaitChild) {
  const char* path = std::getenv("GMLAKE_FD_TEST_CONNECT");
  if (path == nullptr) GTEST_SKIP() << "only run as the child of a test";
  absl::StatusOr<UniqueFd> c = ConnectUnix(path);
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<ReceivedMessage> m = RecvFds(c->get(), 16, 0);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->payload, "bye");
}

}  // namespace
}  // namespace gmlake
