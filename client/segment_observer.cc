// Copyright 2026 The GMLake Authors.

#include "client/segment_observer.h"

#include <atomic>

#include "common/mutex.h"

namespace gmlake {
namespace {

// Set rarely (the door's first tracker), read on each segment event. The
// lock is held while the observer runs, so that SetSegmentObserver's
// return means no call of the old one is still in progress.
Mutex observer_mu;
SegmentObserver installed ABSL_GUARDED_BY(observer_mu);
std::atomic<bool> observer_set{false};

}  // namespace

void SetSegmentObserver(const SegmentObserver* observer) {
  MutexLock lock(&observer_mu);
  installed = observer != nullptr && observer->observe != nullptr
                  ? *observer
                  : SegmentObserver{};
  observer_set.store(installed.observe != nullptr, std::memory_order_relaxed);
}

bool SegmentObserved() { return observer_set.load(std::memory_order_relaxed); }

void NotifySegment(const SegmentEvent& event) {
  if (!SegmentObserved()) return;
  MutexLock lock(&observer_mu);
  if (installed.observe != nullptr) installed.observe(installed.ctx, event);
}

}  // namespace gmlake
