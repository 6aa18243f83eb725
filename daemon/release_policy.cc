// Copyright 2026 The GMLake Authors.

#include "daemon/release_policy.h"

#include <algorithm>

namespace gmlake {

ReleasePlan PlanRelease(const ReleasePolicy& policy,
                        const DeviceHoldings& device, absl::Time now) {
  ReleasePlan plan;
  const uint64_t free = device.free.size();
  // What may go without taking the device below its floor; the rest of the
  // free chunks are kept by the floor.
  const uint64_t above_floor =
      device.created_chunks > device.floor_chunks
          ? std::min<uint64_t>(free,
                               device.created_chunks - device.floor_chunks)
          : 0;
  plan.floor_kept_chunks = free - above_floor;
  if (above_floor == 0) return plan;
  if (!policy.enabled()) {
    plan.later_chunks = above_floor;
    return plan;
  }
  // The `above_floor` longest idle chunks are the candidates: order just
  // enough to find them (a device may have tens of thousands free).
  std::vector<FreeChunk> order = device.free;
  auto older = [](const FreeChunk& a, const FreeChunk& b) {
    if (a.free_since != b.free_since) return a.free_since < b.free_since;
    return a.id < b.id;
  };
  if (above_floor < order.size()) {
    std::nth_element(order.begin(), order.begin() + above_floor, order.end(),
                     older);
    order.resize(above_floor);
  }
  std::sort(order.begin(), order.end(), older);
  const absl::Time due_before = now - policy.idle_after;
  size_t i = 0;
  for (; i < order.size() && order[i].free_since <= due_before &&
         plan.release.size() < policy.max_chunks_per_round;
       ++i) {
    plan.release.push_back(order[i].id);
  }
  plan.later_chunks = order.size() - i;
  if (i < order.size()) {
    plan.next_due = std::max(now, order[i].free_since + policy.idle_after);
  }
  return plan;
}

}  // namespace gmlake
