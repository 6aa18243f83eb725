// Copyright 2026 The GMLake Authors.
//
// Blocks and segments: the allocator's picture of its address space.
//
// A *segment* is a maximal run of mapped pages (one chunk per page) in an
// arena. Blocks tile each segment exactly, in address order (prev/next), and
// are either allocated or free. Free blocks sit in their pool's FreeIndex.
// Segments never touch: when a mapping fills the gap between two segments,
// they become one, so a free block never ends where a mappable one begins.

#ifndef GMLAKE_CLIENT_BLOCK_H_
#define GMLAKE_CLIENT_BLOCK_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/vmm.h"

namespace gmlake {

struct Arena;
struct Pool;
struct Segment;

enum class BlockState : uint8_t {
  kFree,       // in its pool's FreeIndex
  kAllocated,  // handed out
  kPending,    // freed, waiting for other streams' work to finish
  kDetached,   // out of the index while the allocator works on it
};

struct Block {
  DevicePtr addr = 0;
  size_t size = 0;
  size_t requested = 0;   // what the caller asked for (allocated blocks)
  Block* prev = nullptr;  // address neighbours within the segment
  Block* next = nullptr;
  Block* free_prev = nullptr;  // links in the pool's free bin
  Block* free_next = nullptr;
  Segment* segment = nullptr;
  Pool* pool = nullptr;  // the stream it belongs to
  uint32_t bin = 0;
  // When it was last freed (the allocator's count of frees): a free block
  // whose free came before a wait for every stream is no longer in use.
  uint64_t free_seq = 0;
  BlockState state = BlockState::kDetached;
  // Allocated: the stack of the malloc that handed it out, while history
  // keeps stacks of live blocks (TraceRecorder::block_stacks; ~0: none).
  uint32_t stack = ~uint32_t{0};

  DevicePtr end() const { return addr + size; }
};

struct Segment {
  Arena* arena = nullptr;
  size_t first_page = 0;  // within the arena
  size_t num_pages = 0;
  Block* head = nullptr;
  Block* tail = nullptr;

  size_t end_page() const { return first_page + num_pages; }
};

// Recycles objects of one type so the steady state allocates no heap memory.
template <typename T>
class ObjectPool {
 public:
  T* New() {
    if (free_.empty()) {
      storage_.push_back(std::make_unique<T[]>(kSlab));
      for (size_t i = 0; i < kSlab; ++i) free_.push_back(&storage_.back()[i]);
    }
    T* t = free_.back();
    free_.pop_back();
    *t = T();
    return t;
  }
  void Delete(T* t) { free_.push_back(t); }

 private:
  static constexpr size_t kSlab = 1024;
  std::vector<std::unique_ptr<T[]>> storage_;
  std::vector<T*> free_;
};

}  // namespace gmlake

#endif  // GMLAKE_CLIENT_BLOCK_H_
