// Copyright 2026 The GMLake Authors.
//
// Fuzzes the descriptor-socket frame parser (RecvFds, common/fd_passing.h):
// arbitrary bytes, with or without descriptors riding on them, arrive on a
// real socket pair (stream or seqpacket), and RecvFds reads messages until
// it reports an error. It must never crash, never return more than its
// limits, and never leak a descriptor, whatever arrives.
//
// Input: one mode byte (limits, descriptors attached, socket type, how the
// bytes are cut into writes), then the bytes the peer sends.

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "common/fd_passing.h"
#include "common/unique_fd.h"
#include "tests/fuzz/fuzz_input.h"

namespace gmlake {
namespace fuzz {
namespace {

// Sends `bytes` with `fds` attached to the first byte; false once the
// socket is full (the rest is dropped: the reader sees a cut message).
bool SendPiece(int sock, const std::string& bytes,
               const std::vector<int>& fds) {
  if (bytes.empty()) return true;
  iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  std::vector<uint64_t> control;
  if (!fds.empty()) {
    const size_t len = CMSG_SPACE(fds.size() * sizeof(int));
    control.resize((len + 7) / 8);
    msg.msg_control = control.data();
    msg.msg_controllen = len;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(fds.size() * sizeof(int));
    std::memcpy(CMSG_DATA(c), fds.data(), fds.size() * sizeof(int));
  }
  return ::sendmsg(sock, &msg, MSG_NOSIGNAL | MSG_DONTWAIT) ==
         static_cast<ssize_t>(bytes.size());
}

void Run(FuzzInput* in) {
  const int dev_null = DevNull();
  const uint8_t mode = in->Byte();
  static constexpr size_t kPayloadLimits[] = {0, 16, 4096, 65536};
  static constexpr size_t kFdLimits[] = {0, 1, 3, kMaxFdsPerGroup};
  const size_t max_payload = kPayloadLimits[mode & 3];
  const size_t max_fds = kFdLimits[(mode >> 2) & 3];
  const int attach = (mode >> 4) & 3;
  const bool seqpacket = (mode & 0x40) != 0;
  const size_t piece = (mode & 0x80) != 0 ? 5 : 4096;
  const std::string stream = in->Rest();

  int sv[2];
  FUZZ_CHECK(
      ::socketpair(AF_UNIX,
                   (seqpacket ? SOCK_SEQPACKET : SOCK_STREAM) | SOCK_CLOEXEC, 0,
                   sv) == 0,
      "socketpair: %s", std::strerror(errno));
  UniqueFd writer(sv[0]), reader(sv[1]);
  for (size_t at = 0; at < stream.size(); at += piece) {
    std::vector<int> fds;
    // Descriptors on the first piece, and on every fourth one after it.
    if (at % (4 * piece) == 0) fds.assign(attach, dev_null);
    if (!SendPiece(writer.get(), stream.substr(at, piece), fds)) break;
  }
  ::shutdown(writer.get(), SHUT_WR);
  for (int i = 0; i < 10000; ++i) {
    absl::StatusOr<ReceivedMessage> m =
        RecvFds(reader.get(), max_payload, max_fds);
    if (!m.ok()) {
      FUZZ_CHECK(!m.status().message().empty(), "an error without a message");
      break;
    }
    FUZZ_CHECK(m->payload.size() <= max_payload, "payload of %zu over %zu",
               m->payload.size(), max_payload);
    FUZZ_CHECK(m->fds.size() <= max_fds, "%zu descriptors over %zu",
               m->fds.size(), max_fds);
    for (const UniqueFd& fd : m->fds) FUZZ_CHECK(fd.valid(), "a bad fd");
  }
}

}  // namespace
}  // namespace fuzz
}  // namespace gmlake

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gmlake::fuzz::DevNull();
  const int before = gmlake::fuzz::OpenFdCount();
  gmlake::fuzz::FuzzInput in(data, size);
  gmlake::fuzz::Run(&in);
  const int after = gmlake::fuzz::OpenFdCount();
  FUZZ_CHECK(after == before, "%d descriptors open after the input, %d before",
             after, before);
  return 0;
}
