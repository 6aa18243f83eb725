// Copyright 2026 The GMLake Authors.
//
// OperatorAccess: who may look at and tend the lake (the policy; the
// caller's credentials come from daemon/grpc_peer_credentials.h).
//
//   Trim    only root and gmlaked's own uid: it releases memory of the
//           whole node.
//   Status  the books (per device totals, counters, limits) are public;
//           sessions (pids, uids, job names, what each holds) are shown in
//           detail only to their own uid, and all of them to root and
//           gmlaked's uid. Unbound sessions have no uid yet: operators
//           only.
//
// A caller gmlaked could not identify is nobody's: it sees the totals and
// may not trim.

#ifndef GMLAKE_DAEMON_OPERATOR_ACCESS_H_
#define GMLAKE_DAEMON_OPERATOR_ACCESS_H_

#include <sys/types.h>

#include <optional>

#include "absl/status/status.h"
#include "common/fd_passing.h"
#include "proto/gmlake.pb.h"

namespace gmlake {

// The caller of a gRPC call: its connection's credentials, or nullopt when
// they are unknown.
using Caller = std::optional<PeerCredentials>;

class OperatorAccess {
 public:
  explicit OperatorAccess(uid_t daemon_uid) : daemon_uid_(daemon_uid) {}

  uid_t daemon_uid() const { return daemon_uid_; }
  // Root or gmlaked's own uid.
  bool IsOperator(const Caller& caller) const;
  // OK, or PermissionDenied saying who may and who asked.
  absl::Status MayTrim(const Caller& caller) const;
  // Leaves in `status` only the sessions `caller` may see, and says whom it
  // was shown to (caller_uid, daemon_uid) and how many it left out
  // (sessions_hidden).
  void ShowTo(const Caller& caller, v1::StatusResponse* status) const;

 private:
  const uid_t daemon_uid_;
};

}  // namespace gmlake

#endif  // GMLAKE_DAEMON_OPERATOR_ACCESS_H_
