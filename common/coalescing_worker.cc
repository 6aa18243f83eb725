// Copyright 2026 The GMLake Authors.

#include "common/coalescing_worker.h"

#include <utility>

namespace gmlake {

CoalescingWorker::CoalescingWorker(std::function<void()> task)
    : task_(std::move(task)), thread_([this] { Loop(); }) {}

CoalescingWorker::~CoalescingWorker() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    wake_.SignalAll();
  }
  thread_.join();
}

void CoalescingWorker::Request() {
  MutexLock lock(&mu_);
  if (stopping_) return;
  requested_ = true;
  wake_.Signal();
}

void CoalescingWorker::Drain() {
  MutexLock lock(&mu_);
  while ((requested_ || running_) && !stopping_) idle_.Wait(&mu_);
}

int64_t CoalescingWorker::runs() {
  MutexLock lock(&mu_);
  return runs_;
}

void CoalescingWorker::Loop() {
  MutexLock lock(&mu_);
  for (;;) {
    while (!requested_ && !stopping_) wake_.Wait(&mu_);
    if (stopping_) break;
    requested_ = false;
    running_ = true;
    ++runs_;
    mu_.Unlock();
    task_();
    mu_.Lock();
    running_ = false;
    if (!requested_) idle_.SignalAll();
  }
  requested_ = false;  // dropped: Drain returns
  idle_.SignalAll();
}

}  // namespace gmlake
