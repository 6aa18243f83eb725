// Copyright 2026 The GMLake Authors.

#include "proto/protocol.h"

#include "absl/strings/str_cat.h"
#include "proto/gmlake.pb.h"

namespace gmlake {

uint32_t ProtocolVersion() { return v1::PROTOCOL_VERSION_CURRENT; }

absl::Status VersionMismatch(uint32_t client_version, uint32_t daemon_version) {
  std::string advice;
  if (client_version == 0) {
    advice =
        "the client sent no protocol version: it predates versioning or is "
        "not a GMLake client; upgrade it to the GMLake release of gmlaked";
  } else if (client_version < daemon_version) {
    advice =
        "upgrade the client (the GMLake library linked into the training "
        "process) to the release of gmlaked, or run the gmlaked of the "
        "client's release";
  } else {
    advice =
        "upgrade gmlaked (and restart it) to the client's GMLake release, "
        "or use a client of gmlaked's release";
  }
  return absl::FailedPreconditionError(
      absl::StrCat("client speaks protocol ", client_version,
                   ", gmlaked speaks ", daemon_version, ": ", advice));
}

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

}  // namespace gmlake
