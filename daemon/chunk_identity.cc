// Copyright 2026 The GMLake Authors.

#include "daemon/chunk_identity.h"

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
  return {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
}

}  // namespace gmlake
