// Copyright 2026 The GMLake Authors.

#include "daemon/chunk_identity.h"

#include <fcntl.h>
#include <sys/stat.h>

#include "absl/strings/str_cat.h"

namespace gmlake {

std::string ChunkIdentity::ToString() const {
  if (!known()) return "unknown";
  return absl::StrCat("inode ", dev, ":", ino);
}

ChunkIdentity IdentifyDescriptor(int fd) {
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return {};
  // A memfd (or other shmem file): one inode per memory. Anything else is
  // no chunk this names.
  if (::fcntl(fd, F_GET_SEALS) < 0) return {};
  return {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
}

}  // namespace gmlake
