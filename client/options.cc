// Copyright 2026 The GMLake Authors.

#include "client/options.h"

#include <cstdlib>
#include <functional>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/bytes.h"

namespace gmlake {
namespace {

using Setter =
    std::function<absl::Status(absl::string_view, AllocatorOptions*)>;

Setter OneOf(std::string AllocatorOptions::*field,
             std::vector<std::string> allowed) {
  return [field, allowed](absl::string_view v, AllocatorOptions* o) {
    for (const std::string& a : allowed) {
      if (v == a) {
        o->*field = a;
        return absl::OkStatus();
      }
    }
    return absl::InvalidArgumentError(
        absl::StrCat("'", v, "' is not one of ", absl::StrJoin(allowed, "|")));
  };
}

Setter Text(std::string AllocatorOptions::*field) {
  return [field](absl::string_view v, AllocatorOptions* o) {
    o->*field = std::string(v);
    return absl::OkStatus();
  };
}

Setter Bytes(uint64_t AllocatorOptions::*field) {
  return [field](absl::string_view v, AllocatorOptions* o) {
    absl::StatusOr<uint64_t> b = ParseBytes(v);
    if (!b.ok()) return b.status();
    o->*field = *b;
    return absl::OkStatus();
  };
}

Setter Count(uint64_t AllocatorOptions::*field) {
  return [field](absl::string_view v, AllocatorOptions* o) {
    uint64_t n = 0;
    if (!absl::SimpleAtoi(v, &n)) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", v, "' is not a whole number (0 or more)"));
    }
    o->*field = n;
    return absl::OkStatus();
  };
}

Setter Fraction(double AllocatorOptions::*field) {
  return [field](absl::string_view v, AllocatorOptions* o) {
    double d = 0;
    if (!absl::SimpleAtod(v, &d) || !(d >= 0 && d <= 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", v, "' is not a fraction from 0 to 1"));
    }
    o->*field = d;
    return absl::OkStatus();
  };
}

Setter Bool(bool AllocatorOptions::*field) {
  return [field](absl::string_view v, AllocatorOptions* o) {
    if (v == "true" || v == "1" || v == "on") {
      o->*field = true;
    } else if (v == "false" || v == "0" || v == "off") {
      o->*field = false;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("'", v, "' is not true|false"));
    }
    return absl::OkStatus();
  };
}

const std::map<std::string, Setter>& Setters() {
  static const auto* setters = new std::map<std::string, Setter>{
      {"backend", OneOf(&AllocatorOptions::backend,
                        {"auto", "cuda", "host", "accounting"})},
      {"lake", OneOf(&AllocatorOptions::lake, {"auto", "embedded", "daemon"})},
      {"socket", Text(&AllocatorOptions::socket)},
      {"capacity", Bytes(&AllocatorOptions::capacity)},
      {"host_capacity", Bytes(&AllocatorOptions::host_capacity)},
      {"chunk_size", Bytes(&AllocatorOptions::chunk_size)},
      {"max_chunk", Bytes(&AllocatorOptions::max_chunk)},
      {"large_chunk", Bytes(&AllocatorOptions::large_chunk)},
      {"held_chunk_divisor", Count(&AllocatorOptions::held_chunk_divisor)},
      {"held_chunk_max", Bytes(&AllocatorOptions::held_chunk_max)},
      {"small_size", Bytes(&AllocatorOptions::small_size)},
      {"stitch", Bool(&AllocatorOptions::stitch)},
      {"grow_slack", Fraction(&AllocatorOptions::grow_slack)},
      {"grow_slack_large", Fraction(&AllocatorOptions::grow_slack_large)},
      {"grow_reach", Fraction(&AllocatorOptions::grow_reach)},
      {"cover_tail", Bytes(&AllocatorOptions::cover_tail)},
      {"cover_after", Fraction(&AllocatorOptions::cover_after)},
      {"max_dormant", Bytes(&AllocatorOptions::max_dormant)},
      {"unmap_thread", Bool(&AllocatorOptions::unmap_thread)},
      {"large_arena", Bytes(&AllocatorOptions::large_arena)},
      {"small_arena", Bytes(&AllocatorOptions::small_arena)},
      {"idle_watermark", Bytes(&AllocatorOptions::idle_watermark)},
      {"lease_ahead", Bytes(&AllocatorOptions::lease_ahead)},
      {"lease_ahead_background",
       Bool(&AllocatorOptions::lease_ahead_background)},
      {"make_chunks", Bool(&AllocatorOptions::make_chunks)},
      {"log", Bool(&AllocatorOptions::log)},
  };
  return *setters;
}

}  // namespace

std::vector<std::string> KnownConfKeys() {
  std::vector<std::string> keys;
  for (const auto& [k, v] : Setters()) keys.push_back(k);
  return keys;
}

absl::StatusOr<AllocatorOptions> ParseConf(absl::string_view conf,
                                           AllocatorOptions base) {
  for (absl::string_view item :
       absl::StrSplit(conf, ',', absl::SkipWhitespace())) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(item, absl::MaxSplits(':', 1));
    const std::string key(absl::StripAsciiWhitespace(kv.first));
    const absl::string_view value = absl::StripAsciiWhitespace(kv.second);
    auto it = Setters().find(key);
    if (it == Setters().end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GMLAKE_CONF: unknown key '", key,
          "'; known keys: ", absl::StrJoin(KnownConfKeys(), ", ")));
    }
    if (value.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GMLAKE_CONF: key '", key, "' has no value (write ", key, ":VALUE)"));
    }
    absl::Status s = it->second(value, &base);
    if (!s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("GMLAKE_CONF: key '", key, "': ", s.message()));
    }
  }
  if (base.small_size == 0) {
    return absl::InvalidArgumentError("GMLAKE_CONF: small_size must be > 0");
  }
  // Half of x86-64's 47-bit user address space: an arena beyond it can
  // never be reserved, and its page tables alone would exhaust memory.
  constexpr uint64_t kMaxArena = uint64_t{64} << 40;
  for (const auto& [key, value] :
       {std::pair<const char*, uint64_t>{"large_arena", base.large_arena},
        {"small_arena", base.small_arena}}) {
    if (value > kMaxArena) {
      return absl::InvalidArgumentError(
          absl::StrCat("GMLAKE_CONF: ", key, " is ", FormatBytes(value),
                       "; it can be at most ", FormatBytes(kMaxArena),
                       " (address space of a process)"));
    }
  }
  return base;
}

absl::StatusOr<AllocatorOptions> OptionsFromEnv(AllocatorOptions base) {
  const char* conf = std::getenv("GMLAKE_CONF");
  return ParseConf(conf != nullptr ? conf : "", std::move(base));
}

}  // namespace gmlake
