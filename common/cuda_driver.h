// Copyright 2026 The GMLake Authors.
//
// The CUDA driver, loaded at run time. Every call GMLake makes into the CUDA
// driver goes through the table in this file; nothing links against libcuda,
// so every binary also starts (and falls back to the host backend) on a
// machine without a GPU driver.
//
// How the entry points are found: dlopen("libcuda.so.1"), dlsym of
// cuGetProcAddress_v2 (the form cuda.h declares for CUDA >= 12), then
// cuGetProcAddress(name, abi_version) for every other entry point. The driver
// keeps several ABI variants of some symbols (cuMemsetD8 took a 32-bit count
// before CUDA 3.2, cuCtxSynchronize takes a context since CUDA 13.0), and
// cuGetProcAddress returns the newest variant not newer than the version
// asked for. So each entry below names the CUDA version that introduced the
// variant whose prototype cuda.h declares under that name, and that exact
// version is asked for: the pointer we get always has the type we call it
// with. common/cuda_driver_abi_test.sh checks every pair against the
// PFN_<name>_v<version> typedefs of the toolkit's <cudaTypedefs.h>.

#ifndef GMLAKE_COMMON_CUDA_DRIVER_H_
#define GMLAKE_COMMON_CUDA_DRIVER_H_

#include <cuda.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gmlake {

// X(name, abi_version): every driver entry point GMLake uses (except
// cuGetProcAddress itself, found with dlsym), and the CUDA version whose ABI
// cuda.h's prototype for `name` has. `name` is spelled as in cuda.h, so a
// name that cuda.h #defines to a versioned symbol (cuMemsetD8 ->
// cuMemsetD8_v2) declares the table member under the versioned name and
// callers write the plain name, exactly as with a linked driver.
#define GMLAKE_CUDA_DRIVER_ENTRY_POINTS(X) \
  X(cuInit, 2000)                          \
  X(cuDriverGetVersion, 2020)              \
  X(cuGetErrorName, 6000)                  \
  X(cuGetErrorString, 6000)                \
  X(cuDeviceGetCount, 2000)                \
  X(cuDeviceGet, 2000)                     \
  X(cuDeviceGetName, 2000)                 \
  X(cuDeviceGetUuid, 11040)                \
  X(cuDeviceTotalMem, 3020)                \
  X(cuDeviceGetAttribute, 2000)            \
  X(cuDevicePrimaryCtxRetain, 7000)        \
  X(cuDevicePrimaryCtxRelease, 11000)      \
  X(cuDevicePrimaryCtxGetState, 7000)      \
  X(cuCtxSetCurrent, 4000)                 \
  X(cuMemCreate, 10020)                    \
  X(cuMemRelease, 10020)                   \
  X(cuMemExportToShareableHandle, 10020)   \
  X(cuMemImportFromShareableHandle, 10020) \
  X(cuMemGetAllocationGranularity, 10020)  \
  X(cuMemAddressReserve, 10020)            \
  X(cuMemAddressFree, 10020)               \
  X(cuMemMap, 10020)                       \
  X(cuMemUnmap, 10020)                     \
  X(cuMemSetAccess, 10020)                 \
  X(cuEventCreate, 2000)                   \
  X(cuEventRecord, 2000)                   \
  X(cuEventQuery, 2000)                    \
  X(cuEventSynchronize, 2000)              \
  X(cuEventDestroy, 4000)                  \
  X(cuStreamWaitEvent, 3020)               \
  X(cuStreamSynchronize, 2000)             \
  X(cuMemsetD8, 3020)                      \
  X(cuMemcpyHtoD, 3020)                    \
  X(cuMemcpyDtoH, 3020)

// Entry points GMLake can do without (null in the table when the driver
// lacks that ABI): capture-graph queries, CUDA 12.3's forms with edge data.
// Without them a block freed inside a capture waits for the capture's end.
#define GMLAKE_CUDA_DRIVER_OPTIONAL_ENTRY_POINTS(X) \
  X(cuStreamGetCaptureInfo, 12030)                  \
  X(cuGraphNodeGetDependencies, 12030)

// The oldest driver we accept: cuGetProcAddress_v2 appeared in CUDA 12.0.
inline constexpr int kMinCudaDriverVersion = 12000;

// The loaded driver: one function pointer per entry point, all non-null.
// Immutable once loaded, so it may be used from any thread.
struct CudaDriver {
#define GMLAKE_CUDA_DRIVER_MEMBER(name, abi_version) \
  decltype(&::name) name = nullptr;
  GMLAKE_CUDA_DRIVER_ENTRY_POINTS(GMLAKE_CUDA_DRIVER_MEMBER)
  GMLAKE_CUDA_DRIVER_OPTIONAL_ENTRY_POINTS(GMLAKE_CUDA_DRIVER_MEMBER)
#undef GMLAKE_CUDA_DRIVER_MEMBER

  // cuDriverGetVersion's answer, e.g. 13000 for CUDA 13.0.
  int version = 0;
  // Where libcuda.so.1 was loaded from (dlinfo), for logs.
  std::string library_path;
};

// Loads the driver once per process (thread-safe; later calls return the
// same table or the same error): dlopen, resolves every entry point, and
// calls cuInit(0). Errors, all Unavailable and each saying what to do:
//   - no libcuda.so.1 ("no CUDA driver: dlopen(libcuda.so.1) failed: ...;
//     install the NVIDIA driver or set GMLAKE_BACKEND=host"),
//   - a driver older than CUDA 12.0 or missing an entry point,
//   - cuInit failing (no device, stub library, driver/kernel mismatch).
// The library is never unloaded.
absl::StatusOr<const CudaDriver*> LoadCudaDriver();

// "13.0" for 13000.
std::string CudaVersionString(int version);

// The status for a failed driver call: "<call> failed: <error name>
// (<error string>)", e.g. "cuMemMap(addr=0x7f0000000000, size=2097152)
// failed: CUDA_ERROR_INVALID_VALUE (invalid argument)". `name` and
// `description` are what cuGetErrorName/cuGetErrorString said (null: not
// known, the numeric code is used). The code is ResourceExhausted for
// CUDA_ERROR_OUT_OF_MEMORY, InvalidArgument for invalid values, handles and
// devices, Unavailable for a missing or unusable driver or device,
// Unimplemented for CUDA_ERROR_NOT_SUPPORTED, and Internal otherwise. Pure:
// tested without a driver.
absl::Status CudaCallError(CUresult result, absl::string_view call,
                           const char* name, const char* description);

// CudaCallError with the name and description asked from `driver`.
absl::Status CudaCallError(const CudaDriver& driver, CUresult result,
                           absl::string_view call);

}  // namespace gmlake

#endif  // GMLAKE_COMMON_CUDA_DRIVER_H_
