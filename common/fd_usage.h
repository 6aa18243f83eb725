// Copyright 2026 The GMLake Authors.
//
// How many descriptors this process has open, against its limit.
//
// gmlaked holds descriptors per chunk (on the host backend the memfd; an
// export while one is sent), so a large lake can run out of them, and the
// driver then reports something unhelpful (cuMemExportToShareableHandle:
// CUDA_ERROR_OPERATING_SYSTEM). Its errors about creating chunks check this
// to name the real cause instead of blaming the device. A client that keeps
// chunk descriptors for re-adoption (DaemonChunkSource) checks it so as
// never to take the room its process needs for anything else.

#ifndef GMLAKE_COMMON_FD_USAGE_H_
#define GMLAKE_COMMON_FD_USAGE_H_

#include <cstdint>
#include <string>

namespace gmlake {

struct FdUsage {
  uint64_t open = 0;
  // RLIMIT_NOFILE's soft limit (0: unknown).
  uint64_t limit = 0;
};

// Counts /proc/self/fd; reads the limit. Costs a directory listing: call it
// without a lock held, and only on a failure path.
FdUsage CurrentFdUsage();

// Whether the process is at (or within a few descriptors of) its limit:
// whatever failed, the lack of descriptors explains it.
bool OutOfDescriptors(const FdUsage& usage);

// "gmlaked is out of file descriptors (N open, limit M): ..." with what to
// do, for gmlaked's messages.
std::string DescribeOutOfDescriptors(const FdUsage& usage);

}  // namespace gmlake

#endif  // GMLAKE_COMMON_FD_USAGE_H_
