// Copyright 2026 The GMLake Authors.
//
// vmm_peer: the second process of the conformance suite's cross-process
// test. It imports chunks another process exported, maps them, and reads and
// writes them on command (the protocol is in vmm_peer_protocol.h).
//
// Usage:
//   vmm_peer --backend=<kind> --fd=<n>        commands on inherited socket n
//   vmm_peer --backend=<kind> --connect=<p>   commands on Unix socket path p
// <kind> is a CreateBackend kind: host, cuda, accounting or auto.
//
// Exit status: 0 after "exit", 2 for bad usage, 4 when the commanding
// process went away or sent something unreadable. Failed commands are
// reported in the reply ("error ..."), and on stderr.

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/fd_passing.h"
#include "common/unique_fd.h"
#include "common/vmm.h"
#include "tests/vmm_peer_protocol.h"

namespace gmlake {
namespace {

class Peer {
 public:
  explicit Peer(std::unique_ptr<VmmBackend> backend)
      : backend_(std::move(backend)) {}

  // Runs one command; the reply's text.
  std::string Handle(const std::vector<std::string>& words,
                     std::vector<UniqueFd> fds) {
    absl::StatusOr<std::string> r = Dispatch(words, std::move(fds));
    if (r.ok()) return absl::StrCat("ok", r->empty() ? "" : " ", *r);
    return absl::StrCat("error ", r.status().ToString());
  }

  // Unmaps, frees and releases what the imports made.
  absl::Status Cleanup() {
    absl::Status status;
    if (view_size_ > 0) {
      status.Update(backend_->Unmap(view_, view_size_));
      status.Update(backend_->FreeRange(view_, view_size_));
      view_size_ = 0;
    }
    for (ChunkHandle c : chunks_) status.Update(backend_->ReleaseChunk(c));
    chunks_.clear();
    return status;
  }

 private:
  absl::StatusOr<std::string> Dispatch(const std::vector<std::string>& words,
                                       std::vector<UniqueFd> fds) {
    const std::string& cmd = words.empty() ? "" : words[0];
    uint64_t a = 0, b = 0, c = 0;
    if (cmd == "import" && words.size() == 3 &&
        absl::SimpleAtoi(words[1], &a) && absl::SimpleAtoi(words[2], &b)) {
      return Import(static_cast<int>(a), b, std::move(fds));
    }
    if ((cmd == "check" || cmd == "write") && words.size() == 4 &&
        absl::SimpleAtoi(words[1], &a) && absl::SimpleAtoi(words[2], &b) &&
        absl::SimpleAtoi(words[3], &c)) {
      if (b > view_size_ || c > view_size_ - b) {
        return absl::OutOfRangeError(absl::StrCat("[", b, ", +", c,
                                                  ") is outside the view of ",
                                                  view_size_, " bytes"));
      }
      if (cmd == "write") {
        const std::vector<uint8_t> data = Pattern(a, b, c);
        absl::Status s = backend_->CopyFromHost(view_ + b, data.data(), c);
        if (!s.ok()) return s;
        return std::string();
      }
      std::vector<uint8_t> data(c);
      absl::Status s = backend_->CopyToHost(data.data(), view_ + b, c);
      if (!s.ok()) return s;
      std::string mismatch = PatternMismatch(data, a, b);
      if (!mismatch.empty()) return absl::DataLossError(mismatch);
      return std::string();
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown or malformed command '", absl::StrJoin(words, " "), "'"));
  }

  absl::StatusOr<std::string> Import(int device, size_t chunk_size,
                                     std::vector<UniqueFd> fds) {
    if (view_size_ > 0 || fds.empty()) {
      return absl::FailedPreconditionError(
          "import needs descriptors, once per peer");
    }
    for (const UniqueFd& fd : fds) {
      absl::StatusOr<ChunkHandle> c =
          backend_->ImportChunk(fd.get(), device, chunk_size);
      if (!c.ok()) return c.status();
      chunks_.push_back(*c);
    }
    // The imported chunks stay valid without the descriptors.
    fds.clear();
    const size_t total = chunks_.size() * chunk_size;
    absl::StatusOr<DevicePtr> view = backend_->ReserveRange(total);
    if (!view.ok()) return view.status();
    view_ = *view;
    for (size_t i = 0; i < chunks_.size(); ++i) {
      absl::Status s =
          backend_->Map(view_ + i * chunk_size, chunk_size, chunks_[i]);
      if (!s.ok()) {
        if (i > 0) backend_->Unmap(view_, i * chunk_size).IgnoreError();
        backend_->FreeRange(view_, total).IgnoreError();
        return s;
      }
    }
    view_size_ = total;
    absl::Status s = backend_->SetAccess(view_, total, {device});
    if (!s.ok()) return s;
    return absl::StrCat(chunks_.size());
  }

  std::unique_ptr<VmmBackend> backend_;
  std::vector<ChunkHandle> chunks_;
  DevicePtr view_ = 0;
  size_t view_size_ = 0;
};

int Usage(const char* why) {
  std::fprintf(stderr,
               "vmm_peer: %s\nusage: vmm_peer --backend=<kind> "
               "(--fd=<n> | --connect=<socket path>)\n",
               why);
  return 2;
}

int Main(int argc, char** argv) {
  std::string kind;
  std::string connect;
  int fd = -1;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (absl::ConsumePrefix(&arg, "--backend=")) {
      kind = std::string(arg);
    } else if (absl::ConsumePrefix(&arg, "--fd=")) {
      if (!absl::SimpleAtoi(arg, &fd) || fd < 0) {
        return Usage("--fd needs a descriptor number");
      }
    } else if (absl::ConsumePrefix(&arg, "--connect=")) {
      connect = std::string(arg);
    } else {
      return Usage(absl::StrCat("unknown argument '", argv[i], "'").c_str());
    }
  }
  if (kind.empty()) return Usage("--backend is required");
  if ((fd < 0) == connect.empty()) {
    return Usage("give exactly one of --fd and --connect");
  }
  UniqueFd sock;
  if (!connect.empty()) {
    absl::StatusOr<UniqueFd> s = ConnectUnix(connect, "the test");
    if (!s.ok()) {
      std::fprintf(stderr, "vmm_peer: %s\n", s.status().ToString().c_str());
      return 4;
    }
    sock = *std::move(s);
  } else {
    sock.Reset(fd);
  }

  BackendOptions options;
  options.kind = kind;
  absl::StatusOr<std::unique_ptr<VmmBackend>> backend = CreateBackend(options);
  std::unique_ptr<Peer> peer;
  if (backend.ok()) peer = std::make_unique<Peer>(*std::move(backend));

  while (true) {
    absl::StatusOr<ReceivedMessage> msg =
        RecvFds(sock.get(), kPeerMaxPayload, kPeerMaxFds);
    if (!msg.ok()) {
      std::fprintf(stderr, "vmm_peer: %s\n", msg.status().ToString().c_str());
      return 4;
    }
    const std::vector<std::string> words =
        absl::StrSplit(msg->payload, ' ', absl::SkipEmpty());
    std::string reply;
    const bool exit = !words.empty() && words[0] == "exit";
    if (peer == nullptr) {
      reply = absl::StrCat("error cannot create the ", kind,
                           " backend: ", backend.status().ToString());
    } else if (exit) {
      absl::Status s = peer->Cleanup();
      reply = s.ok() ? "ok" : absl::StrCat("error ", s.ToString());
    } else {
      reply = peer->Handle(words, std::move(msg->fds));
    }
    if (absl::StartsWith(reply, "error")) {
      std::fprintf(stderr, "vmm_peer: %s -> %s\n", msg->payload.c_str(),
                   reply.c_str());
    }
    if (absl::Status s = SendFds(sock.get(), reply, {}); !s.ok()) {
      std::fprintf(stderr, "vmm_peer: %s\n", s.ToString().c_str());
      return 4;
    }
    if (exit) return 0;
  }
}

}  // namespace
}  // namespace gmlake

int main(int argc, char** argv) { return gmlake::Main(argc, argv); }
