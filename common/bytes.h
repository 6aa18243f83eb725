// Copyright 2026 The GMLake Authors.
//
// Byte counts for people and for flags: "1.50 GiB", "40GiB" <-> 42949672960.

#ifndef GMLAKE_COMMON_BYTES_H_
#define GMLAKE_COMMON_BYTES_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gmlake {

// "512 B", "2.00 MiB", "13.41 GiB".
std::string FormatBytes(uint64_t bytes);

// Parses "123", "64KiB", "2MiB", "1.5GiB", "40GB" (GB = GiB here, as GPU
// memory is counted), "1TiB". Case-insensitive; no sign.
absl::StatusOr<uint64_t> ParseBytes(absl::string_view text);

}  // namespace gmlake

#endif  // GMLAKE_COMMON_BYTES_H_
