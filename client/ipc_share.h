// Copyright 2026 The GMLake Authors.
//
// CUDA IPC under gmlake: one process shares a live allocation, another
// maps the same memory (what torch.multiprocessing does with CUDA tensors).
//
// A gmlake allocation is cuMem chunks stitched under one address range;
// cudaIpcGetMemHandle cannot export that. The chunks themselves export as
// POSIX descriptors (DeviceAllocator::ExportLive), which cannot ride in the
// byte string PyTorch passes between processes. So the sharing process
// serves them: IpcServer listens on a Unix socket in a directory only its
// user can enter (mode 0600, and the peer's uid is checked), and a handle
// names that socket and a random token. The receiver connects, sends the
// token, gets the descriptors (SCM_RIGHTS) with the chunk sizes and the
// allocation's offset, imports the chunks and maps them whole, one after
// another, in a range of its own (ImportedMemory).
//
// A shared allocation's descriptors are kept until it is freed (Forget);
// PyTorch keeps the sender's memory alive while receivers hold it.

#ifndef GMLAKE_CLIENT_IPC_SHARE_H_
#define GMLAKE_CLIENT_IPC_SHARE_H_

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/device_allocator.h"
#include "common/mutex.h"
#include "common/unique_fd.h"
#include "common/vmm.h"

namespace gmlake {

// Every handle starts so (and PyTorch's own never do: theirs start with a
// version byte of at most 2, or are a bare cudaIpcMemHandle_t).
inline constexpr char kIpcHandlePrefix[] = "GMLK1:";

class IpcServer {
 public:
  // The process's server (started on the first Share).
  static IpcServer& Get();
  // Registers the exported memory of live allocation `ptr` on `device`;
  // returns the handle a receiver passes to ImportedMemory::Open.
  absl::StatusOr<std::string> Share(DevicePtr ptr, int device,
                                    DeviceAllocator::Exported exported);
  // `ptr` was freed: its descriptors are closed, its handles refused.
  void Forget(DevicePtr ptr);
  // Whether anything is shared (a free checks this first, without a lock).
  bool sharing() const { return count_.load(std::memory_order_relaxed) > 0; }

 private:
  struct Entry {
    DevicePtr ptr = 0;
    int device = 0;
    DeviceAllocator::Exported exported;
  };
  absl::Status StartLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Serve(int listen_fd);
  void Answer(int conn);

  Mutex mu_;
  std::string dir_ ABSL_GUARDED_BY(mu_);
  std::string path_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Entry> by_token_ ABSL_GUARDED_BY(mu_);
  std::atomic<int> count_{0};
};

// Memory another process shared, mapped here; unmapped when destroyed.
class ImportedMemory {
 public:
  // Connects to the server `handle` names and maps what it sends on
  // `device`. FailedPrecondition when the sender no longer shares it.
  static absl::StatusOr<std::unique_ptr<ImportedMemory>> Open(
      VmmBackend* backend, const std::string& handle, int device);
  ~ImportedMemory();
  ImportedMemory(const ImportedMemory&) = delete;
  ImportedMemory& operator=(const ImportedMemory&) = delete;

  DevicePtr ptr() const { return ptr_; }
  size_t size() const { return size_; }

 private:
  explicit ImportedMemory(VmmBackend* backend) : backend_(backend) {}
  VmmBackend* backend_;
  VirtualRange range_;
  std::vector<Mapping> mappings_;
  std::vector<ChunkHandle> chunks_;
  DevicePtr ptr_ = 0;
  size_t size_ = 0;
};

}  // namespace gmlake

#endif  // GMLAKE_CLIENT_IPC_SHARE_H_
