// Copyright 2026 The GMLake Authors.
//
// The cuda VMM backend: the VmmBackend interface on the CUDA driver's virtual
// memory management API (cuMemCreate / cuMemMap / cuMemSetAccess ...).
//
// The driver is loaded at run time (cuda_driver.h): binaries carry no
// dependency on libcuda, and CreateCudaBackend() on a machine without a
// driver or GPU returns Unavailable with a message saying so and what to do,
// which the factory (CreateBackend, kind "auto") turns into a fall-back to the
// host backend.
//
// What the handles are:
//   ChunkHandle   a CUmemGenericAllocationHandle, made by cuMemCreate on a
//                 device (pinned device memory, POSIX-fd shareable) or by
//                 cuMemImportFromShareableHandle.
//   EventHandle   a CUevent (created with CU_EVENT_DISABLE_TIMING).
//   StreamHandle  a CUstream of the device's primary context; 0 is the legacy
//                 default stream.
// A device's primary context is retained the first time a call needs it (a
// chunk, event, mapping or range on that device) and held while the backend
// lives; it is made current in each calling thread before the driver is
// called, so callers need no CUDA set-up of their own. A process that
// allocates on one GPU of eight creates a context on that one only (each
// costs ~0.5 GiB of the GPU's memory); creating the backend creates none.
//
// The backend keeps the books of what it made (chunks, ranges, mappings and
// whether they were given access, events) so a bad call is refused with a
// clear InvalidArgument / FailedPrecondition / NotFound before it reaches the
// driver (where a bad pointer can become a sticky context error). Driver
// errors come back as statuses naming the call, its arguments and the
// driver's error name and text (CudaCallError in cuda_driver.h);
// CUDA_ERROR_OUT_OF_MEMORY is ResourceExhausted.
//
// Destroying the backend unmaps, frees, releases and destroys whatever is
// still held through it, then releases the primary contexts it retained. All
// methods are thread-safe.

#ifndef GMLAKE_COMMON_CUDA_BACKEND_H_
#define GMLAKE_COMMON_CUDA_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "common/vmm.h"

namespace gmlake {

// Loads the CUDA driver (once per process), checks that there is at least
// one device and that every device supports virtual memory management and
// POSIX file-descriptor handles, and returns a backend serving all visible
// devices. Unavailable, with what was missing and "set GMLAKE_BACKEND=host"
// in the message, when there is no driver, no device, or a device without
// those features; the error of the failing driver call otherwise.
absl::StatusOr<std::unique_ptr<VmmBackend>> CreateCudaBackend();

}  // namespace gmlake

#endif  // GMLAKE_COMMON_CUDA_BACKEND_H_
