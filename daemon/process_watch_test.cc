// Copyright 2026 The GMLake Authors.

#include "daemon/process_watch.h"

#include <sys/wait.h>
#include <unistd.h>

#include "gtest/gtest.h"

namespace gmlake {
namespace {

TEST(ProcessWatchTest, SeesARealChildExit) {
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(go[1]);
    char c;
    [[maybe_unused]] ssize_t n = ::read(go[0], &c, 1);
    ::_exit(0);
  }
  ::close(go[0]);
  ProcessWatch w = ProcessWatch::Start(child);
  EXPECT_EQ(w.pid(), child);
  EXPECT_TRUE(w.Alive());
  EXPECT_TRUE(w.Alive());  // asking does not consume anything
  ::close(go[1]);
  int status;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_FALSE(w.Alive());
}

TEST(ProcessWatchTest, NothingAndNobodyAreNotAlive) {
  EXPECT_FALSE(ProcessWatch().Alive());
  EXPECT_EQ(ProcessWatch().pidfd(), -1);
  // A pid far above pid_max: no such process.
  EXPECT_FALSE(ProcessWatch::Start(1 << 30).Alive());
  EXPECT_EQ(ProcessStartTime(1 << 30), 0u);
}

TEST(ProcessWatchTest, StartTimeOfThisProcess) {
  EXPECT_GT(ProcessStartTime(::getpid()), 0u);
  EXPECT_EQ(ProcessStartTime(::getpid()), ProcessStartTime(::getpid()));
}

TEST(ProcessWatchTest, StatLinesWithOddCommandNames) {
  // Fields 3..22 after the name; the 22nd is the start time.
  const std::string rest =
      " S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 987654 20 21";
  EXPECT_EQ(StartTimeFromStat("42 (python)" + rest), 987654u);
  EXPECT_EQ(StartTimeFromStat("42 (a b) c)" + rest), 987654u);
  EXPECT_EQ(StartTimeFromStat("42 ()" + rest), 987654u);
  EXPECT_EQ(StartTimeFromStat("42 (python) S 1 2"), 0u);  // cut short
  EXPECT_EQ(StartTimeFromStat("no parentheses"), 0u);
  EXPECT_EQ(StartTimeFromStat(""), 0u);
  EXPECT_EQ(StartTimeFromStat(
                "42 (x)" + std::string(" S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 "
                                       "16 17 18 notanumber 20")),
            0u);
}

}  // namespace
}  // namespace gmlake
