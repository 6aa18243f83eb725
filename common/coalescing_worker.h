// Copyright 2026 The GMLake Authors.
//
// A thread that runs one task on request, off the requester's thread.
// Requests made while the task runs or waits to run fold into one more run:
// the task does whatever work is pending when it starts, so N requests cost
// at most two runs after the first, never N. The allocator uses it to
// unmap stitches' old views (dormant pages) while the thread that asked for
// memory goes on launching work (AllocatorOptions::unmap_thread).
//
// The thread starts with the worker, so that Request, called under its
// owner's lock, neither creates a thread nor can throw.

#ifndef GMLAKE_COMMON_COALESCING_WORKER_H_
#define GMLAKE_COMMON_COALESCING_WORKER_H_

#include <cstdint>
#include <functional>
#include <thread>

#include "common/mutex.h"

namespace gmlake {

class CoalescingWorker {
 public:
  // `task` runs on the worker's thread, never on two threads at once.
  explicit CoalescingWorker(std::function<void()> task);
  // Waits for a run under way and stops; a request not yet started is
  // dropped (the owner does what must be done before it goes itself).
  ~CoalescingWorker();
  CoalescingWorker(const CoalescingWorker&) = delete;
  CoalescingWorker& operator=(const CoalescingWorker&) = delete;

  // Asks for a run; returns at once.
  void Request() ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until no run is asked for or under way.
  void Drain() ABSL_LOCKS_EXCLUDED(mu_);
  // Runs started so far.
  int64_t runs() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);

  const std::function<void()> task_;
  Mutex mu_;
  CondVar wake_;  // a request, or stop
  CondVar idle_;  // a run ended with none asked for
  bool requested_ ABSL_GUARDED_BY(mu_) = false;
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t runs_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;  // last: Loop reads the members above
};

}  // namespace gmlake

#endif  // GMLAKE_COMMON_COALESCING_WORKER_H_
