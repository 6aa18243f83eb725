// Copyright 2026 The GMLake Authors.
//
// The pressure policy: whom gmlaked asks for memory, and for how much, when
// a lease is short. Pure decisions, no state: the Lake describes the
// sessions it may ask and sends what this returns down their Watch streams.
//
// What a session says it caches and does not use goes first: giving it back
// costs that process nothing. The largest cache is asked first, so as few
// processes as possible are disturbed; among equal caches, the largest
// holder. Only when the caches do not cover the shortfall are the holders
// asked for the rest of what they hold (their allocators may free more on
// request, e.g. empty their caches of blocks they were about to reuse).

#ifndef GMLAKE_DAEMON_PRESSURE_POLICY_H_
#define GMLAKE_DAEMON_PRESSURE_POLICY_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace gmlake {

// A session that may be asked: it watches, is not the one leasing, and
// holds chunks on the device.
struct PressureCandidate {
  uint64_t session = 0;
  uint64_t cached_bytes = 0;  // as it last reported them on the device
  uint64_t leased_bytes = 0;  // what it holds there
};

struct PressureAsk {
  uint64_t session = 0;
  uint64_t bytes = 0;
};

// Splits `short_bytes` over `candidates` (see above). Each session appears
// at most once, never asked for more than it holds; the asks add up to
// short_bytes, or to all the candidates hold if that is less. Empty when
// nobody holds anything.
std::vector<PressureAsk> ChoosePressure(
    absl::Span<const PressureCandidate> candidates, uint64_t short_bytes);

}  // namespace gmlake

#endif  // GMLAKE_DAEMON_PRESSURE_POLICY_H_
