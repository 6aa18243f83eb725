// Copyright 2026 The GMLake Authors.
//
// CreateBackend (declared in common/vmm.h): picks and makes a VMM backend.

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/accounting_backend.h"
#include "common/bytes.h"
#include "common/cuda_backend.h"
#include "common/host_backend.h"
#include "common/vmm.h"
#include "common/vmm_books.h"

namespace gmlake {
namespace {

constexpr char kValidKinds[] = "auto, cuda, host, accounting";

bool IsKnownKind(const std::string& kind) {
  return kind == "auto" || kind == "cuda" || kind == "host" ||
         kind == "accounting";
}

// GMLAKE_HOST_VISIBLE_DEVICES, as CUDA_VISIBLE_DEVICES: which of the node's
// emulated devices this process sees, in its order ("2,0"). Empty when unset.
absl::StatusOr<std::vector<std::string>> VisibleDeviceUuids() {
  const char* env = std::getenv("GMLAKE_HOST_VISIBLE_DEVICES");
  if (env == nullptr || *env == '\0') return std::vector<std::string>{};
  std::vector<std::string> uuids;
  std::vector<int> seen;
  for (absl::string_view item : absl::StrSplit(env, ',')) {
    int n = -1;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(item), &n) || n < 0 ||
        n > 4095 || std::find(seen.begin(), seen.end(), n) != seen.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GMLAKE_HOST_VISIBLE_DEVICES=", env,
          " is not a list of distinct device numbers 0..4095 (e.g. 2,0)"));
    }
    seen.push_back(n);
    uuids.push_back(EmulatedDeviceUuid(n));
  }
  return uuids;
}

// The emulated backends' options from `options`, with GMLAKE_HOST_CAPACITY
// filling in a capacity the options leave at 0, and
// GMLAKE_HOST_VISIBLE_DEVICES deciding the devices when set.
absl::StatusOr<EmulatedBackendOptions> EmulatedOptions(
    const BackendOptions& options, std::string note) {
  EmulatedBackendOptions out;
  out.devices = options.host_devices;
  out.uuids = options.host_uuids;
  absl::StatusOr<std::vector<std::string>> visible = VisibleDeviceUuids();
  if (!visible.ok()) return visible.status();
  if (!visible->empty()) out.uuids = *std::move(visible);
  if (!out.uuids.empty()) out.devices = static_cast<int>(out.uuids.size());
  if (options.host_granularity != 0) out.granularity = options.host_granularity;
  if (options.host_capacity_bytes != 0) {
    out.capacity_bytes = options.host_capacity_bytes;
  } else if (const char* env = std::getenv("GMLAKE_HOST_CAPACITY");
             env != nullptr && *env != '\0') {
    absl::StatusOr<uint64_t> bytes = ParseBytes(env);
    if (!bytes.ok() || *bytes == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GMLAKE_HOST_CAPACITY=", env,
          " is not a positive byte count (e.g. 34359738368, 32GiB, 512MiB)",
          bytes.ok() ? "" : absl::StrCat(": ", bytes.status().message())));
    }
    out.capacity_bytes = *bytes;
  }
  out.note = std::move(note);
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<VmmBackend>> CreateBackend(
    const BackendOptions& options) {
  std::string kind = options.kind;
  std::string note;
  if (kind == "auto") {
    if (const char* env = std::getenv("GMLAKE_BACKEND");
        env != nullptr && *env != '\0') {
      kind = env;
      if (!IsKnownKind(kind)) {
        return absl::InvalidArgumentError(
            absl::StrCat("GMLAKE_BACKEND=", kind,
                         " is not a backend kind; valid kinds: ", kValidKinds));
      }
      if (kind != "auto")
        note = absl::StrCat("chosen by GMLAKE_BACKEND=", kind);
    }
  }
  if (kind == "auto") {
    absl::StatusOr<std::unique_ptr<VmmBackend>> cuda = CreateCudaBackend();
    if (cuda.ok()) return cuda;
    // No GPU (or no usable one) is the normal case on CI machines: fall back,
    // keeping the reason where Describe() shows it.
    note = absl::StrCat(cuda.status().message(), "; using host backend");
    kind = "host";
  }
  if (kind == "cuda") return CreateCudaBackend();
  if (kind == "host" || kind == "accounting") {
    absl::StatusOr<EmulatedBackendOptions> emulated =
        EmulatedOptions(options, std::move(note));
    if (!emulated.ok()) return emulated.status();
    if (kind == "host") {
      absl::StatusOr<std::unique_ptr<HostBackend>> host =
          HostBackend::Create(*emulated);
      if (!host.ok()) return host.status();
      return std::unique_ptr<VmmBackend>(*std::move(host));
    }
    absl::StatusOr<std::unique_ptr<AccountingBackend>> accounting =
        AccountingBackend::Create(*emulated);
    if (!accounting.ok()) return accounting.status();
    return std::unique_ptr<VmmBackend>(*std::move(accounting));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown backend kind '", kind, "'; valid kinds: ", kValidKinds));
}

}  // namespace gmlake
