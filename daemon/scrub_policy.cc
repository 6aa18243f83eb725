// Copyright 2026 The GMLake Authors.

#include "daemon/scrub_policy.h"

#include "absl/strings/str_cat.h"

namespace gmlake {

absl::StatusOr<ScrubPolicy> ParseScrubPolicy(absl::string_view text) {
  if (text == "always") return ScrubPolicy::kAlways;
  if (text == "cross-uid" || text == "cross_uid") return ScrubPolicy::kCrossUid;
  if (text == "never") return ScrubPolicy::kNever;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown scrub policy '", text, "': use always, cross-uid or never"));
}

absl::string_view ScrubPolicyName(ScrubPolicy policy) {
  switch (policy) {
    case ScrubPolicy::kAlways:
      return "always";
    case ScrubPolicy::kCrossUid:
      return "cross-uid";
    case ScrubPolicy::kNever:
      return "never";
  }
  return "?";
}

bool NeedsScrub(ScrubPolicy policy, int64_t last_uid, int64_t next_uid) {
  if (last_uid == kNoUid) return false;  // never leased: fresh memory
  switch (policy) {
    case ScrubPolicy::kAlways:
      return true;
    case ScrubPolicy::kCrossUid:
      return last_uid != next_uid;
    case ScrubPolicy::kNever:
      return false;
  }
  return true;
}

}  // namespace gmlake
