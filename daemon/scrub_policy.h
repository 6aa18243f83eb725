// Copyright 2026 The GMLake Authors.
//
// Which chunks gmlaked zeroes before leasing them again: a pure decision
// from the uid that last held a chunk and the uid that gets it next.

#ifndef GMLAKE_DAEMON_SCRUB_POLICY_H_
#define GMLAKE_DAEMON_SCRUB_POLICY_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gmlake {

enum class ScrubPolicy {
  // Every chunk that was leased before, whoever gets it next.
  kAlways,
  // Chunks whose last holder had another uid than the next one (default).
  kCrossUid,
  // None (a single-tenant node).
  kNever,
};

// "always", "cross-uid", "never" <-> ScrubPolicy.
absl::StatusOr<ScrubPolicy> ParseScrubPolicy(absl::string_view text);
absl::string_view ScrubPolicyName(ScrubPolicy policy);

// The last uid of a chunk that was never leased (fresh from the driver,
// which clears memory between processes, or zeroed since).
inline constexpr int64_t kNoUid = -1;

// Whether a chunk last held by `last_uid` must be zeroed before `next_uid`
// gets it.
bool NeedsScrub(ScrubPolicy policy, int64_t last_uid, int64_t next_uid);

}  // namespace gmlake

#endif  // GMLAKE_DAEMON_SCRUB_POLICY_H_
