// Copyright 2026 The GMLake Authors.
//
// Issue 20 §D with real processes: a session holding one chunk reports
// 1 TiB cached, and either answers pressure at once having returned
// nothing or never answers. gmlaked used to ask it first, ask nobody twice
// for one lease, and fail every lease that needed pressure ("did not
// return enough within 2s" / "they returned less") while an honest holder
// still cached 158 chunks. Another uid's leases must now succeed, each
// within 1 s (a liveness bound: they took ~55 ms without the liar).

#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/integration/daemon_harness.h"
#include "tests/time_scale.h"

namespace gmlake {
namespace testing {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kTiB = uint64_t{1} << 40;

std::string Uid(int uid) {
  return absl::StrCat("--uid=", ::getuid() == 0 ? uid : -1);
}

// `liar_mode`: how the liar (a raw client: DaemonChunkSource never reports
// more cache than it holds) answers pressure: "nothing" or "silent".
void OthersLeaseBesideALiar(const std::string& liar_mode) {
  absl::StatusOr<std::unique_ptr<Daemon>> started = Daemon::Start(
      {"--capacity=320MiB", "--chunk_size=2MiB", "--reclaim_timeout=5s",
       "--pressure_patience=100ms", "--pressure_growth_window=0"});
  ASSERT_OK(started);
  Daemon* d = started->get();
  absl::StatusOr<std::unique_ptr<ClientProcess>> honest = ClientProcess::Start(
      d->socket(), {"--name=honest", "--reclaim", Uid(1000)});
  ASSERT_OK(honest) << d->Log();
  absl::StatusOr<std::unique_ptr<ClientProcess>> liar =
      ClientProcess::StartBinary("tests/integration/raw_client", d->socket(),
                                 {"--name=liar", Uid(1000)});
  ASSERT_OK(liar) << d->Log();
  ASSERT_OK((*honest)->Command("acquire 0 158"));
  ASSERT_OK((*liar)->Command("lease 0 1"));
  ASSERT_OK((*honest)->Command(absl::StrCat("report 0 0 ", 158 * 2 * kMiB)));
  ASSERT_OK((*liar)->Command("watch " + liar_mode));
  ASSERT_OK((*liar)->Command(absl::StrCat("usage 0 0 ", kTiB)));

  absl::StatusOr<std::unique_ptr<ClientProcess>> other =
      ClientProcess::Start(d->socket(), {"--name=other", Uid(2000)});
  ASSERT_OK(other) << d->Log();
  for (int i = 0; i < 10; ++i) {
    const absl::Time start = absl::Now();
    absl::StatusOr<std::string> got = (*other)->Command("acquire 0 10");
    EXPECT_TRUE(got.ok()) << "acquire " << i << ": " << got.status() << "\n"
                          << d->Log();
    EXPECT_LT(absl::Now() - start, testing::Scaled(absl::Seconds(1)))
        << "acquire " << i;
  }
  absl::StatusOr<v1::StatusResponse> st = d->Status();
  ASSERT_OK(st);
  EXPECT_EQ(st->leases_failed(), 0u);
  // The liar holds its chunk still; the honest holder gave the 99 missing.
  ASSERT_EQ(st->sessions_size(), 3);
  for (const v1::SessionStatus& s : st->sessions()) {
    if (s.name() == "liar") {
      EXPECT_EQ(s.leased_chunks(), 1u);
    }
    if (s.name() == "honest") {
      EXPECT_EQ(s.leased_chunks(), 59u);
    }
  }
  ASSERT_OK(d->CheckBooks());
  for (auto* c : {&*honest, &*liar, &*other}) {
    absl::StatusOr<int> code = (*c)->Quit();
    ASSERT_OK(code);
    EXPECT_EQ(*code, 0);
  }
}

TEST(PressureLiar, AnswersAtOnceHavingReturnedNothing) {
  OthersLeaseBesideALiar("nothing");
}

TEST(PressureLiar, NeverAnswers) { OthersLeaseBesideALiar("silent"); }

}  // namespace
}  // namespace testing
}  // namespace gmlake
