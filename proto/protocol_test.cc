// Copyright 2026 The GMLake Authors.

#include "proto/protocol.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gmlake {
namespace {

using ::testing::HasSubstr;

TEST(Protocol, MismatchSaysWhichSideToUpgrade) {
  absl::Status older_client = VersionMismatch(1, 2);
  EXPECT_EQ(older_client.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(older_client.message(),
              HasSubstr("client speaks protocol 1, gmlaked speaks 2: "
                        "upgrade the client"));
  absl::Status newer_client = VersionMismatch(3, 2);
  EXPECT_THAT(newer_client.message(),
              HasSubstr("client speaks protocol 3, gmlaked speaks 2: "
                        "upgrade gmlaked"));
  EXPECT_THAT(VersionMismatch(0, 1).message(),
              HasSubstr("sent no protocol version"));
  EXPECT_GE(ProtocolVersion(), 1u);
}

TEST(Protocol, StatusCodesSurviveTheRoundTrip) {
  for (absl::StatusCode code :
       {absl::StatusCode::kInvalidArgument, absl::StatusCode::kNotFound,
        absl::StatusCode::kResourceExhausted,
        absl::StatusCode::kFailedPrecondition,
        absl::StatusCode::kPermissionDenied, absl::StatusCode::kUnavailable}) {
    absl::Status s(code, "why");
    EXPECT_EQ(FromGrpc(ToGrpc(s)), s);
  }
  EXPECT_TRUE(FromGrpc(ToGrpc(absl::OkStatus())).ok());
}

}  // namespace
}  // namespace gmlake
