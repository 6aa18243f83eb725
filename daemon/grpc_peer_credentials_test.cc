// Copyright 2026 The GMLake Authors.

#include "daemon/grpc_peer_credentials.h"

#include <stdlib.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proto/gmlake.grpc.pb.h"

namespace gmlake {
namespace {

// Answers Status with the caller's uid and pid as the registry knows them
// (-1 when it does not).
class WhoAmI final : public v1::Lake::Service {
 public:
  explicit WhoAmI(const GrpcPeerCredentials* peers) : peers_(peers) {}
  grpc::Status Status(grpc::ServerContext* context, const v1::StatusRequest*,
                      v1::StatusResponse* response) override {
    std::optional<PeerCredentials> p = peers_->Lookup(context->peer());
    response->set_caller_uid(p.has_value() ? p->uid : -1);
    response->set_uptime_seconds(p.has_value() ? p->pid : -1);
    response->set_backend(context->peer());
    return grpc::Status::OK;
  }

 private:
  const GrpcPeerCredentials* const peers_;
};

class GrpcPeerCredentialsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/gpc.XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
    path_ = dir_ + "/g.sock";
    grpc::ServerBuilder b;
    b.RegisterService(&service_);
    server_ = b.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    absl::StatusOr<UniqueFd> listener = ListenUnix(path_, 0600);
    ASSERT_TRUE(listener.ok()) << listener.status();
    absl::StatusOr<std::unique_ptr<GrpcUnixAcceptor>> a =
        GrpcUnixAcceptor::Start(server_.get(), *std::move(listener), &peers_);
    ASSERT_TRUE(a.ok()) << a.status();
    acceptor_ = *std::move(a);
  }
  void TearDown() override {
    if (acceptor_ != nullptr) acceptor_->Stop();
    if (server_ != nullptr) server_->Shutdown();
    ::unlink(path_.c_str());
    ::rmdir(dir_.c_str());
  }

  // One Status call on a new channel.
  v1::StatusResponse Ask() {
    grpc::ChannelArguments args;
    // A channel of its own, not one shared through gRPC's subchannel pool.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto stub = v1::Lake::NewStub(grpc::CreateCustomChannel(
        "unix:" + path_, grpc::InsecureChannelCredentials(), args));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(10));
    v1::StatusResponse r;
    grpc::Status s = stub->Status(&ctx, v1::StatusRequest(), &r);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return r;
  }

  std::string dir_, path_;
  GrpcPeerCredentials peers_;
  WhoAmI service_{&peers_};
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<GrpcUnixAcceptor> acceptor_;
};

TEST_F(GrpcPeerCredentialsTest, AHandlerLearnsTheCallersUidAndPid) {
  v1::StatusResponse r = Ask();
  EXPECT_EQ(r.caller_uid(), static_cast<int64_t>(::geteuid()));
  EXPECT_EQ(r.uptime_seconds(), ::getpid());
  EXPECT_EQ(r.backend().rfind("fd:", 0), 0u) << r.backend();
  EXPECT_EQ(acceptor_->accepted(), 1u);
}

TEST_F(GrpcPeerCredentialsTest, EveryNewConnectionIsRecordedBeforeItsCalls) {
  // Connections come and go; descriptor numbers are reused, and each call
  // still finds its own connection's record.
  for (int i = 0; i < 20; ++i) {
    v1::StatusResponse r = Ask();
    ASSERT_EQ(r.caller_uid(), static_cast<int64_t>(::geteuid())) << i;
  }
  EXPECT_EQ(acceptor_->accepted(), 20u);
}

TEST_F(GrpcPeerCredentialsTest, OtherPeerStringsAreNobody) {
  PeerCredentials someone{1, 2, 3};
  peers_.Record(5, someone);
  EXPECT_TRUE(peers_.Lookup("fd:5").has_value());
  EXPECT_EQ(peers_.Lookup("fd:5")->uid, 2u);
  for (const char* peer :
       {"", "fd:", "fd:-1", "fd:5x", "fd:6", "unix:/run/gmlake/gmlaked.sock",
        "ipv4:1.2.3.4:5", " fd:5", "fd:99999999999999999999"}) {
    EXPECT_FALSE(peers_.Lookup(peer).has_value()) << peer;
  }
}

TEST_F(GrpcPeerCredentialsTest, StopClosesTheListener) {
  Ask();
  acceptor_->Stop();
  acceptor_->Stop();  // idempotent
  absl::StatusOr<UniqueFd> c = ConnectUnix(path_);
  EXPECT_FALSE(c.ok());
}

}  // namespace
}  // namespace gmlake
