// Copyright 2026 The GMLake Authors.

#include "common/bytes.h"

#include <cmath>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gmlake {

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  double v = static_cast<double>(bytes);
  int unit = -1;
  while (v >= 1024 && unit < 3) {
    v /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.2f %s", v, kUnits[unit]);
}

absl::StatusOr<uint64_t> ParseBytes(absl::string_view text) {
  std::string s = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  size_t digits = 0;
  while (digits < s.size() &&
         (absl::ascii_isdigit(s[digits]) || s[digits] == '.')) {
    ++digits;
  }
  double number = 0;
  if (digits == 0 || !absl::SimpleAtod(s.substr(0, digits), &number)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "not a byte count: '", text, "' (examples: 2097152, 2MiB, 40GiB)"));
  }
  std::string unit(absl::StripAsciiWhitespace(s.substr(digits)));
  double scale = 1;
  if (unit.empty() || unit == "b") {
    scale = 1;
  } else if (unit == "k" || unit == "kb" || unit == "kib") {
    scale = 1024.0;
  } else if (unit == "m" || unit == "mb" || unit == "mib") {
    scale = 1024.0 * 1024;
  } else if (unit == "g" || unit == "gb" || unit == "gib") {
    scale = 1024.0 * 1024 * 1024;
  } else if (unit == "t" || unit == "tb" || unit == "tib") {
    scale = 1024.0 * 1024 * 1024 * 1024;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown unit '", unit, "' in '", text,
                     "' (use B, KiB, MiB, GiB, TiB)"));
  }
  return static_cast<uint64_t>(std::llround(number * scale));
}

}  // namespace gmlake
