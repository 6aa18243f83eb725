// Copyright 2026 The GMLake Authors.
//
// How many descriptors gmlaked has open, against its limit. The daemon
// holds descriptors per chunk (an exported one for every chunk; on the host
// backend the memfd too), so a large lake can run out of them, and the
// driver then reports something unhelpful (cuMemExportToShareableHandle:
// CUDA_ERROR_OPERATING_SYSTEM). Errors about creating chunks check this to
// name the real cause instead of blaming the device.

#ifndef GMLAKE_DAEMON_FD_USAGE_H_
#define GMLAKE_DAEMON_FD_USAGE_H_

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
// do, for messages.
std::string DescribeOutOfDescriptors(const FdUsage& usage);

}  // namespace gmlake

#endif  // GMLAKE_DAEMON_FD_USAGE_H_
