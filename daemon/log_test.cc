// Copyright 2026 The GMLake Authors.

#include "daemon/log.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace gmlake {
namespace {

TEST(Log, JournalLinesCarryThePriorityAndNoTimestamp) {
  EXPECT_EQ(FormatLogLine(LogFormat::kJournal, LogPriority::kError,
                          "2026-01-02 03:04:05.678", "lease failed: x"),
            "<3>lease failed: x\n");
  EXPECT_EQ(FormatLogLine(LogFormat::kJournal, LogPriority::kInfo, "", "a"),
            "<6>a\n");
  // An embedded newline would start a second entry at the default
  // priority.
  EXPECT_EQ(FormatLogLine(LogFormat::kJournal, LogPriority::kWarning, "",
                          "two\nlines"),
            "<4>two lines\n");
}

TEST(Log, OtherLinesCarryATimestampAndTheName) {
  EXPECT_EQ(FormatLogLine(LogFormat::kTimestamped, LogPriority::kError,
                          "2026-01-02 03:04:05.678", "lease failed: x"),
            "2026-01-02 03:04:05.678 gmlaked: lease failed: x\n");
}

class JournalStreamEnv : public ::testing::Test {
 protected:
  void TearDown() override { ::unsetenv("JOURNAL_STREAM"); }
};

TEST_F(JournalStreamEnv, TheJournalIsRecognisedOnlyOnItsOwnStream) {
  char path[] = "/tmp/gml.log.XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::unlink(path);
  char other_path[] = "/tmp/gml.log.XXXXXX";
  const int other = ::mkstemp(other_path);
  ASSERT_GE(other, 0);
  ::unlink(other_path);
  struct stat st {};
  ASSERT_EQ(::fstat(fd, &st), 0);
  const std::string stream = absl::StrCat(static_cast<uint64_t>(st.st_dev), ":",
                                          static_cast<uint64_t>(st.st_ino));

  ::unsetenv("JOURNAL_STREAM");
  EXPECT_EQ(DetectLogFormat(fd), LogFormat::kTimestamped);
  ::setenv("JOURNAL_STREAM", stream.c_str(), 1);
  EXPECT_EQ(DetectLogFormat(fd), LogFormat::kJournal);
  // Inherited by a process whose stderr went elsewhere.
  EXPECT_EQ(DetectLogFormat(other), LogFormat::kTimestamped);
  ::setenv("JOURNAL_STREAM", "garbage", 1);
  EXPECT_EQ(DetectLogFormat(fd), LogFormat::kTimestamped);
  ::setenv("JOURNAL_STREAM", "12:", 1);
  EXPECT_EQ(DetectLogFormat(fd), LogFormat::kTimestamped);
  ::close(fd);
  ::close(other);
}

}  // namespace
}  // namespace gmlake
