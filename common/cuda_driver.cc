// Copyright 2026 The GMLake Authors.

#include "common/cuda_driver.h"

#include <dlfcn.h>
#include <link.h>

#include "absl/strings/str_cat.h"

namespace gmlake {
namespace {

constexpr absl::string_view kWhatToDo =
    "install the NVIDIA driver or set GMLAKE_BACKEND=host";

// dlerror() as a string; never null.
std::string LastDlError() {
  const char* e = dlerror();
  return e != nullptr ? e : "unknown dlerror";
}

using GetProcAddress = decltype(&::cuGetProcAddress);

// Looks up one entry point in the driver at `path`, asking for the exact ABI
// version cuda.h's prototype has (see the header). LEGACY_STREAM: stream 0
// means the legacy default stream, as StreamHandle documents, not the
// per-thread one. `*slot` is null unless it succeeds.
absl::Status Resolve(GetProcAddress get_proc, const std::string& path,
                     const char* name, int abi_version, void** slot) {
  CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  const CUresult r = get_proc(name, slot, abi_version,
                              CU_GET_PROC_ADDRESS_LEGACY_STREAM, &found);
  if (r == CUDA_ERROR_STUB_LIBRARY) {
    *slot = nullptr;
    return absl::UnavailableError(
        absl::StrCat(path,
                     " is the CUDA toolkit's stub library, not a driver "
                     "(cuGetProcAddress: CUDA_ERROR_STUB_LIBRARY); ",
                     kWhatToDo));
  }
  if (r != CUDA_SUCCESS) {
    *slot = nullptr;
    // cuGetErrorName is not resolved yet: the number has to do.
    return absl::UnavailableError(absl::StrCat(
        "cuGetProcAddress(", name, ", ", abi_version, ") on ", path,
        " failed: CUDA error ", static_cast<int>(r), "; ", kWhatToDo));
  }
  if (found != CU_GET_PROC_ADDRESS_SUCCESS || *slot == nullptr) {
    *slot = nullptr;
    return absl::UnavailableError(absl::StrCat(
        "the CUDA driver at ", path, " has no ", name, " with the ABI of CUDA ",
        CudaVersionString(abi_version), " (cuGetProcAddress query result ",
        static_cast<int>(found),
        "); install a newer NVIDIA driver or set GMLAKE_BACKEND=host"));
  }
  return absl::OkStatus();
}

// Fills every entry point of `d` from `lib`; optional ones stay null when the
// driver lacks them.
absl::Status ResolveEntryPoints(void* lib, CudaDriver* d) {
  // cuda.h maps cuGetProcAddress to cuGetProcAddress_v2 (CUDA >= 12.0), so
  // that is the prototype we call it with.
  auto get_proc =
      reinterpret_cast<GetProcAddress>(dlsym(lib, "cuGetProcAddress_v2"));
  if (get_proc == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "the CUDA driver at ", d->library_path,
        " has no cuGetProcAddress_v2: it is older than CUDA 12.0; "
        "install a newer NVIDIA driver or set GMLAKE_BACKEND=host"));
  }
#define GMLAKE_RESOLVE(name, abi_version)                                     \
  if (absl::Status s = Resolve(get_proc, d->library_path, #name, abi_version, \
                               reinterpret_cast<void**>(&d->name));           \
      !s.ok()) {                                                              \
    return s;                                                                 \
  }
  GMLAKE_CUDA_DRIVER_ENTRY_POINTS(GMLAKE_RESOLVE)
#undef GMLAKE_RESOLVE
#define GMLAKE_RESOLVE_OPTIONAL(name, abi_version)       \
  Resolve(get_proc, d->library_path, #name, abi_version, \
          reinterpret_cast<void**>(&d->name))            \
      .IgnoreError();
  GMLAKE_CUDA_DRIVER_OPTIONAL_ENTRY_POINTS(GMLAKE_RESOLVE_OPTIONAL)
#undef GMLAKE_RESOLVE_OPTIONAL
  return absl::OkStatus();
}

// Checks the driver's version and initialises it.
absl::Status CheckVersionAndInit(CudaDriver* d) {
  if (const CUresult r = d->cuDriverGetVersion(&d->version);
      r != CUDA_SUCCESS) {
    return CudaCallError(*d, r, "cuDriverGetVersion");
  }
  if (d->version < kMinCudaDriverVersion) {
    return absl::UnavailableError(absl::StrCat(
        "the CUDA driver at ", d->library_path, " is CUDA ",
        CudaVersionString(d->version), "; GMLake needs ",
        CudaVersionString(kMinCudaDriverVersion),
        " or newer: install a newer NVIDIA driver or set GMLAKE_BACKEND=host"));
  }
  if (const CUresult r = d->cuInit(0); r != CUDA_SUCCESS) {
    absl::Status s = CudaCallError(*d, r, "cuInit(0)");
    // Whatever cuInit says, this process cannot use the GPU: Unavailable, so
    // the factory falls back to the host backend with this message.
    return absl::UnavailableError(
        absl::StrCat(s.message(), " (driver ", CudaVersionString(d->version),
                     " at ", d->library_path, "); ", kWhatToDo));
  }
  return absl::OkStatus();
}

absl::StatusOr<CudaDriver> Load() {
  // RTLD_LOCAL: the driver's symbols stay out of the global namespace, so
  // nothing else in the process binds to them by accident.
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "no CUDA driver: dlopen(libcuda.so.1) failed: ", LastDlError(), "; ",
        kWhatToDo));
  }
  CudaDriver d;
  struct link_map* map = nullptr;
  if (dlinfo(lib, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr &&
      map->l_name != nullptr) {
    d.library_path = map->l_name;
  }
  if (absl::Status s = ResolveEntryPoints(lib, &d); !s.ok()) return s;
  if (absl::Status s = CheckVersionAndInit(&d); !s.ok()) return s;
  return d;
}

}  // namespace

absl::StatusOr<const CudaDriver*> LoadCudaDriver() {
  // Loaded once; a function-local static is initialised thread-safely. The
  // table (or the error) lives for the whole process, like the library.
  static const absl::StatusOr<CudaDriver>* const loaded =
      new absl::StatusOr<CudaDriver>(Load());
  if (!loaded->ok()) return loaded->status();
  return &loaded->value();
}

std::string CudaVersionString(int version) {
  return absl::StrCat(version / 1000, ".", (version % 1000) / 10);
}

absl::Status CudaCallError(CUresult result, absl::string_view call,
                           const char* name, const char* description) {
  const std::string message = absl::StrCat(
      call, " failed: ",
      name != nullptr ? std::string(name)
                      : absl::StrCat("CUDA error ", static_cast<int>(result)),
      " (", description != nullptr ? description : "no description", ")");
  switch (result) {
    case CUDA_ERROR_OUT_OF_MEMORY:
      return absl::ResourceExhaustedError(message);
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_HANDLE:
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_INVALID_CONTEXT:
    case CUDA_ERROR_NOT_MAPPED:
    case CUDA_ERROR_ALREADY_MAPPED:
      return absl::InvalidArgumentError(message);
    case CUDA_ERROR_NOT_SUPPORTED:
      return absl::UnimplementedError(message);
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED:
    case CUDA_ERROR_STUB_LIBRARY:
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
    case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
    case CUDA_ERROR_DEVICE_UNAVAILABLE:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status CudaCallError(const CudaDriver& driver, CUresult result,
                           absl::string_view call) {
  const char* name = nullptr;
  const char* description = nullptr;
  if (driver.cuGetErrorName == nullptr ||
      driver.cuGetErrorName(result, &name) != CUDA_SUCCESS) {
    name = nullptr;
  }
  if (driver.cuGetErrorString == nullptr ||
      driver.cuGetErrorString(result, &description) != CUDA_SUCCESS) {
    description = nullptr;
  }
  return CudaCallError(result, call, name, description);
}

}  // namespace gmlake
