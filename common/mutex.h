// Copyright 2026 The GMLake Authors.
//
// The project's locks: Mutex, MutexLock, ReaderMutexLock, CondVar and
// Notification, with Abseil's API and thread-safety annotations.
//
// They are Abseil's own, except under ThreadSanitizer (--config=tsan):
// Debian's Abseil is not built with TSAN, so TSAN cannot see absl::Mutex
// order anything and reports every access it guards as a race. There the
// same API runs on std::mutex and std::condition_variable_any, whose
// pthread calls TSAN does see, so its reports are about our code.

#ifndef GMLAKE_COMMON_MUTEX_H_
#define GMLAKE_COMMON_MUTEX_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

// GCC says ThreadSanitizer with __SANITIZE_THREAD__, Clang (--config=clang)
// with __has_feature; the same choice must follow from both.
#if defined(__SANITIZE_THREAD__)
#define GMLAKE_THREAD_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define GMLAKE_THREAD_SANITIZER 1
#endif
#endif

#if defined(GMLAKE_THREAD_SANITIZER)
#include <chrono>
#include <condition_variable>
#include <mutex>
#endif

namespace gmlake {

#if !defined(GMLAKE_THREAD_SANITIZER)

using Mutex = absl::Mutex;
using MutexLock = absl::MutexLock;
using ReaderMutexLock = absl::ReaderMutexLock;
using CondVar = absl::CondVar;
using Notification = absl::Notification;

#else  // ThreadSanitizer

class ABSL_LOCKABLE Mutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  void ReaderLock() ABSL_SHARED_LOCK_FUNCTION() { mu_.lock(); }
  void ReaderUnlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}
  std::mutex& native() { return mu_; }

 private:
  std::mutex mu_;
};

class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->Lock();
  }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

class ABSL_SCOPED_LOCKABLE ReaderMutexLock {
 public:
  explicit ReaderMutexLock(Mutex* mu) ABSL_SHARED_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->ReaderLock();
  }
  ~ReaderMutexLock() ABSL_UNLOCK_FUNCTION() { mu_->ReaderUnlock(); }
  ReaderMutexLock(const ReaderMutexLock&) = delete;
  ReaderMutexLock& operator=(const ReaderMutexLock&) = delete;

 private:
  Mutex* const mu_;
};

class CondVar {
 public:
  void Wait(Mutex* mu) {
    std::unique_lock<std::mutex> lock(mu->native(), std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }
  // True if the deadline passed.
  bool WaitWithDeadline(Mutex* mu, absl::Time deadline) {
    std::unique_lock<std::mutex> lock(mu->native(), std::adopt_lock);
    const bool timeout = cv_.wait_until(lock, absl::ToChronoTime(deadline)) ==
                         std::cv_status::timeout;
    lock.release();
    return timeout;
  }
  bool WaitWithTimeout(Mutex* mu, absl::Duration timeout) {
    return WaitWithDeadline(mu, absl::Now() + timeout);
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable_any cv_;
};

class Notification {
 public:
  void Notify() {
    MutexLock lock(&mu_);
    notified_ = true;
    cv_.SignalAll();
  }
  bool HasBeenNotified() {
    MutexLock lock(&mu_);
    return notified_;
  }
  void WaitForNotification() {
    MutexLock lock(&mu_);
    while (!notified_) cv_.Wait(&mu_);
  }
  bool WaitForNotificationWithTimeout(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    MutexLock lock(&mu_);
    while (!notified_) {
      if (cv_.WaitWithDeadline(&mu_, deadline)) return notified_;
    }
    return true;
  }

 private:
  Mutex mu_;
  CondVar cv_;
  bool notified_ = false;
};

#endif  // GMLAKE_THREAD_SANITIZER

}  // namespace gmlake

#endif  // GMLAKE_COMMON_MUTEX_H_
