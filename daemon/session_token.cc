// Copyright 2026 The GMLake Authors.

#include "daemon/session_token.h"

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/unique_fd.h"

namespace gmlake {
namespace {

// Fills `out` from `read` (getrandom or read), retrying short reads and
// EINTR. False when it gives up.
template <typename ReadFn>
bool Fill(std::string* out, ReadFn read) {
  size_t done = 0;
  while (done < out->size()) {
    const ssize_t n = read(&(*out)[done], out->size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

absl::StatusOr<std::string> NewSessionToken() {
  std::string token(kSessionTokenBytes, '\0');
  if (Fill(&token, [](char* p, size_t n) { return ::getrandom(p, n, 0); })) {
    return token;
  }
  const int getrandom_errno = errno;
  UniqueFd urandom(::open("/dev/urandom", O_RDONLY | O_CLOEXEC));
  if (urandom.valid() && Fill(&token, [&](char* p, size_t n) {
        return ::read(urandom.get(), p, n);
      })) {
    return token;
  }
  return absl::UnavailableError(absl::StrCat(
      "gmlaked has no source of randomness for session tokens (getrandom: ",
      std::strerror(getrandom_errno),
      "; /dev/urandom unreadable); allow getrandom in its sandbox"));
}

bool TokensEqual(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return diff == 0;
}

}  // namespace gmlake
