// Copyright 2026 The GMLake Authors.
//
// DaemonChunkSource: a ChunkSource that leases chunks from gmlaked.
//
// Connect opens a session over gRPC, binds it on the daemon's fd socket
// (where the daemon learns this process's pid/uid with SO_PEERCRED), and
// starts a thread on the session's Watch stream. Acquire leases all missing
// chunks in one call, receives their descriptors on the fd socket (batches
// with SCM_RIGHTS) and imports each through a local backend of the daemon's
// kind, closing each descriptor right after. Return keeps up to an idle
// watermark of chunks imported for reuse and gives the rest back.
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
// If the daemon goes away, the source keeps working with what it holds:
// Acquire serves idle chunks and otherwise fails with Unavailable saying
// so; Return releases locally. Nothing here crashes the process.
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
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "client/chunk_source.h"
#include "common/mutex.h"
#include "common/unique_fd.h"
#include "common/vmm.h"

namespace gmlake {

namespace v1 {
class DeviceInfo;  // proto/gmlake.proto; only the .cc sees gRPC's headers
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
  // The protocol version to speak (0: this build's). For tests.
  uint32_t protocol_version = 0;
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
  size_t chunk_size(int device) const override;
  // Idle chunks first, then one lease for the rest. ResourceExhausted with
  // the daemon's message (quota, or what the lake has), or with this
  // process's own limit (SetCapacity); Unavailable once the daemon is gone;
  // InvalidArgument for a device the daemon does not serve.
  absl::StatusOr<std::vector<ChunkHandle>> Acquire(int device, size_t count);
  // Handles not acquired from this source are ignored.
  void Return(int device, absl::Span<const ChunkHandle> chunks);
  // Acquire and Return in bytes: every chunk is chunk_size(device).
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
  uint64_t ReleaseIdle(int device);

  // Whether gmlaked serves this process's `device` (a device of the same
  // UUID). Those it does not serve keep a chunk_size (the backend's
  // granularity) and fail Acquire with FailedPrecondition naming them;
  // OpenChunkSource serves them from an embedded lake (split_chunk_source.h).
  bool serves(int device) const;

  // OK while the daemon is reachable; afterwards, why it is not.
  absl::Status daemon_status() const;
  uint64_t session_id() const { return session_id_; }
  // Chunks the caller holds / idle ones kept here, on `device`.
  size_t held_chunks(int device) const;
  size_t idle_chunks(int device) const;
  // Usage reports sent on this process's own initiative (figures changed).
  uint64_t usage_reports() const { return usage_reports_.load(); }
  // Pressure requests answered so far and bytes given back for them.
  uint64_t pressure_requests() const { return pressure_requests_.load(); }
  uint64_t pressure_bytes_returned() const {
    return pressure_bytes_returned_.load();
  }

 private:
  // Per device of this process (its numbering; gmlaked's may differ).
  struct DeviceState {
    std::string uuid;
    // gmlaked's number for the device (same UUID); -1: not served.
    int daemon_device = -1;
    // gmlaked's chunk size; the backend's granularity where not served.
    size_t chunk_size = 0;
    uint64_t lake_capacity = 0;
    uint64_t limit = 0;  // SetCapacity; 0: none
    // handle -> daemon chunk id
    absl::flat_hash_map<ChunkHandle, uint64_t> held;
    std::vector<std::pair<ChunkHandle, uint64_t>> idle;
    bool noted = false;
    uint64_t noted_used = 0;
    uint64_t noted_cached = 0;
  };

  explicit DaemonChunkSource(const DaemonSourceOptions& options);
  absl::Status Open();
  // The backend chunks are imported through: the one given, else one of
  // gmlaked's kind (on the host backend, seeing gmlaked's devices unless
  // GMLAKE_HOST_VISIBLE_DEVICES says otherwise).
  absl::Status ChooseBackend(const std::vector<const v1::DeviceInfo*>& served);
  // Pairs each device of this process with gmlaked's of the same UUID.
  absl::Status MatchDevices(const std::vector<const v1::DeviceInfo*>& served);
  // This process's number for gmlaked's device `daemon_device` (-1: none).
  int LocalDevice(int daemon_device) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Bind();
  absl::Status StartWatch();
  void WatchLoop();
  void HandlePressure(int device, uint64_t bytes);
  // Leases `count` chunks and imports them; appends (handle, id) pairs.
  absl::Status LeaseAndImport(
      int device, size_t count,
      std::vector<std::pair<ChunkHandle, uint64_t>>* out);
  // Releases idle chunks of `device` beyond `keep_bytes`, at most
  // `max_bytes` (0: no maximum), and returns them to the daemon.
  uint64_t TrimIdle(int device, uint64_t keep_bytes, uint64_t max_bytes);
  // Releases the local handles of chunks of `device` and tells the daemon
  // (if reachable).
  void GiveBack(int device,
                absl::Span<const std::pair<ChunkHandle, uint64_t>> chunks);
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
  // Unavailable status Acquire reports from then on.
  absl::Status MarkLost(const absl::Status& why);
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
  // The gRPC channel, stub and Watch call (kept out of this header so that
  // its includers do not compile gRPC's headers).
  struct Rpc;
  std::unique_ptr<Rpc> rpc_;
  uint64_t session_id_ = 0;
  std::string token_;
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

  std::thread watch_thread_;
  Notification watching_;

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

  std::atomic<uint64_t> pressure_requests_{0};
  // Bytes given back while answering pressure, counted before the daemon
  // has them.
  std::atomic<uint64_t> pressure_bytes_returned_{0};
};

}  // namespace gmlake

#endif  // GMLAKE_CLIENT_DAEMON_CHUNK_SOURCE_H_
