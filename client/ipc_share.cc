// Copyright 2026 The GMLake Authors.

#include "client/ipc_share.h"

#include <stdlib.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdio>
#include <random>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/fd_passing.h"

namespace gmlake {
namespace {

constexpr size_t kMaxTokenBytes = 64;
constexpr size_t kMaxReplyBytes = 1 << 20;
constexpr size_t kMaxChunks = kMaxFdsPerMessage;

std::string RandomToken() {
  std::random_device rd;
  return absl::StrCat(absl::Hex(uint64_t{rd()} << 32 | rd(), absl::kZeroPad16),
                      absl::Hex(uint64_t{rd()} << 32 | rd(), absl::kZeroPad16));
}

// The reply: "ok <offset> <size> <chunk size>..." with the descriptors, or
// "error <message>" without.
std::string OkReply(const DeviceAllocator::Exported& e) {
  std::string out = absl::StrCat("ok ", e.offset, " ", e.size);
  for (size_t s : e.chunk_sizes) absl::StrAppend(&out, " ", s);
  return out;
}

// The socket and its directory go when the process exits normally.
std::string* socket_to_remove = nullptr;
std::string* dir_to_remove = nullptr;
void RemoveSocket() {
  if (socket_to_remove != nullptr) unlink(socket_to_remove->c_str());
  if (dir_to_remove != nullptr) rmdir(dir_to_remove->c_str());
}

}  // namespace

IpcServer& IpcServer::Get() {
  static IpcServer* server = new IpcServer();  // lives as long as the process
  return *server;
}

absl::Status IpcServer::StartLocked() {
  if (!path_.empty()) return absl::OkStatus();
  const char* tmp = std::getenv("TMPDIR");
  std::string dir =
      absl::StrCat(tmp != nullptr && *tmp ? tmp : "/tmp", "/gmlake-ipc-XXXXXX");
  if (mkdtemp(dir.data()) == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("gmlake: cannot make a directory for CUDA IPC (", dir,
                     "): set TMPDIR to a writable one"));
  }
  const std::string path = dir + "/s";
  absl::StatusOr<UniqueFd> listen = ListenUnix(path, 0600);
  if (!listen.ok()) {
    rmdir(dir.c_str());
    return listen.status();
  }
  const int fd = listen->Release();
  std::thread([this, fd] { Serve(fd); }).detach();
  dir_ = dir;
  path_ = path;
  socket_to_remove = new std::string(path);
  dir_to_remove = new std::string(dir);
  std::atexit(RemoveSocket);
  return absl::OkStatus();
}

absl::StatusOr<std::string> IpcServer::Share(
    DevicePtr ptr, int device, DeviceAllocator::Exported exported) {
  MutexLock lock(&mu_);
  if (absl::Status s = StartLocked(); !s.ok()) return s;
  const std::string token = RandomToken();
  by_token_[token] = Entry{ptr, device, std::move(exported)};
  count_.store(static_cast<int>(by_token_.size()), std::memory_order_relaxed);
  return absl::StrCat(kIpcHandlePrefix, path_, ":", token);
}

void IpcServer::Forget(DevicePtr ptr) {
  MutexLock lock(&mu_);
  for (auto it = by_token_.begin(); it != by_token_.end();) {
    it = it->second.ptr == ptr ? by_token_.erase(it) : std::next(it);
  }
  count_.store(static_cast<int>(by_token_.size()), std::memory_order_relaxed);
}

void IpcServer::Serve(int listen_fd) {
  for (;;) {
    absl::StatusOr<UniqueFd> conn = AcceptUnix(listen_fd);
    if (!conn.ok()) {
      std::fprintf(stderr, "gmlake: CUDA IPC server stops: %s\n",
                   std::string(conn.status().message()).c_str());
      return;
    }
    Answer(conn->get());
  }
}

void IpcServer::Answer(int conn) {
  // One connection at a time: a peer that sends nothing holds it 10 s.
  const timeval timeout{10, 0};
  setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(conn, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  absl::StatusOr<PeerCredentials> peer = GetPeerCredentials(conn);
  if (!peer.ok() || peer->uid != getuid()) {
    SendFds(conn, absl::string_view("error another user's process"), {})
        .IgnoreError();
    return;
  }
  absl::StatusOr<ReceivedMessage> ask = RecvFds(conn, kMaxTokenBytes, 0);
  if (!ask.ok()) return;
  std::string reply;
  std::vector<int> fds;
  {
    MutexLock lock(&mu_);
    auto it = by_token_.find(ask->payload);
    if (it == by_token_.end()) {
      reply = "error the allocation is no longer shared (freed)";
    } else {
      reply = OkReply(it->second.exported);
      for (const UniqueFd& fd : it->second.exported.fds)
        fds.push_back(fd.get());
    }
    // Sent under the lock: a Forget meanwhile must not close them.
    SendFds(conn, reply, fds).IgnoreError();
  }
}

absl::StatusOr<std::unique_ptr<ImportedMemory>> ImportedMemory::Open(
    VmmBackend* backend, const std::string& handle, int device) {
  const absl::string_view prefix(kIpcHandlePrefix);
  const size_t colon = handle.rfind(':');
  if (!absl::StartsWith(handle, prefix) || colon == std::string::npos ||
      colon < prefix.size()) {
    return absl::InvalidArgumentError(
        "gmlake: not a gmlake CUDA IPC handle (GMLK1:<socket>:<token>)");
  }
  const std::string path = handle.substr(prefix.size(), colon - prefix.size());
  const std::string token = handle.substr(colon + 1);
  absl::StatusOr<UniqueFd> conn = ConnectUnix(path, "the sharing process");
  if (!conn.ok()) return conn.status();
  if (absl::Status s = SendFds(conn->get(), token, {}); !s.ok()) return s;
  absl::StatusOr<ReceivedMessage> reply =
      RecvFds(conn->get(), kMaxReplyBytes, kMaxChunks);
  if (!reply.ok()) return reply.status();
  std::vector<std::string> words = absl::StrSplit(reply->payload, ' ');
  if (words.empty() || words[0] != "ok") {
    return absl::FailedPreconditionError(
        absl::StrCat("gmlake: the sharing process says: ", reply->payload));
  }
  size_t offset = 0, size = 0;
  std::vector<size_t> sizes;
  bool parsed = words.size() >= 4 && absl::SimpleAtoi(words[1], &offset) &&
                absl::SimpleAtoi(words[2], &size);
  for (size_t i = 3; parsed && i < words.size(); ++i) {
    size_t s = 0;
    parsed = absl::SimpleAtoi(words[i], &s) && s > 0;
    sizes.push_back(s);
  }
  size_t total = 0;
  for (size_t s : sizes) total += s;
  if (!parsed || sizes.size() != reply->fds.size() || offset + size > total) {
    return absl::DataLossError(absl::StrCat(
        "gmlake: a CUDA IPC reply that does not add up: ", reply->payload));
  }
  std::unique_ptr<ImportedMemory> m(new ImportedMemory(backend));
  absl::StatusOr<VirtualRange> range =
      VirtualRange::Reserve(backend, total, 0, device);
  if (!range.ok()) return range.status();
  m->range_ = *std::move(range);
  DevicePtr at = m->range_.base();
  const int devices[] = {device};
  for (size_t i = 0; i < sizes.size(); ++i) {
    absl::StatusOr<ChunkHandle> chunk =
        backend->ImportChunk(reply->fds[i].get(), device, sizes[i]);
    if (!chunk.ok()) return chunk.status();
    m->chunks_.push_back(*chunk);
    absl::StatusOr<Mapping> mapping =
        Mapping::Map(backend, at, sizes[i], *chunk, devices);
    if (!mapping.ok()) return mapping.status();
    m->mappings_.push_back(*std::move(mapping));
    at += sizes[i];
  }
  m->ptr_ = m->range_.base() + offset;
  m->size_ = size;
  return m;
}

ImportedMemory::~ImportedMemory() {
  mappings_.clear();  // unmaps, before the chunks go
  for (ChunkHandle c : chunks_) backend_->ReleaseChunk(c).IgnoreError();
}

}  // namespace gmlake
