// Copyright 2026 The GMLake Authors.
//
// A Lake over a real host backend (memfd chunks) with sessions bound
// directly (the fd server takes identities from SO_PEERCRED; the
// integration tests cover that), for tests of one part of the lake.

#ifndef GMLAKE_DAEMON_LAKE_TESTING_H_
#define GMLAKE_DAEMON_LAKE_TESTING_H_

#include <unistd.h>

#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "common/vmm.h"
#include "daemon/lake.h"
#include "gtest/gtest.h"

namespace gmlake {
namespace testing {

inline constexpr size_t kTestChunk = 2 << 20;

// One device of `capacity_chunks` 2 MiB chunks, `floor_chunks` precreated.
inline LakeOptions TestLakeOptions(uint64_t capacity_chunks,
                                   uint64_t floor_chunks = 0) {
  LakeOptions o;
  o.devices.push_back(
      {kTestChunk, capacity_chunks * kTestChunk, floor_chunks * kTestChunk});
  o.reclaim_timeout = absl::Seconds(5);
  o.fd_socket_path = "/test/fd.sock";
  return o;
}

class TestLake {
 public:
  explicit TestLake(LakeOptions options) {
    BackendOptions b;
    b.kind = "host";
    b.host_capacity_bytes = size_t{1} << 30;
    absl::StatusOr<std::unique_ptr<VmmBackend>> backend = CreateBackend(b);
    EXPECT_TRUE(backend.ok()) << backend.status();
    backend_ = *std::move(backend);
    absl::StatusOr<std::unique_ptr<Lake>> lake =
        Lake::Create(backend_.get(), std::move(options));
    EXPECT_TRUE(lake.ok()) << lake.status();
    lake_ = *std::move(lake);
  }

  Lake* operator->() { return lake_.get(); }
  VmmBackend* backend() { return backend_.get(); }
  Lake& lake() { return *lake_; }

  // Opens and binds a session of this process as `uid`.
  SessionTicket Open(uid_t uid, const std::string& name = "t") {
    absl::StatusOr<SessionTicket> t = lake_->OpenSession(::getpid(), name);
    EXPECT_TRUE(t.ok()) << t.status();
    EXPECT_TRUE(
        lake_->BindSession(t->id, t->token, {::getpid(), uid, uid}, nullptr)
            .ok());
    return *t;
  }

  v1::StatusResponse Status() {
    v1::StatusResponse st;
    lake_->FillStatus(&st);
    return st;
  }

 private:
  std::unique_ptr<VmmBackend> backend_;
  std::unique_ptr<Lake> lake_;
};

// Answers pressure as DaemonChunkSource does, from another thread: returns
// chunks of `ids` (each `chunk_bytes`) from the front until they cover
// what was asked, then reports usage. Answers the first request only.
//
// The answer is part of what a test checks, and its thread calls the lake:
// a test calls AwaitAnswer() before its lake goes away. The lake holds the
// sink and drops it only while it shuts down, so a thread joined in the
// destructor alone would call a lake that has ended its sessions (issue 16:
// ReportUsage failed 5 runs in 10 that way).
class ReturningSink : public PressureSink {
 public:
  ReturningSink(Lake* lake, SessionTicket t, std::vector<uint64_t> ids,
                uint64_t chunk_bytes = kTestChunk)
      : lake_(lake),
        t_(std::move(t)),
        ids_(std::move(ids)),
        chunk_bytes_(chunk_bytes) {}
  ~ReturningSink() override {
    // Let a held report go, so a test that forgot to await fails in its
    // expectations rather than hanging here.
    if (report_gate_ != nullptr && !report_gate_->HasBeenNotified()) {
      report_gate_->Notify();
    }
    if (thread_.joinable()) thread_.join();
  }

  // Holds the usage report, after the chunks went back, until `gate` is
  // notified: the slow answering thread of issue 16, made reproducible.
  // Call before the sink is attached.
  void HoldReportUntil(absl::Notification* gate) { report_gate_ = gate; }
  // What its usage report says it still caches after the answer (default
  // nothing): a session with more to give, that a lease could ask again.
  // Call before the sink is attached.
  void ReportCachedAfter(uint64_t bytes) { cached_after_ = bytes; }

  // Waits for the answer to the first request; returns how its Return and
  // ReportUsage went (FailedPrecondition if nothing was asked).
  absl::Status AwaitAnswer() {
    if (!thread_.joinable()) {
      return absl::FailedPreconditionError("the sink was never asked");
    }
    thread_.join();
    return answer_;
  }

  void Send(const Pressure& p) override {
    if (p.bytes == 0 || thread_.joinable()) return;
    thread_ = std::thread([this, p] {
      const uint64_t n = std::min<uint64_t>(
          ids_.size(), (p.bytes + chunk_bytes_ - 1) / chunk_bytes_);
      std::vector<uint64_t> give(ids_.begin(), ids_.begin() + n);
      answer_ = lake_->Return(t_.id, t_.token, give).status();
      if (report_gate_ != nullptr) report_gate_->WaitForNotification();
      DeviceUsageReport u{0, 0, cached_after_};
      absl::Status reported = lake_->ReportUsage(t_.id, t_.token, {u});
      if (answer_.ok()) answer_ = reported;
    });
  }
  void Close(const absl::Status&) override {}

 private:
  Lake* lake_;
  SessionTicket t_;
  std::vector<uint64_t> ids_;
  uint64_t chunk_bytes_;
  absl::Notification* report_gate_ = nullptr;
  uint64_t cached_after_ = 0;
  std::thread thread_;
  absl::Status answer_;  // written by thread_, read after it is joined
};

}  // namespace testing
}  // namespace gmlake

#endif  // GMLAKE_DAEMON_LAKE_TESTING_H_
