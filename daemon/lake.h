// Copyright 2026 The GMLake Authors.
//
// Lake: gmlaked's books of the lake, the node's pool of chunks that it
// leases to processes, and the one lock over them. It is no ChunkSource:
// processes reach it through DaemonChunkSource (client/), and EmbeddedLake
// is the in-process pool used without gmlaked (docs/design.md, Names).
// It ties together the
// chunks (ChunkBooks: every chunk in exactly one state, and who holds it),
// the sessions (SessionTable: who may open, bind, claim, and when a
// session ends), the pressure policy (whom to ask for memory) and the
// backend (creating, zeroing and releasing chunks).
//
// A lease runs in three steps: admission under the lock (checks, quotas,
// pressure rounds while it waits for memory), the slow work without it
// (zeroing chunks that held another uid's data, creating new ones; the
// chunks belong to the lease meanwhile, so nothing else can take them),
// and the grant under the lock (to its session if still there, otherwise
// back to the lake).
//
// created = free + leased + scrubbing, per device, at every moment the lock
// is not held (chunks reserved by leases in flight count as leased).
// Chunks are created on demand (or ahead of time) up to a capacity per
// device, and exported whenever a lease sends them (the first export,
// ~0.6 ms on an H200, at creation; ~26 us after), so the daemon keeps no
// descriptor per chunk (or, without export_on_demand, exported once with the
// descriptor kept, and each lease sends a duplicate). Free chunks idle long
// enough go back to the driver (ReleaseIdle, daemon/release_policy.h).
//
// Thread-safe. Callbacks (PressureSink, end-of-session hooks) are always
// called without the lock held, and nothing under the lock throws or waits
// on another process.

#ifndef GMLAKE_DAEMON_LAKE_H_
#define GMLAKE_DAEMON_LAKE_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/fd_usage.h"
#include "common/mutex.h"
#include "common/unique_fd.h"
#include "common/vmm.h"
#include "daemon/chunk_books.h"
#include "daemon/chunk_identity.h"
#include "daemon/histogram.h"
#include "daemon/pressure_policy.h"
#include "daemon/release_policy.h"
#include "daemon/scrub_policy.h"
#include "daemon/session_table.h"
#include "proto/gmlake.pb.h"

namespace gmlake {

struct LakeDeviceConfig {
  // The unit of chunks on the device: a positive multiple of the backend's
  // granularity. Every chunk is a multiple of it (leases name their chunks'
  // size); precreated chunks and leases that name none are of this size.
  size_t chunk_size = 0;
  // The most bytes the lake creates on the device (rounded down to chunks).
  uint64_t capacity_bytes = 0;
  // Bytes to create at start-up, before any lease (<= capacity).
  uint64_t precreate_bytes = 0;
};

struct LakeOptions {
  // One entry per device the backend has, in device order.
  std::vector<LakeDeviceConfig> devices;
  // Most bytes all sessions of one uid may hold, over all devices (0: no
  // limit). Flag name, for messages: --uid_quota.
  uint64_t uid_quota_bytes = 0;
  // Most bytes one session may hold, over all devices (0: no limit).
  // --session_quota.
  uint64_t session_quota_bytes = 0;
  ScrubPolicy scrub = ScrubPolicy::kCrossUid;
  // Zero chunks that held a session's data as they go back to the driver
  // (--zero_on_release). Off: they go back as they are, and as many bytes
  // of what the daemon creates next on that device are zeroed before they
  // are leased (the driver may hand the daemon its own memory back), so a
  // job's end gives the card back at the driver's release speed.
  bool zero_on_release = false;
  // How long a lease waits for other sessions to return memory while none
  // arrives: every byte that comes back restarts it (--reclaim_timeout).
  absl::Duration reclaim_timeout = absl::Seconds(2);
  // How long an asked session has to answer (or return a first byte, or
  // the next) before the lease asks others for what it owes, and the
  // session's cache reports are discounted (--pressure_patience; at most
  // reclaim_timeout).
  absl::Duration pressure_patience = absl::Milliseconds(500);
  // The window over which a session's recent growth is measured: a short
  // lease asks for at least what its session leased over it
  // (--pressure_growth_window; daemon/pressure_policy.h).
  absl::Duration pressure_growth_window = absl::Seconds(2);
  // A want back to a session's peak adds 1/this of the peak (0: none;
  // --pressure_peak_margin_divisor; daemon/pressure_policy.h).
  uint64_t pressure_peak_margin_divisor = kDefaultPeakMarginDivisor;
  // Most leases waiting for memory at once, over all uids and per uid
  // (--max_waiting_leases, --max_waiting_leases_per_uid). A waiting lease
  // holds a gRPC thread; past these, a lease that would wait fails at once.
  size_t max_waiting_leases = 64;
  size_t max_waiting_leases_per_uid = 16;
  // Before creating new chunks for a lease, ask the other sessions for the
  // memory they cache and do not use (bounded by reclaim_timeout), and
  // create only what they did not give. Keeps the node's footprint near
  // what its processes use, at the price of pressure rounds while a session
  // grows beside others that hold memory. --prefer_reclaim.
  bool prefer_reclaim = false;
  // Sessions not bound on the fd socket within this are dropped.
  absl::Duration bind_timeout = absl::Seconds(10);
  // Leases whose descriptors are not claimed within this go back.
  absl::Duration claim_timeout = absl::Seconds(30);
  // Most sessions at once.
  size_t max_sessions = 8192;
  // Most sessions one uid may have bound at once, ended ones still holding
  // chunks included (--max_sessions_per_uid): one uid cannot take every
  // session.
  size_t max_sessions_per_uid = 512;
  // Most sessions opened and not bound yet (--max_unbound_sessions). The
  // uid of a session is known only once bound, so these are capped apart:
  // at the cap, a new session takes the place of the one that has waited
  // longest if that one has waited unbound_eviction_age (clients bind right
  // after opening), and is refused otherwise.
  size_t max_unbound_sessions = 128;
  absl::Duration unbound_eviction_age = absl::Seconds(1);
  // Whether the fd-socket peer's pid must equal the pid claimed at
  // OpenSession (turn off for clients in another pid namespace).
  bool check_claimed_pid = true;
  // Reported to clients in OpenSession.
  std::string fd_socket_path;
  // Which free chunks go back to the driver on their own (ReleaseIdle);
  // each device's floor is its precreate_bytes.
  ReleasePolicy release;
  // Export a chunk each time its descriptor is sent (DupChunkFds), instead
  // of keeping one exported descriptor per chunk: the daemon's descriptors
  // then do not grow with the lake (70 000 chunks of 2 MiB fill an H200;
  // a re-export costs ~26 us there; the first export, ~0.6 ms, is still
  // paid when the chunk is created). --export_on_demand.
  bool export_on_demand = true;
  // Tests only: called without the lock before a lease zeroes chunks, so a
  // test can act while the lease is in flight (gmlaked
  // --testonly_scrub_gate).
  std::function<void()> testonly_before_lease_scrub;
};

struct SessionTicket {
  uint64_t id = 0;
  std::string token;
};

struct LeaseGrant {
  uint64_t lease_id = 0;
  int device = 0;
  size_t chunk_size = 0;  // of each of its chunks
  std::vector<uint64_t> chunk_ids;
  bool client_makes = false;  // capacity: the client makes the chunks
};

class Lake {
 public:
  // Checks `options` against `backend` (which must outlive the lake and
  // have memory that can be exported) and creates the precreate chunks.
  // InvalidArgument naming the bad option.
  static absl::StatusOr<std::unique_ptr<Lake>> Create(VmmBackend* backend,
                                                      LakeOptions options);
  // Ends every session and releases every chunk.
  ~Lake();
  Lake(const Lake&) = delete;
  Lake& operator=(const Lake&) = delete;

  VmmBackend* backend() const { return backend_; }
  const LakeOptions& options() const { return options_; }

  // --- Sessions --------------------------------------------------------------

  // Opens an unbound session for a client that says it is `claimed_pid`.
  // ResourceExhausted past max_sessions or max_unbound_sessions.
  // `opener_uid`: the uid of the caller's connection, when known; only it
  // may then bind the session and call for it (CheckCaller).
  absl::StatusOr<SessionTicket> OpenSession(
      pid_t claimed_pid, absl::string_view name,
      std::optional<uid_t> opener_uid = std::nullopt);
  // Binds a session to the fd-socket connection whose peer is `peer`. From
  // then on the session is usable, its uid/gid are the peer's and
  // `on_end` (may be null) is called once when the session ends, for any
  // reason. PermissionDenied for a bad token, a pid that is not the claimed
  // one (with check_claimed_pid) or a session bound already;
  // ResourceExhausted (and the session ends) when the peer's uid has
  // max_sessions_per_uid sessions already.
  absl::Status BindSession(uint64_t session, absl::string_view token,
                           const PeerIdentity& peer,
                           std::function<void()> on_end);
  // OK unless `session` exists and belongs to another uid than
  // `caller_uid` (nullopt: unknown): PermissionDenied saying whose it is.
  absl::Status CheckCaller(uint64_t session,
                           std::optional<uid_t> caller_uid) const;
  // OK if `token` is the session's; NotFound / PermissionDenied otherwise.
  absl::Status Authenticate(uint64_t session, absl::string_view token) const;
  // Routes the session's pressure requests to `sink`, replacing (and
  // closing) an earlier one. When the session ends, sink->Close is called.
  absl::Status AttachWatcher(uint64_t session, absl::string_view token,
                             std::shared_ptr<PressureSink> sink);
  // The Watch stream behind `sink` broke: ends its session, unless another
  // sink replaced it or the session ended already.
  void WatcherGone(uint64_t session, const PressureSink* sink);
  // Records the client's usage figures. `answers_pressure`: the report is
  // the client's answer to pressure requests (a ReportUsage call), not
  // figures riding on a Lease or Return: a lease waiting for answers stops
  // waiting once every session asked has answered.
  absl::Status ReportUsage(uint64_t session, absl::string_view token,
                           absl::Span<const DeviceUsageReport> usage,
                           bool answers_pressure = true);
  // Ends a session at its client's request; returns the bytes it held.
  absl::StatusOr<uint64_t> CloseSession(uint64_t session,
                                        absl::string_view token);
  // Ends a session for `reason` (logged and sent to its watcher). If its
  // process still runs, the chunks it received stay leased (it may still
  // have them mapped: re-leasing them would hand its memory to another
  // process) until CheckLiveness sees the process exit; otherwise they go
  // back to the lake now. Leases never claimed go back in any case.
  // Returns the bytes back in the lake now; 0 if the session does not exist.
  uint64_t EndSession(uint64_t session, absl::string_view reason);

  // Ends sessions whose process is gone and sessions never bound within
  // bind_timeout, returns leases not claimed within claim_timeout, and
  // frees the chunks of ended sessions whose process has exited since.
  // Called periodically (every 200 ms) by the daemon. Returns the number of
  // sessions ended.
  int CheckLiveness();

  // --- Leases ----------------------------------------------------------------

  // Leases `count` chunks of `chunk_bytes` each (0: the device's
  // chunk_size; else a multiple of it) on `device` to a bound session, all
  // or nothing, asking other sessions for memory and waiting up to
  // reclaim_timeout if needed. Free chunks of that size are reused; the
  // rest are created, where the capacity left is short after releasing
  // free chunks of other sizes. ResourceExhausted with a message naming
  // the quota, or what was asked and what the lake has; InvalidArgument
  // for a size that is no multiple of the device's chunk_size.
  // `no_pressure` (a lease ahead of need): never asks other sessions or
  // waits; ResourceExhausted at once when the lake cannot serve it from
  // free chunks and capacity left.
  // `client_makes`: the lease is capacity, for chunks its client creates
  // itself (no descriptors, nothing to claim; "Chunks the client makes" in
  // docs/daemon.md); free chunks of the lake's own are released to make
  // room where the capacity left is short.
  absl::StatusOr<LeaseGrant> Lease(uint64_t session, absl::string_view token,
                                   int device, uint64_t count,
                                   uint64_t chunk_bytes = 0,
                                   bool no_pressure = false,
                                   bool client_makes = false);
  // Starts delivering a lease: returns its chunk ids (at most once per
  // lease). NotFound for an unknown or already claimed lease,
  // PermissionDenied for another session's lease.
  absl::StatusOr<std::vector<uint64_t>> Claim(uint64_t session,
                                              absl::string_view token,
                                              uint64_t lease_id);
  // Exports (or, without export_on_demand, duplicates the kept exports of)
  // the descriptors of `chunk_ids`, which must all be leased to `session`
  // before and after, for sending. The caller owns them. The driver calls
  // run without the lock; the chunks cannot be released meanwhile.
  absl::StatusOr<std::vector<UniqueFd>> DupChunkFds(
      uint64_t session, absl::Span<const uint64_t> chunk_ids);
  // Returns chunks of the session to the lake: all or nothing
  // (InvalidArgument naming the first chunk that is not leased to it).
  // Returns the bytes returned.
  absl::StatusOr<uint64_t> Return(uint64_t session, absl::string_view token,
                                  absl::Span<const uint64_t> chunk_ids);

  // --- After a restart (adopt_policy.h, lake_adopt.cc) -----------------------

  // Adopts into `session` (bound, with `token`) the chunks its process still
  // holds from the daemon before this one, shown by `fds`, one descriptor
  // per chunk of `device` (`previous_ids`: their ids then, for the log;
  // `sizes`: each chunk's, or empty: all of the device's chunk_size).
  // Each descriptor is imported; the chunks are leased to the session at
  // once, counted against capacity and quotas, and dropped (never pooled)
  // when the session returns them or ends. All or nothing. Returns the
  // chunks' ids, in the order of `fds`. InvalidArgument for a claim without
  // descriptors or with one that is no chunk of the device's size,
  // AlreadyExists for memory the daemon holds already, ResourceExhausted
  // past capacity or a quota.
  absl::StatusOr<std::vector<uint64_t>> Adopt(
      uint64_t session, absl::string_view token, int device,
      absl::Span<const uint64_t> previous_ids, absl::Span<const UniqueFd> fds,
      absl::Span<const uint64_t> sizes = {});

  // --- Operators -------------------------------------------------------------

  // Releases free chunks to the driver: up to `bytes` (0: all) on `device`
  // (-1: all devices). Returns {bytes, chunks} released.
  std::pair<uint64_t, uint64_t> Trim(int device, uint64_t bytes);
  // Releases the free chunks that options().release picks at `now` (idle
  // long enough, above each device's floor). Called periodically by the
  // daemon. Returns {bytes, chunks} released.
  // With `only_without_sessions`, does nothing while any session is open
  // (cheap: the daemon calls it at every wake, so that memory goes back
  // within a wake of the last session's end).
  std::pair<uint64_t, uint64_t> ReleaseIdle(absl::Time now,
                                            bool only_without_sessions = false);
  // What the release policy sees of `device`: its books, and whether
  // anyone uses it (a chunk of it leased, or any session open).
  DeviceHoldings HoldingsLocked(int device, uint64_t floor_bytes) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fills the books, the sessions and the counters into `out`.
  void FillStatus(v1::StatusResponse* out) const;

  // Ends every session ("gmlaked is shutting down"), fails waiting leases
  // with Unavailable and refuses new sessions. Chunks stay until the
  // destructor.
  void Shutdown();

 private:
  // FillStatus's parts: the lake's counters and settings, one device's
  // books, one session.
  void FillCountersLocked(absl::Time now, v1::StatusResponse* out) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FillDeviceLocked(int device, absl::Time now, v1::DeviceStatus* ds) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FillSessionLocked(const Session& s, absl::Time now,
                         v1::SessionStatus* ss) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Why a session ends: only kOther keeps the chunks of a process that
  // still runs (the client did not say it is done, and is not gone).
  enum class EndKind { kClosed, kProcessGone, kShutdown, kOther };

  // What to do once the lock is released: hooks and sinks of ended
  // sessions, pressure to send.
  struct Aftermath {
    std::vector<std::function<void()>> hooks;
    std::vector<std::pair<std::shared_ptr<PressureSink>, absl::Status>> closes;
    std::vector<std::pair<std::shared_ptr<PressureSink>, Pressure>> sends;
    void Run();
  };

  // What a waiting lease remembers between its rounds of pressure. The
  // requests themselves are debts of the sessions asked (Session::debts),
  // owed to the lease's session: its later leases count on them too.
  struct LeaseWait {
    absl::Time started;
    bool reclaim_first = false;  // prefer_reclaim, until the others answered
    bool admitted_once = false;  // the token was checked once
    bool no_pressure = false;    // LeaseRequest.no_pressure
    bool client_makes = false;   // LeaseRequest.client_makes
    // Since when it waited for memory (never: InfiniteFuture).
    absl::Time pressure_since = absl::InfiniteFuture();
    bool waiting = false;      // counted in waiting_leases_
    int64_t waiting_uid = -1;  // and in waiting_by_uid_ under this uid
    // When it last sent requests or saw bytes come back (reclaim_timeout
    // counts from here), and pressure_returned_bytes_ then.
    absl::Time last_progress;
    uint64_t returned_seen = 0;
    uint64_t returned_at_start = 0;
    uint64_t requests = 0;     // pressure requests it sent
    uint64_t asked_bytes = 0;  // what they asked for
  };
  // What sessions owe one asker on one device (OwedLocked).
  struct Owed {
    uint64_t pending_bytes = 0;  // by requests within their patience
    bool overdue = false;        // a request silent past its patience
    absl::Time next_expiry = absl::InfiniteFuture();  // of a pending one
  };

  Lake(VmmBackend* backend, LakeOptions options);
  absl::Status Precreate();

  // --- Sessions (lake.cc) ---
  absl::StatusOr<SessionTicket> OpenSessionLocked(
      pid_t claimed_pid, absl::string_view name,
      std::optional<uid_t> opener_uid, std::string token, Aftermath* after)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status BindSessionLocked(uint64_t session, absl::string_view token,
                                 const PeerIdentity& peer,
                                 std::function<void()> on_end, Aftermath* after)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t EndSessionLocked(uint64_t session, absl::string_view reason,
                            EndKind kind, Aftermath* after)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees those of `ids` that are leased to `s` (a Return, or leases it
  // never claimed); returns the bytes.
  uint64_t FreeChunksLocked(const Session& s, absl::Span<const uint64_t> ids)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // --- Leases (lake_lease.cc) ---
  // Return's books part; Return then releases adopted chunks among them.
  absl::StatusOr<uint64_t> ReturnChunks(uint64_t session,
                                        absl::string_view token,
                                        absl::Span<const uint64_t> chunk_ids)
      ABSL_LOCKS_EXCLUDED(mu_);
  // One step of a lease's admission: checks the session, device and quotas,
  // then reserves the chunks (true: `r` is filled), or queues pressure
  // requests in `after` (false: run them without the lock and call again),
  // waiting on `freed_` in between while answers are due. Errors end the
  // lease.
  absl::StatusOr<bool> AdmitLeaseLocked(
      uint64_t session, absl::string_view token, int device, uint64_t count,
      uint64_t chunk_bytes, LeaseWait* wait, ChunkBooks::Reservation* r,
      Aftermath* after) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The lease's checks that need no waiting: bound session, device, count,
  // quotas.
  absl::Status CheckLeaseLocked(const Session& s, int device, uint64_t count,
                                uint64_t chunk_bytes) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What the lake has on `device`, for a lease that is short.
  std::string DescribeShortLocked(const Session& s, int device, uint64_t count,
                                  uint64_t chunk_bytes) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The pressure step of a lease `short_bytes` short (pressure_policy.h
  // decides): true when requests are queued in `after` (send them, then
  // call again); false when it waits (on freed_, done here) or
  // prefer_reclaim switched to creating; an error ends the lease (nobody
  // (else) to ask, nothing came, or it may not wait).
  absl::StatusOr<bool> PressureStepLocked(const Session& s, int device,
                                          uint64_t count, uint64_t chunk_bytes,
                                          uint64_t short_bytes, LeaseWait* wait,
                                          Aftermath* after)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Why a lease that asked others fails.
  std::string DescribeGiveUpLocked(const Session& s, int device, uint64_t count,
                                   uint64_t chunk_bytes, const LeaseWait& wait,
                                   bool timed_out) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Judges every unsettled request (pressure_policy.h JudgeDebt): settles
  // those delivered or answered, marks the silent overdue, and counts
  // against their sessions those that returned less than promised.
  void SettleDebtsLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What the sessions owe `asker` on `device` (after SettleDebtsLocked).
  Owed OwedLocked(uint64_t asker, int device) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What a lease by `s`, `short_bytes` short, asks for (PressureWant over
  // the session's growth, peak and quotas).
  uint64_t PressureWantLocked(Session* s, int device, uint64_t short_bytes,
                              absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Bytes that left `s` on each device (holding before minus after) go to
  // its debts there, oldest first; with no debt there, the return was its
  // own choice and, made at its peak, lowers the peak to what it keeps.
  // `gone_bytes`: per device, what of it left the books as capacity (chunks its
  // client made), credited to the debts' beneficiaries as room
  // (Session::reclaimed_room).
  void NoteReturnedLocked(Session* s, const ChunkBooks::Holding& before,
                          absl::Time now,
                          std::map<int, uint64_t> gone_bytes = {})
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The room `s` may grow into on `device` under --prefer_reclaim: what
  // others gave back for it as capacity since it last gave back itself.
  uint64_t RoomCreditLocked(const Session& s, int device) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A lease granted to `s`: its growth and peak.
  void NoteGrantLocked(Session* s, int device, uint64_t bytes, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts the lease as waiting for memory, unless the caps say it may not
  // wait (ResourceExhausted).
  absl::Status StartWaitingLocked(int64_t uid, LeaseWait* wait)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StopWaitingLocked(LeaseWait* wait) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whom to ask for `want_bytes` (of which `short_bytes` the lease lacks)
  // on `device` for `asker`: sessions other than it that watch, hold
  // chunks there, owe it nothing and have not come up short for it since
  // `since` (pressure_policy.h ChoosePressure).
  std::vector<PressureAsk> ChooseAsksLocked(const Session& asker, int device,
                                            uint64_t short_bytes,
                                            uint64_t want_bytes,
                                            absl::Time since) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues `asks` in `after` and records them as debts owed to `asker`.
  void SendAsksLocked(const Session& asker, int device,
                      absl::Span<const PressureAsk> asks, absl::Time now,
                      LeaseWait* wait, Aftermath* after)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After the slow work: grants the lease's chunks to its session, or, if
  // the work failed or the session is gone, puts them back.
  absl::StatusOr<LeaseGrant> FinishLeaseLocked(
      ChunkBooks::Reservation* r, const absl::Status& scrubbed,
      const absl::Status& created, const FdUsage& fds,
      std::vector<ChunkBooks::MadeChunk> made)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // FinishLeaseLocked's verdict: why lease `r` of session `s` (null if it
  // ended; `label` names it) cannot be granted, or OK.
  absl::Status LeaseFailureLocked(const ChunkBooks::Reservation& r,
                                  const Session* s, const std::string& label,
                                  uint64_t to_create,
                                  const absl::Status& scrubbed,
                                  const absl::Status& created,
                                  const FdUsage& fds) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Books a granted lease (`chunk_ids` from ChunkBooks::Grant) to `s`:
  // unclaimed descriptors, counters, the session's growth.
  LeaseGrant BookGrantLocked(const ChunkBooks::Reservation& r, Session* s,
                             const std::string& label,
                             std::vector<uint64_t> chunk_ids)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // A lease that asked others for memory since `since` is done.
  void NotePressureWaitLocked(absl::Time since)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // --- Backend work, without the lock ---
  // Gives chunks already out of the books back to the driver. Those that
  // held a session's data (unless --scrub=never): the daemon may get the
  // same memory again from a later create, which it would treat as fresh.
  // So they are zeroed first (--zero_on_release), or counted in
  // unzeroed_released_ for ZeroRecreated.
  void ReleaseToDriver(std::vector<ChunkBooks::Released> gone);
  // Zeroes as many of `made` (new chunks of `size` on `device`, for `uid`)
  // as the device has bytes released unzeroed that held other uids' data
  // (any uid's with --scrub=always; see ReleaseToDriver). The rest of
  // `made` settles as much of `uid`'s own: memory that comes back holding
  // only its own data needs no zeroing.
  absl::Status ZeroRecreated(int device, int64_t uid, uint64_t size,
                             const std::vector<ChunkBooks::MadeChunk>& made)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Releases the adopted chunks that their sessions let go (never zeroed:
  // their clients may still map them). Called after anything that may end
  // a session or take chunks back; CheckLiveness catches the rest.
  void ReleaseDropped() ABSL_LOCKS_EXCLUDED(mu_);
  // Imports the descriptors of an adoption (without the lock); on failure
  // releases what it imported.
  absl::Status ImportAdopted(int device, absl::Span<const UniqueFd> fds,
                             absl::Span<const uint64_t> sizes,
                             std::vector<ChunkHandle>* handles,
                             std::vector<ChunkIdentity>* identities);
  // Adopts the imported `handles` (of `sizes`, `bytes` in all) into
  // `session` where they fit (CheckAdoptionFits), appending their ids to
  // `ids`; Aborted if the session ended meanwhile.
  absl::Status BookAdoptedLocked(uint64_t session, int device,
                                 absl::Span<const ChunkHandle> handles,
                                 absl::Span<const uint64_t> sizes,
                                 const std::vector<ChunkIdentity>& identities,
                                 uint64_t bytes, std::vector<uint64_t>* ids)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseHandles(absl::Span<const ChunkHandle> handles);
  // Zeroes chunks of `size` bytes each through a scratch mapping.
  absl::Status Scrub(int device, uint64_t size,
                     absl::Span<const ChunkHandle> handles);
  // Creates and exports `n` chunks of `size` bytes on `device`. With
  // export on demand the export is kept only `for_delivery` (a lease's
  // chunks, whose claim sends it: ChunkBooks::TakeCreationFd); chunks made
  // ahead of time keep none, so the daemon's descriptors do not grow with
  // the lake.
  absl::Status CreateChunks(int device, uint64_t n, uint64_t size,
                            bool for_delivery,
                            std::vector<ChunkBooks::MadeChunk>* out);

  VmmBackend* const backend_;
  const LakeOptions options_;
  const absl::Time started_;

  mutable Mutex mu_;
  // Signalled whenever chunks become free, capacity frees up, a session
  // answers pressure or ends.
  CondVar freed_;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  ChunkBooks books_ ABSL_GUARDED_BY(mu_);
  SessionTable sessions_ ABSL_GUARDED_BY(mu_);
  uint64_t next_lease_ ABSL_GUARDED_BY(mu_) = 1;
  // Leases waiting for memory, in all and per uid.
  size_t waiting_leases_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<int64_t, size_t> waiting_by_uid_ ABSL_GUARDED_BY(mu_);

  // Counters for Status.
  uint64_t leases_served_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t leases_failed_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t pressure_sent_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t chunks_scrubbed_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t sessions_ended_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t released_idle_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t trimmed_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t zeroed_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // Per device, by the uid whose data they held: bytes that went back to
  // the driver unzeroed; the daemon's next creations for other uids zero
  // as much.
  std::map<int, std::map<int64_t, uint64_t>> unzeroed_released_
      ABSL_GUARDED_BY(mu_);
  uint64_t reclaimed_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t pressure_rounds_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t adopted_chunks_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t recycled_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // Bytes granted as capacity for chunks their clients made, in all.
  uint64_t client_made_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // Chunks and bytes granted by leases, in all.
  uint64_t leased_chunks_total_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t leased_bytes_total_ ABSL_GUARDED_BY(mu_) = 0;
  // Bytes pressure requests asked for, bytes that came back against them,
  // and requests settled with less than their session's report promised.
  uint64_t pressure_asked_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t pressure_promised_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t pressure_returned_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t pressure_undelivered_ ABSL_GUARDED_BY(mu_) = 0;
  // Sessions with unsettled pressure requests.
  absl::flat_hash_set<uint64_t> debtors_ ABSL_GUARDED_BY(mu_);
  Histogram pressure_wait_ ABSL_GUARDED_BY(mu_){Histogram::LatencyBounds()};
  // Whole leases (asked to granted) that took memory other sessions gave
  // back: the hand-off from one process to another, as gmlaked sees it.
  Histogram handoff_ ABSL_GUARDED_BY(mu_){Histogram::LatencyBounds()};
};

}  // namespace gmlake

#endif  // GMLAKE_DAEMON_LAKE_H_
