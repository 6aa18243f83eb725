// Copyright 2026 The GMLake Authors.

#include "daemon/http2_refusal.h"

#include <string>

#include "gtest/gtest.h"

namespace gmlake {
namespace {

std::string Frame(uint8_t type, uint32_t stream, const std::string& payload) {
  std::string f = {
      0, 0, static_cast<char>(payload.size()), static_cast<char>(type), 0, 0,
      0, 0, static_cast<char>(stream)};
  return f + payload;
}

const std::string kPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

TEST(FirstStreamFinder, FindsTheFirstHeadersFrameByteByByte) {
  const std::string client = kPreface + Frame(0x4, 0, "") +
                             Frame(0x8, 0, "wind") + Frame(0x1, 1, "hdrs");
  FirstStreamFinder f;
  // Found with the HEADERS frame's header, its last byte the stream's.
  const size_t found_at = client.size() - 4;
  for (size_t i = 0; i < client.size(); ++i) {
    EXPECT_EQ(f.stream(), 0u) << i;
    f.Feed(client.substr(i, 1));
    if (i + 1 == found_at) break;
  }
  EXPECT_EQ(f.stream(), 1u);
  EXPECT_FALSE(f.broken());
}

TEST(FirstStreamFinder, NotHttp2IsBroken) {
  FirstStreamFinder f;
  f.Feed("GET / HTTP/1.1\r\n");
  EXPECT_TRUE(f.broken());
  EXPECT_EQ(f.stream(), 0u);
}

// A frame that announces megabytes is not waited for past 64 KiB.
TEST(FirstStreamFinder, AHugeFrameIsNotBuffered) {
  FirstStreamFinder f;
  f.Feed(kPreface + std::string("\xff\xff\xff\x00\x00\x00\x00\x00\x00", 9));
  const std::string data(4096, 'd');
  int fed = 0;
  for (; fed < 1000 && !f.broken(); ++fed) f.Feed(data);
  EXPECT_TRUE(f.broken());
  EXPECT_LE(fed, 17);
}

TEST(Http2Refusal, TrailersOnlyCarriesStatusAndEncodedMessage) {
  const std::string h = Http2GrpcTrailersOnly(3, 8, "50% used\n");
  ASSERT_GE(h.size(), 9u);
  EXPECT_EQ(h[3], 0x1);  // HEADERS
  EXPECT_EQ(h[4], 0x5);  // END_STREAM | END_HEADERS
  EXPECT_EQ(h[8], 3);    // the stream
  const size_t len = (static_cast<unsigned char>(h[1]) << 8) |
                     static_cast<unsigned char>(h[2]);
  EXPECT_EQ(len, h.size() - 9);
  EXPECT_NE(h.find("grpc-status\x01"
                   "8"),
            std::string::npos);
  EXPECT_NE(h.find("50%25 used%0A"), std::string::npos);
}

TEST(Http2Refusal, LongValuesUseMultiByteLengths) {
  const std::string why(300, 'a');
  const std::string h = Http2GrpcTrailersOnly(1, 8, why);
  // 300 = 127 + 173: 0x7f, then 173 as 0xad | 0x80 ... = 0xad, 0x01.
  EXPECT_NE(h.find(std::string("\x7f\xad\x01", 3) + why), std::string::npos);
}

TEST(Http2Refusal, GoAwayNamesTheLastStreamAndWhy) {
  const std::string g = Http2GoAway(5, "too many");
  EXPECT_EQ(g[3], 0x7);
  EXPECT_EQ(g.substr(9, 8), std::string("\0\0\0\x05\0\0\0\x0b", 8));
  EXPECT_EQ(g.substr(17), "too many");
}

}  // namespace
}  // namespace gmlake
