// Copyright 2026 The GMLake Authors.
//
// Which chunks a restarted gmlaked adopts (pure). After a restart the daemon
// knows nothing; clients that still hold chunks of the daemon before show
// them again, one descriptor per chunk (FdRequest.adopt). The daemon has no
// record of the chunks it made before, so it cannot tell a chunk it once
// made from memory a client made itself: it adopts what it is shown into
// the showing session only, and never pools it. So:
//
//   * a claim comes with its descriptors, one per chunk, or is refused: a
//     chunk is adopted only if the daemon itself imports it (the backend
//     refuses anything that is not a chunk of the size the claim gives it,
//     a multiple of the device's unit; on the host backend, a sealed memfd
//     of exactly that size);
//   * a chunk the daemon holds already (the same memory under another
//     descriptor, on backends that can tell: chunk_identity.h), or shown
//     twice, is refused: one memory is counted once;
//   * adopted chunks count against the device's capacity and the quotas like
//     leased ones, and a claim beyond either is refused whole;
//   * adopted chunks stay with the session that showed them. When it
//     returns them or ends, the daemon drops its handle (the memory goes
//     back to the driver once the client lets go too) instead of leasing it
//     to anyone else: memory the daemon cannot prove was its own is never
//     handed to another session, let alone another uid.
//
// The mechanism is Lake::Adopt (daemon/lake_adopt.cc).

#ifndef GMLAKE_DAEMON_ADOPT_POLICY_H_
#define GMLAKE_DAEMON_ADOPT_POLICY_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "daemon/chunk_identity.h"

namespace gmlake {

// What a client shows, before the daemon imports anything.
struct AdoptionClaim {
  int device = 0;
  size_t descriptors = 0;   // descriptors riding on the request
  size_t previous_ids = 0;  // ids given for them (one per descriptor)
};

// Checks a claim's form: descriptors present, one id each, a device that
// exists. InvalidArgument naming what is wrong otherwise.
absl::Status CheckAdoptionClaim(const AdoptionClaim& claim, int device_count);

// The claimed chunks' sizes: `sizes` as given (one per descriptor), or,
// given none, `unit` for each of the `descriptors`. Each must be a
// multiple of the device's `unit` and at most its `capacity`.
// InvalidArgument naming the chunk or the count otherwise.
absl::StatusOr<std::vector<uint64_t>> AdoptedChunkSizes(
    int device, size_t descriptors, absl::Span<const uint64_t> sizes,
    uint64_t unit, uint64_t capacity);

// Where the adopted chunks would go.
struct AdoptionRoom {
  uint64_t room_bytes = 0;  // capacity neither created nor set aside
  // Bytes the session / its uid hold (granted and in flight), and their
  // quotas (0: none).
  uint64_t session_bytes = 0, session_quota = 0;
  uint64_t uid_bytes = 0, uid_quota = 0;
  int64_t uid = -1;
};

// After import: whether the chunks with `identities` (one per descriptor,
// in order; unknown ones are not compared), of `bytes` in all, may be
// adopted. `held_as` says
// which chunk of the books has an identity (0: none). AlreadyExists for a
// chunk held already or shown twice, ResourceExhausted past the capacity
// or a quota, each naming the descriptor or the flag.
absl::Status CheckAdoptionFits(
    int device, const std::vector<ChunkIdentity>& identities, uint64_t bytes,
    const AdoptionRoom& room,
    const std::function<uint64_t(const ChunkIdentity&)>& held_as);

}  // namespace gmlake

#endif  // GMLAKE_DAEMON_ADOPT_POLICY_H_
