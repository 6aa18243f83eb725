// Copyright 2026 The GMLake Authors.
//
// DaemonChunkSource's leasing: Acquire takes idle chunks, then leases the
// rest (one Lease per chunk size), claims their descriptors on the fd socket
// and imports them; Return keeps idle chunks up to the watermark and gives
// the rest back.

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/chunk_sizing.h"
#include "client/daemon_chunk_source.h"
#include "client/daemon_link.h"
#include "common/bytes.h"
#include "common/fd_passing.h"
#include "common/mutex.h"
#include "grpcpp/grpcpp.h"
#include "proto/gmlake.grpc.pb.h"
#include "proto/protocol.h"

namespace gmlake {

using daemon_link::AddUsage;
using daemon_link::ReadReply;
using daemon_link::SetDeadline;
using daemon_link::WithContext;

absl::StatusOr<std::vector<ChunkHandle>> DaemonChunkSource::Acquire(
    int device, size_t count) {
  const uint64_t unit = chunk_size(device);
  absl::StatusOr<std::vector<LeasedChunk>> got =
      Obtain(device, count * unit, IdleTake::kUnit, /*others_asked=*/false);
  if (!got.ok()) return got.status();
  std::vector<ChunkHandle> handles;
  handles.reserve(got->size());
  for (const LeasedChunk& c : *got) handles.push_back(c.handle);
  return handles;
}

absl::StatusOr<std::vector<SizedChunk>> DaemonChunkSource::AcquireBytes(
    int device, uint64_t bytes) {
  const uint64_t unit = chunk_size(device);
  if (unit == 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("device %d does not exist in this process", device));
  }
  absl::StatusOr<std::vector<LeasedChunk>> got =
      Obtain(device, (bytes + unit - 1) / unit * unit, IdleTake::kPlanned,
             /*others_asked=*/false);
  if (!got.ok()) return got.status();
  std::vector<SizedChunk> out;
  out.reserve(got->size());
  for (const LeasedChunk& c : *got) out.push_back({c.handle, c.size});
  return out;
}

absl::StatusOr<std::vector<DaemonChunkSource::LeasedChunk>>
DaemonChunkSource::Obtain(int device, uint64_t bytes, IdleTake take,
                          bool others_asked) {
  WaitIfLostAndShort(device, bytes);
  Obtaining o;
  if (absl::Status s = TakeIdle(device, bytes, take, &o); !s.ok()) return s;
  if (bytes == 0) return std::move(o.got);
  PlanLeases(device, bytes, take, &o);
  // This process's own idle chunks come before the other sessions' memory:
  // while some are here that fit no planned chunk, the leases ask no one,
  // and where the lake is full those chunks serve the request in any size
  // or go back to make room first. On an H100 the colocation trainer's
  // turn took a second pressure round (~14 GiB asked of inference) for a
  // need planned in 16 MiB chunks, while its own stock leased ahead in
  // 4 MiB ones held the room that the first round had made.
  const bool may_press =
      !others_asked && (take == IdleTake::kUnit ||
                        take == IdleTake::kRoomMade || o.idle_left == 0);
  const absl::Status s = LeaseRuns(device, may_press, &o);
  const ObtainFailed failed = BookObtained(device, take, s, &o);
  if (s.ok()) return std::move(o.got);
  if (o.got.size() > o.from_idle) TrimIdle(device, failed.keep_bytes, 0);
  // A lease that asked no one and found no room is asked again as one
  // that may, even where the idle chunks it deferred to went meanwhile
  // (to another thread's request).
  const bool ask_others =
      !others_asked && !may_press && absl::IsResourceExhausted(s);
  if (!failed.retry && !failed.give_back_idle && !ask_others) return s;
  // No room for chunks of the planned sizes while idle ones of others are
  // here: those, before the caller hears there is no room. Else idle chunks
  // none of which fits what is missing (leased ahead in other sizes, freed
  // in larger ones) take the room of the chunks it needs: they go back to
  // the lake, and the lease is asked again.
  if (failed.give_back_idle) TrimIdle(device, 0, 0);
  absl::StatusOr<std::vector<LeasedChunk>> again = Obtain(
      device, bytes, failed.retry ? IdleTake::kAnyFit : IdleTake::kRoomMade,
      others_asked || may_press);
  if (again.ok() || !absl::IsResourceExhausted(again.status()) || !may_press) {
    return again;
  }
  // What the lease that asked the other sessions found, not the retry's.
  return s;
}

void DaemonChunkSource::WaitIfLostAndShort(int device, uint64_t bytes) {
  bool short_while_lost;
  {
    MutexLock l(&mu_);
    short_while_lost = device >= 0 &&
                       static_cast<size_t>(device) < devices_.size() &&
                       devices_[device].idle_bytes < bytes && !lost_.ok();
  }
  if (short_while_lost) {
    // gmlaked is away and the idle chunks do not do: wait for it holding
    // nothing (idle chunks taken now would miss its adoption).
    WaitForLink(absl::Now() + options_.reconnect_wait).IgnoreError();
  }
}

absl::Status DaemonChunkSource::TakeIdle(int device, uint64_t bytes,
                                         IdleTake take, Obtaining* o) {
  MutexLock l(&mu_);
  if (device < 0 || static_cast<size_t>(device) >= devices_.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "device %d does not exist: this process has devices 0..%d", device,
        devices_.size() - 1));
  }
  if (bytes == 0) return absl::OkStatus();
  DeviceState& d = devices_[device];
  if (d.daemon_device < 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "gmlaked at %s does not serve this process's device %d (%s); it "
        "serves %s",
        options_.socket_path, device, d.uuid,
        absl::StrJoin(daemon_uuids_, ", ")));
  }
  o->unit = d.chunk_size;
  const uint64_t after = d.held_bytes + bytes;
  if (d.limit != 0 && after > d.limit) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "acquiring %s on device %d would put this process at %s, over its "
        "limit of %s (SetCapacity)",
        FormatBytes(bytes), device, FormatBytes(after), FormatBytes(d.limit)));
  }
  // A refill on its way that covers this: wait for it rather than lease.
  if (WaitForRefillLocked(device, bytes)) background_waits_.fetch_add(1);
  o->sizing = SizingLocked(d);
  const uint64_t have =
      take == IdleTake::kPlanned
          ? TakePlannedChunks(&d.idle, bytes, o->sizing, &o->got)
          : TakeKeptChunks(&d.idle, bytes,
                           take == IdleTake::kUnit ? o->unit : 0, &o->got);
  d.idle_bytes -= have;
  // What was taken was leased ahead for this, as far as it goes.
  if (have > 0 && d.ahead_bytes > 0) {
    d.ahead_bytes -= std::min(d.ahead_bytes, have);
    d.grew = true;
  }
  o->missing = bytes - have;
  o->idle_left = d.idle_bytes;
  o->from_idle = o->got.size();
  o->epochs.assign(o->from_idle, epoch_);
  return absl::OkStatus();
}

void DaemonChunkSource::PlanLeases(int device, uint64_t bytes, IdleTake take,
                                   Obtaining* o) {
  // The rest in runs of one size each: one lease per run.
  if (take != IdleTake::kUnit) {
    o->runs = PlanChunks(o->missing, o->sizing);
  } else if (o->missing > 0) {
    o->runs.push_back({o->unit, o->missing / o->unit});
  }
  o->ahead_run = o->runs.size();
  // A small shortfall (no chunk past the base) leases the next ones ahead
  // with its largest run, in chunks of that run's size; a large one is one
  // lease of large chunks already.
  if (o->runs.empty() || o->runs[0].size > std::max(o->sizing.base, o->unit)) {
    return;
  }
  o->ahead_run = 0;
  for (size_t i = 1; i < o->runs.size(); ++i) {
    if (o->runs[i].size * o->runs[i].count >
        o->runs[o->ahead_run].size * o->runs[o->ahead_run].count) {
      o->ahead_run = i;
    }
  }
  const uint64_t size = o->runs[o->ahead_run].size;
  MutexLock l(&mu_);
  o->ahead = AheadChunksLocked(devices_[device], o->missing, bytes, size);
  if (o->ahead > 0) devices_[device].ahead_chunk = size;
}

absl::Status DaemonChunkSource::LeaseRuns(int device, bool may_press,
                                          Obtaining* o) {
  for (size_t i = 0; i < o->runs.size(); ++i) {
    const ChunkRun& run = o->runs[i];
    uint64_t lease_epoch = 0;
    blocking_leases_.fetch_add(1);
    absl::Status s = LeaseWithAhead(
        device, run.count, i == o->ahead_run ? o->ahead : 0, run.size, &o->got,
        &o->ahead_got, &lease_epoch, may_press);
    if (!s.ok()) return s;
    o->epochs.resize(o->got.size(), lease_epoch);
    if (!o->ahead_got.empty()) o->ahead_epoch = lease_epoch;
  }
  return absl::OkStatus();
}

DaemonChunkSource::ObtainFailed DaemonChunkSource::BookObtained(
    int device, IdleTake take, const absl::Status& s, Obtaining* o) {
  MutexLock l(&mu_);
  // Ids of another daemon than the current one (it restarted meanwhile,
  // and these were not in the maps it was shown): kept, uncounted.
  for (size_t i = 0; i < o->got.size(); ++i) {
    if (i >= o->epochs.size() || o->epochs[i] != epoch_) o->got[i].id = 0;
  }
  DeviceState& d = devices_[device];
  uint64_t leased = 0;
  for (size_t i = o->from_idle; i < o->got.size(); ++i) {
    leased += o->got[i].size;
  }
  for (LeasedChunk& c : o->ahead_got) {
    if (o->ahead_epoch != epoch_) c.id = 0;
    d.Idle(c);
    d.ahead_bytes += c.size;
    leased += c.size;
  }
  if (leased > 0) {
    d.streak_bytes += leased;
    d.grew = true;
    d.ahead_paused_bytes -= std::min(d.ahead_paused_bytes, leased);
  }
  if (s.ok()) {
    for (const LeasedChunk& c : o->got) d.Hold(c);
    MaybeRefillLocked(device);
    return {};
  }
  // All or nothing: the idle chunks taken, and those of runs leased
  // before the one that failed, are idle (the watermark decides which
  // stay, besides what was leased ahead).
  for (const LeasedChunk& c : o->got) d.Idle(c);
  ObtainFailed f;
  f.keep_bytes = options_.idle_watermark_bytes + d.ahead_bytes;
  f.retry = take == IdleTake::kPlanned && absl::IsResourceExhausted(s) &&
            d.idle_bytes >= o->missing;
  f.give_back_idle =
      !f.retry && (take == IdleTake::kPlanned || take == IdleTake::kAnyFit) &&
      absl::IsResourceExhausted(s) && d.idle_bytes > 0;
  return f;
}

ChunkSizing DaemonChunkSource::SizingLocked(const DeviceState& d) const {
  ChunkSizing s = options_.chunks;
  s.unit = d.chunk_size;
  if (s.unit == 0) return ChunkSizing{};
  s.base = std::max<uint64_t>(s.base / s.unit, 1) * s.unit;
  return ForHeld(s, d.peak_held_bytes);
}

size_t DaemonChunkSource::AheadChunksLocked(const DeviceState& d,
                                            uint64_t missing, uint64_t bytes,
                                            uint64_t size) const {
  if (missing == 0 || d.ahead_paused_bytes > 0 || d.chunk_size == 0 ||
      size == 0) {
    return 0;
  }
  // Room: what this process may hold (its limit, the lake's capacity) past
  // what it will hold with this request.
  const uint64_t after = d.held_bytes + bytes + d.idle_bytes;
  uint64_t room = ~uint64_t{0};
  for (uint64_t bound : {d.limit, d.lake_capacity}) {
    if (bound != 0) room = std::min(room, bound > after ? bound - after : 0);
  }
  LeaseAhead policy;
  policy.max_bytes = options_.lease_ahead_max;
  return LeaseAheadBytes(policy, d.chunk_size, missing, d.streak_bytes,
                         d.held_bytes + d.idle_bytes, room) /
         size;
}

absl::Status DaemonChunkSource::LeaseWithAhead(
    int device, size_t count, size_t ahead, uint64_t size,
    std::vector<LeasedChunk>* out, std::vector<LeasedChunk>* ahead_out,
    uint64_t* epoch, bool may_press) {
  if (ahead > 0) {
    absl::Status s = LeaseWhenLinked(device, count + ahead, size, out, epoch,
                                     /*no_pressure=*/true);
    if (s.ok()) {
      ahead_out->assign(out->end() - ahead, out->end());
      out->resize(out->size() - ahead);
      return s;
    }
    if (!absl::IsResourceExhausted(s)) return s;
    // The lake has not that much free (or the quota is near): the shortfall
    // as asked, and no leasing ahead for a while (LeaseAheadPause).
    MutexLock l(&mu_);
    devices_[device].PauseAhead(uint64_t{ahead} * size);
  }
  return LeaseWhenLinked(device, count, size, out, epoch,
                         /*no_pressure=*/!may_press);
}

void DaemonChunkSource::TrimAheadAfterPause() {
  size_t n;
  {
    MutexLock l(&mu_);
    n = devices_.size();
  }
  for (size_t i = 0; i < n; ++i) {
    uint64_t keep = 0;
    bool trim = false;
    {
      MutexLock l(&mu_);
      DeviceState& d = devices_[i];
      if (!d.grew) {
        // Growth paused: the next streak starts small again, and what was
        // leased ahead for this one goes back.
        d.streak_bytes = 0;
        d.pressed = false;
        trim = d.ahead_bytes > 0;
        keep = d.idle_bytes - d.ahead_bytes;
      }
      d.grew = false;
    }
    if (trim) TrimIdle(static_cast<int>(i), keep, 0);
  }
}

uint64_t DaemonChunkSource::ahead_bytes(int device) const {
  MutexLock l(&mu_);
  if (device < 0 || static_cast<size_t>(device) >= devices_.size()) return 0;
  return devices_[device].ahead_bytes;
}

absl::Status DaemonChunkSource::LeaseAndImport(int device, size_t count,
                                               uint64_t size,
                                               std::vector<LeasedChunk>* out,
                                               uint64_t* epoch,
                                               bool no_pressure) {
  const std::shared_ptr<Rpc> r = link();
  *epoch = r->epoch;
  absl::StatusOr<v1::LeaseResponse> resp =
      RequestLease(*r, device, count, size, no_pressure);
  if (!resp.ok()) return resp.status();
  if (static_cast<size_t>(resp->chunk_ids_size()) != count) {
    return absl::DataLossError(
        absl::StrFormat("gmlaked granted %d chunks for a lease of %d",
                        resp->chunk_ids_size(), count));
  }
  const std::vector<uint64_t> ids(resp->chunk_ids().begin(),
                                  resp->chunk_ids().end());
  Landed landed;
  const absl::Status failure = Land(*r, device, size, *resp, ids, &landed);
  if (!failure.ok()) return Undo(*r, ids, landed, failure);
  lease_calls_.fetch_add(1);
  chunks_leased_.fetch_add(count);
  if (resp->client_makes()) chunks_made_.fetch_add(count);
  for (auto& [h, fd] : landed.kept) KeepFd(h, std::move(fd));
  out->insert(out->end(), landed.chunks.begin(), landed.chunks.end());
  return absl::OkStatus();
}

absl::StatusOr<v1::LeaseResponse> DaemonChunkSource::RequestLease(
    const Rpc& r, int device, size_t count, uint64_t size, bool no_pressure) {
  v1::LeaseRequest req;
  req.set_session_id(r.session);
  req.set_token(r.token);
  req.set_chunk_count(count);
  req.set_no_pressure(no_pressure);
  req.set_client_makes(options_.make_chunks);
  {
    MutexLock l(&mu_);
    // gmlaked's number for the device; the chunks are imported on ours.
    req.set_device(devices_[device].daemon_device);
    // The unit needs no size (a gmlaked before chunk sizes serves it too).
    if (size != devices_[device].chunk_size) req.set_chunk_bytes(size);
    AddUsage(last_sent_ = UsageLocked(), req.mutable_usage());
  }
  v1::LeaseResponse resp;
  grpc::ClientContext ctx;
  // Creating and exporting a fresh chunk costs ~0.6 ms on an H200: a
  // large lease of new chunks gets time for it.
  SetDeadline(&ctx, options_.lease_timeout +
                        absl::Milliseconds(2) * static_cast<int64_t>(count));
  absl::Status s = FromGrpc(r.stub->Lease(&ctx, req, &resp));
  if (s.code() == absl::StatusCode::kUnavailable ||
      s.code() == absl::StatusCode::kNotFound) {
    return MarkLost(s, &r);
  }
  if (!s.ok()) return WithContext("gmlaked", s);
  return resp;
}

absl::Status DaemonChunkSource::Land(const Rpc& r, int device, uint64_t size,
                                     const v1::LeaseResponse& resp,
                                     absl::Span<const uint64_t> ids,
                                     Landed* landed) {
  if (resp.client_makes() && resp.chunk_size() == size) {
    // Capacity: the chunks are ours to make.
    return MakeChunks(device, size, ids, &landed->chunks);
  }
  if (resp.chunk_size() != size) {
    // Given back unclaimed by Undo.
    return absl::FailedPreconditionError(absl::StrFormat(
        "gmlaked leased chunks of %s for a lease of chunks of %s: it "
        "predates chunk sizes; upgrade gmlaked, or set GMLAKE_CONF "
        "max_chunk:0,large_chunk:0",
        FormatBytes(resp.chunk_size()), FormatBytes(size)));
  }
  return ClaimAndImport(r, device, size, resp.lease_id(), ids, landed);
}

absl::Status DaemonChunkSource::ClaimAndImport(const Rpc& r, int device,
                                               uint64_t size, uint64_t lease_id,
                                               absl::Span<const uint64_t> ids,
                                               Landed* landed) {
  MutexLock l(&fd_mu_);
  v1::FdRequest claim;
  claim.set_session_id(r.session);
  claim.set_token(r.token);
  claim.mutable_claim()->set_lease_id(lease_id);
  absl::Status s = SendFds(fd_sock_.get(), claim.SerializeAsString(), {});
  if (!s.ok()) {
    landed->socket_broken = true;
    return s;
  }
  size_t next = 0;      // ids[next] is the next chunk gmlaked is to send
  absl::Status failed;  // an import failed: the rest is read, not imported
  while (true) {
    std::vector<UniqueFd> fds;
    absl::StatusOr<v1::FdReply> reply = ReadReply(fd_sock_.get(), &fds);
    if (!reply.ok()) {
      landed->socket_broken = true;
      return reply.status();
    }
    if (reply->code() != 0) {
      return absl::Status(
          static_cast<absl::StatusCode>(reply->code()),
          absl::StrCat("claiming lease ", lease_id, ": ", reply->message()));
    }
    if (reply->lease_id() != lease_id ||
        static_cast<size_t>(reply->chunk_ids_size()) != fds.size() ||
        next + fds.size() > ids.size()) {
      landed->socket_broken = true;  // out of step
      return absl::DataLossError(absl::StrFormat(
          "gmlaked sent %d descriptors for %d chunk ids of lease %d",
          fds.size(), reply->chunk_ids_size(), reply->lease_id()));
    }
    if (failed.ok()) {
      failed = ImportBatch(device, size, *reply, ids, &fds, &next, landed);
    }
    // After a failed import the lease's other batches are still read (and
    // their descriptors closed), so that the next claim finds the socket in
    // step.
    if (reply->last()) {
      if (failed.ok() && next != ids.size()) {
        return absl::DataLossError(
            absl::StrFormat("gmlaked sent %d of the %d descriptors of lease %d",
                            next, ids.size(), lease_id));
      }
      return failed;
    }
  }
}

absl::Status DaemonChunkSource::ImportBatch(int device, uint64_t size,
                                            const v1::FdReply& reply,
                                            absl::Span<const uint64_t> ids,
                                            std::vector<UniqueFd>* fds,
                                            size_t* next, Landed* landed) {
  const size_t batch_start = landed->chunks.size();
  absl::Status s;
  for (size_t i = 0; i < fds->size(); ++i) {
    if (reply.chunk_ids(i) != ids[*next]) {
      s = absl::DataLossError("gmlaked sent chunks out of order");
      break;
    }
    absl::StatusOr<ChunkHandle> h =
        backend_->ImportChunk((*fds)[i].get(), device, size);
    // The descriptor closes with `fds` (the import holds the chunk),
    // unless it is kept for re-adoption.
    if (!h.ok()) {
      s = WithContext("importing a chunk from gmlaked", h.status());
      break;
    }
    landed->chunks.push_back({*h, ids[*next], size});
    ++*next;
  }
  // Descriptors kept for re-adoption, as many as leave the process room;
  // the others close with `fds`.
  const size_t keep = KeepRoom(fds->size(), landed->kept.size(),
                               landed->chunks.size() - batch_start);
  for (size_t i = 0; i < keep; ++i) {
    landed->kept.push_back(
        {landed->chunks[batch_start + i].handle, std::move((*fds)[i])});
  }
  return s;
}

absl::Status DaemonChunkSource::Undo(const Rpc& r,
                                     absl::Span<const uint64_t> ids,
                                     const Landed& landed,
                                     const absl::Status& failure) {
  for (const LeasedChunk& c : landed.chunks) {
    backend_->ReleaseChunk(c.handle).IgnoreError();
  }
  if (landed.socket_broken) {
    // Without the fd socket the session is over (the daemon ends it when
    // the connection closes).
    return MarkLost(WithContext("gmlaked's fd socket failed", failure), &r);
  }
  v1::ReturnRequest ret;
  ret.set_session_id(r.session);
  ret.set_token(r.token);
  for (uint64_t id : ids) ret.add_chunk_ids(id);
  v1::ReturnResponse ret_resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, options_.rpc_timeout);
  r.stub->Return(&ctx, ret, &ret_resp);
  return failure;
}

absl::Status DaemonChunkSource::MakeChunks(int device, uint64_t size,
                                           absl::Span<const uint64_t> ids,
                                           std::vector<LeasedChunk>* made) {
  for (uint64_t id : ids) {
    absl::StatusOr<ChunkHandle> h = backend_->CreateChunk(device, size);
    if (!h.ok()) {
      return absl::Status(
          h.status().code(),
          absl::StrFormat("making a chunk of %s on device %d in the capacity "
                          "gmlaked leased (%d of %d made): %s",
                          FormatBytes(size), device, made->size(), ids.size(),
                          h.status().message()));
    }
    made->push_back({*h, id, size});
  }
  return absl::OkStatus();
}

void DaemonChunkSource::Return(int device,
                               absl::Span<const ChunkHandle> chunks) {
  uint64_t keep;
  {
    MutexLock l(&mu_);
    if (device < 0 || static_cast<size_t>(device) >= devices_.size()) return;
    DeviceState& d = devices_[device];
    for (ChunkHandle h : chunks) {
      auto it = d.held.find(h);
      if (it == d.held.end()) continue;  // not ours: ignored (see header)
      d.Idle({h, it->second.id, it->second.size});
      d.Unhold(it);
    }
    // What was leased ahead stays for the growth it was leased for.
    keep = options_.idle_watermark_bytes + d.ahead_bytes;
  }
  TrimIdle(device, keep, 0);
}

void DaemonChunkSource::ReturnSized(int device,
                                    absl::Span<const SizedChunk> chunks) {
  std::vector<ChunkHandle> handles;
  handles.reserve(chunks.size());
  for (const SizedChunk& c : chunks) handles.push_back(c.handle);
  Return(device, handles);
}

uint64_t DaemonChunkSource::ReleaseKept(int device) {
  return TrimIdle(device, 0, 0);
}

uint64_t DaemonChunkSource::TrimIdle(int device, uint64_t keep_bytes,
                                     uint64_t max_bytes) {
  std::vector<LeasedChunk> give;
  uint64_t bytes = 0;
  uint64_t epoch = 0;
  {
    MutexLock l(&mu_);
    if (device < 0 || static_cast<size_t>(device) >= devices_.size()) {
      return 0;
    }
    DeviceState& d = devices_[device];
    while (!d.idle.empty() && d.idle_bytes > keep_bytes &&
           (max_bytes == 0 || bytes < max_bytes)) {
      give.push_back(d.idle.back());
      d.idle.pop_back();
      d.idle_bytes -= give.back().size;
      bytes += give.back().size;
    }
    // Idle chunks go back leased-ahead ones first (nobody asked for them).
    d.ahead_bytes = std::min(d.ahead_bytes, d.idle_bytes);
    // Room again: leasing ahead may try anew.
    if (bytes > 0) d.ahead_paused_bytes = 0;
    epoch = epoch_;
  }
  if (!give.empty()) GiveBack(device, give, epoch);
  return bytes;
}

void DaemonChunkSource::GiveBack(int device,
                                 absl::Span<const LeasedChunk> chunks,
                                 uint64_t epoch) {
  // Our handle goes first, so the daemon never leases a chunk on while
  // this process still holds it.
  uint64_t bytes = 0;
  for (const LeasedChunk& c : chunks) {
    // The kept descriptor first: once released, the handle's value may
    // name a chunk imported next.
    DropKeptFd(c.handle);
    backend_->ReleaseChunk(c.handle).IgnoreError();
    bytes += c.size;
  }
  // Counted before the daemon has them: once it has, the lease that asked
  // goes on, and its caller may read this counter at once.
  if (daemon_link::answering_pressure == this) {
    pressure_bytes_returned_.fetch_add(bytes);
  }
  if (!Lost().ok()) return;
  const std::shared_ptr<Rpc> r = link();
  // Ids of a daemon before a restart: the new one was shown these chunks
  // and got them back from Relink, or never counted them.
  if (r->epoch != epoch) return;
  v1::ReturnRequest req;
  req.set_session_id(r->session);
  req.set_token(r->token);
  // Id 0: kept from before a restart, not adopted by this daemon.
  for (const LeasedChunk& c : chunks) {
    if (c.id != 0) req.add_chunk_ids(c.id);
  }
  if (req.chunk_ids_size() == 0) return;
  {
    MutexLock l(&mu_);
    AddUsage(last_sent_ = UsageLocked(), req.mutable_usage());
  }
  v1::ReturnResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, options_.rpc_timeout);
  absl::Status s = FromGrpc(r->stub->Return(&ctx, req, &resp));
  if (s.code() == absl::StatusCode::kUnavailable ||
      s.code() == absl::StatusCode::kNotFound) {
    MarkLost(s, r.get()).IgnoreError();
  }
}

}  // namespace gmlake
