// Copyright 2026 The GMLake Authors.
//
// A Lake over a real host backend (memfd chunks) with sessions bound
// directly (the fd server takes identities from SO_PEERCRED; the
// integration tests cover that), for tests of one part of the lake.

#ifndef GMLAKE_DAEMON_LAKE_TESTING_H_
#define GMLAKE_DAEMON_LAKE_TESTING_H_

#include <unistd.h>

#include <memory>
#include <string>

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

}  // namespace testing
}  // namespace gmlake

#endif  // GMLAKE_DAEMON_LAKE_TESTING_H_
