// Copyright 2026 The GMLake Authors.

#include "common/coalescing_worker.h"

#include <atomic>
#include <thread>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace gmlake {
namespace {

TEST(CoalescingWorkerTest, RunsTheTaskOffTheRequestersThread) {
  std::atomic<bool> ran_elsewhere{false};
  const std::thread::id me = std::this_thread::get_id();
  CoalescingWorker worker(
      [&] { ran_elsewhere = std::this_thread::get_id() != me; });
  worker.Request();
  worker.Drain();
  EXPECT_TRUE(ran_elsewhere);
  EXPECT_EQ(worker.runs(), 1);
}

TEST(CoalescingWorkerTest, RequestsDuringARunFoldIntoOneMore) {
  Notification entered;
  Notification release;
  std::atomic<int> calls{0};
  CoalescingWorker worker([&] {
    if (calls.fetch_add(1) == 0) {
      entered.Notify();
      release.WaitForNotification();
    }
  });
  worker.Request();
  entered.WaitForNotification();
  for (int i = 0; i < 100; ++i) worker.Request();
  release.Notify();
  worker.Drain();
  EXPECT_EQ(calls.load(), 2);
  EXPECT_EQ(worker.runs(), 2);
}

TEST(CoalescingWorkerTest, NoRequestNoRun) {
  std::atomic<int> calls{0};
  {
    CoalescingWorker worker([&] { ++calls; });
    worker.Drain();  // returns at once: nothing asked
  }
  EXPECT_EQ(calls.load(), 0);
}

TEST(CoalescingWorkerTest, StoppingWaitsForTheRunUnderWay) {
  Notification entered;
  std::atomic<bool> finished{false};
  {
    CoalescingWorker worker([&] {
      entered.Notify();
      absl::SleepFor(absl::Milliseconds(50));
      finished = true;
    });
    worker.Request();
    entered.WaitForNotification();
  }
  EXPECT_TRUE(finished);
}

}  // namespace
}  // namespace gmlake
