// Copyright 2026 The GMLake Authors.
//
// DaemonChunkSource's answers to pressure: the Watch stream's thread, which
// gives back idle chunks first, then asks the ReclaimHandler for the rest,
// and reports usage (which tells gmlaked it has answered).

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

namespace daemon_link {
thread_local const DaemonChunkSource* answering_pressure = nullptr;
}  // namespace daemon_link

void DaemonChunkSource::WatchLoop(std::shared_ptr<Rpc> link) {
  v1::WatchRequest req;
  req.set_session_id(link->session);
  req.set_token(link->token);
  std::unique_ptr<grpc::ClientReader<v1::PressureRequest>> reader =
      link->stub->Watch(&link->watch_ctx, req);
  v1::PressureRequest p;
  while (reader->Read(&p)) {
    if (!link->hello) {
      link->hello = true;  // the session is live
      link->watching.Notify();
      continue;
    }
    if (p.bytes_wanted() == 0) continue;
    HandlePressure(p.device(), p.bytes_wanted());
  }
  const absl::Status s = FromGrpc(reader->Finish());
  bool closing;
  {
    MutexLock l(&mu_);
    closing = closing_;
  }
  if (!closing) {
    MarkLost(
        s.ok() ? absl::UnavailableError("gmlaked ended the Watch stream") : s,
        link.get())
        .IgnoreError();
  }
  if (!link->watching.HasBeenNotified()) link->watching.Notify();
}

void DaemonChunkSource::HandlePressure(int daemon_device, uint64_t bytes) {
  pressure_requests_.fetch_add(1);
  int device;
  {
    MutexLock l(&mu_);
    device = LocalDevice(daemon_device);
  }
  if (device >= 0) {
    // Counted where chunks go back (GiveBack), also those that the
    // handler's Return sends straight back past the watermark.
    // No leasing ahead in the background while memory is short: none
    // starts until this device's growth pauses, and one on its way lands
    // first, so that what it brings goes back with the rest.
    {
      MutexLock l(&mu_);
      devices_[device].pressed = true;
    }
    AwaitBackgroundLease(device);
    daemon_link::answering_pressure = this;
    // Idle chunks first: nobody uses them.
    uint64_t freed = TrimIdle(device, 0, bytes);
    if (freed < bytes) {
      // Held through the call: SetReclaimHandler waits for it.
      MutexLock l(&reclaim_mu_);
      if (reclaim_) {
        // The allocator returns cached chunks through Return, which may
        // keep them idle (below the watermark): give those back too.
        reclaim_(device, bytes - freed);
        TrimIdle(device, 0, bytes - freed);
      }
    }
    daemon_link::answering_pressure = nullptr;
  }
  // The report tells the daemon this request has been answered, with the
  // allocator's figures as they are now.
  PollUsage();
  SendUsage().IgnoreError();
}

void DaemonChunkSource::SetReclaimHandler(ReclaimHandler handler) {
  MutexLock l(&reclaim_mu_);
  reclaim_ = std::move(handler);
}

}  // namespace gmlake
