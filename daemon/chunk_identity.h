// Copyright 2026 The GMLake Authors.
//
// What memory a chunk descriptor names, as far as gmlaked can tell. On the
// host backend a chunk is a memfd, and its inode (st_dev, st_ino) names the
// memory for as long as any descriptor or mapping of it lives: two
// descriptors with the same inode are the same chunk. The CUDA driver's
// descriptors carry no such name (each export is a new file), so there a
// chunk's identity is unknown.
//
// Used to refuse a chunk offered for adoption after a restart that the
// daemon holds already (daemon/adopt_policy.h).

#ifndef GMLAKE_DAEMON_CHUNK_IDENTITY_H_
#define GMLAKE_DAEMON_CHUNK_IDENTITY_H_

#include <cstdint>
#include <string>
#include <utility>

namespace gmlake {

struct ChunkIdentity {
  uint64_t dev = 0;
  uint64_t ino = 0;  // 0: unknown

  bool known() const { return ino != 0; }
  // "inode 8:1234", or "unknown".
  std::string ToString() const;
  friend bool operator==(const ChunkIdentity& a, const ChunkIdentity& b) {
    return a.dev == b.dev && a.ino == b.ino;
  }
  template <typename H>
  friend H AbslHashValue(H h, const ChunkIdentity& c) {
    return H::combine(std::move(h), c.dev, c.ino);
  }
};

// The identity of the memory behind an open descriptor: the inode of a
// memfd (a regular shmem file, which takes seals), unknown for anything
// else (a pipe, a file on disk, a device's descriptor) or a closed one.
ChunkIdentity IdentifyDescriptor(int fd);

}  // namespace gmlake

#endif  // GMLAKE_DAEMON_CHUNK_IDENTITY_H_
