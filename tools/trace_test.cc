// Copyright 2026 The GMLake Authors.
//
// LoadTrace on real files: good traces load, and anything that is not a
// trace is refused with the file, the line and what was expected.

#include "tools/trace.h"

#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gmlake {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

// Writes `text` gzip'd to a fresh file and returns its path.
std::string WriteGz(const std::string& name, const std::string& text) {
  const std::string path = TempPath(name);
  gzFile f = gzopen(path.c_str(), "wb");
  EXPECT_NE(f, nullptr);
  EXPECT_EQ(gzwrite(f, text.data(), text.size()),
            static_cast<int>(text.size()));
  gzclose(f);
  return path;
}

std::string WriteRaw(const std::string& name, const std::string& bytes) {
  const std::string path = TempPath(name);
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::string ReadRaw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Bytes no trace has: a fixed pseudo-random sequence with no newline.
std::string Garbage(size_t n) {
  std::string s(n, '\0');
  uint32_t x = 12345;
  for (char& c : s) {
    x = x * 1103515245 + 12345;
    c = static_cast<char>(0x80 | (x >> 24));
  }
  return s;
}

constexpr char kHeader[] = "# action addr size stream\n";

TEST(LoadTraceTest, ReadsAllocationsAndCompletedFrees) {
  const std::string path =
      WriteGz("good.trace.gz", absl::StrCat(kHeader,
                                            "S 4096 8192 0\n"
                                            "a 4096 1000 0\n"
                                            "a 8192 3000 7\n"
                                            "f 4096 1000 0\n"
                                            "F 4096 1000 0\n"
                                            "a 4096 500 0\n"
                                            "F 8192 3000 7"));  // no '\n'
  absl::StatusOr<Trace> t = LoadTrace(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->name, "good");
  ASSERT_EQ(t->events.size(), 5u);
  EXPECT_EQ(t->num_ids, 3u);
  EXPECT_TRUE(t->events[0].alloc);
  EXPECT_EQ(t->events[0].size, 1000u);
  EXPECT_FALSE(t->events[2].alloc);
  EXPECT_EQ(t->events[2].id, 0u);  // the first allocation at 4096
  EXPECT_EQ(t->events[3].id, 2u);  // 4096 again, a new allocation
  EXPECT_EQ(t->events[1].stream, 1);
  EXPECT_EQ(t->streams, (std::vector<uint64_t>{0, 7}));
  EXPECT_EQ(t->peak_live_bytes, 4000u);
  EXPECT_EQ(t->end_live_bytes, 500u);
  ASSERT_EQ(t->native_segments.size(), 1u);  // PyTorch's own segment
  EXPECT_EQ(t->native_segments[0].at_event, 0u);
  EXPECT_EQ(t->native_segments[0].bytes, 8192);
}

TEST(LoadTraceTest, PlainTextLoadsToo) {
  absl::StatusOr<Trace> t =
      LoadTrace(WriteRaw("plain.trace", absl::StrCat(kHeader, "a 1 512 0\n")));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->events.size(), 1u);
}

TEST(LoadTraceTest, MissingFileIsNotFound) {
  absl::StatusOr<Trace> t = LoadTrace(TempPath("absent.trace.gz"));
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(t.status().message(), HasSubstr("absent.trace.gz"));
}

TEST(LoadTraceTest, GzipOfGarbageNamesTheLineAndTheFormat) {
  const std::string path = WriteGz("bad.trace.gz", Garbage(5000));
  absl::StatusOr<Trace> t = LoadTrace(path);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr(path + ":1: "));
  EXPECT_THAT(t.status().message(), HasSubstr("ACTION ADDR SIZE STREAM"));
}

TEST(LoadTraceTest, BytesThatAreNoGzipNameTheLineAndTheFormat) {
  const std::string path = WriteRaw("raw.trace.gz", "\x1f\x8b" + Garbage(300));
  absl::StatusOr<Trace> t = LoadTrace(path);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr(path + ":1: "));
  EXPECT_THAT(t.status().message(), HasSubstr("gzip"));
}

TEST(LoadTraceTest, CorruptGzipDataSaysSo) {
  std::string text = kHeader;
  for (int i = 0; i < 2000; ++i) {
    absl::StrAppend(&text, "a ", 4096 * (i + 1), " 512 0\n");
  }
  std::string gz = ReadRaw(WriteGz("whole.trace.gz", text));
  for (size_t i = gz.size() / 2; i < gz.size() / 2 + 64; ++i) gz[i] ^= 0x5a;
  const std::string path = WriteRaw("corrupt.trace.gz", gz);
  absl::StatusOr<Trace> t = LoadTrace(path);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr(path + ":"));
  EXPECT_THAT(t.status().message(), HasSubstr("gzip"));
}

TEST(LoadTraceTest, TruncatedGzipSaysWhereItEnds) {
  std::string text = kHeader;
  for (int i = 0; i < 20000; ++i) {
    absl::StrAppend(&text, "a ", 4096 * (i + 1), " 512 0\n");
  }
  const std::string gz = ReadRaw(WriteGz("long.trace.gz", text));
  const std::string path =
      WriteRaw("trunc.trace.gz", gz.substr(0, gz.size() / 2));
  absl::StatusOr<Trace> t = LoadTrace(path);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kDataLoss) << t.status();
  EXPECT_THAT(t.status().message(), HasSubstr(path + ":"));
  EXPECT_THAT(t.status().message(), HasSubstr("truncated"));
}

TEST(LoadTraceTest, AddressAllocatedTwiceWithoutAFreeIsRefused) {
  const std::string path = WriteGz(
      "double.trace.gz", absl::StrCat(kHeader, "a 1 4096 0\na 1 4096 0\n"));
  absl::StatusOr<Trace> t = LoadTrace(path);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(), HasSubstr(path + ":3: "));
  EXPECT_THAT(t.status().message(), HasSubstr("which line 2 allocated"));
  EXPECT_THAT(t.status().message(), HasSubstr("expected an 'F 1 ...' line"));
}

TEST(LoadTraceTest, FreeOfAnAddressNeverAllocatedIsRefused) {
  const std::string path = WriteGz(
      "unknown.trace.gz", absl::StrCat(kHeader, "a 1 4096 0\nF 2 0 0\n"));
  absl::StatusOr<Trace> t = LoadTrace(path);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr(path + ":3: "));
  EXPECT_THAT(t.status().message(), HasSubstr("'F' frees address 2"));
  EXPECT_THAT(t.status().message(), HasSubstr("expected an 'a 2 ...' line"));
}

TEST(LoadTraceTest, FreeingTwiceIsRefused) {
  const std::string path =
      WriteGz("twice.trace.gz",
              absl::StrCat(kHeader, "a 1 4096 0\nF 1 4096 0\nF 1 4096 0\n"));
  absl::StatusOr<Trace> t = LoadTrace(path);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr(path + ":4: "));
}

TEST(LoadTraceTest, LinesOutOfFormatAreRefused) {
  for (const char* line :
       {"a 1 4096\n", "a 1 -4096 0\n", "a one 4096 0\n", "x 1 4096 0\n",
        "a1 4096 0\n", "a 1 4096 0 9\n", "S 1 2\n", "f 1 2 zero\n"}) {
    const std::string path =
        WriteGz("format.trace.gz", absl::StrCat(kHeader, "a 8 8 0\n", line));
    absl::StatusOr<Trace> t = LoadTrace(path);
    ASSERT_FALSE(t.ok()) << line;
    EXPECT_THAT(t.status().message(), HasSubstr(path + ":3: expected")) << line;
  }
}

TEST(LoadTraceTest, OverlongLineIsRefused) {
  const std::string path = WriteGz(
      "long_line.trace.gz",
      absl::StrCat(kHeader, "a 1 4096 0 ", std::string(10000, '7'), "\n"));
  absl::StatusOr<Trace> t = LoadTrace(path);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr(path + ":2: a line longer"));
}

TEST(LoadTraceTest, NoAllocationsIsRefused) {
  const std::string path =
      WriteGz("empty.trace.gz", absl::StrCat(kHeader, "S 1 2097152 0\n"));
  absl::StatusOr<Trace> t = LoadTrace(path);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("no allocations"));
  EXPECT_THAT(t.status().message(), HasSubstr(path));
}

}  // namespace
}  // namespace gmlake
