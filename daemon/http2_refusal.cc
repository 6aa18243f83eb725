// Copyright 2026 The GMLake Authors.

#include "daemon/http2_refusal.h"

#include <algorithm>
#include <cstddef>

#include "absl/strings/str_format.h"

namespace gmlake {
namespace {

constexpr absl::string_view kClientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
constexpr size_t kFrameHeader = 9;
constexpr uint8_t kHeaders = 0x1, kSettings = 0x4, kGoAway = 0x7;
constexpr uint8_t kEndStream = 0x1, kEndHeaders = 0x4, kAck = 0x1;
constexpr uint32_t kEnhanceYourCalm = 0xb;
constexpr size_t kMaxText = 512;
// A client's frames are read no further than this while it opens nothing.
constexpr size_t kMaxBuffered = 64 << 10;

void Put32(std::string* out, uint32_t v) {
  out->push_back(static_cast<char>(v >> 24));
  out->push_back(static_cast<char>(v >> 16));
  out->push_back(static_cast<char>(v >> 8));
  out->push_back(static_cast<char>(v));
}

std::string Frame(uint8_t type, uint8_t flags, uint32_t stream,
                  absl::string_view payload) {
  std::string out;
  const size_t len = payload.size();
  out.push_back(static_cast<char>(len >> 16));
  out.push_back(static_cast<char>(len >> 8));
  out.push_back(static_cast<char>(len));
  out.push_back(static_cast<char>(type));
  out.push_back(static_cast<char>(flags));
  Put32(&out, stream & 0x7fffffff);
  out.append(payload.data(), payload.size());
  return out;
}

// HPACK integer with a 7-bit prefix (RFC 7541 §5.1), H (Huffman) clear.
void PutLength(std::string* out, size_t v) {
  if (v < 127) {
    out->push_back(static_cast<char>(v));
    return;
  }
  out->push_back(127);
  v -= 127;
  while (v >= 128) {
    out->push_back(static_cast<char>(0x80 | (v & 0x7f)));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

// Literal header field without indexing, new name (RFC 7541 §6.2.2).
void PutHeader(std::string* out, absl::string_view name,
               absl::string_view value) {
  out->push_back(0);
  PutLength(out, name.size());
  out->append(name.data(), name.size());
  PutLength(out, value.size());
  out->append(value.data(), value.size());
}

// gRPC's grpc-message: percent-encoded outside printable ASCII and '%'.
std::string PercentEncode(absl::string_view text) {
  std::string out;
  for (char c : text.substr(0, kMaxText)) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u > 0x7e || c == '%') {
      out += absl::StrFormat("%%%02X", u);
    } else {
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace

std::string Http2ServerPreface() { return Frame(kSettings, 0, 0, ""); }

std::string Http2SettingsAck() { return Frame(kSettings, kAck, 0, ""); }

std::string Http2GoAway(uint32_t last_stream, absl::string_view why) {
  std::string payload;
  Put32(&payload, last_stream & 0x7fffffff);
  Put32(&payload, kEnhanceYourCalm);
  payload.append(why.substr(0, kMaxText).data(),
                 why.substr(0, kMaxText).size());
  return Frame(kGoAway, 0, 0, payload);
}

std::string Http2GrpcTrailersOnly(uint32_t stream, int code,
                                  absl::string_view message) {
  std::string block;
  PutHeader(&block, ":status", "200");
  PutHeader(&block, "content-type", "application/grpc");
  PutHeader(&block, "grpc-status", absl::StrFormat("%d", code));
  PutHeader(&block, "grpc-message", PercentEncode(message));
  return Frame(kHeaders, kEndStream | kEndHeaders, stream, block);
}

void FirstStreamFinder::Feed(absl::string_view bytes) {
  if (broken_ || stream_ != 0) return;
  buffer_.append(bytes.data(), bytes.size());
  if (!preface_seen_) {
    const size_t n = std::min(buffer_.size(), kClientPreface.size());
    if (absl::string_view(buffer_).substr(0, n) !=
        kClientPreface.substr(0, n)) {
      broken_ = true;
      return;
    }
    if (buffer_.size() < kClientPreface.size()) return;
    buffer_.erase(0, kClientPreface.size());
    preface_seen_ = true;
  }
  // Whole frames, skipped until a HEADERS frame opens a stream.
  while (buffer_.size() >= kFrameHeader) {
    const auto* h = reinterpret_cast<const unsigned char*>(buffer_.data());
    const size_t len = (size_t{h[0]} << 16) | (size_t{h[1]} << 8) | h[2];
    const uint32_t stream = ((uint32_t{h[5]} << 24) | (uint32_t{h[6]} << 16) |
                             (uint32_t{h[7]} << 8) | h[8]) &
                            0x7fffffff;
    if (h[3] == kHeaders && stream != 0) {
      stream_ = stream;
      buffer_.clear();
      return;
    }
    if (buffer_.size() < kFrameHeader + len) break;
    buffer_.erase(0, kFrameHeader + len);
  }
  if (buffer_.size() > kMaxBuffered) broken_ = true;
}

}  // namespace gmlake
