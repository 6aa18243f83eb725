// Copyright 2026 The GMLake Authors.
//
// OpenLake: picks where chunks come from. With lake:auto, gmlaked when its
// socket exists, else the embedded lake; the choice is said in one line.

#ifndef GMLAKE_CLIENT_LAKE_H_
#define GMLAKE_CLIENT_LAKE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "client/chunk_source.h"
#include "client/options.h"

namespace gmlake {

struct OpenedLake {
  std::unique_ptr<ChunkSource> source;
  std::string description;  // for the start-up log
};

// Opens the lake `options` asks for. lake:daemon fails (Unavailable, saying
// how to start gmlaked) when the daemon cannot be reached; lake:auto falls
// back to the embedded lake and says why in `description`.
absl::StatusOr<OpenedLake> OpenLake(const AllocatorOptions& options);

}  // namespace gmlake

#endif  // GMLAKE_CLIENT_LAKE_H_
