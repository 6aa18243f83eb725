// Copyright 2026 The GMLake Authors.
//
// trace_client: a client process of gmlaked that replays a slice of a
// shipped trace through a real Allocator over DaemonChunkSource, for the
// restart and chaos tests. It keeps going when gmlaked is killed and
// started again (the source reconnects and is adopted), and says on stdout:
//
//   ready <session>
//       connected;
//   ok progress <loop> <event>
//       every --progress_every events;
//   ok done <events> <reconnections> <readopted> <oom waits> <loops>
//       the slice replayed --loops times (and for --duration_s);
//   err <code> <message>
//       a call failed: the replay stopped.
//
// With --records=FILE it appends, every --record_every events, one line per
// chunk it holds: "<pid> <handle> <inode> <monotonic ns>" (the memfd's
// inode, from an export of the handle, which fails once the handle is
// released), so a test can check afterwards that no chunk was ever held by
// two live processes at once. With --tag, every block it allocates must
// start with zeros or with this uid's tag, and gets the tag: a chunk that
// comes from another uid without zeroing is caught ("err 15 ..."). Sizes
// are divided by --scale (rounded up to 512 bytes) to keep many clients
// within a small lake. With --duration_s the slice is replayed until that
// long has passed (at least --loops times); a Malloc the lake cannot serve
// yet (all of it in use elsewhere) is retried for --oom_patience_s.

#include <grp.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/allocator.h"
#include "client/daemon_chunk_source.h"
#include "common/vmm.h"
#include "tests/time_scale.h"
#include "tools/trace.h"

ABSL_FLAG(std::string, socket, "", "gmlaked's gRPC socket.");
ABSL_FLAG(std::string, trace, "", "The trace (.trace.gz).");
ABSL_FLAG(double, begin, 0, "Where the slice starts, as a fraction.");
ABSL_FLAG(double, end, 1, "Where the slice ends, as a fraction.");
ABSL_FLAG(int, loops, 1, "Times the slice is replayed.");
ABSL_FLAG(uint64_t, scale, 1, "Divide every size by this.");
ABSL_FLAG(int64_t, progress_every, 20000, "Events between progress lines.");
ABSL_FLAG(int64_t, event_sleep_us, 0, "Pause after every 100 events.");
ABSL_FLAG(int, uid, -1, "Drop to this uid (and gid) before connecting.");
ABSL_FLAG(std::string, records, "", "Append held chunks here.");
ABSL_FLAG(int64_t, record_every, 5000, "Events between records.");
ABSL_FLAG(bool, tag, false, "Tag allocated blocks with the uid; check.");
ABSL_FLAG(double, duration_s, 0, "Replay the slice until this long passed.");
ABSL_FLAG(double, oom_patience_s, 60, "Retry a Malloc the lake refuses.");

namespace gmlake {
namespace {

void Say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

int Fail(const absl::Status& s) {
  std::string msg(s.message());
  for (char& c : msg) {
    if (c == '\n') c = ' ';
  }
  Say(absl::StrCat("err ", static_cast<int>(s.code()), " ", msg));
  return 1;
}

uint64_t MonotonicNanos() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + ts.tv_nsec;
}

// Appends one line per chunk the source holds: pid, handle, inode, time.
void Record(DaemonChunkSource* src, std::ofstream* out) {
  for (ChunkHandle h : src->HeldHandles(0)) {
    absl::StatusOr<UniqueFd> fd = src->backend()->ExportChunk(h);
    if (!fd.ok()) continue;  // released meanwhile
    struct stat st {};
    if (::fstat(fd->get(), &st) != 0) continue;
    *out << ::getpid() << " " << h << " " << st.st_ino << " "
         << MonotonicNanos() << "\n";
  }
  out->flush();
}

// The first 8 bytes of a block: zero or a tag of this uid, then the tag.
absl::Status CheckAndTag(VmmBackend* b, DevicePtr p, uint64_t tag) {
  uint64_t was = 0;
  if (absl::Status s = b->CopyToHost(&was, p, sizeof(was)); !s.ok()) return s;
  if (was != 0 && was != tag) {
    return absl::DataLossError(absl::StrFormat(
        "a new block starts with tag %#x, not zero or this uid's %#x: memory "
        "of another uid came without zeroing",
        was, tag));
  }
  return b->CopyFromHost(p, &tag, sizeof(tag));
}

int Main() {
  if (const int uid = absl::GetFlag(FLAGS_uid); uid >= 0) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(uid) != 0 ||
        ::setuid(uid) != 0) {
      return Fail(absl::PermissionDeniedError(absl::StrCat("setuid ", uid)));
    }
  }
  absl::StatusOr<Trace> trace = LoadTrace(absl::GetFlag(FLAGS_trace));
  if (!trace.ok()) return Fail(trace.status());
  const size_t n = trace->events.size();
  const size_t begin = static_cast<size_t>(absl::GetFlag(FLAGS_begin) * n);
  const size_t end =
      std::min(n, static_cast<size_t>(absl::GetFlag(FLAGS_end) * n));
  DaemonSourceOptions o;
  o.socket_path = absl::GetFlag(FLAGS_socket);
  o.name = absl::StrCat("trace ", trace->name);
  // Ten of these start beside a restarting gmlaked: under a sanitizer a
  // connect takes longer than users' 2 s.
  o.connect_timeout = testing::Scaled(o.connect_timeout);
  absl::StatusOr<std::unique_ptr<DaemonChunkSource>> src =
      DaemonChunkSource::Connect(o);
  if (!src.ok()) return Fail(src.status());
  DaemonChunkSource* source = src->get();
  std::ofstream records;
  if (!absl::GetFlag(FLAGS_records).empty()) {
    records.open(absl::GetFlag(FLAGS_records), std::ios::app);
  }
  Say(absl::StrCat("ready ", source->session_id()));
  const uint64_t scale = std::max<uint64_t>(1, absl::GetFlag(FLAGS_scale));
  const int64_t progress = absl::GetFlag(FLAGS_progress_every);
  const int64_t sleep_us = absl::GetFlag(FLAGS_event_sleep_us);
  const int64_t record_every = absl::GetFlag(FLAGS_record_every);
  const bool tag_blocks = absl::GetFlag(FLAGS_tag);
  const uint64_t tag = 0x5441470000000000ull | ::getuid();
  const absl::Duration patience =
      absl::Seconds(absl::GetFlag(FLAGS_oom_patience_s));
  const absl::Time until =
      absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_duration_s));
  uint64_t replayed = 0, oom_waits = 0;
  int loops = 0;
  {
    AllocatorOptions ao;
    ao.log = false;
    Allocator allocator(source, ao);
    std::vector<DevicePtr> ptr(trace->num_ids, 0);
    while (loops < absl::GetFlag(FLAGS_loops) || absl::Now() < until) {
      for (size_t i = begin; i < end; ++i) {
        const TraceEvent& e = trace->events[i];
        if (e.alloc) {
          if (ptr[e.id] != 0) continue;
          const uint64_t size =
              std::max<uint64_t>(512, ((e.size / scale + 511) / 512) * 512);
          absl::StatusOr<DevicePtr> p = allocator.Malloc(size, 0, e.stream);
          // All of the lake in use elsewhere: others free as they go.
          const absl::Time give_up = absl::Now() + patience;
          while (!p.ok() &&
                 p.status().code() == absl::StatusCode::kResourceExhausted &&
                 absl::Now() < give_up) {
            ++oom_waits;
            absl::SleepFor(absl::Milliseconds(20));
            p = allocator.Malloc(size, 0, e.stream);
          }
          if (!p.ok()) return Fail(p.status());
          if (tag_blocks) {
            if (absl::Status s = CheckAndTag(source->backend(), *p, tag);
                !s.ok()) {
              return Fail(s);
            }
          }
          ptr[e.id] = *p;
        } else if (ptr[e.id] != 0) {
          if (absl::Status s = allocator.Free(ptr[e.id]); !s.ok()) {
            return Fail(s);
          }
          ptr[e.id] = 0;
        }
        ++replayed;
        if (sleep_us > 0 && replayed % 100 == 0) {
          absl::SleepFor(absl::Microseconds(sleep_us));
        }
        if (progress > 0 && replayed % progress == 0) {
          Say(absl::StrCat("ok progress ", loops, " ", replayed));
        }
        if (records.is_open() && record_every > 0 &&
            replayed % record_every == 0) {
          Record(source, &records);
        }
      }
      for (DevicePtr& p : ptr) {
        if (p != 0) allocator.Free(p).IgnoreError();
        p = 0;
      }
      ++loops;
    }
  }
  Say(absl::StrCat("ok done ", replayed, " ", source->reconnections(), " ",
                   source->chunks_readopted(), " ", oom_waits, " ", loops));
  src->reset();
  return 0;
}

}  // namespace
}  // namespace gmlake

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return gmlake::Main();
}
