// Copyright 2026 The GMLake Authors.

#include "common/fd_usage.h"

#include <dirent.h>
#include <sys/resource.h>

#include <cerrno>

#include "absl/strings/str_format.h"

namespace gmlake {
namespace {

// Descriptors the daemon may still open at the limit's edge (a socket
// accepted, /proc read, gRPC's own): within this, it counts as out.
constexpr uint64_t kSlack = 16;

}  // namespace

FdUsage CurrentFdUsage() {
  FdUsage u;
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur != RLIM_INFINITY) {
    u.limit = r.rlim_cur;
  }
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) {
    // At the limit even the listing cannot be opened: that says it all.
    if (errno == EMFILE) u.open = u.limit;
    return u;
  }
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] != '.') ++u.open;
  }
  ::closedir(dir);
  // The listing's own descriptor was counted.
  if (u.open > 0) --u.open;
  return u;
}

bool OutOfDescriptors(const FdUsage& usage) {
  return usage.limit > 0 && usage.open + kSlack >= usage.limit;
}

std::string DescribeOutOfDescriptors(const FdUsage& usage) {
  return absl::StrFormat(
      "gmlaked is out of file descriptors (%d open, limit %d; it keeps "
      "descriptors for every chunk it holds): raise LimitNOFILE= in "
      "gmlaked.service (ulimit -n elsewhere), or use larger chunks "
      "(--chunk_size)",
      usage.open, usage.limit);
}

}  // namespace gmlake
