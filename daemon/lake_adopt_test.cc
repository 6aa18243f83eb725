// Copyright 2026 The GMLake Authors.
//
// Re-adoption in the Lake (host backend, real memfds): chunks of "the
// daemon before" (another backend in this process) shown by descriptor are
// adopted into the session that shows them, counted, and dropped when it
// lets go; anything the lake cannot prove is a chunk of its own kind and
// size, or holds already, or that does not fit, is refused whole.

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <memory>
#include <vector>

#include "common/unique_fd.h"
#include "common/vmm.h"
#include "daemon/lake.h"
#include "daemon/lake_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gmlake {
namespace testing {
namespace {

using ::testing::HasSubstr;

// Chunks as the daemon before made them: another host backend.
class Before {
 public:
  Before() {
    BackendOptions b;
    b.kind = "host";
    absl::StatusOr<std::unique_ptr<VmmBackend>> backend = CreateBackend(b);
    EXPECT_TRUE(backend.ok()) << backend.status();
    backend_ = *std::move(backend);
  }
  // A chunk of `size`, filled with `value`, as an exported descriptor.
  UniqueFd Chunk(uint8_t value, size_t size = kTestChunk) {
    absl::StatusOr<ChunkHandle> h = backend_->CreateChunk(0, size);
    EXPECT_TRUE(h.ok()) << h.status();
    absl::StatusOr<VirtualRange> r =
        VirtualRange::Reserve(backend_.get(), size);
    const int devs[] = {0};
    absl::StatusOr<Mapping> m =
        Mapping::Map(backend_.get(), r->base(), size, *h, devs);
    EXPECT_TRUE(m.ok()) << m.status();
    EXPECT_TRUE(backend_->Fill(r->base(), value, size).ok());
    absl::StatusOr<UniqueFd> fd = backend_->ExportChunk(*h);
    EXPECT_TRUE(fd.ok());
    handles_.push_back(*h);
    return *std::move(fd);
  }
  // The first byte of the chunk behind `fd`.
  static uint8_t FirstByte(int fd) {
    uint8_t b = 0;
    EXPECT_EQ(::pread(fd, &b, 1, 0), 1);
    return b;
  }

 private:
  std::unique_ptr<VmmBackend> backend_;
  std::vector<ChunkHandle> handles_;
};

std::vector<UniqueFd> Fds(std::vector<UniqueFd>* v) { return std::move(*v); }

TEST(LakeAdoptTest, AdoptedChunksAreCountedAndDroppedNotPooled) {
  TestLake lake(TestLakeOptions(4));
  Before before;
  SessionTicket a = lake.Open(2000);
  std::vector<UniqueFd> fds;
  fds.push_back(before.Chunk(0x5a));
  fds.push_back(before.Chunk(0x5b));
  const int first = ::fcntl(fds[0].get(), F_DUPFD_CLOEXEC, 0);
  UniqueFd keep(first);
  absl::StatusOr<std::vector<uint64_t>> ids =
      lake->Adopt(a.id, a.token, 0, {17, 18}, fds);
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_EQ(ids->size(), 2u);
  v1::StatusResponse st = lake.Status();
  EXPECT_EQ(st.devices(0).created_chunks(), 2u);
  EXPECT_EQ(st.devices(0).leased_chunks(), 2u);
  EXPECT_EQ(st.sessions(0).leased_chunks(), 2u);
  // Returned: dropped, not free; the data stays the client's, unzeroed.
  ASSERT_TRUE(lake->Return(a.id, a.token, {(*ids)[0]}).ok());
  st = lake.Status();
  EXPECT_EQ(st.devices(0).created_chunks(), 1u);
  EXPECT_EQ(st.devices(0).free_chunks(), 0u);
  EXPECT_EQ(Before::FirstByte(keep.get()), 0x5a);
  ASSERT_TRUE(lake->CloseSession(a.id, a.token).ok());
  st = lake.Status();
  EXPECT_EQ(st.devices(0).created_chunks(), 0u);
  // Another uid gets chunks the lake made: all four, zero.
  SessionTicket b = lake.Open(3000);
  absl::StatusOr<LeaseGrant> g = lake->Lease(b.id, b.token, 0, 4);
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<std::vector<UniqueFd>> got =
      lake->DupChunkFds(b.id, g->chunk_ids);
  ASSERT_TRUE(got.ok());
  for (const UniqueFd& fd : *got) EXPECT_EQ(Before::FirstByte(fd.get()), 0);
}

TEST(LakeAdoptTest, WhatCannotBeProvenIsRefusedWhole) {
  TestLake lake(TestLakeOptions(4));
  Before before;
  SessionTicket a = lake.Open(2000);
  auto adopt = [&](std::vector<UniqueFd> fds, std::vector<uint64_t> prev) {
    return lake->Adopt(a.id, a.token, 0, prev, fds).status();
  };
  // No descriptors: a claim alone proves nothing.
  absl::Status s = adopt({}, {1, 2});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("must carry the chunks' descriptors"));
  // A pipe, an unsealed memfd, a sealed one of the wrong size.
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  UniqueFd r(p[0]), w(p[1]);
  std::vector<UniqueFd> v;
  v.push_back(before.Chunk(1));
  v.push_back(std::move(r));
  s = adopt(Fds(&v), {1, 2});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("descriptor 1 of the adopt request is "
                                     "not a chunk"));
  UniqueFd loose(::memfd_create("x", MFD_CLOEXEC));
  ASSERT_EQ(::ftruncate(loose.get(), kTestChunk), 0);
  v.clear();
  v.push_back(std::move(loose));
  EXPECT_THAT(adopt(Fds(&v), {1}).message(), HasSubstr("not a sealed chunk"));
  v.clear();
  v.push_back(before.Chunk(1, 2 * kTestChunk));
  EXPECT_THAT(adopt(Fds(&v), {1}).message(), HasSubstr("not the 2097152"));
  // The same chunk twice.
  UniqueFd c = before.Chunk(2);
  v.clear();
  v.push_back(UniqueFd(::fcntl(c.get(), F_DUPFD_CLOEXEC, 0)));
  v.push_back(std::move(c));
  s = adopt(Fds(&v), {1, 2});
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists);
  // A chunk the lake leased to another session, shown by its holder.
  SessionTicket other = lake.Open(3000);
  absl::StatusOr<LeaseGrant> g = lake->Lease(other.id, other.token, 0, 1);
  ASSERT_TRUE(g.ok());
  absl::StatusOr<std::vector<UniqueFd>> leased =
      lake->DupChunkFds(other.id, g->chunk_ids);
  ASSERT_TRUE(leased.ok());
  s = adopt(*std::move(leased), {g->chunk_ids[0]});
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(s.message(), HasSubstr("which gmlaked holds already"));
  // More than the capacity left (3 chunks).
  v.clear();
  for (int i = 0; i < 4; ++i) v.push_back(before.Chunk(3));
  s = adopt(Fds(&v), {1, 2, 3, 4});
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  // A bad token, a device that does not exist.
  v.clear();
  v.push_back(before.Chunk(4));
  EXPECT_EQ(lake->Adopt(a.id, "bad", 0, {1}, v).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(lake->Adopt(a.id, a.token, 1, {1}, v).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Nothing of the above was adopted, and nothing leaked into the books.
  v1::StatusResponse st = lake.Status();
  EXPECT_EQ(st.devices(0).created_chunks(), 1u);
  EXPECT_EQ(st.devices(0).leased_chunks(), 1u);
  // The good one still goes in.
  EXPECT_TRUE(lake->Adopt(a.id, a.token, 0, {1}, v).ok());
}

TEST(LakeAdoptTest, QuotasCountAdoptedChunks) {
  LakeOptions o = TestLakeOptions(8);
  o.uid_quota_bytes = 2 * kTestChunk;
  TestLake lake(std::move(o));
  Before before;
  SessionTicket a = lake.Open(2000);
  std::vector<UniqueFd> v;
  for (int i = 0; i < 2; ++i) v.push_back(before.Chunk(1));
  ASSERT_TRUE(lake->Adopt(a.id, a.token, 0, {1, 2}, v).ok());
  absl::StatusOr<LeaseGrant> g = lake->Lease(a.id, a.token, 0, 1);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(g.status().message(), HasSubstr("--uid_quota"));
}

}  // namespace
}  // namespace testing
}  // namespace gmlake
