// Copyright 2026 The GMLake Authors.
//
// Session tokens: what ties a client's gRPC calls to the session it opened.
// Unguessable (16 bytes from the kernel's random source) and compared in
// constant time, so neither guessing nor timing finds another's.

#ifndef GMLAKE_DAEMON_SESSION_TOKEN_H_
#define GMLAKE_DAEMON_SESSION_TOKEN_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gmlake {

inline constexpr size_t kSessionTokenBytes = 16;

// A new token: getrandom, or /dev/urandom where getrandom is refused (a
// sandbox). Unavailable when neither gives randomness: a guessable token
// would let one client act for another, so there is no weaker fallback.
absl::StatusOr<std::string> NewSessionToken();

// Compares without an early exit, so timing does not tell how much of a
// guessed token was right.
bool TokensEqual(absl::string_view a, absl::string_view b);

}  // namespace gmlake

#endif  // GMLAKE_DAEMON_SESSION_TOKEN_H_
