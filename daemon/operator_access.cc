// Copyright 2026 The GMLake Authors.

#include "daemon/operator_access.h"

#include <utility>

#include "absl/strings/str_format.h"

namespace gmlake {

bool OperatorAccess::IsOperator(const Caller& caller) const {
  return caller.has_value() && (caller->uid == 0 || caller->uid == daemon_uid_);
}

absl::Status OperatorAccess::MayTrim(const Caller& caller) const {
  if (IsOperator(caller)) return absl::OkStatus();
  const std::string who =
      caller.has_value()
          ? absl::StrFormat("uid %d (pid %d) may not", caller->uid, caller->pid)
          : std::string(
                "gmlaked cannot tell who is calling (the connection "
                "did not come through its gRPC socket)");
  return absl::PermissionDeniedError(absl::StrFormat(
      "trim releases memory of the whole node: only root and gmlaked's own "
      "uid (%d) may trim; %s. Run it as root (sudo gmlakectl trim)",
      daemon_uid_, who));
}

void OperatorAccess::ShowTo(const Caller& caller,
                            v1::StatusResponse* status) const {
  status->set_caller_uid(caller.has_value() ? static_cast<int64_t>(caller->uid)
                                            : int64_t{-1});
  status->set_daemon_uid(daemon_uid_);
  if (IsOperator(caller)) {
    status->set_sessions_hidden(0);
    return;
  }
  auto* sessions = status->mutable_sessions();
  uint64_t hidden = 0;
  int kept = 0;
  for (int i = 0; i < sessions->size(); ++i) {
    const v1::SessionStatus& s = sessions->Get(i);
    // An unbound session's uid is -1: nobody's yet.
    const bool own = caller.has_value() && s.uid() >= 0 &&
                     s.uid() == static_cast<int64_t>(caller->uid);
    if (!own) {
      ++hidden;
      continue;
    }
    if (kept != i) sessions->SwapElements(kept, i);
    ++kept;
  }
  sessions->DeleteSubrange(kept, sessions->size() - kept);
  status->set_sessions_hidden(hidden);
}

}  // namespace gmlake
