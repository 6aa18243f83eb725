// Copyright 2026 The GMLake Authors.
//
// Tests that play a hostile or broken client send bytes with a descriptor
// attached, outside the framing of common/fd_passing.h (SendFds frames its
// payload; these send whatever the test chose).

#ifndef GMLAKE_TESTS_SEND_WITH_FD_H_
#define GMLAKE_TESTS_SEND_WITH_FD_H_

#include <string>

namespace gmlake {
namespace testing {

// Sends `bytes` with `fd` attached (SCM_RIGHTS) on `sock`; the errno, or 0.
int SendWithFd(int sock, const std::string& bytes, int fd);

}  // namespace testing
}  // namespace gmlake

#endif  // GMLAKE_TESTS_SEND_WITH_FD_H_
