// Copyright 2026 The GMLake Authors.
//
// HeldReport: the part of `gmlakectl status` that says, per device, what
// gmlaked holds from the driver and why it still holds it: leased to
// sessions (some of them ended, kept until their process exits), free and
// kept as the floor (--precreate), free and idle (back to the driver in so
// long, --release_idle), being zeroed. From a StatusResponse alone.

#ifndef GMLAKE_TOOLS_HELD_REPORT_H_
#define GMLAKE_TOOLS_HELD_REPORT_H_

#include <string>

#include "proto/gmlake.pb.h"

namespace gmlake {

std::string HeldReport(const v1::StatusResponse& status);

}  // namespace gmlake

#endif  // GMLAKE_TOOLS_HELD_REPORT_H_
