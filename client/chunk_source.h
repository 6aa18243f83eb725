// Copyright 2026 The GMLake Authors.
//
// ChunkSource: where the allocator gets physical chunks from.
//
// Two implementations: the embedded lake (embedded_lake.h), which creates
// chunks in this process through the VMM layer up to a capacity, and the
// daemon source (daemon_chunk_source.h), which leases chunks from gmlaked
// and imports their descriptors. The allocator cannot tell them apart.

#ifndef GMLAKE_CLIENT_CHUNK_SOURCE_H_
#define GMLAKE_CLIENT_CHUNK_SOURCE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/unique_fd.h"
#include "common/vmm.h"

namespace gmlake {

// A chunk and its size (a multiple of the source's chunk_size()).
struct SizedChunk {
  ChunkHandle handle = 0;
  uint64_t size = 0;
};

class ChunkSource {
 public:
  virtual ~ChunkSource() = default;

  // "embedded" or "daemon".
  virtual absl::string_view name() const = 0;
  // One line for start-up logs: which lake, where, capacity.
  virtual std::string Describe() const = 0;
  // The backend the chunks live in; the allocator maps them through it.
  virtual VmmBackend* backend() = 0;
  // A new descriptor of chunk `h` (held by the caller) for another process
  // to import: CUDA IPC (client/ipc_share.h). A source whose chunks came
  // from elsewhere may show the descriptor it received, where the backend
  // cannot export its imports again.
  virtual absl::StatusOr<UniqueFd> ExportForSharing(ChunkHandle h) {
    return backend()->ExportChunk(h);
  }
  // Size of every chunk this source hands out on `device`.
  virtual size_t chunk_size(int device) const = 0;

  // Gets chunks totalling exactly `bytes` (a multiple of
  // chunk_size(device)) on `device`, all or nothing; the source picks their
  // sizes, each a multiple of chunk_size(device). Fewer, larger chunks cost
  // fewer driver calls to create and map (one call per chunk, whatever its
  // size: docs/gpu.md, VMM call costs). The handles are usable with
  // backend() (imported already, where they came from elsewhere) and belong
  // to the caller until ReturnSized. ResourceExhausted, with a message
  // saying what was asked and what is left, when the lake has no room.
  virtual absl::StatusOr<std::vector<SizedChunk>> AcquireBytes(
      int device, uint64_t bytes) = 0;
  // Gives back chunks from AcquireBytes, with the sizes it gave. They must
  // be unmapped.
  virtual void ReturnSized(int device, absl::Span<const SizedChunk> chunks) = 0;
  // Gives the chunks returned and kept for reuse on `device` back where they
  // came from (the driver, or gmlaked): empty_cache's last step, so that
  // what the allocator no longer holds is the node's again, as PyTorch's
  // cudaFree makes it. Returns the bytes given back.
  virtual uint64_t ReleaseKept(int device) { return 0; }

  // The most bytes this process may hold on `device` (0: no limit but the
  // device's own).
  virtual uint64_t capacity_bytes(int device) const = 0;
  // Limits what this process may hold on `device`; 0 lifts the limit.
  // Chunks already held above it are not taken back.
  virtual absl::Status SetCapacity(int device, uint64_t bytes) = 0;

  // The lake asks for memory back: the handler returns (through ReturnSized)
  // cached chunks it does not use, up to `bytes` on `device`, and says how
  // many bytes it returned. The source may call it from any thread. Once
  // SetReclaimHandler returns, no call of the handler it replaced is running
  // or will start: the caller may destroy what that handler used.
  using ReclaimHandler = std::function<uint64_t(int device, uint64_t bytes)>;
  virtual void SetReclaimHandler(ReclaimHandler handler) = 0;

  // What the allocator does with the chunks it holds on a device: bytes in
  // live allocations, and bytes held but free (it could give them back).
  struct AllocatorUsage {
    uint64_t used_bytes = 0;
    uint64_t cached_bytes = 0;
  };
  using UsageProvider = std::function<AllocatorUsage(int device)>;
  // Where the source reads the allocator's usage, for a shared lake that
  // asks the process with the most cache first. The source calls it from
  // its own threads only (never inside a call the allocator made into the
  // source, which may hold the allocator's lock), so it may take the
  // allocator's lock. Setting another (or null) waits for a call in
  // progress. The default ignores it: a lake of its own needs no figures.
  virtual void SetUsageProvider(UsageProvider provider) {}
};

}  // namespace gmlake

#endif  // GMLAKE_CLIENT_CHUNK_SOURCE_H_
