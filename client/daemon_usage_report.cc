// Copyright 2026 The GMLake Authors.
//
// DaemonChunkSource's usage reports: the allocator's figures (the
// UsageProvider) read periodically and sent to gmlaked when they moved, so
// that it knows whom to ask first under pressure.

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/daemon_chunk_source.h"
#include "client/daemon_link.h"
#include "common/bytes.h"
#include "common/mutex.h"
#include "grpcpp/grpcpp.h"
#include "proto/gmlake.grpc.pb.h"
#include "proto/protocol.h"

namespace gmlake {

using daemon_link::AddUsage;
using daemon_link::SetDeadline;

void DaemonChunkSource::SetUsageProvider(UsageProvider provider) {
  MutexLock l(&provider_mu_);
  provider_ = std::move(provider);
}

void DaemonChunkSource::PollUsage() {
  size_t n;
  {
    MutexLock l(&mu_);
    n = devices_.size();
  }
  std::vector<AllocatorUsage> got;
  {
    MutexLock l(&provider_mu_);
    if (!provider_) return;
    for (size_t d = 0; d < n; ++d)
      got.push_back(provider_(static_cast<int>(d)));
  }
  for (size_t d = 0; d < got.size(); ++d) {
    NoteUsage(static_cast<int>(d), got[d].used_bytes, got[d].cached_bytes);
  }
}

bool DaemonChunkSource::ReportWorthyLocked() const {
  for (const UsageFigures& now : UsageLocked()) {
    UsageFigures was{now.device, 0, 0};
    for (const UsageFigures& sent : last_sent_) {
      if (sent.device == now.device) was = sent;
    }
    const int local = LocalDevice(now.device);
    if (local < 0) continue;
    const DeviceState& d = devices_[local];
    // A chunk's worth, and a sixteenth of what is held: a process that
    // churns within its cache does not report at every period.
    const uint64_t held = d.held_bytes + d.idle_bytes;
    const uint64_t step = std::max<uint64_t>(d.chunk_size, held / 16);
    auto moved = [step](uint64_t a, uint64_t b) {
      return (a > b ? a - b : b - a) >= step;
    };
    if (moved(now.used, was.used) || moved(now.cached, was.cached)) {
      return true;
    }
  }
  return false;
}

void DaemonChunkSource::ReportLoop() {
  while (!stop_reports_.WaitForNotificationWithTimeout(
      options_.usage_report_interval)) {
    if (!Lost().ok()) continue;  // until the daemon is back
    TrimAheadAfterPause();
    PollUsage();
    bool worthy;
    {
      MutexLock l(&mu_);
      worthy = ReportWorthyLocked();
    }
    if (worthy) SendUsage(/*unsolicited=*/true).IgnoreError();
  }
}

void DaemonChunkSource::NoteUsage(int device, uint64_t used_bytes,
                                  uint64_t cached_bytes) {
  MutexLock l(&mu_);
  if (device < 0 || static_cast<size_t>(device) >= devices_.size()) return;
  DeviceState& d = devices_[device];
  d.noted = true;
  d.noted_used = used_bytes;
  d.noted_cached = cached_bytes;
}

std::vector<DaemonChunkSource::UsageFigures> DaemonChunkSource::UsageLocked()
    const {
  std::vector<UsageFigures> out;
  for (size_t i = 0; i < devices_.size(); ++i) {
    const DeviceState& d = devices_[i];
    if (d.daemon_device < 0) continue;
    const uint64_t held = d.held_bytes;
    const uint64_t idle = d.idle_bytes;
    // Under gmlaked's number for the device.
    UsageFigures u{d.daemon_device, held, idle};
    if (d.noted) {
      u.used = std::min(d.noted_used, held);
      u.cached = idle + std::min(d.noted_cached, held - u.used);
    }
    out.push_back(u);
  }
  return out;
}

absl::Status DaemonChunkSource::ReportUsage() { return SendUsage(); }

absl::Status DaemonChunkSource::SendUsage(bool unsolicited) {
  if (absl::Status lost = Lost(); !lost.ok()) return lost;
  const std::shared_ptr<Rpc> r = link();
  v1::ReportUsageRequest req;
  req.set_session_id(r->session);
  req.set_token(r->token);
  req.set_unsolicited(unsolicited);
  if (unsolicited) usage_reports_.fetch_add(1);
  {
    MutexLock l(&mu_);
    AddUsage(last_sent_ = UsageLocked(), req.mutable_usage());
  }
  v1::ReportUsageResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, options_.rpc_timeout);
  absl::Status s = FromGrpc(r->stub->ReportUsage(&ctx, req, &resp));
  if (s.code() == absl::StatusCode::kUnavailable ||
      s.code() == absl::StatusCode::kNotFound) {
    return MarkLost(s, r.get());
  }
  return s;
}

}  // namespace gmlake
