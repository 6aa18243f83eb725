// Copyright 2026 The GMLake Authors.

#include "tests/integration/daemon_harness.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "proto/protocol.h"
#include "tests/time_scale.h"

namespace gmlake {
namespace testing {
namespace {

// fork+exec `argv`; the child's stdin/stdout are `in`/`out` (-1: inherit)
// and stderr goes to `err_path` ("" : inherit).
absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& argv, int in,
                            int out, const std::string& err_path) {
  std::vector<char*> args;
  for (const std::string& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int err = -1;
  if (!err_path.empty()) {
    err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
                 0644);
    if (err < 0) {
      return absl::InternalError(
          absl::StrCat("open ", err_path, ": ", std::strerror(errno)));
    }
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    if (err >= 0) ::close(err);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    if (in >= 0) ::dup2(in, 0);
    if (out >= 0) ::dup2(out, 1);
    if (err >= 0) ::dup2(err, 2);
    // The test's blocked signals must not leak into the daemon.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execv(args[0], args.data());
    std::fprintf(stderr, "exec %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  if (err >= 0) ::close(err);
  return pid;
}

absl::StatusOr<int> WaitExit(pid_t pid, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
      return -1;
    }
    if (r < 0) {
      return absl::InternalError(
          absl::StrCat("waitpid: ", std::strerror(errno)));
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("process ", pid, " did not exit within ",
                       absl::FormatDuration(timeout)));
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
}

}  // namespace

absl::StatusOr<std::string> ParseAnswer(const std::string& line) {
  if (line == "ok") return std::string();
  if (line.rfind("ok ", 0) == 0) return line.substr(3);
  if (line.rfind("ready ", 0) == 0) return line.substr(6);
  if (line.rfind("err ", 0) == 0) {
    std::vector<std::string> parts =
        absl::StrSplit(line.substr(4), absl::MaxSplits(' ', 1));
    int code = 2;
    if (!absl::SimpleAtoi(parts[0], &code)) code = 2;
    return absl::Status(static_cast<absl::StatusCode>(code),
                        parts.size() > 1 ? parts[1] : "");
  }
  return absl::InternalError(absl::StrCat("unexpected answer: ", line));
}

absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         absl::Duration timeout) {
  char templ[] = "/tmp/gml.out.XXXXXX";
  const int out_fd = ::mkstemp(templ);
  if (out_fd < 0) {
    return absl::InternalError(absl::StrCat("mkstemp: ", std::strerror(errno)));
  }
  UniqueFd out(out_fd);
  const std::string out_path = templ;
  const std::string err_path = out_path + ".err";
  absl::StatusOr<pid_t> pid = Spawn(argv, -1, out.get(), err_path);
  if (!pid.ok()) return pid.status();
  absl::StatusOr<int> code = WaitExit(*pid, timeout);
  if (!code.ok()) {
    ::kill(*pid, SIGKILL);
    ::waitpid(*pid, nullptr, 0);
  }
  CommandResult r;
  auto slurp = [](const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  };
  r.out = slurp(out_path);
  r.err = slurp(err_path);
  ::unlink(out_path.c_str());
  ::unlink(err_path.c_str());
  if (!code.ok()) return code.status();
  r.exit_code = *code;
  return r;
}

// --- Daemon ------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Start(
    const std::vector<std::string>& flags) {
  std::unique_ptr<Daemon> d(new Daemon());
  char templ[] = "/tmp/gml.XXXXXX";
  if (::mkdtemp(templ) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp: ", std::strerror(errno)));
  }
  d->dir_ = templ;
  ::chmod(templ, 0755);
  d->socket_ = d->dir_ + "/gmlaked.sock";
  d->fd_socket_ = d->dir_ + "/fd.sock";
  d->log_ = d->dir_ + "/gmlaked.log";
  // A flagfile goes first, so that the sockets and the rest override it.
  std::vector<std::string> argv = {RunfilePath("daemon/gmlaked")};
  for (const std::string& f : flags) {
    if (f.rfind("--flagfile=", 0) == 0) argv.push_back(f);
  }
  // No idle release unless a test asks (--release_idle=...: the last one
  // wins): with no session open, free chunks would go back to the driver
  // at the daemon's next wake, and a test counting what came back to the
  // lake after its clients ended would race that.
  for (const std::string& f :
       {std::string("--backend=host"), "--socket=" + d->socket_,
        "--fd_socket=" + d->fd_socket_, std::string("--verbose"),
        std::string("--release_idle=0")}) {
    argv.push_back(f);
  }
  for (const std::string& f : flags) {
    if (f.rfind("--flagfile=", 0) != 0) argv.push_back(f);
  }
  d->argv_ = std::move(argv);
  if (absl::Status s = d->Launch(); !s.ok()) return s;
  return d;
}

absl::Status Daemon::Restart() {
  if (pid_ > 0) return absl::FailedPreconditionError("gmlaked still runs");
  return Launch();
}

absl::Status Daemon::Launch() {
  absl::StatusOr<pid_t> pid = Spawn(argv_, -1, -1, log_);
  if (!pid.ok()) return pid.status();
  pid_ = *pid;
  // Wait for the gRPC socket (a killed daemon leaves its file behind: wait
  // for the answer), then for an answer.
  // (Scaled: a sanitizer's daemon takes seconds to start on a busy machine.)
  const absl::Time deadline = absl::Now() + Scaled(absl::Seconds(20));
  while (::access(socket_.c_str(), F_OK) != 0) {
    int status;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return absl::FailedPreconditionError(
          absl::StrCat("gmlaked exited at start: ", Log()));
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("gmlaked did not create its socket: ", Log()));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  channel_ = grpc::CreateChannel("unix:" + socket_,
                                 grpc::InsecureChannelCredentials());
  stub_ = v1::Lake::NewStub(channel_);
  for (;;) {
    absl::StatusOr<v1::StatusResponse> st = Status();
    if (st.ok()) break;
    int status;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return absl::FailedPreconditionError(
          absl::StrCat("gmlaked exited at start: ", Log()));
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "gmlaked does not answer: ", st.status().ToString(), "\n", Log()));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::OkStatus();
}

Daemon::~Daemon() {
  if (pid_ > 0) {
    absl::StatusOr<int> code = Stop(SIGTERM, Scaled(absl::Seconds(5)));
    if (!code.ok()) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  if (std::getenv("GMLAKE_SHOW_DAEMON_LOG") != nullptr) {
    std::fprintf(stderr, "--- gmlaked log ---\n%s--- end ---\n", Log().c_str());
  }
  if (!dir_.empty()) {
    ::unlink(log_.c_str());
    ::unlink(socket_.c_str());
    ::unlink(fd_socket_.c_str());
    ::rmdir(dir_.c_str());
  }
}

absl::StatusOr<int> Daemon::Stop(int sig, absl::Duration timeout) {
  if (pid_ <= 0) return absl::FailedPreconditionError("not running");
  ::kill(pid_, sig);
  absl::StatusOr<int> code = WaitExit(pid_, timeout);
  if (code.ok()) pid_ = -1;
  return code;
}

absl::StatusOr<v1::StatusResponse> Daemon::Status() {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + Scaled(absl::Seconds(5))));
  v1::StatusRequest req;
  v1::StatusResponse resp;
  absl::Status s = FromGrpc(stub_->Status(&ctx, req, &resp));
  if (!s.ok()) return s;
  return resp;
}

absl::Status Daemon::CheckBooks() {
  absl::StatusOr<v1::StatusResponse> st = Status();
  if (!st.ok()) return st.status();
  uint64_t leased = 0;
  for (const v1::DeviceStatus& d : st->devices()) {
    if (d.created_chunks() !=
        d.free_chunks() + d.leased_chunks() + d.scrubbing_chunks()) {
      return absl::InternalError(absl::StrCat(
          "device ", d.device(), ": created ", d.created_chunks(), " != free ",
          d.free_chunks(), " + leased ", d.leased_chunks(), " + scrubbing ",
          d.scrubbing_chunks()));
    }
    if (d.created_bytes() > d.capacity_bytes()) {
      return absl::InternalError(
          absl::StrCat("device ", d.device(), ": created over capacity"));
    }
    leased += d.leased_bytes() + d.scrubbing_bytes() + d.creating_bytes();
  }
  uint64_t by_sessions = 0;
  for (const v1::SessionStatus& s : st->sessions()) {
    by_sessions += s.leased_bytes();
  }
  if (leased != by_sessions) {
    return absl::InternalError(absl::StrCat("devices have ", leased,
                                            " bytes leased but sessions hold ",
                                            by_sessions));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::StatusResponse> Daemon::WaitFor(
    const std::function<bool(const v1::StatusResponse&)>& pred,
    absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    absl::StatusOr<v1::StatusResponse> st = Status();
    if (!st.ok()) return st.status();
    if (pred(*st)) return st;
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "condition not met within ", absl::FormatDuration(timeout),
          "; last status:\n", st->DebugString()));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
}

std::string Daemon::Log() const {
  std::ifstream in(log_);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// --- ClientProcess -----------------------------------------------------------

absl::StatusOr<std::unique_ptr<ClientProcess>> ClientProcess::Start(
    const std::string& socket, const std::vector<std::string>& flags) {
  return StartBinary("tests/integration/lake_client", socket, flags);
}

absl::StatusOr<std::unique_ptr<ClientProcess>> ClientProcess::StartBinary(
    const std::string& runfile, const std::string& socket,
    const std::vector<std::string>& flags) {
  // A client that died must not take the test down with SIGPIPE.
  ::signal(SIGPIPE, SIG_IGN);
  int to_child[2], from_child[2];
  if (::pipe2(to_child, O_CLOEXEC) != 0 ||
      ::pipe2(from_child, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  std::vector<std::string> argv = {RunfilePath(runfile), "--socket=" + socket};
  argv.insert(argv.end(), flags.begin(), flags.end());
  std::unique_ptr<ClientProcess> c(new ClientProcess());
  absl::StatusOr<pid_t> pid = Spawn(argv, to_child[0], from_child[1], "");
  ::close(to_child[0]);
  ::close(from_child[1]);
  c->in_.Reset(to_child[1]);
  c->out_.Reset(from_child[0]);
  if (!pid.ok()) return pid.status();
  c->pid_ = *pid;
  absl::StatusOr<std::string> first = c->ReadLine(Scaled(absl::Seconds(20)));
  if (!first.ok()) return first.status();
  absl::StatusOr<std::string> ready = ParseAnswer(*first);
  if (!ready.ok()) return ready.status();
  if (!absl::SimpleAtoi(*ready, &c->session_)) {
    return absl::InternalError(absl::StrCat("client said \"", *ready,
                                            "\" where its session id was due"));
  }
  return c;
}

ClientProcess::~ClientProcess() {
  if (pid_ > 0) Kill(SIGKILL);
}

void ClientProcess::Kill(int sig) {
  if (pid_ <= 0) return;
  ::kill(pid_, sig);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

absl::StatusOr<int> ClientProcess::Quit() {
  absl::StatusOr<std::string> r = Command("quit");
  if (!r.ok()) return r.status();
  absl::StatusOr<int> code = WaitExit(pid_, Scaled(absl::Seconds(10)));
  if (code.ok()) pid_ = -1;
  return code;
}

absl::StatusOr<std::string> ClientProcess::ReadLine(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    const size_t nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return line;
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(
          absl::StrCat("client ", pid_, " gave no answer within ",
                       absl::FormatDuration(timeout)));
    }
    pollfd p{out_.get(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1) <=
        0) {
      continue;
    }
    char buf[4096];
    const ssize_t n = ::read(out_.get(), buf, sizeof(buf));
    if (n <= 0) {
      return absl::UnavailableError(
          absl::StrCat("client ", pid_, " closed its output"));
    }
    buffer_.append(buf, static_cast<size_t>(n));
  }
}

absl::StatusOr<std::string> ClientProcess::Command(const std::string& line,
                                                   absl::Duration timeout) {
  if (absl::Status s = Send(line); !s.ok()) return s;
  return Receive(timeout);
}

absl::Status ClientProcess::Send(const std::string& line) {
  const std::string text = line + "\n";
  if (::write(in_.get(), text.data(), text.size()) !=
      static_cast<ssize_t>(text.size())) {
    return absl::UnavailableError(absl::StrCat("client ", pid_, " is gone"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ClientProcess::Receive(absl::Duration timeout) {
  absl::StatusOr<std::string> answer = ReadLine(timeout);
  if (!answer.ok()) return answer.status();
  return ParseAnswer(*answer);
}

LingeringSocket MakeLingeringSocket(int linger_seconds) {
  LingeringSocket l;
  l.listener.Reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const int small = 4096;
  ::setsockopt(l.listener.get(), SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  ::bind(l.listener.get(), reinterpret_cast<sockaddr*>(&a), len);
  ::listen(l.listener.get(), 1);
  ::getsockname(l.listener.get(), reinterpret_cast<sockaddr*>(&a), &len);
  l.sock.Reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ::setsockopt(l.sock.get(), SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
  ::connect(l.sock.get(), reinterpret_cast<sockaddr*>(&a), len);
  l.peer.Reset(::accept4(l.listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
  const linger lg{1, linger_seconds};
  ::setsockopt(l.sock.get(), SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  std::string junk(1 << 16, 'x');
  while (::send(l.sock.get(), junk.data(), junk.size(),
                MSG_DONTWAIT | MSG_NOSIGNAL) > 0) {
  }
  return l;
}

}  // namespace testing
}  // namespace gmlake
