// Copyright 2026 The GMLake Authors.

#include "tools/held_report.h"

#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "common/bytes.h"

namespace gmlake {
namespace {

std::string Plural(uint64_t n, absl::string_view one) {
  return absl::StrCat(n, " ", one, n == 1 ? "" : "s");
}

std::string Seconds(double s) {
  return absl::FormatDuration(absl::Seconds(std::ceil(s)));
}

}  // namespace

std::string HeldReport(const v1::StatusResponse& st) {
  const bool releasing = st.release_idle_seconds() > 0;
  const std::string idle_flag =
      releasing
          ? absl::StrCat("--release_idle=", Seconds(st.release_idle_seconds()))
          : "--release_idle=0";
  std::string out = "held, and why:\n";
  for (const v1::DeviceStatus& d : st.devices()) {
    if (d.created_bytes() == 0) {
      absl::StrAppend(&out, "  device ", d.device(),
                      ": nothing created (everything is the driver's)\n");
      continue;
    }
    absl::StrAppend(&out, "  device ", d.device(), ": ",
                    FormatBytes(d.created_bytes()), " created\n");
    if (d.leased_bytes() > 0) {
      uint64_t holders = 0, ending = 0;
      for (const v1::SessionStatus& s : st.sessions()) {
        for (const v1::DeviceLeased& l : s.leased()) {
          if (l.device() != d.device() || l.bytes() == 0) continue;
          ++holders;
          if (s.ending()) ++ending;
        }
      }
      absl::StrAppend(&out, "    ", FormatBytes(d.leased_bytes()),
                      " leased to ", Plural(holders, "session"));
      if (d.ending_bytes() > 0) {
        absl::StrAppend(&out, " (", FormatBytes(d.ending_bytes()), " of it to ",
                        Plural(ending, "ended session"),
                        ", kept until the process exits)");
      }
      out += "\n";
    }
    if (d.scrubbing_bytes() > 0) {
      absl::StrAppend(&out, "    ", FormatBytes(d.scrubbing_bytes()),
                      " being zeroed for a lease\n");
    }
    if (d.floor_kept_bytes() > 0) {
      absl::StrAppend(&out, "    ", FormatBytes(d.floor_kept_bytes()),
                      " free, kept as the floor of ",
                      FormatBytes(d.floor_bytes()), " (--precreate)\n");
    }
    if (d.idle_bytes() > 0) {
      if (!releasing) {
        absl::StrAppend(&out, "    ", FormatBytes(d.idle_bytes()),
                        " free, kept until gmlakectl trim (", idle_flag, ")\n");
      } else if (d.next_release_seconds() <= 0) {
        absl::StrAppend(&out, "    ", FormatBytes(d.idle_bytes()),
                        " free and idle, going back to the driver now (",
                        idle_flag, ")\n");
      } else {
        absl::StrAppend(&out, "    ", FormatBytes(d.idle_bytes()),
                        " free, going back to the driver once idle; the "
                        "first in ",
                        Seconds(d.next_release_seconds()), " unless leased (",
                        idle_flag, ")\n");
      }
    }
  }
  return out;
}

}  // namespace gmlake
