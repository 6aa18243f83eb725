// Copyright 2026 The GMLake Authors.

#include "tools/trace.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace gmlake {

absl::StatusOr<Trace> LoadTrace(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("cannot open trace ", path, ": ", std::strerror(errno)));
  }
  gzbuffer(f, 1 << 20);
  Trace t;
  std::string base = path.substr(path.find_last_of('/') + 1);
  t.name = base.substr(0, base.find(".trace"));
  absl::flat_hash_map<uint64_t, uint32_t> live_ids;  // addr -> id
  std::vector<uint64_t> id_size;
  uint64_t live = 0;
  char line[256];
  int lineno = 0;
  while (gzgets(f, line, sizeof(line)) != nullptr) {
    ++lineno;
    const char action = line[0];
    if (action != 'a' && action != 'F') continue;
    std::vector<absl::string_view> parts =
        absl::StrSplit(absl::string_view(line + 1), ' ', absl::SkipEmpty());
    uint64_t addr = 0, size = 0, stream = 0;
    if (parts.size() < 3 || !absl::SimpleAtoi(parts[0], &addr) ||
        !absl::SimpleAtoi(parts[1], &size) ||
        !absl::SimpleAtoi(absl::StripSuffix(parts[2], "\n"), &stream)) {
      gzclose(f);
      return absl::InvalidArgumentError(absl::StrCat(
          path, ":", lineno, ": expected 'ACTION ADDR SIZE STREAM', got '",
          absl::StripSuffix(line, "\n"), "'"));
    }
    auto sit = std::find(t.streams.begin(), t.streams.end(), stream);
    if (sit == t.streams.end()) {
      t.streams.push_back(stream);
      sit = t.streams.end() - 1;
    }
    const uint8_t sidx = static_cast<uint8_t>(sit - t.streams.begin());
    if (action == 'a') {
      const uint32_t id = t.num_ids++;
      live_ids[addr] = id;
      id_size.push_back(size);
      t.events.push_back({size, id, sidx, true});
      live += size;
      t.peak_live_bytes = std::max(t.peak_live_bytes, live);
    } else {
      auto it = live_ids.find(addr);
      if (it == live_ids.end()) continue;
      t.events.push_back({0, it->second, sidx, false});
      live -= id_size[it->second];
      live_ids.erase(it);
    }
  }
  t.end_live_bytes = live;
  const bool eof_ok = gzeof(f);
  gzclose(f);
  if (!eof_ok) {
    return absl::DataLossError(absl::StrCat("trace ", path, " is truncated"));
  }
  return t;
}

}  // namespace gmlake
