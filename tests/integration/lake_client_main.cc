// Copyright 2026 The GMLake Authors.
//
// lake_client: a real client process of gmlaked for the integration tests.
// It connects with DaemonChunkSource (optionally after dropping to another
// uid, so SO_PEERCRED sees that uid), prints "ready <session>" (or
// "err <code> <message>" and exits 1), then serves one command per line on
// stdin, answering one line each on stdout:
//
//   acquire D N        lease N chunks on device D          -> ok <held>
//   fill D B           write byte B over every held chunk  -> ok
//   check D B          every byte of every held chunk is B -> ok | err
//   return D N         return the last N chunks acquired   -> ok <held>
//   held D             -> ok <held> <idle>
//   report D U C       NoteUsage(D, U, C) and ReportUsage  -> ok
//   release_idle D     -> ok <bytes>
//   pressure           -> ok <requests> <bytes returned>
//   status             daemon_status()                     -> ok | err
//   quit               destroy the source and exit 0
//
// With --reclaim, the ReclaimHandler returns held chunks (last acquired
// first) when gmlaked asks for memory.
//
// With --allocator, a real Allocator runs over the source (it answers
// pressure from its cache and reports its usage, as in a training
// process), and these commands drive it:
//
//   malloc D BYTES     allocate and keep a block            -> ok <index>
//   free I             free block I                         -> ok
//   usage D            -> ok <allocated> <reserved> <reports sent>

#include <grp.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "client/allocator.h"
#include "client/daemon_chunk_source.h"
#include "common/mutex.h"
#include "common/vmm.h"

ABSL_FLAG(std::string, socket, "", "gmlaked's gRPC socket.");
ABSL_FLAG(std::string, name, "lake_client", "Session name.");
ABSL_FLAG(int, uid, -1, "Drop to this uid (and gid) before connecting.");
ABSL_FLAG(uint64_t, idle_watermark, 0, "Idle watermark in bytes.");
ABSL_FLAG(uint64_t, lease_ahead, 0,
          "DaemonSourceOptions.lease_ahead_max (0: a lease per request, as "
          "the tests driving this client count them).");
ABSL_FLAG(uint32_t, protocol_version, 0, "Protocol version to speak.");
ABSL_FLAG(bool, make_chunks, false,
          "DaemonSourceOptions.make_chunks: make new chunks here in the "
          "capacity gmlaked leases (off: import gmlaked's, which the tests "
          "of its books follow).");
ABSL_FLAG(bool, reclaim, false, "Return held chunks under pressure.");
ABSL_FLAG(absl::Duration, reconnect_wait, absl::Seconds(30),
          "How long an acquire waits for a gmlaked that is gone to be back.");
ABSL_FLAG(bool, allocator, false,
          "Run an Allocator over the source (malloc, free, usage).");

namespace gmlake {
namespace {

Mutex mu;
std::vector<std::vector<ChunkHandle>> held ABSL_GUARDED_BY(mu);
// With --allocator: the allocator and its live blocks (0: freed).
std::unique_ptr<Allocator> allocator;
std::vector<DevicePtr> blocks;

void Answer(const absl::StatusOr<std::string>& r) {
  if (r.ok()) {
    std::cout << (r->empty() ? "ok" : "ok " + *r) << std::endl;
  } else {
    std::string msg(r.status().message());
    for (char& c : msg) {
      if (c == '\n') c = ' ';
    }
    std::cout << "err " << static_cast<int>(r.status().code()) << " " << msg
              << std::endl;
  }
}

// Maps every held chunk of `device` side by side, runs `fn` on the range,
// unmaps. Called with `mu` held, so the reclaim handler cannot return a
// chunk while it is mapped.
absl::Status WithMapped(
    DaemonChunkSource* src, int device,
    const std::function<absl::Status(DevicePtr, size_t)>& fn)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
  const std::vector<ChunkHandle>& hs = held[device];
  if (hs.empty()) return fn(0, 0);
  const size_t size = src->chunk_size(device);
  VmmBackend* b = src->backend();
  absl::StatusOr<VirtualRange> range =
      VirtualRange::Reserve(b, size * hs.size());
  if (!range.ok()) return range.status();
  std::vector<Mapping> maps;
  const int devs[] = {device};
  for (size_t i = 0; i < hs.size(); ++i) {
    absl::StatusOr<Mapping> m =
        Mapping::Map(b, range->base() + i * size, size, hs[i], devs);
    if (!m.ok()) return m.status();
    maps.push_back(*std::move(m));
  }
  return fn(range->base(), size * hs.size());
}

absl::StatusOr<std::string> Serve(DaemonChunkSource* src,
                                  const std::vector<std::string>& w) {
  auto arg = [&](size_t i) -> int64_t {
    int64_t v = -1;
    // A word that is no number reads as -1, which every command refuses.
    if (i >= w.size() || !absl::SimpleAtoi(w[i], &v)) return int64_t{-1};
    return v;
  };
  const std::string& cmd = w[0];
  const int device = static_cast<int>(arg(1));
  if (cmd == "free") {
    const int64_t i = arg(1);
    if (allocator == nullptr || i < 0 ||
        i >= static_cast<int64_t>(blocks.size())) {
      return absl::InvalidArgumentError("no such block (--allocator?)");
    }
    absl::Status s = allocator->Free(std::exchange(blocks[i], 0));
    if (!s.ok()) return s;
    return std::string();
  }
  size_t devices = 0;
  {
    MutexLock l(&mu);
    devices = held.size();
  }
  if (cmd != "pressure" && cmd != "status" &&
      (device < 0 || device >= static_cast<int>(devices))) {
    return absl::InvalidArgumentError("bad device");
  }
  if (cmd == "malloc" || cmd == "usage") {
    if (allocator == nullptr) {
      return absl::FailedPreconditionError("start with --allocator");
    }
    if (cmd == "usage") {
      const AllocatorStats st = allocator->stats(device);
      return absl::StrCat(st.allocated_bytes.current, " ",
                          st.reserved_bytes.current, " ", src->usage_reports());
    }
    absl::StatusOr<DevicePtr> p =
        allocator->Malloc(static_cast<size_t>(arg(2)), device, 0);
    if (!p.ok()) return p.status();
    blocks.push_back(*p);
    return absl::StrCat(blocks.size() - 1);
  }
  if (cmd == "acquire") {
    absl::StatusOr<std::vector<ChunkHandle>> got =
        src->Acquire(device, static_cast<size_t>(arg(2)));
    if (!got.ok()) return got.status();
    MutexLock l(&mu);
    held[device].insert(held[device].end(), got->begin(), got->end());
    return absl::StrCat(held[device].size());
  }
  if (cmd == "fill" || cmd == "check") {
    const uint8_t value = static_cast<uint8_t>(arg(2));
    MutexLock l(&mu);
    absl::Status s = WithMapped(
        src, device, [&](DevicePtr base, size_t bytes) -> absl::Status {
          if (bytes == 0) return absl::OkStatus();
          if (cmd == "fill") return src->backend()->Fill(base, value, bytes);
          std::vector<uint8_t> buf(bytes);
          absl::Status c = src->backend()->CopyToHost(buf.data(), base, bytes);
          if (!c.ok()) return c;
          for (size_t i = 0; i < bytes; ++i) {
            if (buf[i] != value) {
              return absl::DataLossError(absl::StrCat(
                  "byte ", i, " of ", bytes, " is ", buf[i], ", not ", value));
            }
          }
          return absl::OkStatus();
        });
    if (!s.ok()) return s;
    return std::string();
  }
  if (cmd == "return") {
    std::vector<ChunkHandle> give;
    {
      MutexLock l(&mu);
      auto& hs = held[device];
      const size_t n = std::min<size_t>(static_cast<size_t>(arg(2)), hs.size());
      give.assign(hs.end() - n, hs.end());
      hs.resize(hs.size() - n);
    }
    src->Return(device, give);
    MutexLock l(&mu);
    return absl::StrCat(held[device].size());
  }
  if (cmd == "held") {
    MutexLock l(&mu);
    return absl::StrCat(held[device].size(), " ", src->idle_chunks(device));
  }
  if (cmd == "report") {
    src->NoteUsage(device, static_cast<uint64_t>(arg(2)),
                   static_cast<uint64_t>(arg(3)));
    absl::Status s = src->ReportUsage();
    if (!s.ok()) return s;
    return std::string();
  }
  if (cmd == "release_idle") return absl::StrCat(src->ReleaseKept(device));
  if (cmd == "pressure") {
    return absl::StrCat(src->pressure_requests(), " ",
                        src->pressure_bytes_returned());
  }
  if (cmd == "status") {
    absl::Status s = src->daemon_status();
    if (!s.ok()) return s;
    return std::string();
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown command ", cmd));
}

int Main() {
  const int uid = absl::GetFlag(FLAGS_uid);
  if (uid >= 0) {
    // Connect as that uid: gmlaked sees it through SO_PEERCRED.
    if (::setgroups(0, nullptr) != 0 || ::setgid(uid) != 0 ||
        ::setuid(uid) != 0) {
      Answer(
          absl::PermissionDeniedError(absl::StrCat("cannot become uid ", uid)));
      return 1;
    }
  }
  DaemonSourceOptions o;
  o.socket_path = absl::GetFlag(FLAGS_socket);
  o.name = absl::GetFlag(FLAGS_name);
  o.idle_watermark_bytes = absl::GetFlag(FLAGS_idle_watermark);
  o.protocol_version = absl::GetFlag(FLAGS_protocol_version);
  o.reconnect_wait = absl::GetFlag(FLAGS_reconnect_wait);
  o.lease_ahead_max = absl::GetFlag(FLAGS_lease_ahead);
  o.make_chunks = absl::GetFlag(FLAGS_make_chunks);
  absl::StatusOr<std::unique_ptr<DaemonChunkSource>> src =
      DaemonChunkSource::Connect(o);
  if (!src.ok()) {
    Answer(src.status());
    return 1;
  }
  {
    MutexLock l(&mu);
    held.resize((*src)->backend()->device_count());
  }
  if (absl::GetFlag(FLAGS_allocator)) {
    AllocatorOptions ao;
    ao.log = false;
    allocator = std::make_unique<Allocator>(src->get(), ao);
  }
  if (absl::GetFlag(FLAGS_reclaim)) {
    DaemonChunkSource* s = src->get();
    s->SetReclaimHandler([s](int device, uint64_t bytes) -> uint64_t {
      std::vector<ChunkHandle> give;
      {
        MutexLock l(&mu);
        auto& hs = held[device];
        const size_t size = s->chunk_size(device);
        while (!hs.empty() && give.size() * size < bytes) {
          give.push_back(hs.back());
          hs.pop_back();
        }
      }
      s->Return(device, give);
      return give.size() * s->chunk_size(device);
    });
  }
  std::cout << "ready " << (*src)->session_id() << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::vector<std::string> words =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (words.empty()) continue;
    if (words[0] == "quit") {
      if (allocator != nullptr) {
        for (DevicePtr p : blocks) {
          if (p != 0) allocator->Free(p).IgnoreError();
        }
        allocator.reset();  // returns its chunks to the source
      }
      {
        MutexLock l(&mu);
        for (size_t d = 0; d < held.size(); ++d) {
          (*src)->Return(static_cast<int>(d), held[d]);
          held[d].clear();
        }
      }
      src->reset();
      Answer(std::string());
      return 0;
    }
    Answer(Serve(src->get(), words));
  }
  return 0;
}

}  // namespace
}  // namespace gmlake

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return gmlake::Main();
}
