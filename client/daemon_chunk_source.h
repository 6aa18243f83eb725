// Copyright 2026 The GMLake Authors.
//
// DaemonChunkSource: a ChunkSource that leases chunks from gmlaked.
//
// Connect opens a session over gRPC, binds it on the daemon's fd socket
// (where the daemon learns this process's pid/uid with SO_PEERCRED), and
// starts a thread on the session's Watch stream. AcquireBytes takes idle
// chunks that fit, then leases what is missing (one call per chunk size:
// a large shortfall in large chunks, client/chunk_sizing.h), receives their
// descriptors on the fd socket (batches with SCM_RIGHTS) and imports each
// through a local backend of the daemon's kind, closing each descriptor
// right after. Return keeps up to an idle watermark of chunks imported for
// reuse and gives the rest back.
//
// Under pressure from the daemon (another process needs memory), the Watch
// thread gives back idle chunks first, then calls the ReclaimHandler for
// the rest, gives back what it returned, and reports usage (which tells the
// daemon it has answered). A reporter thread reads the allocator's usage
// (SetUsageProvider) periodically and sends it when it moved, so the daemon
// knows whom to ask first.
//
// Devices are this process's, numbered as its backend numbers them; each is
// paired with gmlaked's device of the same UUID (CUDA_VISIBLE_DEVICES gives
// a rank other numbers than gmlaked's). Requests, usage and pressure are
// translated; a device gmlaked does not serve is said so per device.
//
// If the daemon goes away, the source keeps working with what it holds, and
// a thread reconnects as soon as gmlaked is back (a restart, systemd's
// Restart=): it opens a new session, shows the new daemon every chunk this
// process still holds (their descriptors, exported from its imports:
// FdRequest.adopt) so that its books count them again, and resumes
// leasing, pressure and usage reports (daemon_relink.cc). Meanwhile Acquire
// serves idle chunks, and otherwise waits up to reconnect_wait for the
// daemon before failing with Unavailable; Return releases locally. Nothing
// here crashes the process.
//
// Contract: destroy the source only after every acquired chunk was returned
// (unmapped): the session's end gives all its chunks back to the lake.

#ifndef GMLAKE_CLIENT_DAEMON_CHUNK_SOURCE_H_
#define GMLAKE_CLIENT_DAEMON_CHUNK_SOURCE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/chunk_sizing.h"
#include "client/chunk_source.h"
#include "common/mutex.h"
#include "common/unique_fd.h"
#include "common/vmm.h"

namespace gmlake {

namespace v1 {  // proto/gmlake.proto; only the .cc sees gRPC's headers
class DeviceInfo;
class FdReply;
class LeaseResponse;
}  // namespace v1

struct DaemonSourceOptions {
  // gmlaked's gRPC socket.
  std::string socket_path = "/run/gmlake/gmlaked.sock";
  // A label for operators (gmlakectl clients), e.g. "trainer-rank3".
  std::string name;
  // Devices this process will use (informational; empty: all).
  std::vector<int> devices;
  // Where chunks are imported. Null: a backend of the daemon's kind is
  // created and owned here. Given: must be of the daemon's kind and outlive
  // the source.
  VmmBackend* backend = nullptr;
  // Bytes per device of returned chunks kept imported for reuse, instead of
  // going back to the daemon at once.
  uint64_t idle_watermark_bytes = 0;
  // How AcquireBytes cuts a shortfall into the chunks it leases, as the
  // embedded lake cuts what it creates (GrowthSizing of the allocator's
  // options), so a process gets the same chunks from either lake: chunks
  // of `chunks.base` (rounded down to gmlaked's unit, at least one unit;
  // 0: the unit), the last piece smaller; a large shortfall in chunks of
  // up to `chunks.large_chunk` (0: never larger than the base); coarser
  // for a process that has held much (`held_divisor`, `held_max`: ForHeld).
  // The unit is gmlaked's, set per device. Every chunk costs its way
  // through gmlaked (export, transfer, import, map: ~200 us on an H200
  // whatever its size), so 4 MiB chunks halve what growth costs in 2 MiB
  // ones.
  ChunkSizing chunks;
  // Leasing ahead of need (client/chunk_sizing.h, LeaseAhead): a process
  // growing in many small shortfalls leases the next ones with this one,
  // in steps that double with the growth, up to the larger of
  // lease_ahead_max and 1/64 of what it holds (0: off). What is leased
  // ahead waits here unmapped, counted to gmlaked as cached; it goes back
  // first under pressure, and once growth pauses for a usage report
  // interval. Leases ahead never ask other sessions for memory
  // (LeaseRequest.no_pressure).
  uint64_t lease_ahead_max = 256ull << 20;
  // Lease ahead in the background (daemon_lease_ahead.cc): once a growth
  // streak has taken half of what was leased ahead for it, a thread of
  // this source leases the next step, so the mallocs that follow find
  // chunks already imported instead of waiting for gmlaked's create,
  // export, transfer and import (~110 us a chunk on an H200,
  // docs/benchmarks.md). false: only with a shortfall, on the malloc's
  // thread.
  bool lease_ahead_in_background = true;
  // New chunks are made here, in the capacity gmlaked leases
  // (LeaseRequest.client_makes): a create (~18 us a chunk on an H200)
  // instead of gmlaked's create and first export and this process's import
  // (~130 us in all, docs/design.md). gmlaked leases none of its own free
  // chunks for it: they go back to the driver where the capacity left is
  // short. A gmlaked that predates it sends descriptors as before.
  bool make_chunks = true;
  // How long Connect may take before it gives up.
  absl::Duration connect_timeout = absl::Seconds(2);
  // Deadline of one Lease call, plus 2 ms per chunk asked for (it may wait
  // for other sessions to return memory: keep it above gmlaked's
  // --reclaim_timeout; new chunks cost ~0.6 ms each to create and export).
  absl::Duration lease_timeout = absl::Seconds(15);
  // Deadline of other calls.
  absl::Duration rpc_timeout = absl::Seconds(5);
  // How often the allocator's usage (SetUsageProvider) is read; it is sent
  // to gmlaked when it moved by a chunk or more and by at least 1/16 of what
  // this process holds on the device (0: read only when answering
  // pressure). One lock taken per device and period; no call on a malloc.
  absl::Duration usage_report_interval = absl::Milliseconds(250);
  // Keep the descriptor of each leased chunk while it is held, to show it to
  // a restarted gmlaked (re-adoption). Unset: where the backend cannot
  // export its imports again (cuda). Costs one descriptor per chunk held;
  // the process's soft RLIMIT_NOFILE is raised to its hard limit, and a
  // descriptor is kept only while the process stays at or under half of
  // it (the rest of the process has the other half). Chunks past that are
  // not shown to a restarted gmlaked (they stay this process's, uncounted).
  std::optional<bool> keep_descriptors;
  // The protocol version to speak (0: this build's). For tests.
  uint32_t protocol_version = 0;
  // Once gmlaked is gone, how often to try to reconnect to a restarted one
  // (0: never; the source then stays without a daemon).
  absl::Duration reconnect_interval = absl::Milliseconds(100);
  // How long an Acquire that needs the daemon waits for it to come back
  // before failing with Unavailable.
  absl::Duration reconnect_wait = absl::Seconds(30);
};

class DaemonChunkSource : public ChunkSource {
 public:
  // Connects to gmlaked. NotFound when no socket exists at
  // options.socket_path (gmlaked is not running here), Unavailable when
  // nothing answers there within connect_timeout, FailedPrecondition on a
  // protocol version mismatch (saying which side to upgrade), and the
  // daemon's error otherwise.
  static absl::StatusOr<std::unique_ptr<DaemonChunkSource>> Connect(
      const DaemonSourceOptions& options);

  // Closes the session (the daemon takes back every chunk of it), stops
  // the Watch thread, releases the local imports.
  ~DaemonChunkSource() override;
  DaemonChunkSource(const DaemonChunkSource&) = delete;
  DaemonChunkSource& operator=(const DaemonChunkSource&) = delete;

  // --- ChunkSource -----------------------------------------------------------

  absl::string_view name() const override { return "daemon"; }
  // "gmlaked at /run/gmlake/gmlaked.sock (session 7, host backend, device
  // 0: 2 MiB chunks, 40 GiB capacity)".
  std::string Describe() const override;
  VmmBackend* backend() override { return backend_; }
  // The kept descriptor's copy (keep_descriptors), else a new export.
  absl::StatusOr<UniqueFd> ExportForSharing(ChunkHandle h) override {
    return ShowableFd(h);
  }
  // gmlaked's unit on `device`: every chunk is a multiple of it.
  size_t chunk_size(int device) const override;
  // `count` chunks of chunk_size(device): idle ones of that size first, then
  // one lease for the rest. ResourceExhausted with the daemon's message
  // (quota, or what the lake has), or with this process's own limit
  // (SetCapacity); Unavailable once the daemon is gone; InvalidArgument for
  // a device the daemon does not serve.
  absl::StatusOr<std::vector<ChunkHandle>> Acquire(int device, size_t count);
  // Handles not acquired from this source are ignored.
  void Return(int device, absl::Span<const ChunkHandle> chunks);
  // Idle chunks that fit (largest first), then leases for the rest, cut by
  // PlanChunks as options.chunks says (large chunks for a large shortfall,
  // coarser ones for a process that holds much). Errors as Acquire.
  absl::StatusOr<std::vector<SizedChunk>> AcquireBytes(int device,
                                                       uint64_t bytes) override;
  void ReturnSized(int device, absl::Span<const SizedChunk> chunks) override;
  // The limit set with SetCapacity, else the lake's capacity on `device`.
  uint64_t capacity_bytes(int device) const override;
  absl::Status SetCapacity(int device, uint64_t bytes) override;
  void SetReclaimHandler(ReclaimHandler handler) override;
  void SetUsageProvider(UsageProvider provider) override;

  // --- Beyond ChunkSource ----------------------------------------------------

  // What this process uses of what it holds on `device`, as the allocator
  // sees it; sent with the next call to the daemon (which asks sessions
  // with the most cached memory first). The Allocator's UsageProvider
  // (SetUsageProvider) does this by itself; NoteUsage is for callers
  // without one. Without either, the source reports acquired chunks as
  // used and idle ones as cached.
  void NoteUsage(int device, uint64_t used_bytes, uint64_t cached_bytes);
  // Sends the usage now.
  absl::Status ReportUsage();
  // Gives every idle chunk back to the daemon. Returns the bytes given.
  uint64_t ReleaseKept(int device) override;

  // Whether gmlaked serves this process's `device` (a device of the same
  // UUID). Those it does not serve keep a chunk_size (the backend's
  // granularity) and fail Acquire with FailedPrecondition naming them;
  // OpenChunkSource serves them from an embedded lake (split_chunk_source.h).
  bool serves(int device) const;

  // OK while the daemon is reachable; afterwards, why it is not.
  absl::Status daemon_status() const;
  // The current session (a new one after each reconnection).
  uint64_t session_id() const { return session_id_.load(); }
  // Reconnections to a restarted gmlaked so far, and chunks it adopted.
  uint64_t reconnections() const { return reconnections_.load(); }
  uint64_t chunks_readopted() const { return chunks_readopted_.load(); }
  // Chunks the caller holds / idle ones kept here, on `device`.
  size_t held_chunks(int device) const;
  // The handles of both, for tests that check what a process holds.
  std::vector<ChunkHandle> HeldHandles(int device) const;
  size_t idle_chunks(int device) const;
  // Chunk descriptors kept for re-adoption (DaemonSourceOptions::
  // keep_descriptors).
  size_t kept_descriptors() const;
  // Usage reports sent on this process's own initiative (figures changed).
  uint64_t usage_reports() const { return usage_reports_.load(); }
  // Pressure requests answered so far and bytes given back for them.
  uint64_t pressure_requests() const { return pressure_requests_.load(); }
  uint64_t pressure_bytes_returned() const {
    return pressure_bytes_returned_.load();
  }
  // Lease calls made so far, and chunks leased by them (leased ahead
  // included).
  uint64_t lease_calls() const { return lease_calls_.load(); }
  uint64_t chunks_leased() const { return chunks_leased_.load(); }
  // Of those, chunks this process made itself (make_chunks).
  uint64_t chunks_made() const { return chunks_made_.load(); }
  // Idle bytes on `device` leased ahead of need and not taken yet.
  uint64_t ahead_bytes(int device) const;
  // Leases made on an acquiring thread (it waited for gmlaked), and those
  // made ahead in the background (it did not).
  uint64_t blocking_leases() const { return blocking_leases_.load(); }
  uint64_t background_leases() const { return background_leases_.load(); }
  // Acquires that found a background lease in flight and waited for it
  // rather than leasing on their own.
  uint64_t background_waits() const { return background_waits_.load(); }
  // Waits until no background lease is in flight for `device` (for tests
  // and benchmarks that want the leasing ahead settled).
  void AwaitBackgroundLease(int device);

 private:
  struct Rpc;  // daemon_link.h
  // A chunk leased from gmlaked and imported here: its handle, its id
  // under the current daemon (0: not counted by it, kept from before a
  // restart), its size.
  struct LeasedChunk {
    ChunkHandle handle = 0;
    uint64_t id = 0;
    uint64_t size = 0;
  };
  struct HeldChunk {
    uint64_t id = 0;
    uint64_t size = 0;
  };
  // Per device of this process (its numbering; gmlaked's may differ).
  struct DeviceState {
    std::string uuid;
    // gmlaked's number for the device (same UUID); -1: not served.
    int daemon_device = -1;
    // gmlaked's unit; the backend's granularity where not served.
    size_t chunk_size = 0;
    uint64_t lake_capacity = 0;
    uint64_t limit = 0;  // SetCapacity; 0: none
    // Acquired by the caller, by handle; and idle, kept for reuse.
    absl::flat_hash_map<ChunkHandle, HeldChunk> held;
    std::vector<LeasedChunk> idle;
    uint64_t held_bytes = 0;
    uint64_t idle_bytes = 0;
    // The most held_bytes has been: what the process grows back to after
    // giving its cache back (ForHeld).
    uint64_t peak_held_bytes = 0;
    void Hold(const LeasedChunk& c) {
      held[c.handle] = {c.id, c.size};
      held_bytes += c.size;
      peak_held_bytes = std::max(peak_held_bytes, held_bytes);
    }
    void Unhold(absl::flat_hash_map<ChunkHandle, HeldChunk>::iterator it) {
      held_bytes -= it->second.size;
      held.erase(it);
    }
    void Idle(const LeasedChunk& c) {
      idle.push_back(c);
      idle_bytes += c.size;
    }
    // Of idle_bytes, those leased ahead of need and not taken yet.
    uint64_t ahead_bytes = 0;
    // Bytes leased since growth last paused (the step of leasing ahead
    // doubles with it); whether it grew since the reporter last looked
    // (leased, or took leased-ahead chunks).
    uint64_t streak_bytes = 0;
    bool grew = false;
    // A lease ahead was refused: none until chunks go back or the process
    // has leased this many more bytes as asked (LeaseAheadPause).
    uint64_t ahead_paused_bytes = 0;
    // A lease ahead of `refused` bytes found the lake full: leasing ahead
    // pauses, and once it resumes its steps grow from small again.
    void PauseAhead(uint64_t refused) {
      ahead_paused_bytes = LeaseAheadPause(refused, chunk_size);
      streak_bytes = 0;
    }
    // A background lease of `refill_chunks` is wanted, or in flight.
    bool refilling = false;
    // Asked to give memory back since growth last paused: no background
    // leasing ahead until it pauses.
    bool pressed = false;
    size_t refill_chunks = 0;
    // The size of the chunks leased ahead last (the largest run of the
    // shortfall that leased them): what a background refill leases.
    uint64_t ahead_chunk = 0;
    bool noted = false;
    uint64_t noted_used = 0;
    uint64_t noted_cached = 0;
  };

  explicit DaemonChunkSource(const DaemonSourceOptions& options);
  // The current link's gRPC objects, session and token.
  std::shared_ptr<Rpc> link() const;
  // A new channel to options_.socket_path, connected within `timeout`.
  absl::StatusOr<std::shared_ptr<Rpc>> NewLink(absl::Duration timeout);
  // Opens a session on `link`. The first time it also chooses the backend
  // and pairs devices; later (a restarted daemon) it checks that the
  // daemon still serves the same devices with the same chunk sizes.
  absl::Status Open(Rpc* link, bool first);
  absl::Status CheckSameDevices(
      const std::vector<const v1::DeviceInfo*>& served);
  // The backend chunks are imported through: the one given, else one of
  // gmlaked's kind (on the host backend, seeing gmlaked's devices unless
  // GMLAKE_HOST_VISIBLE_DEVICES says otherwise).
  absl::Status ChooseBackend(const std::vector<const v1::DeviceInfo*>& served);
  // Pairs each device of this process with gmlaked's of the same UUID.
  absl::Status MatchDevices(const std::vector<const v1::DeviceInfo*>& served);
  // This process's number for gmlaked's device `daemon_device` (-1: none).
  int LocalDevice(int daemon_device) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<UniqueFd> Bind(const Rpc& link);
  absl::Status StartWatch(std::shared_ptr<Rpc> link);
  void WatchLoop(std::shared_ptr<Rpc> link);
  // --- Reconnecting (daemon_relink.cc) ---
  // The reconnecting thread: waits for the daemon to be lost, then tries
  // Relink every reconnect_interval until it works or the source closes.
  void RelinkLoop();
  // One attempt: a new session, the chunks held shown to it (Readopt), a
  // new Watch stream, then published as the current link.
  absl::Status Relink();
  // Shows the new daemon every chunk held, device by device; fills
  // `renamed` (handle -> new id) with those it adopted.
  absl::Status Readopt(const Rpc& link, int sock,
                       absl::flat_hash_map<ChunkHandle, uint64_t>* renamed);
  // One adopt request of Readopt: `shown` (of device `dev`, gmlaked's
  // `daemon_device`) with their descriptors `fds`; adds what gmlaked adopted
  // to `renamed`. A refusal is reported on stderr, not returned: the
  // process keeps those chunks, uncounted.
  absl::Status ShowChunks(const Rpc& link, int sock, size_t dev,
                          int daemon_device,
                          const std::vector<LeasedChunk>& shown,
                          std::vector<UniqueFd> fds,
                          absl::flat_hash_map<ChunkHandle, uint64_t>* renamed);
  // How many chunks to show in one adopt request: what the process's
  // descriptors allow (ReadoptBatch's comment), at most kMaxFdsPerGroup.
  static size_t ReadoptBatch();
  // Descriptors to show `chunks` of `device` with (ShowableFd), of those
  // still held as listed; fills `shown` with them, in order, and counts
  // the ones that could not be made.
  std::vector<UniqueFd> ShowableFdsLocked(int device,
                                          absl::Span<const LeasedChunk> chunks,
                                          std::vector<LeasedChunk>* shown,
                                          size_t* failures,
                                          absl::Status* first_failure)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies the new ids (chunks the daemon did not adopt are kept,
  // uncounted: id 0) and returns the new ids of chunks let go meanwhile.
  std::vector<uint64_t> RenameLocked(
      const absl::flat_hash_map<ChunkHandle, uint64_t>& renamed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits until the daemon is back or `deadline`; its status then.
  absl::Status WaitForLink(absl::Time deadline);
  void HandlePressure(int device, uint64_t bytes);
  // Which idle chunks serve a request: Acquire's, of the unit only
  // (kUnit); AcquireBytes', of the sizes PlanChunks cuts it in
  // (kPlanned, TakePlannedChunks); or, once the lake had no room for that,
  // any that fit (kAnyFit), so that no idle chunk waits while a request
  // fails; kRoomMade after the idle chunks went back to make room.
  enum class IdleTake { kUnit, kPlanned, kAnyFit, kRoomMade };
  // Acquire and AcquireBytes: idle chunks for `bytes` (as `take` says),
  // then leases for the rest (of the unit for kUnit, else cut by
  // PlanChunks). All or nothing. Where the lake has no room for the rest
  // while idle chunks are here, they serve it in any size, or go back to
  // make room, before other sessions are asked to give memory back; they
  // are asked at most once per request (`others_asked`: already).
  absl::StatusOr<std::vector<LeasedChunk>> Obtain(int device, uint64_t bytes,
                                                  IdleTake take,
                                                  bool others_asked);
  // Obtain's request as it goes: the chunks taken from the idle ones, then
  // leased (with the epoch of the link each came on), and the leases that
  // cover the rest.
  struct Obtaining {
    std::vector<LeasedChunk> got;  // from_idle idle ones first
    std::vector<uint64_t> epochs;  // one per chunk of `got`, as it fills
    size_t from_idle = 0;
    uint64_t missing = 0;    // bytes the idle chunks did not cover
    uint64_t idle_left = 0;  // idle bytes that fit none of the request
    uint64_t unit = 0;       // the device's chunk size
    ChunkSizing sizing;
    std::vector<ChunkRun> runs;  // one lease each
    // The run that also leases `ahead` chunks ahead of need (runs.size():
    // none).
    size_t ahead_run = 0;
    size_t ahead = 0;
    std::vector<LeasedChunk> ahead_got;
    uint64_t ahead_epoch = 0;
  };
  // What a failed Obtain does next: keep this many idle bytes, and retry
  // with any idle chunk that fits, or after giving the idle ones back.
  struct ObtainFailed {
    uint64_t keep_bytes = 0;
    bool retry = false;
    bool give_back_idle = false;
  };
  // Obtain's phases. While gmlaked is away and the idle chunks fall short,
  // waits for it (up to reconnect_wait) holding nothing.
  void WaitIfLostAndShort(int device, uint64_t bytes);
  // Checks the request (device served, under the SetCapacity limit) and
  // takes idle chunks for it as `take` says.
  absl::Status TakeIdle(int device, uint64_t bytes, IdleTake take,
                        Obtaining* o);
  // Cuts the rest into runs, and picks the run that leases ahead and how
  // many chunks it adds.
  void PlanLeases(int device, uint64_t bytes, IdleTake take, Obtaining* o);
  // One lease per run, lock down; stops at the first that fails.
  // `may_press`: a lease may ask other sessions to give memory back.
  absl::Status LeaseRuns(int device, bool may_press, Obtaining* o);
  // Books the outcome `s` of LeaseRuns: all chunks held, or (on failure)
  // all idle, with what to do next.
  ObtainFailed BookObtained(int device, IdleTake take, const absl::Status& s,
                            Obtaining* o);
  // LeaseAndImport once the daemon is there: waits up to reconnect_wait
  // for a restarted one, and leases again if it restarted during the lease.
  absl::Status LeaseWhenLinked(int device, size_t count, uint64_t size,
                               std::vector<LeasedChunk>* out, uint64_t* epoch,
                               bool no_pressure = false);
  // Leases `count` chunks of `size` bytes and imports them (or, leased as
  // capacity, makes them: make_chunks); appends them, with the epoch of the
  // link they were leased on.
  // `no_pressure`: leased ahead of need (LeaseRequest.no_pressure).
  absl::Status LeaseAndImport(int device, size_t count, uint64_t size,
                              std::vector<LeasedChunk>* out, uint64_t* epoch,
                              bool no_pressure);
  // What a lease's chunks have become in this process so far: imported or
  // made, and the descriptors to keep for re-adoption.
  struct Landed {
    std::vector<LeasedChunk> chunks;
    std::vector<std::pair<ChunkHandle, UniqueFd>> kept;
    // The fd socket failed or is out of step: the session is lost.
    bool socket_broken = false;
  };
  // LeaseAndImport's steps. RequestLease: the Lease call on link `r` (a
  // lost daemon marks the source lost). Land: the granted chunks made
  // (capacity), or claimed and imported. ClaimAndImport: claims lease
  // `lease_id` on the fd socket and imports its descriptors batch by batch
  // (ImportBatch: one reply's, in the order of `ids`; `next` counts the
  // chunks imported so far). Undo: releases what landed and gives the
  // whole lease back (or, with the socket broken, marks the source lost);
  // returns `failure` as the caller should see it.
  absl::StatusOr<v1::LeaseResponse> RequestLease(const Rpc& r, int device,
                                                 size_t count, uint64_t size,
                                                 bool no_pressure);
  absl::Status Land(const Rpc& r, int device, uint64_t size,
                    const v1::LeaseResponse& resp,
                    absl::Span<const uint64_t> ids, Landed* landed);
  absl::Status ClaimAndImport(const Rpc& r, int device, uint64_t size,
                              uint64_t lease_id, absl::Span<const uint64_t> ids,
                              Landed* landed);
  absl::Status ImportBatch(int device, uint64_t size, const v1::FdReply& reply,
                           absl::Span<const uint64_t> ids,
                           std::vector<UniqueFd>* fds, size_t* next,
                           Landed* landed);
  absl::Status Undo(const Rpc& r, absl::Span<const uint64_t> ids,
                    const Landed& landed, const absl::Status& failure);
  // Creates one chunk of `size` on `device` per id of a lease of capacity,
  // appending each to `made` as it goes (the caller releases them on
  // failure).
  absl::Status MakeChunks(int device, uint64_t size,
                          absl::Span<const uint64_t> ids,
                          std::vector<LeasedChunk>* made);
  // Leases `count` chunks of `size` and `ahead` more, ahead of need, in
  // one call where the lake has them free; else the `count` alone, and
  // leasing ahead pauses (LeaseAheadPause). Moves the ahead ones to
  // `ahead_out`. `may_press`: the `count` may ask other sessions to give
  // memory back (else it is leased as no_pressure, as the ahead ones are).
  absl::Status LeaseWithAhead(int device, size_t count, size_t ahead,
                              uint64_t size, std::vector<LeasedChunk>* out,
                              std::vector<LeasedChunk>* ahead_out,
                              uint64_t* epoch, bool may_press);
  // Chunks of `size` to lease ahead of need with a shortfall of `missing`
  // bytes, for `bytes` more on `device` (0: none).
  size_t AheadChunksLocked(const DeviceState& d, uint64_t missing,
                           uint64_t bytes, uint64_t size) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // How AcquireBytes cuts a shortfall on device `d`: options_.chunks with
  // its base in whole units of `d` (at least one), coarser for the most
  // this process has held on `d` (ForHeld).
  ChunkSizing SizingLocked(const DeviceState& d) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives back what was leased ahead and not taken since the last look
  // (growth paused), on every device; the reporter thread calls it.
  void TrimAheadAfterPause();
  // Background leasing ahead (daemon_lease_ahead.cc). Asks the refill
  // thread for the next step once the stock leased ahead for this streak
  // runs below half of it.
  void MaybeRefillLocked(int device) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The size of the chunks a refill leases: those leased ahead last, or
  // the unit.
  static uint64_t RefillChunkLocked(const DeviceState& d);
  // If a background lease is in flight for `device` and what is idle plus
  // what it brings covers `bytes`, waits for it (true when it waited).
  bool WaitForRefillLocked(int device, uint64_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RefillLoop();
  // Releases idle chunks of `device` beyond `keep_bytes`, at most
  // `max_bytes` (0: no maximum), and returns them to the daemon.
  uint64_t TrimIdle(int device, uint64_t keep_bytes, uint64_t max_bytes);
  // Releases the local handles of chunks of `device` and tells the daemon
  // (if reachable).
  // `epoch`: the link the ids are of (taken out of the maps under it).
  void GiveBack(int device, absl::Span<const LeasedChunk> chunks,
                uint64_t epoch);
  // `unsolicited`: sent because the figures changed, not as an answer to
  // pressure.
  absl::Status SendUsage(bool unsolicited = false);
  // Reads the allocator's figures (if a provider is set) into the noted
  // ones. Called without mu_ held.
  void PollUsage();
  // The usage reporter thread: PollUsage every usage_report_interval, and a
  // report when the figures moved (ReportWorthy).
  void ReportLoop();
  bool ReportWorthyLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records that the daemon is gone (the first reason wins); returns the
  // Unavailable status Acquire reports from then on. A call made on `link`
  // when another link has replaced it meanwhile marks nothing.
  absl::Status MarkLost(const absl::Status& why, const Rpc* link = nullptr);
  absl::Status Lost() const;
  struct UsageFigures {
    int device;
    uint64_t used;
    uint64_t cached;
  };
  std::vector<UsageFigures> UsageLocked() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const DaemonSourceOptions options_;
  std::unique_ptr<VmmBackend> owned_backend_;
  VmmBackend* backend_ = nullptr;
  // The gRPC channel, stub, Watch call, session and token of the current
  // link (kept out of this header so that its includers do not compile
  // gRPC's headers). A restarted daemon gets a new link; calls in flight
  // keep theirs.
  std::shared_ptr<Rpc> rpc_ ABSL_GUARDED_BY(mu_);
  // Links so far: chunk ids are a daemon's, and mean nothing to the next.
  // Ids taken out of the maps under one epoch are used under it only.
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 1;
  std::atomic<uint64_t> session_id_{0};
  std::string fd_socket_path_;
  std::string daemon_backend_;
  std::string daemon_description_;
  std::vector<std::string> daemon_uuids_;  // by gmlaked's device number

  // The fd socket; one claim at a time.
  Mutex fd_mu_;
  UniqueFd fd_sock_ ABSL_GUARDED_BY(fd_mu_);

  mutable Mutex mu_;
  std::vector<DeviceState> devices_ ABSL_GUARDED_BY(mu_);
  absl::Status lost_ ABSL_GUARDED_BY(mu_);
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  // Signalled when the daemon is lost or back, and when closing.
  CondVar link_changed_;

  std::thread watch_thread_;  // the current link's; replaced by Relink
  std::thread relink_thread_;
  std::atomic<uint64_t> reconnections_{0};
  std::atomic<uint64_t> chunks_readopted_{0};

  // The descriptors kept for re-adoption (options.keep_descriptors), by
  // handle, and how many may be kept.
  mutable Mutex kept_mu_ ABSL_ACQUIRED_AFTER(mu_);
  absl::flat_hash_map<ChunkHandle, UniqueFd> kept_fds_
      ABSL_GUARDED_BY(kept_mu_);
  size_t max_kept_fds_ = 0;  // 0: none kept
  // How many of `wanted` descriptors (of chunks just imported) may be kept:
  // within max_kept_fds_ (counting `pending` ones about to be kept), and
  // leaving the process at or under half its descriptor limit once the
  // `in_hand` descriptors that are not kept close.
  size_t KeepRoom(size_t in_hand, size_t pending, size_t wanted) const;
  // Keeps `fd` for `h` within the budget (else it closes).
  void KeepFd(ChunkHandle h, UniqueFd fd);
  // Drops the kept descriptor of `h`, if any.
  void DropKeptFd(ChunkHandle h);
  // A descriptor to show `h` with: a copy of the kept one, else a new
  // export through the backend.
  absl::StatusOr<UniqueFd> ShowableFd(ChunkHandle h);

  // Held while the reclaim handler runs, so that replacing it waits for the
  // call (the Allocator destroys what its handler uses once it cleared it).
  Mutex reclaim_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  ReclaimHandler reclaim_ ABSL_GUARDED_BY(reclaim_mu_);
  // Held while the provider runs, so that replacing it waits for the call.
  Mutex provider_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  UsageProvider provider_ ABSL_GUARDED_BY(provider_mu_);
  std::thread report_thread_;
  Notification stop_reports_;
  // The figures last sent to gmlaked (any call), per device.
  std::vector<UsageFigures> last_sent_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> usage_reports_{0};

  std::atomic<uint64_t> lease_calls_{0};
  std::atomic<uint64_t> blocking_leases_{0};
  std::atomic<uint64_t> background_leases_{0};
  std::atomic<uint64_t> background_waits_{0};
  // The refill thread (started with the source when leasing ahead in the
  // background); it waits on refill_wanted_, and signals refill_done_.
  std::thread refill_thread_;
  CondVar refill_wanted_;
  CondVar refill_done_;
  std::atomic<uint64_t> chunks_leased_{0};
  std::atomic<uint64_t> chunks_made_{0};
  std::atomic<uint64_t> pressure_requests_{0};
  // Bytes given back while answering pressure, counted before the daemon
  // has them.
  std::atomic<uint64_t> pressure_bytes_returned_{0};
};

}  // namespace gmlake

#endif  // GMLAKE_CLIENT_DAEMON_CHUNK_SOURCE_H_
