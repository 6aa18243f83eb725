// Copyright 2026 The GMLake Authors.
//
// What gmlaked exports to Prometheus (--metrics_address), rendered from
// the same StatusResponse that `gmlakectl status` shows, so the two never
// disagree. Names follow Prometheus' conventions: a gmlake_ prefix, base
// units as suffixes (_bytes, _seconds), _total on counters; one series per
// device (label device) where the lake keeps books per device. The list,
// with what each means, is in docs/daemon.md ("Monitoring").

#ifndef GMLAKE_DAEMON_METRICS_H_
#define GMLAKE_DAEMON_METRICS_H_

#include <string>

#include "proto/gmlake.pb.h"

namespace gmlake {

// The exposition text (Prometheus text format 0.0.4) for `status`.
std::string RenderMetrics(const v1::StatusResponse& status);

}  // namespace gmlake

#endif  // GMLAKE_DAEMON_METRICS_H_
