// Copyright 2026 The GMLake Authors.
//
// AccountingBackend: the books of the host backend without any memory.
//
// It validates every call exactly as the host backend does (same capacity,
// alignment, double-map, unmapped-range errors: both keep their books in
// common/vmm_books.h), but a chunk is only an id and a virtual range only an
// address from a counter (granularity-aligned, from 1 << 44 up, never
// reused). No system call is made on the hot path, so replaying an
// allocation trace through it is fast enough to repeat many times (e.g. to
// bisect a fragmentation regression).
//
// has_memory() is false: Fill/CopyToHost/CopyFromHost return Unimplemented.
// ExportChunk hands out an empty (sparse) memfd of the chunk's size, so code
// that passes chunks between processes keeps working and ImportChunk checks
// descriptors as the host backend does.

#ifndef GMLAKE_COMMON_ACCOUNTING_BACKEND_H_
#define GMLAKE_COMMON_ACCOUNTING_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/vmm.h"
#include "common/vmm_books.h"

namespace gmlake {

class AccountingBackend : public VmmBackend {
 public:
  using Options = EmulatedBackendOptions;

  // The first address handed out by ReserveRange.
  static constexpr DevicePtr kFirstAddress = DevicePtr{1} << 44;

  // Makes a backend (InvalidArgument for bad options).
  static absl::StatusOr<std::unique_ptr<AccountingBackend>> Create(
      const Options& options);

  absl::string_view name() const override { return "accounting"; }
  // "accounting backend (books only, no memory): 1 device, 64 GiB capacity,
  // 2 MiB chunks", then "; <note>" when the options carry one.
  std::string Describe() const override;
  int device_count() const override { return books_.devices(); }
  std::string device_uuid(int device) const override {
    return books_.device_uuid(device);
  }
  size_t granularity(int /*device*/) const override {
    return books_.granularity();
  }
  bool has_memory() const override { return false; }

  // Unimplemented: there is no memory behind the addresses.
  absl::Status Fill(DevicePtr addr, uint8_t value, size_t size) override;
  absl::Status CopyToHost(void* dst, DevicePtr src, size_t size) override;
  absl::Status CopyFromHost(DevicePtr dst, const void* src,
                            size_t size) override;

  // Bytes of capacity in use on `device` (imported chunks count nothing).
  size_t used_bytes(int device) const { return books_.used_bytes(device); }
  size_t live_chunks() const { return books_.live_chunks(); }
  size_t live_mappings() const { return books_.live_mappings(); }

 protected:
  absl::StatusOr<ChunkHandle> DoCreateChunk(int device, size_t size) override;
  absl::Status DoReleaseChunk(ChunkHandle chunk) override;
  absl::StatusOr<UniqueFd> DoExportChunk(ChunkHandle chunk) override;
  absl::StatusOr<ChunkHandle> DoImportChunk(int fd, int device,
                                            size_t size) override;
  absl::StatusOr<DevicePtr> DoReserveRange(size_t size, size_t alignment,
                                           int device) override;
  absl::Status DoFreeRange(DevicePtr base, size_t size) override;
  absl::Status DoMap(DevicePtr addr, size_t size, ChunkHandle chunk) override;
  absl::Status DoUnmap(DevicePtr addr, size_t size) override;
  absl::Status DoSetAccess(DevicePtr addr, size_t size,
                           absl::Span<const int> devices) override;
  absl::StatusOr<EventHandle> DoCreateEvent(int device) override;
  absl::Status DoDestroyEvent(EventHandle event) override;
  absl::Status DoRecordEvent(EventHandle event, StreamHandle stream) override;
  absl::StatusOr<bool> DoQueryEvent(EventHandle event) override;
  absl::Status DoSyncEvent(EventHandle event) override;
  absl::Status DoWaitEventOnStream(StreamHandle stream,
                                   EventHandle event) override;

 private:
  explicit AccountingBackend(const Options& options);

  VmmBooks books_;
  const std::string note_;
  // The next free fake address. Only touched inside the books' ReserveRange
  // effect, which runs under the books' lock.
  DevicePtr next_address_ = kFirstAddress;
};

}  // namespace gmlake

#endif  // GMLAKE_COMMON_ACCOUNTING_BACKEND_H_
