// Copyright 2026 The GMLake Authors.
//
// The HTTP/2 bytes (RFC 9113, HPACK RFC 7541) with which gmlaked refuses a
// gRPC connection over a limit, so that the client's call fails with the
// reason rather than a broken pipe or a deadline.
//
// A GOAWAY alone is not enough: a gRPC client that meets one before its
// call was sent retries the call on a new connection, which is refused
// again, until its deadline ("Deadline Exceeded"). So the refused
// connection is sent the server's SETTINGS, the client's first stream is
// awaited (FirstStreamFinder) and answered with a trailers-only response,
// grpc-status RESOURCE_EXHAUSTED and the reason as grpc-message, then a
// GOAWAY; a client that opens no stream gets the GOAWAY alone.

#ifndef GMLAKE_DAEMON_HTTP2_REFUSAL_H_
#define GMLAKE_DAEMON_HTTP2_REFUSAL_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace gmlake {

// The server's connection preface: an empty SETTINGS frame.
std::string Http2ServerPreface();
// A SETTINGS frame acknowledging the client's.
std::string Http2SettingsAck();
// A GOAWAY (ENHANCE_YOUR_CALM) naming `last_stream` processed, with `why`
// (at most 512 bytes of it) as debug data, which gRPC logs.
std::string Http2GoAway(uint32_t last_stream, absl::string_view why);
// A HEADERS frame ending `stream` at once: HTTP 200, gRPC status `code`
// and `message` (percent-encoded as gRPC wants; at most 512 bytes).
std::string Http2GrpcTrailersOnly(uint32_t stream, int code,
                                  absl::string_view message);

// Reads a client's bytes as they come and finds the first stream it
// opens (its first HEADERS frame).
class FirstStreamFinder {
 public:
  // Takes the next bytes; then stream() is the stream's id once found.
  void Feed(absl::string_view bytes);
  // 0: none yet; the id of the first stream opened.
  uint32_t stream() const { return stream_; }
  // Not HTTP/2 (a wrong preface): nothing will be found.
  bool broken() const { return broken_; }

 private:
  std::string buffer_;
  bool preface_seen_ = false;
  bool broken_ = false;
  uint32_t stream_ = 0;
};

}  // namespace gmlake

#endif  // GMLAKE_DAEMON_HTTP2_REFUSAL_H_
