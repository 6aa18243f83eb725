// Copyright 2026 The GMLake Authors.

#include "daemon/release_policy.h"

#include <algorithm>

namespace gmlake {

ReleasePlan PlanRelease(const ReleasePolicy& policy,
                        const DeviceHoldings& device, absl::Time now) {
  ReleasePlan plan;
  // What may go without taking the device below its floor.
  const uint64_t allowance = device.created_bytes > device.floor_bytes
                                 ? device.created_bytes - device.floor_bytes
                                 : 0;
  std::vector<FreeChunk> order = device.free;
  auto older = [](const FreeChunk& a, const FreeChunk& b) {
    if (a.free_since != b.free_since) return a.free_since < b.free_since;
    return a.id < b.id;
  };
  std::sort(order.begin(), order.end(), older);
  // The longest idle chunks that fit in the allowance are the candidates;
  // the floor keeps the others (the warmest).
  uint64_t candidates_bytes = 0;
  std::vector<FreeChunk> candidates;
  for (const FreeChunk& c : order) {
    if (candidates_bytes + c.bytes <= allowance) {
      candidates_bytes += c.bytes;
      candidates.push_back(c);
    } else {
      plan.floor_kept_bytes += c.bytes;
    }
  }
  if (!policy.enabled()) {
    plan.later_bytes = candidates_bytes;
    return plan;
  }
  // Nobody on the device: everything above the floor is due.
  const absl::Time due_before =
      device.in_use ? now - policy.idle_after : absl::InfiniteFuture();
  size_t i = 0;
  // The cap per round keeps a round short while sessions may need the
  // lock; with nobody on the device, everything due goes now (a job's end
  // gives the card back at once).
  const size_t cap =
      device.in_use ? policy.max_chunks_per_round : candidates.size();
  for (; i < candidates.size() && candidates[i].free_since <= due_before &&
         plan.release.size() < cap;
       ++i) {
    plan.release.push_back(candidates[i].id);
    plan.release_bytes += candidates[i].bytes;
  }
  plan.later_bytes = candidates_bytes - plan.release_bytes;
  if (i < candidates.size()) {
    plan.next_due = std::max(now, candidates[i].free_since + policy.idle_after);
  }
  return plan;
}

}  // namespace gmlake
