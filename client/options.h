// Copyright 2026 The GMLake Authors.
//
// AllocatorOptions: every knob of libgmlake, set in one place with one
// syntax: GMLAKE_CONF="key:value,key:value" (as PYTORCH_CUDA_ALLOC_CONF).
// docs/tuning.md documents each key; KnownConfKeys() lists them.

#ifndef GMLAKE_CLIENT_OPTIONS_H_
#define GMLAKE_CLIENT_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gmlake {

struct AllocatorOptions {
  // backend: auto | cuda | host | accounting (the VMM layer, common/vmm.h).
  std::string backend = "auto";
  // lake: auto (gmlaked if its socket exists, else embedded) | embedded |
  // daemon (fail if gmlaked is not there).
  std::string lake = "auto";
  // socket: gmlaked's control socket.
  std::string socket = "/run/gmlake/gmlaked.sock";
  // capacity: most bytes this process may hold per device (0: no limit).
  uint64_t capacity = 0;
  // host_capacity: memory of each emulated device on the host and
  // accounting backends (0: 64 GiB).
  uint64_t host_capacity = 0;
  // chunk_size: physical chunk size (0: the backend's granularity, 2 MiB on
  // an H200). Also the unit of stitching: a chunk maps only whole.
  uint64_t chunk_size = 0;
  // max_chunk: the largest chunk the embedded lake creates when the
  // allocator grows (one chunk per shortfall up to this; 0: no bound).
  // Larger chunks mean fewer driver calls (cuMemSetAccess costs the same
  // per handle whatever its size); smaller ones can be stitched more
  // finely. 4 MiB halves the calls of 2 MiB chunks and keeps the smallest
  // capacity within 1.008 x the live peak on the seven traces shipped first
  // (with covers, 1.01 on all fifteen: cover_tail); 8 MiB needs up to 1.015 x
  // (docs/design.md, "Chunk sizes").
  uint64_t max_chunk = uint64_t{4} << 20;
  // large_chunk: the largest chunk for a large shortfall (one of at least
  // 32 x max_chunk): it is cut into at least 16 chunks of a power-of-two
  // multiple of max_chunk, up to this (client/chunk_sizing.h). Through
  // gmlaked, leases of such chunks let 40 GiB move between processes in
  // 40 chunks instead of 20,480 (docs/daemon.md, "Hand-off"). 0: never
  // larger than max_chunk.
  uint64_t large_chunk = uint64_t{1} << 30;
  // held_chunk_divisor / held_chunk_max: a process that holds (or has held)
  // much grows in coarser chunks: max_chunk doubles while it stays within
  // 1/divisor of the most the process has held on the device and within
  // held_chunk_max
  // (client/chunk_sizing.h, ForHeld; what is left below it is cut in
  // max_chunk as before). What a partly free chunk strands then scales with
  // the bytes held: every trace in traces/ stays within 1.01 x live, and
  // the colocation trainer (56 GiB) grows with 18,653 driver calls instead
  // of 30,122, a cuMemCreate and a cuMemSetAccess (~50 us together on an
  // H200) per chunk fewer (docs/design.md, "Chunk sizes"). 0: off.
  uint64_t held_chunk_divisor = 2048;
  uint64_t held_chunk_max = uint64_t{16} << 20;
  // small_size: requests up to this many bytes are carved from single
  // chunks of their own arena and never stitched.
  uint64_t small_size = 1 << 20;
  // stitch: when no free block fits, move free chunks from other free
  // blocks into a new mapping before asking the lake for more (true), or
  // always ask the lake (false, for comparison).
  bool stitch = true;
  // grow_slack: while what the process reserves stays within (1 +
  // grow_slack) x the most it has had allocated, a request no free block
  // fits maps new chunks from the lake instead of stitching. Stitching costs
  // host time per chunk (cuMemSetAccess, ~35 us per 2 MiB handle on an
  // H200); a little slack lets the sizes of a training step settle with far
  // fewer stitches (docs/design.md). 0: stitch whenever free chunks exist.
  double grow_slack = 0.005;
  // grow_slack_large: grow_slack for a request of 64 MiB or more (the
  // "large" of GrowInPlace) that raises the most allocated at once: while
  // the peak rises (a KV cache growing in a first decode), growing maps
  // memory the program goes on to hold, and stitching it from the free
  // blocks the growing tensors take turns in makes them be mapped anew
  // whole. 0.0075 rather than grow_slack's 0.005: the recorded 320-token
  // decode (colocate_infer_long) makes 23% fewer driver calls (51,451
  // instead of 67,098 on the accounting backend), reserving 1.0073 x live;
  // the other 15 traces as many calls or fewer, 10 of them exactly as
  // before (client/stitch_policy.h, GrowSlackFor; docs/design.md, "A
  // larger slack while the peak rises"). Never less than grow_slack,
  // and 0 when grow_slack is 0 (stitch whenever free chunks exist).
  double grow_slack_large = 0.0075;
  // grow_reach: a request no free block fits grows a free block in place
  // when that block is short of it by at most this share of the request,
  // unmapping the old pages of stolen chunks (dormant, below) that stand
  // in its way (docs/design.md, "A KV cache that grows"). For requests of
  // 64 MiB or more; smaller ones at most 1/16 (GrowInPlace in
  // client/stitch_policy.h). Growing maps the shortfall where a fresh view
  // maps it all: at 0.4 instead of 1/16 the recorded 320-token decode makes
  // 19% fewer driver calls, the colocation traces 6-7% fewer,
  // llama3b_infer_large 2.9% more, every trace within 1.01 x live
  // (docs/design.md, "How far a block grows in place"). 0: never.
  double grow_reach = 0.4;
  // cover_tail: when every free chunk is larger than what a mapping still
  // misses, one of them (the small pool: the smallest; the large pool: the
  // largest, a free tail a growing tensor uses) is mapped whole if its extra
  // bytes, at most this many, fit unmapped beside the mapping: they become a
  // free tail of the new block instead of a new chunk from the lake
  // (client/chunk_cover.h, docs/design.md "Chunk sizes"). 32 MiB lets a
  // tensor that grows by a page take one of the 16 MiB chunks a KV cache's
  // prefill was cut into (with max_dormant below: colocate_infer's replay
  // at 1.008 x live instead of 1.016). 0: never.
  uint64_t cover_tail = uint64_t{32} << 20;
  // cover_after: the large pool takes such a chunk out of a free block only
  // once the rests the lake made instead would pass this share of the
  // allocated peak (a program whose shapes strand memory); the small pool
  // always does. 0: at once.
  double cover_after = 0.002;
  // max_dormant: stitched chunks stay mapped where they were taken from
  // (dormant), so the shape they had comes back with no driver call. Once
  // more bytes are dormant than this, those no stream uses any more are
  // unmapped (docs/design.md, "Dormant mappings"). 8 GiB holds what every
  // training trace in traces/ reactivates (none makes one call more than
  // with no bound), while a KV cache that grows a token a step, whose old
  // views never come back, stops hemming its free blocks in: the inference
  // traces make 39-42% fewer driver calls, and the colocation pair's
  // inference role on the H200 spends 4.4 s in the driver instead of 7.7
  // (docs/design.md, "A KV cache that grows"). 0: what is reserved plus
  // 2 GiB (the bound before 2026-12-03).
  uint64_t max_dormant = uint64_t{8} << 30;
  // unmap_thread: dormant pages over max_dormant are unmapped on a thread
  // of the allocator's instead of in the malloc that finds them over it,
  // so that the thread launching work does not wait for cuMemUnmap
  // (0.54-0.57 s of the colocation pair's first inference turn on an
  // H100). Off: on an H100 the unmaps slow the stitch's maps on the
  // malloc thread threefold and the turn ran no faster (docs/design.md
  // "Dormant mappings").
  bool unmap_thread = false;
  // large_arena / small_arena: virtual address space reserved per device
  // for each kind of request (more is reserved when it runs out).
  uint64_t large_arena = uint64_t{512} << 30;
  uint64_t small_arena = uint64_t{64} << 30;
  // idle_watermark: with gmlaked, free chunks beyond this many bytes are
  // returned to the lake at once (0: keep all until asked).
  uint64_t idle_watermark = 0;
  // lease_ahead: with gmlaked, a process growing in many small shortfalls
  // leases the next ones ahead, in steps that double with its growth, up
  // to the larger of this and 1/64 of what it holds (0: one lease per
  // shortfall). Leased ahead and unused, chunks go back first under
  // pressure and once growth pauses (docs/daemon.md, "Growth").
  uint64_t lease_ahead = uint64_t{256} << 20;
  // lease_ahead_background: lease the next step ahead on a thread of the
  // lake's client once half of the last one is taken, so that mallocs find
  // chunks imported already (docs/daemon.md, "Leasing ahead in the
  // background"). false: leasing ahead only on the malloc that falls short.
  bool lease_ahead_background = true;
  // make_chunks: with gmlaked, the process makes its new chunks itself in
  // the capacity gmlaked leases it, instead of importing chunks gmlaked
  // made and exported (docs/daemon.md, "Chunks the client makes"). false:
  // every new chunk comes from gmlaked.
  bool make_chunks = true;
  // log: print start-up lines (which backend and lake) to stderr.
  bool log = true;
};

// Parses "key:value,key:value" over `base`. Unknown keys and bad values are
// InvalidArgument naming the key and listing what is accepted.
absl::StatusOr<AllocatorOptions> ParseConf(absl::string_view conf,
                                           AllocatorOptions base = {});

// Reads GMLAKE_CONF from the environment (empty when unset) over `base`.
absl::StatusOr<AllocatorOptions> OptionsFromEnv(AllocatorOptions base = {});

// Every accepted key, for help texts.
std::vector<std::string> KnownConfKeys();

}  // namespace gmlake

#endif  // GMLAKE_CLIENT_OPTIONS_H_
