// Copyright 2026 The GMLake Authors.

#include "daemon/pressure_policy.h"

#include <algorithm>

namespace gmlake {

std::vector<PressureAsk> ChoosePressure(
    absl::Span<const PressureCandidate> candidates, uint64_t short_bytes) {
  struct Left {
    PressureCandidate c;
    uint64_t asked = 0;
  };
  std::vector<Left> order;
  order.reserve(candidates.size());
  for (const PressureCandidate& c : candidates) {
    if (c.leased_bytes > 0) order.push_back({c});
  }
  // Largest cached first; among equals, the largest holder; then the
  // oldest session, so that the order does not depend on the input's.
  std::sort(order.begin(), order.end(), [](const Left& a, const Left& b) {
    if (a.c.cached_bytes != b.c.cached_bytes) {
      return a.c.cached_bytes > b.c.cached_bytes;
    }
    if (a.c.leased_bytes != b.c.leased_bytes) {
      return a.c.leased_bytes > b.c.leased_bytes;
    }
    return a.c.session < b.c.session;
  });
  uint64_t remaining = short_bytes;
  // First what they cache (never more than they hold), then the rest of
  // what they hold.
  for (int pass = 0; pass < 2 && remaining > 0; ++pass) {
    for (Left& l : order) {
      if (remaining == 0) break;
      const uint64_t cached = std::min(l.c.cached_bytes, l.c.leased_bytes);
      const uint64_t offer = pass == 0 ? cached - std::min(cached, l.asked)
                                       : l.c.leased_bytes - l.asked;
      const uint64_t ask = std::min(remaining, offer);
      l.asked += ask;
      remaining -= ask;
    }
  }
  std::vector<PressureAsk> out;
  for (const Left& l : order) {
    if (l.asked > 0) out.push_back({l.c.session, l.asked});
  }
  return out;
}

}  // namespace gmlake
