// Copyright 2026 The GMLake Authors.

#include "daemon/adopt_policy.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "common/bytes.h"

namespace gmlake {

absl::Status CheckAdoptionClaim(const AdoptionClaim& claim, int device_count) {
  if (claim.descriptors == 0) {
    return absl::InvalidArgumentError(
        "an adopt request must carry the chunks' descriptors (SCM_RIGHTS), "
        "one per chunk: gmlaked adopts only chunks it is shown");
  }
  if (claim.previous_ids != claim.descriptors) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "an adopt request with %d descriptors and %d chunk ids: give one id "
        "per descriptor",
        claim.descriptors, claim.previous_ids));
  }
  if (claim.device < 0 || claim.device >= device_count) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "adopting chunks on device %d, which gmlaked does not serve (devices "
        "0..%d)",
        claim.device, device_count - 1));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint64_t>> AdoptedChunkSizes(
    int device, size_t descriptors, absl::Span<const uint64_t> sizes,
    uint64_t unit, uint64_t capacity) {
  std::vector<uint64_t> out(sizes.begin(), sizes.end());
  if (out.empty()) out.assign(descriptors, unit);
  if (out.size() != descriptors) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "an adopt request with %d descriptors and %d chunk sizes: give one "
        "size per descriptor, or none",
        descriptors, out.size()));
  }
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == 0 || out[i] % unit != 0 || out[i] > capacity) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "chunk %d of the adopt request claims %d bytes: chunks on device "
          "%d are multiples of %s, at most its capacity; nothing was adopted",
          i, out[i], device, FormatBytes(unit)));
    }
  }
  return out;
}

absl::Status CheckAdoptionFits(
    int device, const std::vector<ChunkIdentity>& identities, uint64_t bytes,
    const AdoptionRoom& room,
    const std::function<uint64_t(const ChunkIdentity&)>& held_as) {
  absl::flat_hash_map<ChunkIdentity, size_t> seen;
  for (size_t i = 0; i < identities.size(); ++i) {
    const ChunkIdentity& id = identities[i];
    if (!id.known()) continue;
    if (auto [it, fresh] = seen.emplace(id, i); !fresh) {
      return absl::AlreadyExistsError(absl::StrFormat(
          "descriptors %d and %d of the adopt request are the same chunk "
          "(%s): nothing was adopted",
          it->second, i, id.ToString()));
    }
    if (const uint64_t chunk = held_as(id); chunk != 0) {
      return absl::AlreadyExistsError(absl::StrFormat(
          "descriptor %d of the adopt request is chunk %d, which gmlaked "
          "holds already (%s): nothing was adopted",
          i, chunk, id.ToString()));
    }
  }
  const uint64_t n = identities.size();
  if (bytes > room.room_bytes) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "adopting %d chunks (%s) on device %d would exceed its capacity: "
        "%s of room left (--capacity); the process keeps them, uncounted",
        n, FormatBytes(bytes), device, FormatBytes(room.room_bytes)));
  }
  if (room.session_quota != 0 &&
      room.session_bytes + bytes > room.session_quota) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "adopting %s would put the session at %s, over its quota of %s "
        "(--session_quota)",
        FormatBytes(bytes), FormatBytes(room.session_bytes + bytes),
        FormatBytes(room.session_quota)));
  }
  if (room.uid_quota != 0 && room.uid_bytes + bytes > room.uid_quota) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "adopting %s would put uid %d at %s, over its quota of %s "
        "(--uid_quota)",
        FormatBytes(bytes), room.uid, FormatBytes(room.uid_bytes + bytes),
        FormatBytes(room.uid_quota)));
  }
  return absl::OkStatus();
}

}  // namespace gmlake
