// Copyright 2026 The GMLake Authors.
//
// What both ends of the gmlaked protocol agree on beyond the messages: the
// protocol version, the words of a version mismatch, and the mapping
// between absl::Status and grpc::Status (their codes are the same numbers).

#ifndef GMLAKE_PROTO_PROTOCOL_H_
#define GMLAKE_PROTO_PROTOCOL_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace gmlake {

// The version this build speaks (gmlake.v1.PROTOCOL_VERSION_CURRENT).
uint32_t ProtocolVersion();

// FailedPrecondition: "client speaks protocol 1, gmlaked speaks 2: upgrade
// the client ...", telling the reader which side to upgrade. Used by the
// daemon (refusing a client) and by the client (refusing a daemon).
absl::Status VersionMismatch(uint32_t client_version, uint32_t daemon_version);

grpc::Status ToGrpc(const absl::Status& status);
absl::Status FromGrpc(const grpc::Status& status);

}  // namespace gmlake

#endif  // GMLAKE_PROTO_PROTOCOL_H_
