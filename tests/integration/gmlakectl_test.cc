// Copyright 2026 The GMLake Authors.
//
// gmlakectl against a real gmlaked holding a real client's chunks.

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/daemon_harness.h"

namespace gmlake {
namespace testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

CommandResult Ctl(const Daemon& d, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {RunfilePath("tools/gmlakectl"),
                                   "--socket=" + d.socket()};
  argv.insert(argv.end(), args.begin(), args.end());
  absl::StatusOr<CommandResult> r = RunCommand(argv);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : CommandResult{};
}

TEST(Gmlakectl, StatusClientsTrimInTablesAndJson) {
  absl::StatusOr<std::unique_ptr<Daemon>> d = Daemon::Start(
      {"--capacity=32MiB", "--uid_quota=20GiB", "--release_idle=1m"});
  ASSERT_TRUE(d.ok()) << d.status();
  absl::StatusOr<std::unique_ptr<ClientProcess>> c =
      ClientProcess::Start((*d)->socket(), {"--name=trainer-rank3"});
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE((*c)->Command("acquire 0 5").ok());
  ASSERT_TRUE((*c)->Command("return 0 2").ok());

  CommandResult r = Ctl(**d, {"status"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("backend host"));
  EXPECT_THAT(r.out, HasSubstr("uid quota 20.00 GiB"));
  EXPECT_THAT(r.out, HasSubstr("DEVICE"));
  EXPECT_THAT(r.out, HasSubstr("32.00 MiB"));  // capacity
  EXPECT_THAT(r.out, HasSubstr("10.00 MiB"));  // created
  EXPECT_THAT(r.out, HasSubstr("3/2"));        // leased/free chunks
  // What is held, and why.
  EXPECT_THAT(r.out, HasSubstr("device 0: 10.00 MiB created"));
  EXPECT_THAT(r.out, HasSubstr("6.00 MiB leased to 1 session\n"));
  EXPECT_THAT(r.out, HasSubstr("4.00 MiB free, going back to the driver "
                               "once idle"));

  r = Ctl(**d, {"clients"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("trainer-rank3"));
  EXPECT_THAT(r.out, HasSubstr(absl::StrCat((*c)->pid())));
  EXPECT_THAT(r.out, HasSubstr("watching"));
  EXPECT_THAT(r.out, HasSubstr("0:6.00 MiB"));

  r = Ctl(**d, {"clients", "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"name\": \"trainer-rank3\""));
  // 64-bit counts are numbers.
  EXPECT_THAT(r.out, HasSubstr("\"leased_chunks\": 3,"));
  EXPECT_THAT(r.out, Not(HasSubstr("\"devices\"")));

  r = Ctl(**d, {"status", "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"free_chunks\": 2,"));
  EXPECT_THAT(r.out, HasSubstr("\"leases_served\": 1,"));
  EXPECT_THAT(r.out, Not(HasSubstr("\": \"2\"")));
  EXPECT_THAT(r.out, HasSubstr("\"scrub_policy\": \"cross-uid\""));

  r = Ctl(**d, {"trim", "--bytes=2MiB"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("released 2.00 MiB (1 chunks)"));
  r = Ctl(**d, {"trim", "--json"});
  EXPECT_THAT(r.out, HasSubstr("\"released_chunks\": 1\n"));
  EXPECT_TRUE((*d)->CheckBooks().ok());
  absl::StatusOr<v1::StatusResponse> st = (*d)->Status();
  EXPECT_EQ(st->devices(0).created_chunks(), 3u);

  r = Ctl(**d, {"trim", "--device=7"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("device 7 does not exist"));
  r = Ctl(**d, {"frobnicate"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown command"));
}

TEST(Gmlakectl, HealthIsZeroWhileServingOneOtherwise) {
  absl::StatusOr<std::unique_ptr<Daemon>> d =
      Daemon::Start({"--capacity=8MiB"});
  ASSERT_TRUE(d.ok()) << d.status();
  CommandResult r = Ctl(**d, {"health"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "gmlaked at " + (*d)->socket() + ": SERVING\n");
  r = Ctl(**d, {"health", "--service=gmlake.v1.Lake", "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "{\n  \"status\": \"SERVING\"\n}\n");
  r = Ctl(**d, {"health", "--service=gmlake.v9.Nothing"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("no service 'gmlake.v9.Nothing'"));

  const std::string socket = (*d)->socket();
  ASSERT_TRUE((*d)->Stop(SIGTERM, absl::Seconds(10)).ok());
  absl::StatusOr<CommandResult> gone =
      RunCommand({RunfilePath("tools/gmlakectl"), "--socket=" + socket,
                  "--timeout=1s", "health"});
  ASSERT_TRUE(gone.ok()) << gone.status();
  EXPECT_EQ(gone->exit_code, 1);
  EXPECT_THAT(gone->err, HasSubstr("is gmlaked running?"));
}

// gmlakectl run as `uid` (setpriv drops to it before the exec). The binary is
// copied where that uid can read it: Bazel's runfiles may sit under /root.
CommandResult CtlAs(const Daemon& d, uid_t uid,
                    const std::vector<std::string>& args) {
  const std::string copy = d.dir() + "/gmlakectl";
  if (::access(copy.c_str(), X_OK) != 0) {
    absl::StatusOr<CommandResult> cp =
        RunCommand({"/bin/cp", RunfilePath("tools/gmlakectl"), copy});
    EXPECT_TRUE(cp.ok() && cp->exit_code == 0);
    ::chmod(copy.c_str(), 0755);
  }
  std::vector<std::string> argv = {"/usr/bin/setpriv",
                                   absl::StrCat("--reuid=", uid),
                                   absl::StrCat("--regid=", uid),
                                   "--clear-groups",
                                   copy,
                                   "--socket=" + d.socket()};
  argv.insert(argv.end(), args.begin(), args.end());
  absl::StatusOr<CommandResult> r = RunCommand(argv);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : CommandResult{};
}

TEST(Gmlakectl, AnotherUidSeesItsOwnSessionsAndMayNotTrim) {
  if (::geteuid() != 0) {
    GTEST_SKIP() << "needs root to run clients and gmlakectl as another uid";
  }
  absl::StatusOr<std::unique_ptr<Daemon>> d =
      Daemon::Start({"--capacity=32MiB"});
  ASSERT_TRUE(d.ok()) << d.status();
  absl::StatusOr<std::unique_ptr<ClientProcess>> root_job =
      ClientProcess::Start((*d)->socket(), {"--name=root-job"});
  ASSERT_TRUE(root_job.ok()) << root_job.status();
  absl::StatusOr<std::unique_ptr<ClientProcess>> nobody_job =
      ClientProcess::Start((*d)->socket(),
                           {"--name=nobody-job", "--uid=65534"});
  ASSERT_TRUE(nobody_job.ok()) << nobody_job.status();
  ASSERT_TRUE((*nobody_job)->Command("acquire 0 3").ok());
  ASSERT_TRUE((*root_job)->Command("acquire 0 4").ok());
  ASSERT_TRUE((*root_job)->Command("return 0 2").ok());  // 2 free chunks

  // uid 65534 sees its own session, not root's, and the whole lake's books.
  CommandResult r = CtlAs(**d, 65534, {"clients"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("nobody-job"));
  EXPECT_THAT(r.out, HasSubstr(absl::StrCat((*nobody_job)->pid())));
  EXPECT_THAT(r.out, Not(HasSubstr("root-job")));
  EXPECT_THAT(r.out, Not(HasSubstr(absl::StrCat((*root_job)->pid()))));
  EXPECT_THAT(r.out,
              HasSubstr("1 sessions of other users are not shown: only root "
                        "and gmlaked's uid (0) see them (you are uid 65534)"));
  r = CtlAs(**d, 65534, {"clients", "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("nobody-job"));
  EXPECT_THAT(r.out, Not(HasSubstr("root-job")));
  r = CtlAs(**d, 65534, {"status", "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"leased_chunks\": 5"));
  EXPECT_THAT(r.out, HasSubstr("\"free_chunks\": 2"));
  EXPECT_THAT(r.out, HasSubstr("\"sessions_hidden\": 1"));
  EXPECT_THAT(r.out, HasSubstr("\"caller_uid\": 65534"));
  EXPECT_THAT(r.out, Not(HasSubstr("root-job")));
  r = CtlAs(**d, 65534, {"status"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("sessions 2;"));

  // uid 65534 may not trim: a clear refusal, and nothing released.
  r = CtlAs(**d, 65534, {"trim"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("refused to trim"));
  EXPECT_THAT(r.err, HasSubstr("only root and gmlaked's own uid (0) may trim"));
  EXPECT_THAT(r.err, HasSubstr("uid 65534"));
  absl::StatusOr<v1::StatusResponse> st = (*d)->Status();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->devices(0).free_chunks(), 2u);
  EXPECT_THAT((*d)->Log(), HasSubstr("refused a trim from uid 65534"));

  // Root sees both sessions and may trim.
  r = Ctl(**d, {"clients"});
  EXPECT_THAT(r.out, HasSubstr("root-job"));
  EXPECT_THAT(r.out, HasSubstr("nobody-job"));
  EXPECT_THAT(r.out, Not(HasSubstr("not shown")));
  r = Ctl(**d, {"trim"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("released 4.00 MiB (2 chunks)"));
  EXPECT_TRUE((*d)->CheckBooks().ok());
}

TEST(Gmlakectl, NoDaemonIsAClearError) {
  absl::StatusOr<CommandResult> r = RunCommand(
      {RunfilePath("tools/gmlakectl"), "--socket=/tmp/gml.none/gmlaked.sock",
       "--timeout=1s", "status"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 1);
  EXPECT_THAT(r->err, HasSubstr("gmlaked at /tmp/gml.none/gmlaked.sock"));
  EXPECT_THAT(r->err, HasSubstr("is gmlaked running?"));
}

}  // namespace
}  // namespace testing
}  // namespace gmlake
