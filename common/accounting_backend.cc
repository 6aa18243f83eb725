// Copyright 2026 The GMLake Authors.

#include "common/accounting_backend.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace gmlake {
namespace {

absl::Status NoMemory(absl::string_view what) {
  return absl::UnimplementedError(absl::StrCat(
      "accounting backend: ", what,
      " is not available: this backend keeps books only and has no memory "
      "(has_memory() is false); use the host or cuda backend"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<AccountingBackend>> AccountingBackend::Create(
    const Options& options) {
  if (absl::Status s = ValidateEmulatedOptions(options); !s.ok()) return s;
  return std::unique_ptr<AccountingBackend>(new AccountingBackend(options));
}

AccountingBackend::AccountingBackend(const Options& options)
    : books_("accounting", options), note_(options.note) {}

std::string AccountingBackend::Describe() const {
  std::string out = absl::StrCat("accounting backend (books only, no memory): ",
                                 books_.DescribeDevices());
  if (!note_.empty()) absl::StrAppend(&out, "; ", note_);
  return out;
}

absl::StatusOr<ChunkHandle> AccountingBackend::DoCreateChunk(int device,
                                                             size_t size) {
  return books_.CreateChunk(device, size, [] { return UniqueFd(); });
}

absl::Status AccountingBackend::DoReleaseChunk(ChunkHandle chunk) {
  return books_.ReleaseChunk(chunk);
}

absl::StatusOr<UniqueFd> AccountingBackend::DoExportChunk(ChunkHandle chunk) {
  // An empty memfd of the right size: no pages, but a real descriptor that
  // another process can send on and import.
  return books_.ExportChunk(chunk, [](const ChunkRecord& c) {
    return MakeChunkMemfd(c.size, "accounting");
  });
}

absl::StatusOr<ChunkHandle> AccountingBackend::DoImportChunk(int fd, int device,
                                                             size_t size) {
  return books_.ImportChunk(device, size,
                            [&] { return DupChunkFd(fd, size, "accounting"); });
}

absl::StatusOr<DevicePtr> AccountingBackend::DoReserveRange(size_t size,
                                                            size_t alignment,
                                                            int /*device*/) {
  return books_.ReserveRange(
      size, alignment,
      [this](size_t size, size_t alignment) -> absl::StatusOr<DevicePtr> {
        const DevicePtr base =
            (next_address_ + alignment - 1) & ~(DevicePtr{alignment} - 1);
        // Far beyond any real replay (2^62 bytes handed out), but the
        // counter must not wrap into addresses already given.
        if (base >= (DevicePtr{1} << 62) ||
            size >= (DevicePtr{1} << 62) - base) {
          return absl::ResourceExhaustedError(
              "accounting backend: fake address space used up");
        }
        next_address_ = base + size;
        return base;
      });
}

absl::Status AccountingBackend::DoFreeRange(DevicePtr base, size_t size) {
  return books_.FreeRange(base, size, [] { return absl::OkStatus(); });
}

absl::Status AccountingBackend::DoMap(DevicePtr addr, size_t size,
                                      ChunkHandle chunk) {
  return books_.Map(addr, size, chunk,
                    [](const ChunkRecord&) { return absl::OkStatus(); });
}

absl::Status AccountingBackend::DoUnmap(DevicePtr addr, size_t size) {
  return books_.Unmap(addr, size, [] { return absl::OkStatus(); });
}

absl::Status AccountingBackend::DoSetAccess(DevicePtr addr, size_t size,
                                            absl::Span<const int> devices) {
  return books_.SetAccess(addr, size, devices, [] { return absl::OkStatus(); });
}

absl::StatusOr<EventHandle> AccountingBackend::DoCreateEvent(int device) {
  return books_.CreateEvent(device);
}

absl::Status AccountingBackend::DoDestroyEvent(EventHandle event) {
  return books_.DestroyEvent(event);
}

absl::Status AccountingBackend::DoRecordEvent(EventHandle event,
                                              StreamHandle stream) {
  return books_.RecordEvent(event, stream);
}

absl::StatusOr<bool> AccountingBackend::DoQueryEvent(EventHandle event) {
  // No work ever runs, so every event is complete; the lookup still rejects
  // handles that are not live.
  absl::StatusOr<absl::Time> done = books_.EventDoneAt(event);
  if (!done.ok()) return done.status();
  return true;
}

absl::Status AccountingBackend::DoSyncEvent(EventHandle event) {
  return books_.EventDoneAt(event).status();
}

absl::Status AccountingBackend::DoWaitEventOnStream(StreamHandle /*stream*/,
                                                    EventHandle event) {
  return books_.EventDoneAt(event).status();
}

absl::Status AccountingBackend::Fill(DevicePtr, uint8_t, size_t) {
  return NoMemory("Fill");
}

absl::Status AccountingBackend::CopyToHost(void*, DevicePtr, size_t) {
  return NoMemory("CopyToHost");
}

absl::Status AccountingBackend::CopyFromHost(DevicePtr, const void*, size_t) {
  return NoMemory("CopyFromHost");
}

}  // namespace gmlake
