// Copyright 2026 The GMLake Authors.

#include "tools/trace.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace gmlake {
namespace {

// Longer lines are no trace's ("ACTION ADDR SIZE STREAM" is under 80).
constexpr size_t kMaxLine = 4096;

constexpr char kFormat[] =
    "expected a '#' comment or 'ACTION ADDR SIZE STREAM' with ACTION one of "
    "a f F S s M U and decimal numbers (format: traces/README.md)";

// Reads one line without its '\n'. False at the end of the data or on an
// error (which the caller reads from gzerror).
bool ReadLine(gzFile f, std::string* line, bool* too_long) {
  line->clear();
  *too_long = false;
  char buf[512];
  while (gzgets(f, buf, sizeof(buf)) != nullptr) {
    const size_t n = std::strlen(buf);
    if (n > 0 && buf[n - 1] == '\n') {
      line->append(buf, n - 1);
      return true;
    }
    line->append(buf, n);
    if (line->size() > kMaxLine) {
      *too_long = true;
      return true;
    }
  }
  // The last line may lack its '\n', unless the data broke off there.
  int error = Z_OK;
  gzerror(f, &error);
  return !line->empty() && error == Z_OK;
}

// What a person can read of a line that is not what it should be.
std::string Shown(absl::string_view line) {
  constexpr size_t kShown = 60;
  std::string s = absl::CHexEscape(line.substr(0, kShown));
  if (line.size() > kShown) s += "...";
  return s;
}

class TraceParser {
 public:
  explicit TraceParser(std::string path) : path_(std::move(path)) {}

  absl::Status Line(int lineno, absl::string_view line) {
    lineno_ = lineno;
    if (line.empty() || line[0] == '#') return absl::OkStatus();
    const char action = line[0];
    std::vector<absl::string_view> parts =
        absl::StrSplit(line.substr(1), ' ', absl::SkipEmpty());
    uint64_t addr = 0, size = 0, stream = 0;
    if (std::strchr("afFSsMU", action) == nullptr || line.size() < 2 ||
        line[1] != ' ' || parts.size() != 3 ||
        !absl::SimpleAtoi(parts[0], &addr) ||
        !absl::SimpleAtoi(parts[1], &size) ||
        !absl::SimpleAtoi(parts[2], &stream)) {
      return Bad(absl::StrCat(kFormat, "; got '", Shown(line), "'"));
    }
    if (action == 'S' || action == 's') {
      if (size > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Bad(absl::StrCat("segment size ", size,
                                " is too large; expected at most 2^63-1"));
      }
      const int64_t bytes = static_cast<int64_t>(size);
      trace_.native_segments.push_back(
          {trace_.events.size(), action == 'S' ? bytes : -bytes});
    }
    if (action != 'a' && action != 'F') return absl::OkStatus();
    absl::StatusOr<uint8_t> sidx = StreamIndex(stream);
    if (!sidx.ok()) return sidx.status();
    if (action == 'a') return Allocate(addr, size, *sidx);
    return Free(addr, *sidx);
  }

  absl::StatusOr<Trace> Finish() {
    if (trace_.num_ids == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(path_, ": no allocations in ", lineno_,
                       " lines; expected 'a ADDR SIZE STREAM' lines (format: "
                       "traces/README.md)"));
    }
    trace_.end_live_bytes = live_;
    return std::move(trace_);
  }

  Trace& trace() { return trace_; }

 private:
  struct Live {
    uint32_t id;
    int line;  // where it was allocated
  };

  absl::Status Bad(absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ":", lineno_, ": ", what));
  }

  absl::StatusOr<uint8_t> StreamIndex(uint64_t stream) {
    auto it = std::find(trace_.streams.begin(), trace_.streams.end(), stream);
    if (it != trace_.streams.end()) return it - trace_.streams.begin();
    if (trace_.streams.size() > std::numeric_limits<uint8_t>::max()) {
      return Bad(absl::StrCat("stream ", stream, " is the ",
                              trace_.streams.size() + 1,
                              "th; expected at most 256 streams"));
    }
    trace_.streams.push_back(stream);
    return static_cast<uint8_t>(trace_.streams.size() - 1);
  }

  absl::Status Allocate(uint64_t addr, uint64_t size, uint8_t sidx) {
    auto [it, fresh] = live_ids_.try_emplace(addr, Live{trace_.num_ids, 0});
    if (!fresh) {
      return Bad(absl::StrCat(
          "'a' allocates address ", addr, ", which line ", it->second.line,
          " allocated and no 'F' has freed since; expected an 'F ", addr,
          " ...' line before an address is allocated again"));
    }
    if (trace_.num_ids == std::numeric_limits<uint32_t>::max()) {
      return Bad("expected fewer than 2^32 allocations");
    }
    it->second.line = lineno_;
    id_size_.push_back(size);
    trace_.events.push_back({size, trace_.num_ids++, sidx, true});
    live_ += size;
    trace_.peak_live_bytes = std::max(trace_.peak_live_bytes, live_);
    return absl::OkStatus();
  }

  absl::Status Free(uint64_t addr, uint8_t sidx) {
    auto it = live_ids_.find(addr);
    if (it == live_ids_.end()) {
      return Bad(absl::StrCat(
          "'F' frees address ", addr,
          ", which is not allocated (never, or freed already); expected an 'a ",
          addr, " ...' line before its 'F'"));
    }
    trace_.events.push_back({0, it->second.id, sidx, false});
    live_ -= id_size_[it->second.id];
    live_ids_.erase(it);
    return absl::OkStatus();
  }

  const std::string path_;
  int lineno_ = 0;
  Trace trace_;
  absl::flat_hash_map<uint64_t, Live> live_ids_;  // by address
  std::vector<uint64_t> id_size_;
  uint64_t live_ = 0;
};

}  // namespace

absl::StatusOr<Trace> LoadTrace(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("cannot open trace ", path, ": ", std::strerror(errno)));
  }
  gzbuffer(f, 1 << 20);
  TraceParser parser(path);
  const std::string base = path.substr(path.find_last_of('/') + 1);
  parser.trace().name = base.substr(0, base.find(".trace"));
  std::string line;
  bool too_long = false;
  int lineno = 0;
  absl::Status status;
  while (status.ok() && ReadLine(f, &line, &too_long)) {
    ++lineno;
    if (too_long) {
      status = absl::InvalidArgumentError(
          absl::StrCat(path, ":", lineno, ": a line longer than ", kMaxLine,
                       " bytes; ", kFormat, "; got '", Shown(line), "'"));
      break;
    }
    status = parser.Line(lineno, line);
  }
  int gz_error = Z_OK;
  const char* gz_message = gzerror(f, &gz_error);
  const std::string gz_what = gz_message != nullptr ? gz_message : "";
  gzclose(f);
  if (!status.ok()) return status;
  if (gz_error == Z_BUF_ERROR) {
    return absl::DataLossError(absl::StrCat(
        path, ":", lineno + 1, ": the gzip data ends early (", gz_what,
        "); expected the rest of the trace: is the file truncated?"));
  }
  if (gz_error != Z_OK && gz_error != Z_STREAM_END) {
    return absl::DataLossError(
        absl::StrCat(path, ":", lineno + 1, ": not valid gzip data (", gz_what,
                     "); expected a gzip'd text trace (traces/README.md)"));
  }
  return parser.Finish();
}

}  // namespace gmlake
