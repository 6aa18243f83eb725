// Copyright 2026 The GMLake Authors.
//
// Capacities in gmlaked's flags: bytes ("40GiB", see common/bytes.h) or a
// fraction of the device ("0.9").

#ifndef GMLAKE_DAEMON_UNITS_H_
#define GMLAKE_DAEMON_UNITS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gmlake {

// A capacity given either as bytes or as a fraction in (0, 1] of a whole.
struct Capacity {
  bool is_fraction = false;
  double fraction = 0;
  uint64_t bytes = 0;

  // The capacity in bytes, given the whole it may be a fraction of.
  uint64_t Resolve(uint64_t whole) const {
    return is_fraction ? static_cast<uint64_t>(fraction * whole) : bytes;
  }
};

// Parses "0.9" (a plain number <= 1 is a fraction) or a byte count as
// ParseBytes does ("40GiB", "1073741824"). InvalidArgument naming `text`
// otherwise, and for a fraction that is not positive.
absl::StatusOr<Capacity> ParseCapacity(absl::string_view text);

}  // namespace gmlake

#endif  // GMLAKE_DAEMON_UNITS_H_
