// Copyright 2026 The GMLake Authors.
//
// The Lake after a restart: adopting the chunks that clients still hold
// from the daemon before (the policy is daemon/adopt_policy.h), and
// releasing them when their sessions let go.

#include <utility>

#include "absl/strings/str_format.h"
#include "common/bytes.h"
#include "common/mutex.h"
#include "daemon/adopt_policy.h"
#include "daemon/lake.h"
#include "daemon/log.h"

namespace gmlake {

absl::StatusOr<std::vector<uint64_t>> Lake::Adopt(
    uint64_t session, absl::string_view token, int device,
    absl::Span<const uint64_t> previous_ids, absl::Span<const UniqueFd> fds,
    absl::Span<const uint64_t> sizes) {
  if (absl::Status s =
          CheckAdoptionClaim({device, fds.size(), previous_ids.size()},
                             static_cast<int>(options_.devices.size()));
      !s.ok()) {
    return s;
  }
  // Each chunk's size: as claimed (the import checks it where the backend
  // can), a multiple of the device's unit.
  absl::StatusOr<std::vector<uint64_t>> sized = AdoptedChunkSizes(
      device, fds.size(), sizes, options_.devices[device].chunk_size,
      options_.devices[device].capacity_bytes);
  if (!sized.ok()) return sized.status();
  const std::vector<uint64_t>& chunk_sizes = *sized;
  uint64_t bytes = 0;
  for (uint64_t size : chunk_sizes) bytes += size;
  {
    MutexLock lock(&mu_);
    absl::StatusOr<Session*> found = sessions_.Find(session, token);
    if (!found.ok()) return found.status();
    if (!(*found)->bound) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "session %d is not bound: bind it on the fd socket before adopting "
          "chunks",
          session));
    }
  }
  // Imported without the lock: the backend checks each is a chunk of the
  // device's size (a sealed memfd of that size on the host backend).
  std::vector<ChunkHandle> handles;
  std::vector<ChunkIdentity> identities;
  if (absl::Status s =
          ImportAdopted(device, fds, chunk_sizes, &handles, &identities);
      !s.ok()) {
    return s;
  }
  std::vector<uint64_t> ids;
  absl::Status refused;
  {
    MutexLock lock(&mu_);
    refused = BookAdoptedLocked(session, device, handles, chunk_sizes,
                                identities, bytes, &ids);
  }
  if (!refused.ok()) {
    ReleaseHandles(handles);
    Warnf("session %d: adoption of %d chunks on device %d refused: %s", session,
          fds.size(), device, refused.message());
    return refused;
  }
  return ids;
}

absl::Status Lake::BookAdoptedLocked(
    uint64_t session, int device, absl::Span<const ChunkHandle> handles,
    absl::Span<const uint64_t> sizes,
    const std::vector<ChunkIdentity>& identities, uint64_t bytes,
    std::vector<uint64_t>* ids) {
  const Session* s = sessions_.Live(session);
  if (s == nullptr || shutting_down_) {
    return absl::AbortedError(absl::StrFormat(
        "session %d ended while its chunks were being adopted", session));
  }
  AdoptionRoom room;
  room.room_bytes = books_.room(device);
  const ChunkBooks::Holding h = books_.holding(session);
  room.session_bytes = h.leased_bytes + h.in_flight_bytes;
  room.session_quota = options_.session_quota_bytes;
  room.uid = s->peer.uid;
  room.uid_bytes = books_.uid_bytes(s->peer.uid);
  room.uid_quota = options_.uid_quota_bytes;
  if (absl::Status fits = CheckAdoptionFits(
          device, identities, bytes, room,
          [this](const ChunkIdentity& id)
              ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return books_.HeldAs(id); });
      !fits.ok()) {
    return fits;
  }
  for (size_t i = 0; i < handles.size(); ++i) {
    ids->push_back(books_.Adopt(session, s->peer.uid, device, handles[i],
                                sizes[i], identities[i]));
  }
  adopted_chunks_ += ids->size();
  Logf(
      "%s: adopted %d chunks (%s) on device %d that its process held from "
      "the gmlaked before",
      s->Label(), ids->size(), FormatBytes(bytes), device);
  return absl::OkStatus();
}

absl::Status Lake::ImportAdopted(int device, absl::Span<const UniqueFd> fds,
                                 absl::Span<const uint64_t> sizes,
                                 std::vector<ChunkHandle>* handles,
                                 std::vector<ChunkIdentity>* identities) {
  for (size_t i = 0; i < fds.size(); ++i) {
    const uint64_t size = sizes[i];
    absl::StatusOr<ChunkHandle> h =
        backend_->ImportChunk(fds[i].get(), device, size);
    if (!h.ok()) {
      ReleaseHandles(*handles);
      handles->clear();
      return absl::InvalidArgumentError(absl::StrFormat(
          "descriptor %d of the adopt request is not a chunk of %s on device "
          "%d: %s; nothing was adopted",
          i, FormatBytes(size), device, h.status().message()));
    }
    handles->push_back(*h);
    identities->push_back(IdentifyDescriptor(fds[i].get()));
  }
  return absl::OkStatus();
}

void Lake::ReleaseHandles(absl::Span<const ChunkHandle> handles) {
  for (ChunkHandle h : handles) {
    absl::Status s = backend_->ReleaseChunk(h);
    if (!s.ok()) Warnf("releasing an adopted chunk: %s", s.ToString());
  }
}

void Lake::ReleaseDropped() {
  std::vector<ChunkBooks::Released> gone;
  {
    MutexLock lock(&mu_);
    gone = books_.TakeDropped();
  }
  if (gone.empty()) return;
  std::vector<ChunkHandle> handles;
  for (const ChunkBooks::Released& c : gone) handles.push_back(c.handle);
  ReleaseHandles(handles);
  VLogf("released %d adopted chunks that their sessions let go",
        handles.size());
}

}  // namespace gmlake
