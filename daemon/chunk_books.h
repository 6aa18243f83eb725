// Copyright 2026 The GMLake Authors.
//
// ChunkBooks: every chunk gmlaked created, the one state it is in, and who
// holds it. This is the state machine that keeps one chunk from two
// holders:
//
//            Reserve                      Grant
//   free ────────────> reserved ─────────────────────> leased
//     ^                scrubbing                       (a session)
//     │                (a lease in flight)                 │
//     ├──────── PutBack ───┘                               │
//     └──────────────────────── Free / FreeAll ────────────┘
//   free ── TakeFreeForTrim / TakeFree / TakeAll ──> gone (the caller
//                                                      releases it)
//   Adopt ──> leased ── Free / FreeAll ──> dropped (TakeDropped: the
//                                          caller releases it)
//
// A lease in flight (zeroing or creating chunks without the Lake's lock)
// owns its chunks as a Reservation: no session's end, Return or trim can
// take them, and only the lease grants them or puts them back. Every
// transition checks the state and holder it expects and leaves any other
// chunk alone; none throws (lookups return null). Free chunks remember the
// uid that last held them, so that ScrubPolicy can say which need zeroing
// for the next holder, and a lease takes those that do not first.
//
// Who holds what is kept here too, as the chunks move: per session, the
// bytes granted and the bytes of its leases in flight (which count against
// quotas), per uid the sum.
//
// Chunks come in sizes: each is a multiple of its device's unit
// (ChunkBooksDevice::chunk_size), as the lease that made it asked
// (LeaseRequest.chunk_bytes), and a lease is served chunks of its one
// size. Free chunks of the size a lease asks for are reused; for the rest
// it creates new ones, and where the capacity left does not cover them it
// takes free chunks of other sizes out of the books (Reservation::recycled)
// for the caller to release first. Capacity, room and quotas are in bytes.
//
// Not thread-safe: the Lake calls it under its lock. It makes no backend
// calls: creating, zeroing and releasing chunks is the caller's.

#ifndef GMLAKE_DAEMON_CHUNK_BOOKS_H_
#define GMLAKE_DAEMON_CHUNK_BOOKS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/unique_fd.h"
#include "common/vmm.h"
#include "daemon/chunk_identity.h"
#include "daemon/release_policy.h"
#include "daemon/scrub_policy.h"

namespace gmlake {

struct ChunkBooksDevice {
  // The unit: every chunk on the device is a positive multiple of it.
  size_t chunk_size = 0;
  // The most bytes created (and being created) at once.
  uint64_t capacity_bytes = 0;
};

class ChunkBooks {
 public:
  ChunkBooks(std::vector<ChunkBooksDevice> devices, ScrubPolicy scrub);
  ChunkBooks(const ChunkBooks&) = delete;
  ChunkBooks& operator=(const ChunkBooks&) = delete;

  int device_count() const { return static_cast<int>(devices_.size()); }
  // The device's unit (every chunk is a multiple of it).
  size_t chunk_size(int device) const;
  uint64_t capacity_bytes(int device) const;

  // Chunks and their bytes.
  struct Tally {
    uint64_t chunks = 0;
    uint64_t bytes = 0;
    void Add(uint64_t size) {
      ++chunks;
      bytes += size;
    }
    void Sub(uint64_t size);
  };
  // Per state on a device. created = free + reserved + scrubbing + leased;
  // creating_bytes is capacity set aside for chunks being made.
  struct Counts {
    Tally created, free, reserved, scrubbing, leased;
    uint64_t creating_bytes = 0;
  };
  Counts counts(int device) const;
  // Capacity neither created nor set aside, in bytes.
  uint64_t room(int device) const;
  // Free chunks of `size` bytes on `device`, in bytes.
  uint64_t free_bytes_of_size(int device, uint64_t size) const;
  // No bound on the room a lease may grow into (CanReserve, Reserve).
  static constexpr uint64_t kAnyGrowth = ~uint64_t{0};
  // Whether a lease of `count` chunks of `size` bytes on `device` can be
  // reserved now: from free chunks of that size, then by creating, in the
  // room left (at most `grow_limit` bytes of it), and in the room that
  // releasing free chunks of other sizes (not pinned) makes. If not,
  // `*short_bytes` says by how much. `client_makes`: capacity only, in the
  // room left and the room releasing any free chunk makes (none is leased
  // for it).
  bool CanReserve(int device, uint64_t count, uint64_t size,
                  uint64_t grow_limit, uint64_t* short_bytes,
                  bool client_makes = false) const;

  // A chunk of `size` bytes made outside any lease (ahead of time): free
  // and fresh. `fd` is its kept export, or none when chunks are exported
  // on demand; `identity` names its memory where the backend can tell
  // (chunk_identity.h).
  uint64_t AddFree(int device, ChunkHandle handle, uint64_t size, UniqueFd fd,
                   ChunkIdentity identity = {});

  // --- Leases in flight
  // -------------------------------------------------------

  struct Released;
  // The chunks a lease in flight owns.
  struct Reservation {
    uint64_t lease = 0;
    uint64_t session = 0;
    int64_t uid = kNoUid;
    int device = 0;
    uint64_t count = 0;
    uint64_t chunk_bytes = 0;     // the size of each of its chunks
    std::vector<uint64_t> clean;  // reserved: fresh or the uid's own
    std::vector<uint64_t> dirty;  // scrubbing: zero them before granting
    std::vector<ChunkHandle> dirty_handles;
    // Capacity only: its client makes the chunks (no handle here, no
    // descriptor to send); `to_create` of them, added by AddClientMade.
    bool client_makes = false;
    uint64_t to_create = 0;      // chunks to make (capacity set aside)
    std::vector<uint64_t> made;  // chunks made for it (AddMade)
    // Free chunks of other sizes taken out of the books to make room: the
    // caller releases them (ReleaseToDriver) before creating.
    std::vector<Released> recycled;
    uint64_t bytes() const { return count * chunk_bytes; }
  };
  // Reserves `count` chunks of `size` bytes on `device` for lease `lease`
  // of `session` (with `uid`): free chunks of that size, those needing no
  // zeroing for `uid` first, and capacity for the rest, recycling free
  // chunks of other sizes where the room left is short. The caller has
  // checked CanReserve (with may_grow). Charges the session and the uid.
  // `client_makes`: capacity for all `count`, none from free chunks (those
  // of any size are recycled where the room is short).
  Reservation Reserve(uint64_t lease, uint64_t session, int64_t uid, int device,
                      uint64_t count, uint64_t size,
                      uint64_t grow_limit = kAnyGrowth,
                      bool client_makes = false);
  // Chunks made for `r` join it (reserved, fresh); the capacity set aside
  // for it is released, whether made or not.
  struct MadeChunk {
    ChunkHandle handle = 0;
    UniqueFd fd;
    ChunkIdentity identity;
  };
  void AddMade(Reservation* r, std::vector<MadeChunk> made);
  // A lease whose client makes its chunks: their records (no handle, never
  // free: freed, they leave the books) join it; the capacity set aside
  // becomes theirs.
  void AddClientMade(Reservation* r);
  // Grants every chunk of `r` to its session, all or nothing, and returns
  // their ids. FailedPrecondition, changing nothing, if `r` holds fewer
  // than its count (some were never made, or a bug took one: logged).
  absl::StatusOr<std::vector<uint64_t>> Grant(const Reservation& r);
  // Puts back what `r` still holds: scrubbing chunks as fresh if `zeroed`
  // (their zeroing succeeded), the others as they were; uncharges `r`.
  void PutBack(const Reservation& r, bool zeroed);

  // --- Chunks granted to sessions
  // ---------------------------------------------

  // OK if every one of `ids` is leased to `session`; otherwise
  // InvalidArgument naming the first that is not, and what it is.
  absl::Status CheckLeasedTo(uint64_t session,
                             absl::Span<const uint64_t> ids) const;
  // Frees a chunk leased to `session`: the bytes freed, 0 (and nothing
  // done) if it is not leased to it.
  uint64_t Free(uint64_t session, uint64_t id);
  // Frees every chunk leased to `session`. Its leases in flight keep their
  // charge until they are granted or put back.
  uint64_t FreeAll(uint64_t session);
  // OK if every one of `ids` is leased to `session` (its descriptors may be
  // sent); FailedPrecondition otherwise.
  absl::Status CheckDeliverable(uint64_t session,
                                absl::Span<const uint64_t> ids) const;
  // Duplicates (close-on-exec) the kept exports of `ids`, which must all be
  // leased to `session`: FailedPrecondition otherwise, ResourceExhausted
  // when out of descriptors.
  absl::StatusOr<std::vector<UniqueFd>> DupFds(
      uint64_t session, absl::Span<const uint64_t> ids) const;
  // With exports on demand: the descriptor a chunk made for a lease kept
  // from its creation (invalid once taken, or for any other chunk). Its
  // first delivery sends it instead of exporting again.
  UniqueFd TakeCreationFd(uint64_t id);
  // For exporting without the lock: the handles of `ids` (all leased to
  // `session`, else FailedPrecondition), pinned so that no trim or release
  // takes them until Unpin, even if they are returned meanwhile.
  absl::StatusOr<std::vector<ChunkHandle>> Pin(uint64_t session,
                                               absl::Span<const uint64_t> ids);
  void Unpin(absl::Span<const uint64_t> ids);

  // --- Who holds what
  // ---------------------------------------------------------

  struct Holding {
    uint64_t leased_bytes = 0;     // granted
    uint64_t in_flight_bytes = 0;  // its leases in flight
    uint64_t leased_chunks = 0;
    std::map<int, Tally> leased_by_device;
  };
  // What `session` holds (all zero if nothing).
  Holding holding(uint64_t session) const;
  // Bytes granted to and in flight for all sessions of `uid`.
  uint64_t uid_bytes(int64_t uid) const;
  // Sessions holding granted chunks on `device`.
  size_t holders(int device) const;

  // --- Releasing
  // ---------------------------------------------------------------

  struct Released {
    uint64_t id = 0;
    int device = 0;
    ChunkHandle handle = 0;
    uint64_t size = 0;
    UniqueFd fd;
    bool held_data = false;  // a session wrote to it since it was fresh
    int64_t uid = kNoUid;    // the uid of its last holder
  };
  // Takes free chunks of `device` out of the books, up to `bytes` (0: all):
  // those that held data first (they would need zeroing before reuse).
  // Pinned chunks stay.
  std::vector<Released> TakeFreeForTrim(int device, uint64_t bytes);
  // What the release policy needs to know of `device`: its free chunks
  // (pinned ones left out), their sizes and since when each is free.
  DeviceHoldings Holdings(int device, uint64_t floor_bytes) const;
  // Takes the free, unpinned chunks among `ids` of `device` out of the
  // books (others are left alone).
  std::vector<Released> TakeFree(int device, absl::Span<const uint64_t> ids);
  // Takes every chunk out, whatever its state (the daemon is ending).
  std::vector<Released> TakeAll();

  // --- Adopted after a restart (adopt_policy.h) -----------------------------

  // A chunk a session's process still held from the daemon before this
  // one, shown by its descriptor and imported as `handle`: leased to
  // `session` (of `uid`) at once, counted as created, its bytes charged to
  // the session and the uid. It is never pooled: when the session returns
  // it or ends, Free takes it out of the books into TakeDropped.
  uint64_t Adopt(uint64_t session, int64_t uid, int device, ChunkHandle handle,
                 uint64_t size, ChunkIdentity identity);
  // Adopted chunks freed since the last call, out of the books: the caller
  // releases their handles (never zeroing them: the client may still map
  // them, and their memory never goes to anyone else).
  std::vector<Released> TakeDropped();
  // The chunk whose memory has `identity` (0: none, or unknown).
  uint64_t HeldAs(const ChunkIdentity& identity) const;

 private:
  enum class State { kFree, kReserved, kScrubbing, kLeased };
  struct Chunk {
    uint64_t id = 0;
    int device = 0;
    ChunkHandle handle = 0;
    uint64_t size = 0;
    UniqueFd fd;   // without export on demand: exported once, duplicated
    int pins = 0;  // exports in progress without the lock (Pin)
    State state = State::kFree;
    uint64_t lease = 0;         // reserved, scrubbing: the lease
    uint64_t session = 0;       // leased: the session
    int64_t last_uid = kNoUid;  // the uid of the last holder
    absl::Time free_since;      // when free: since when
    ChunkIdentity identity;     // its memory, where the backend can tell
    bool adopted = false;       // after a restart: never pooled
    bool client_made = false;   // its client made it: no handle, never pooled
  };
  // Free chunk ids by the uid that last held them (kNoUid: fresh).
  using FreeLists = absl::flat_hash_map<int64_t, std::vector<uint64_t>>;
  struct Device {
    ChunkBooksDevice config;
    Counts counts;
    // The free lists of each chunk size.
    std::map<uint64_t, FreeLists> free_by_size;
  };
  struct SessionHolding {
    int64_t uid = kNoUid;
    Holding totals;
    absl::flat_hash_set<uint64_t> chunks;
  };

  Chunk* Find(uint64_t id) const;
  // Takes an adopted chunk that its session let go out of the books, into
  // dropped_.
  void Drop(Chunk* c);
  // Takes a free chunk out of chunks_ (its free list entry is the caller's).
  Released Take(Chunk* c);
  // The chunks `r` still holds as it left them; others are logged.
  std::vector<Chunk*> HeldBy(const Reservation& r) const;
  void MakeFree(Chunk* c);
  // Files the chunks made for `r` (AddMade), or with `made` null the
  // records of those its client makes (AddClientMade).
  void FileMade(Reservation* r, std::vector<MadeChunk>* made);
  Tally* CounterOf(Device* d, State state);
  // Files chunk `c`, free, under its size and its last holder's uid.
  void ListFree(Device* d, const Chunk& c);
  // Takes a listed free chunk (not pinned) of `d` out of its list and the
  // free counts; null for a stale entry (logged, dropped).
  Chunk* UnlistFree(Device* d, std::vector<uint64_t>* list);
  // Takes free chunks of sizes other than `size` out of the books until
  // `bytes` are released (or none is left), fresh ones first.
  // `size` 0: of any size.
  std::vector<Released> Recycle(int device, uint64_t size, uint64_t bytes);
  // Takes free chunks off the back of `list` (one of `d`'s free lists) out
  // of the books into `out`, leaving pinned ones listed, until `budget`
  // bytes (0: no limit) are reached (`may_exceed`: the last one may pass
  // it) or would be passed. Returns the bytes taken.
  uint64_t TakeUnpinned(Device* d, std::vector<uint64_t>* list, uint64_t budget,
                        bool may_exceed, std::vector<Released>* out);
  // Drops emptied free lists of `d`.
  void PruneFreeLists(Device* d);
  void Charge(uint64_t session, int64_t uid, uint64_t bytes);
  void UnchargeInFlight(uint64_t session, int64_t uid, uint64_t bytes);
  void Forget(uint64_t session);  // when it holds nothing any more

  const ScrubPolicy scrub_;
  std::vector<Device> devices_;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Chunk>> chunks_;
  absl::flat_hash_map<uint64_t, SessionHolding> sessions_;
  absl::flat_hash_map<int64_t, uint64_t> uid_bytes_;
  absl::flat_hash_map<ChunkIdentity, uint64_t> by_identity_;
  std::vector<Released> dropped_;
  uint64_t next_id_ = 1;
};

}  // namespace gmlake

#endif  // GMLAKE_DAEMON_CHUNK_BOOKS_H_
