// Copyright 2026 The GMLake Authors.
//
// OpenChunkSource: picks the chunk source `lake:` in GMLAKE_CONF asks for:
// gmlaked's lake (DaemonChunkSource), an embedded lake in this process
// (EmbeddedLake), or per device one of the two (SplitChunkSource). With
// lake:auto, gmlaked when its socket exists, else the embedded lake; the
// choice is said in one line.

#ifndef GMLAKE_CLIENT_OPEN_CHUNK_SOURCE_H_
#define GMLAKE_CLIENT_OPEN_CHUNK_SOURCE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "client/chunk_sizing.h"
#include "client/chunk_source.h"
#include "client/daemon_chunk_source.h"
#include "client/options.h"

namespace gmlake {

struct OpenedChunkSource {
  std::unique_ptr<ChunkSource> source;
  std::string description;  // for the start-up log
};

// Opens the chunk source `options` asks for. lake:daemon fails (Unavailable,
// saying how to start gmlaked) when the daemon cannot be reached; lake:auto
// falls back to the embedded lake and says why in `description`.
absl::StatusOr<OpenedChunkSource> OpenChunkSource(
    const AllocatorOptions& options);

// What a DaemonChunkSource for an allocator of `options` is told: its
// socket, and the chunk sizes, leasing ahead and idle watermark the
// allocator's options give, so that every process leasing for an
// allocator (a program, a benchmark's client) cuts its leases alike. The
// name is left to the caller.
DaemonSourceOptions DaemonSourceOptionsFor(const AllocatorOptions& options);

// How an embedded lake for an allocator of `options` cuts the chunks it
// creates (client/chunk_sizing.h; the lake sets the unit), so that a
// program and a replay of its trace grow alike.
ChunkSizing GrowthSizing(const AllocatorOptions& options);

}  // namespace gmlake

#endif  // GMLAKE_CLIENT_OPEN_CHUNK_SOURCE_H_
