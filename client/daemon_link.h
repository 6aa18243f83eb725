// Copyright 2026 The GMLake Authors.
//
// DaemonChunkSource's link to one gmlaked session: the gRPC channel, stub
// and Watch call, the session and its token. Private to the source (its
// header keeps gRPC out of its includers); a restarted daemon gets a new
// link, and calls in flight keep theirs.

#ifndef GMLAKE_CLIENT_DAEMON_LINK_H_
#define GMLAKE_CLIENT_DAEMON_LINK_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/daemon_chunk_source.h"
#include "common/mutex.h"
#include "common/unique_fd.h"
#include "grpcpp/grpcpp.h"
#include "proto/gmlake.grpc.pb.h"

namespace gmlake {

struct DaemonChunkSource::Rpc {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Lake::Stub> stub;
  grpc::ClientContext watch_ctx;
  // Notified when the Watch stream's hello came (hello set) or it failed.
  Notification watching;
  std::atomic<bool> hello{false};
  uint64_t session = 0;
  std::string token;
  // DaemonChunkSource::epoch_ while this link is the current one.
  uint64_t epoch = 0;
};

// Helpers shared by the source's files (daemon_*.cc).
namespace daemon_link {

// The source whose pressure request this thread is answering, if any:
// chunks it gives back meanwhile count as given for pressure
// (daemon_pressure_answer.cc sets it, GiveBack reads it).
extern thread_local const DaemonChunkSource* answering_pressure;

// The usage figures every request to gmlaked carries.
template <typename Figures>
void AddUsage(const Figures& usage,
              google::protobuf::RepeatedPtrField<v1::DeviceUsage>* out) {
  for (const auto& u : usage) {
    v1::DeviceUsage* du = out->Add();
    du->set_device(u.device);
    du->set_used_bytes(u.used);
    du->set_cached_bytes(u.cached);
  }
}

// Largest FdReply payload accepted (a batch of 253 ids is ~2.6 KiB).
inline constexpr size_t kMaxReplyBytes = 64 * 1024;
// A reply on the fd socket must come within this, or the daemon is stuck.
inline constexpr absl::Duration kFdSocketTimeout = absl::Seconds(15);

inline void SetDeadline(grpc::ClientContext* ctx, absl::Duration d) {
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + d));
}

inline absl::Status WithContext(absl::string_view what, const absl::Status& s) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
}

// One FdReply on the fd socket, with its descriptors.
absl::StatusOr<v1::FdReply> ReadReply(int sock, std::vector<UniqueFd>* fds);

}  // namespace daemon_link

}  // namespace gmlake

#endif  // GMLAKE_CLIENT_DAEMON_LINK_H_
