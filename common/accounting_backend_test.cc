// Copyright 2026 The GMLake Authors.
//
// What is particular to the accounting backend: fake addresses, no memory,
// books that keep up with long replays. Its shared behaviour with the host
// backend (same books, same errors) is tested by tests/vmm_conformance.cc,
// which runs against both.

#include "common/accounting_backend.h"

#include <sys/stat.h>

#include <vector>

#include "common/vmm.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gmlake {
namespace {

using ::testing::HasSubstr;

constexpr size_t kChunk = size_t{2} << 20;

std::unique_ptr<AccountingBackend> MakeAccounting(size_t capacity = size_t{64}
                                                                    << 30) {
  AccountingBackend::Options o;
  o.capacity_bytes = capacity;
  absl::StatusOr<std::unique_ptr<AccountingBackend>> b =
      AccountingBackend::Create(o);
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? *std::move(b) : nullptr;
}

TEST(AccountingBackendTest, Describe) {
  std::unique_ptr<AccountingBackend> acc = MakeAccounting();
  EXPECT_EQ(acc->name(), "accounting");
  EXPECT_FALSE(acc->has_memory());
  EXPECT_EQ(acc->Describe(),
            "accounting backend (books only, no memory): 1 device, 64.00 GiB "
            "capacity, 2.00 MiB chunks");
}

TEST(AccountingBackendTest, FakeAddressesAreAlignedAndNeverReused) {
  std::unique_ptr<AccountingBackend> acc = MakeAccounting();
  absl::StatusOr<DevicePtr> a = acc->ReserveRange(3 * kChunk);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a, AccountingBackend::kFirstAddress);
  absl::StatusOr<DevicePtr> b = acc->ReserveRange(kChunk, 64 * kChunk);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b % (64 * kChunk), 0u);
  EXPECT_GE(*b, *a + 3 * kChunk);
  ASSERT_TRUE(acc->FreeRange(*a, 3 * kChunk).ok());
  absl::StatusOr<DevicePtr> c = acc->ReserveRange(kChunk);
  ASSERT_TRUE(c.ok());
  EXPECT_GE(*c, *b + kChunk);
  EXPECT_EQ(*c % kChunk, 0u);
}

TEST(AccountingBackendTest, MemoryAccessIsUnimplemented) {
  std::unique_ptr<AccountingBackend> acc = MakeAccounting();
  absl::StatusOr<DevicePtr> r = acc->ReserveRange(kChunk);
  absl::StatusOr<ChunkHandle> c = acc->CreateChunk(0, kChunk);
  ASSERT_TRUE(r.ok() && c.ok());
  ASSERT_TRUE(acc->Map(*r, kChunk, *c).ok());
  ASSERT_TRUE(acc->SetAccess(*r, kChunk, {0}).ok());
  uint8_t buf[4] = {};
  for (absl::Status s : {acc->Fill(*r, 1, 4), acc->CopyToHost(buf, *r, 4),
                         acc->CopyFromHost(*r, buf, 4)}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(std::string(s.message()), HasSubstr("has no memory"));
  }
}

// Exports are empty memfds of the chunk's size, which import checks like the
// host backend does.
TEST(AccountingBackendTest, ExportImport) {
  std::unique_ptr<AccountingBackend> acc = MakeAccounting();
  absl::StatusOr<ChunkHandle> c = acc->CreateChunk(0, 2 * kChunk);
  ASSERT_TRUE(c.ok());
  absl::StatusOr<UniqueFd> fd = acc->ExportChunk(*c);
  ASSERT_TRUE(fd.ok()) << fd.status();
  struct stat st {};
  ASSERT_EQ(fstat(fd->get(), &st), 0);
  EXPECT_EQ(st.st_size, static_cast<off_t>(2 * kChunk));
  EXPECT_EQ(st.st_blocks, 0);
  std::unique_ptr<AccountingBackend> other = MakeAccounting(kChunk);
  absl::StatusOr<ChunkHandle> imported =
      other->ImportChunk(fd->get(), 0, 2 * kChunk);
  ASSERT_TRUE(imported.ok()) << imported.status();
  // Imports count against no capacity (this one is larger than it).
  EXPECT_EQ(other->used_bytes(0), 0u);
  EXPECT_EQ(other->ImportChunk(fd->get(), 0, kChunk).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A trace replay does millions of these: many rounds of mapping a range
// chunk by chunk, giving access and unmapping it leave the books balanced
// and every call counted. (How fast the books are is a benchmark's
// question, not a test's: bazel run -c opt //common:vmm_call_bench.)
TEST(AccountingBackendTest, ManyMapRoundsBalanceTheBooks) {
  std::unique_ptr<AccountingBackend> acc = MakeAccounting();
  constexpr int kChunks = 1024;
  absl::StatusOr<DevicePtr> range = acc->ReserveRange(kChunks * kChunk);
  ASSERT_TRUE(range.ok());
  std::vector<ChunkHandle> chunks;
  for (int i = 0; i < kChunks; ++i)
    chunks.push_back(*acc->CreateChunk(0, kChunk));
  constexpr int kRounds = 20;
  for (int r = 0; r < kRounds; ++r) {
    for (int i = 0; i < kChunks; ++i) {
      const DevicePtr at = *range + ((i + r) % kChunks) * kChunk;
      ASSERT_TRUE(acc->Map(at, kChunk, chunks[i]).ok());
    }
    ASSERT_EQ(acc->live_mappings(), static_cast<size_t>(kChunks));
    ASSERT_TRUE(acc->SetAccess(*range, kChunks * kChunk, {0}).ok());
    ASSERT_TRUE(acc->Unmap(*range, kChunks * kChunk).ok());
  }
  EXPECT_EQ(acc->call_stats().Count(VmmCall::kMap),
            static_cast<uint64_t>(kRounds * kChunks));
  EXPECT_EQ(acc->call_stats().Count(VmmCall::kSetAccess),
            static_cast<uint64_t>(kRounds));
  EXPECT_EQ(acc->call_stats().Count(VmmCall::kUnmap),
            static_cast<uint64_t>(kRounds));
  EXPECT_EQ(acc->live_mappings(), 0u);
  EXPECT_EQ(acc->used_bytes(0), kChunks * kChunk);
}

}  // namespace
}  // namespace gmlake
