// Copyright 2026 The GMLake Authors.
//
// SessionTable: gmlaked's sessions, from OpenSession to their end, and the
// decisions about them that need no chunk: who may open and bind (the caps
// on sessions in all, per uid and unbound), which token is whose, which
// sessions must end because their process is gone or they never bound,
// which granted leases were never claimed. The Lake acts on what it says
// (ending a session frees its chunks, runs its hooks).
//
// A session is opened over gRPC with a claimed pid and becomes usable only
// once bound on the fd socket, where the daemon learns the peer's real
// pid/uid/gid (SO_PEERCRED). A session that ended while its process still
// runs and may still map its chunks is kept apart, as ended, until the
// process exits.
//
// Not thread-safe: the Lake calls it under its lock.

#ifndef GMLAKE_DAEMON_SESSION_TABLE_H_
#define GMLAKE_DAEMON_SESSION_TABLE_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/process_watch.h"

namespace gmlake {

// The real identity of a client, from SO_PEERCRED.
struct PeerIdentity {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

// A request for memory back, sent on a session's Watch stream.
struct Pressure {
  int device = 0;
  uint64_t bytes = 0;
  std::string reason;
};

// Where a session's pressure requests go (its Watch stream). Implementations
// must not block and must not call back into the Lake from Send or Close.
class PressureSink {
 public:
  virtual ~PressureSink() = default;
  // Queues a request to the client.
  virtual void Send(const Pressure& pressure) = 0;
  // The session has ended (`why`): finish the stream.
  virtual void Close(const absl::Status& why) = 0;
};

struct DeviceUsageReport {
  int device = 0;
  uint64_t used_bytes = 0;
  uint64_t cached_bytes = 0;
};

struct Session {
  uint64_t id = 0;
  std::string token;
  pid_t claimed_pid = 0;
  // The uid of the gRPC connection that opened it, when gmlaked could tell
  // (SO_PEERCRED): only that uid may bind it and call for it.
  std::optional<uid_t> opener_uid;
  std::string name;
  absl::Time opened;
  bool bound = false;
  PeerIdentity peer;
  ProcessWatch process;  // once bound
  std::function<void()> on_end;
  std::shared_ptr<PressureSink> sink;
  std::map<int, DeviceUsageReport> usage;
  // Answers to pressure (ReportUsage calls), and requests sent to it and
  // not answered yet. A client answers its requests one by one, in order,
  // so the answer to a request sent now is answer number reports +
  // pressure_outstanding.
  uint64_t reports = 0;
  uint64_t pressure_outstanding = 0;
  // A pressure request sent to this session and not settled yet
  // (lake_lease.cc; judged by daemon/pressure_policy.h).
  struct PressureDebt {
    int device = 0;
    uint64_t beneficiary = 0;  // the session whose lease asked
    uint64_t asked = 0;
    uint64_t promised = 0;     // the part its cache report covered
    uint64_t returned = 0;     // returned since
    uint64_t answer_due = 0;   // answered once reports reach this
    absl::Time last_progress;  // asked, or bytes came
    bool overdue = false;      // silent past its patience, counted so
  };
  std::vector<PressureDebt> debts;
  // Requests it lately settled without returning what it promised (0 after
  // one it delivered in full): the policy discounts its cache reports.
  uint32_t undelivered = 0;
  // When it last settled a request short (or let it pass) for each
  // beneficiary: a lease waiting since before then does not ask it again.
  absl::flat_hash_map<uint64_t, absl::Time> short_for;
  // Per device: its recent grants (when, bytes) and the most it held since
  // it last gave back memory of its own accord at that peak: what it will
  // need again when it takes its turn (Lake::NoteReturnedLocked).
  struct Growth {
    std::vector<std::pair<absl::Time, uint64_t>> grants;
    uint64_t peak = 0;
  };
  std::map<int, Growth> growth;
  // Per device: capacity other sessions gave back for this one's leases
  // under pressure as chunks their clients made (gone, not free in the
  // lake), until it gives back itself. Under --prefer_reclaim its leases
  // grow into it without asking again (Lake::AdmitLeaseLocked).
  std::map<int, uint64_t> reclaimed_room;
  // Leases granted and not claimed yet (their descriptors not delivered).
  struct Unclaimed {
    std::vector<uint64_t> chunk_ids;
    absl::Time granted;
  };
  absl::flat_hash_map<uint64_t, Unclaimed> unclaimed;
  // Ended while its process still ran: kept until the process exits.
  bool ended = false;
  std::string end_reason;

  // "session 3 (trainer, pid 1234)", for messages.
  std::string Label() const;
};

struct SessionLimits {
  size_t max_sessions = 8192;
  size_t max_per_uid = 512;
  size_t max_unbound = 128;
  absl::Duration unbound_eviction_age = absl::Seconds(1);
  absl::Duration bind_timeout = absl::Seconds(10);
  absl::Duration claim_timeout = absl::Seconds(30);
  bool check_claimed_pid = true;
};

class SessionTable {
 public:
  explicit SessionTable(SessionLimits limits) : limits_(limits) {}
  SessionTable(const SessionTable&) = delete;
  SessionTable& operator=(const SessionTable&) = delete;

  // --- Opening and binding
  // ----------------------------------------------------

  // Whether a session may open now. OK, with *evict set (else 0) to an
  // unbound session to end first: at max_unbound, the one that has waited
  // longest gives its place once it has waited unbound_eviction_age.
  // ResourceExhausted naming the flag otherwise.
  absl::Status CheckOpen(absl::Time now, uint64_t* evict) const;
  // Adds an unbound session. `name` is cut to 128 bytes.
  Session* Add(pid_t claimed_pid, absl::string_view name, std::string token,
               absl::Time now, std::optional<uid_t> opener_uid = std::nullopt);
  // Whether `s` may be bound to `peer`: FailedPrecondition when bound
  // already, PermissionDenied for a pid that is not the claimed one (with
  // check_claimed_pid) or a uid that is not the opener's, ResourceExhausted
  // when the uid has max_per_uid sessions (ended ones still holding chunks
  // count).
  absl::Status CheckBind(const Session& s, const PeerIdentity& peer) const;
  // Binds `s` and starts watching its process.
  void Bind(Session* s, const PeerIdentity& peer, std::function<void()> on_end);

  // Whether a call by `caller_uid` (nullopt: unknown, allowed) may act for
  // `s`: PermissionDenied, saying whose the session is, when `s` belongs to
  // another uid (its peer's once bound, else its opener's). A token alone
  // does not make a session anyone's.
  static absl::Status CheckCaller(const Session& s,
                                  std::optional<uid_t> caller_uid);

  // --- Finding
  // ----------------------------------------------------------------

  // The live session `id` if `token` is its: NotFound / PermissionDenied.
  absl::StatusOr<Session*> Find(uint64_t id, absl::string_view token) const;
  // The live session `id`, or null.
  Session* Live(uint64_t id) const;
  // The live or ended-and-kept session `id`, or null.
  Session* Any(uint64_t id) const;
  const absl::flat_hash_map<uint64_t, std::unique_ptr<Session>>& live() const {
    return live_;
  }
  const absl::flat_hash_map<uint64_t, std::unique_ptr<Session>>& ended() const {
    return ended_;
  }

  // --- Ending
  // -----------------------------------------------------------------

  // Takes a live session out: it has ended.
  std::unique_ptr<Session> Remove(uint64_t id);
  // Keeps an ended session whose process still runs (and may map its
  // chunks) until RemoveEnded.
  void KeepEnded(std::unique_ptr<Session> s, absl::string_view reason);
  std::unique_ptr<Session> RemoveEnded(uint64_t id);

  // --- Leases to claim
  // --------------------------------------------------------

  void AddUnclaimed(Session* s, uint64_t lease, std::vector<uint64_t> ids,
                    absl::Time now);
  // The chunk ids of `lease`, which `session` (with `token`) claims now, at
  // most once. NotFound for an unknown or claimed lease, PermissionDenied
  // for another session's.
  absl::StatusOr<std::vector<uint64_t>> Claim(uint64_t session,
                                              absl::string_view token,
                                              uint64_t lease);
  // Takes the session's unclaimed leases out; returns their chunk ids.
  std::vector<uint64_t> TakeUnclaimed(Session* s);
  // Takes one unclaimed lease out; returns its chunk ids.
  std::vector<uint64_t> TakeUnclaimed(Session* s, uint64_t lease);
  // Chunks returned before their lease was claimed leave it.
  static void DropFromUnclaimed(Session* s,
                                const absl::flat_hash_set<uint64_t>& ids);

  // --- Liveness
  // ---------------------------------------------------------------

  // Live sessions that must end, and why: never bound within bind_timeout,
  // or bound to a process that is gone.
  std::vector<std::pair<uint64_t, std::string>> ToEnd(absl::Time now) const;
  // Ended sessions whose process has exited (or that hold nothing to wait
  // for: `holds(id)` false).
  std::vector<uint64_t> EndedAndDone(
      const std::function<bool(uint64_t)>& holds) const;
  // (session, lease) of leases not claimed within claim_timeout.
  std::vector<std::pair<uint64_t, uint64_t>> ExpiredUnclaimed(
      absl::Time now) const;

 private:
  const SessionLimits limits_;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Session>> live_;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Session>> ended_;
  // Lease id -> session, for telling "another session's lease" apart.
  absl::flat_hash_map<uint64_t, uint64_t> lease_owner_;
  uint64_t next_id_ = 1;
};

}  // namespace gmlake

#endif  // GMLAKE_DAEMON_SESSION_TABLE_H_
