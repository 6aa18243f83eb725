// Copyright 2026 The GMLake Authors.

#include "daemon/units.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/bytes.h"

namespace gmlake {

absl::StatusOr<Capacity> ParseCapacity(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  Capacity cap;
  double value = 0;
  if (absl::SimpleAtod(text, &value) && value <= 1.0) {
    if (!(value > 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "capacity '", text,
          "' is not positive: give a fraction in (0, 1] of the device "
          "(0.9) or bytes (40GiB)"));
    }
    cap.is_fraction = true;
    cap.fraction = value;
    return cap;
  }
  absl::StatusOr<uint64_t> bytes = ParseBytes(text);
  if (!bytes.ok() || *bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "capacity '", text,
        "' is neither bytes (40GiB, 512MiB) nor a fraction in (0, 1] of "
        "the device (0.9)"));
  }
  cap.bytes = *bytes;
  return cap;
}

}  // namespace gmlake
