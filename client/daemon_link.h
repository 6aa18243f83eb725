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

#include "client/daemon_chunk_source.h"
#include "common/mutex.h"
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

}  // namespace gmlake

#endif  // GMLAKE_CLIENT_DAEMON_LINK_H_
