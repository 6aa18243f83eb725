// Copyright 2026 The GMLake Authors.
//
// What the conformance suite (vmm_conformance.cc) and its peer process
// (vmm_peer_main.cc) agree on: the byte patterns they write, and the
// commands the suite sends the peer.
//
// Commands are text payloads of fd_passing messages; each gets one reply,
// "ok ..." or "error <what went wrong>":
//   import <device> <chunk_size>   with N descriptors: import each, map them
//                                  side by side into one new range (the
//                                  "view"), give device <device> access.
//   check <seed> <offset> <len>    the view's bytes [offset, offset+len) hold
//                                  Pattern(seed) at those offsets?
//   write <seed> <offset> <len>    write Pattern(seed) there.
//   exit                           unmap, free, release; reply; exit 0.

#ifndef GMLAKE_TESTS_VMM_PEER_PROTOCOL_H_
#define GMLAKE_TESTS_VMM_PEER_PROTOCOL_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"

namespace gmlake {

// The pattern byte of `seed` at `offset`: neighbouring bytes, offsets and
// seeds all differ, so a misplaced or stale page shows.
inline uint8_t PatternByte(uint32_t seed, uint64_t offset) {
  uint64_t x =
      (offset + 1) * 0x9E3779B97F4A7C15ull + seed * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 31;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 29;
  return static_cast<uint8_t>(x);
}

// Pattern(seed) over [offset, offset+len).
inline std::vector<uint8_t> Pattern(uint32_t seed, uint64_t offset,
                                    size_t len) {
  std::vector<uint8_t> out(len);
  for (size_t i = 0; i < len; ++i) out[i] = PatternByte(seed, offset + i);
  return out;
}

// "" when `data` (read from [offset, ...)) holds Pattern(seed); else where
// and how it differs.
inline std::string PatternMismatch(absl::Span<const uint8_t> data,
                                   uint32_t seed, uint64_t offset) {
  for (size_t i = 0; i < data.size(); ++i) {
    const uint8_t want = PatternByte(seed, offset + i);
    if (data[i] != want) {
      return absl::StrCat("pattern ", seed, " differs at offset ", offset + i,
                          ": got ", data[i], ", want ", want);
    }
  }
  return "";
}

// Limits of one command message.
inline constexpr size_t kPeerMaxPayload = 4096;
inline constexpr size_t kPeerMaxFds = 1024;

}  // namespace gmlake

#endif  // GMLAKE_TESTS_VMM_PEER_PROTOCOL_H_
