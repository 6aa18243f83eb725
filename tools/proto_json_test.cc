// Copyright 2026 The GMLake Authors.

#include "tools/proto_json.h"

#include <cstdint>
#include <limits>

#include "gtest/gtest.h"
#include "proto/gmlake.pb.h"
#include "proto/health.pb.h"

namespace gmlake {
namespace {

TEST(ProtoJson, SixtyFourBitCountsAreNumbers) {
  v1::StatusResponse st;
  st.set_leases_served(3);
  v1::DeviceStatus* d = st.add_devices();
  d->set_device(1);
  d->set_created_bytes(uint64_t{141} << 30);
  // Above 2^53: still exact.
  d->set_leased_bytes(std::numeric_limits<uint64_t>::max());
  v1::SessionStatus* s = st.add_sessions();
  s->set_uid(-1);
  s->set_name("trainer");
  s->set_age_seconds(1.5);

  const nlohmann::ordered_json j = ProtoToJson(st);
  EXPECT_TRUE(j["leases_served"].is_number_unsigned());
  EXPECT_EQ(j["leases_served"].get<uint64_t>(), 3u);
  EXPECT_EQ(j["devices"][0]["created_bytes"].get<uint64_t>(),
            uint64_t{141} << 30);
  EXPECT_EQ(j["devices"][0]["leased_bytes"].get<uint64_t>(),
            std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(j["sessions"][0]["uid"].get<int64_t>(), -1);
  EXPECT_EQ(j["sessions"][0]["age_seconds"].get<double>(), 1.5);
  EXPECT_EQ(j["sessions"][0]["name"], "trainer");
  // Unset fields are there, with their defaults.
  EXPECT_EQ(j["devices"][0]["free_chunks"].get<uint64_t>(), 0u);
  EXPECT_TRUE(j["sessions"][0]["leased"].is_array());
  EXPECT_EQ(j["backend"], "");

  const std::string text = ProtoToJsonText(st);
  EXPECT_NE(text.find("\"leases_served\": 3,"), std::string::npos) << text;
  EXPECT_NE(text.find("\"leased_bytes\": 18446744073709551615"),
            std::string::npos)
      << text;
  // It parses back.
  EXPECT_EQ(nlohmann::json::parse(text)["leases_served"], 3);
}

TEST(ProtoJson, EnumsByNameBytesInBase64NonFiniteAsNull) {
  grpc::health::v1::HealthCheckResponse h;
  h.set_status(grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(ProtoToJson(h)["status"], "NOT_SERVING");

  v1::WatchRequest w;
  w.set_token(std::string("\x00\xff", 2));
  EXPECT_EQ(ProtoToJson(w)["token"], "AP8=");

  v1::SessionStatus s;
  s.set_age_seconds(std::numeric_limits<double>::infinity());
  EXPECT_TRUE(ProtoToJson(s)["age_seconds"].is_null());
}

}  // namespace
}  // namespace gmlake
