// SPDX-License-Identifier: Apache-2.0
// test-tiers: tsan
// rpc_client::adopt (include/agentstate/client.hpp): the client over a pair
// of descriptors, against a real `agentstate serve` child on its stdin and
// stdout pipes (pipelined calls matched by id, a watch, the end of input
// ending the child with status 0, the child killed), over one connected
// Unix socket with a token, a write to a pipe nobody reads failing the call
// instead of raising SIGPIPE, and descriptors that cannot be used.
#include "server/net_support.hpp"
#include "support/test_support.hpp"
#include "support/counter.hpp"

#include "agentstate/client.hpp"

#include <condition_variable>
#include <csignal>
#include <mutex>

using namespace agentstate;
using namespace agentstate::test;
using namespace agentstate::test::net;

namespace {

/// `agentstate serve --memory` with stdin and stdout on pipes held here and
/// stderr in a file. Killed at destruction if still running.
class piped_serve {
public:
  explicit piped_serve(const std::string& err_path) {
    int in[2], out[2];
    REQUIRE(::pipe2(in, O_CLOEXEC) == 0);
    REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::vector<std::string> argv_s{AGENTSTATE_BIN, "serve", "--memory"};
    std::vector<char*> argv;
    for (auto& a : argv_s)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    int rc = ::posix_spawn(&pid_, AGENTSTATE_BIN, &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(in[0]);
    ::close(out[1]);
    stdin_ = in[1];
    stdout_ = out[0];
    REQUIRE(rc == 0);
  }
  ~piped_serve() {
    close_stdin();
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (stdout_ >= 0)
      ::close(stdout_);
  }
  piped_serve(const piped_serve&) = delete;
  piped_serve& operator=(const piped_serve&) = delete;

  int stdin_fd() const { return stdin_; }
  int stdout_fd() const { return stdout_; }
  pid_t pid() const { return pid_; }

  void close_stdin() {
    if (stdin_ >= 0)
      ::close(stdin_);
    stdin_ = -1;
  }

  /// The child's exit status, waiting up to 15 s; -1 when it did not exit
  /// normally.
  int wait_exit() {
    int status = 0;
    REQUIRE(test::reaped_within(pid_, status, 15s));
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

private:
  pid_t pid_ = -1;
  int stdin_ = -1, stdout_ = -1;
};

using test::counter;

std::unique_ptr<rpc_client> adopt_pipes(piped_serve& s, const client_options& o = {}) {
  auto c = rpc_client::adopt(s.stdout_fd(), s.stdin_fd(), o);
  INFO("adopt: ", c.err().message);
  REQUIRE(c.ok());
  return std::move(*c);
}

json event_params(const std::string& session, int n) {
  auto p = sref_params("app", session);
  p["event"] = json{{"author", "agent"}, {"actions", {{"state_delta", {{"n", n}}}}}};
  return p;
}

} // namespace

TEST_CASE("client adopt: a serve child's pipes carry pipelined calls matched by id and a watch; "
          "the end of its input ends the child with status 0") {
  temp_dir dir;
  piped_serve srv((dir.path() / "log").string());
  auto c = adopt_pipes(srv);
  CHECK(c->server()
        == "fd:" + std::to_string(srv.stdout_fd()) + "/" + std::to_string(srv.stdin_fd()));
  REQUIRE(c->call("create_session", sref_params("app", "s")).value.ok());

  counter changes;
  std::vector<std::uint64_t> seen;
  auto w = c->watch(json{{"scope", "all"}}, [&](const watch_event& ev) {
    if (ev.what != watch_event::kind::changes)
      return;
    for (auto& ch : ev.params["changes"])
      if (ch.value("kind", "") == "append") {
        seen.push_back(ch["version"].get<std::uint64_t>());
        changes.add();
      }
  });
  INFO("watch: ", w.value.ok() ? "" : w.value.err().message);
  REQUIRE(w.value.ok());

  constexpr int n = 500;
  std::vector<std::uint64_t> version(n, 0);
  std::vector<int> times(n, 0);
  counter done;
  for (int i = 0; i < n; ++i)
    c->call_async("append_event", event_params("s", i), [&, i](rpc_reply r) {
      auto k = static_cast<std::size_t>(i);
      ++times[k];
      if (r.answered && r.value.ok())
        version[k] = (*r.value)["version"].get<std::uint64_t>();
      done.add();
    });
  REQUIRE(done.wait(n));
  for (std::size_t i = 0; i < n; ++i) {
    CHECK(times[i] == 1);
    CHECK(version[i] == i + 1);
  }
  REQUIRE(changes.wait(n));
  c.reset(); // joins the I/O thread: `seen` is settled
  REQUIRE(seen.size() == n);
  for (std::size_t i = 0; i < n; ++i)
    CHECK(seen[i] == i + 1);

  // The client's duplicates are closed with it; the child's input ends when
  // the caller closes its own copy.
  srv.close_stdin();
  CHECK(srv.wait_exit() == 0);
}

TEST_CASE("client adopt: the serve child killed with calls in flight ends each with unavailable "
          "once; a write to a pipe nobody reads fails the call, raising no SIGPIPE") {
  temp_dir dir;
  {
    piped_serve srv((dir.path() / "log").string());
    auto c = adopt_pipes(srv);
    REQUIRE(c->call("create_session", sref_params("app", "k")).value.ok());
    REQUIRE(::kill(srv.pid(), SIGSTOP) == 0); // nothing is answered from here on
    constexpr int n = 100;
    std::vector<int> times(n, 0);
    std::vector<errc> codes(n, errc::ok);
    counter done;
    for (int i = 0; i < n; ++i)
      c->call_async("append_event", event_params("k", i), [&, i](rpc_reply r) {
        auto k = static_cast<std::size_t>(i);
        ++times[k];
        codes[k] = r.answered ? errc::ok : r.value.code();
        done.add();
      });
    REQUIRE(::kill(srv.pid(), SIGKILL) == 0);
    REQUIRE(done.wait(n));
    c.reset();
    for (std::size_t i = 0; i < n; ++i) {
      CHECK(times[i] == 1);
      CHECK(codes[i] == errc::unavailable);
    }
  }

  // Requests go to a pipe whose read end is closed; responses would come
  // from a pipe whose write end stays open here (no end of stream).
  int to[2], from[2];
  REQUIRE(::pipe2(to, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(from, O_CLOEXEC) == 0);
  ::close(to[0]);
  auto old = std::signal(SIGPIPE, SIG_DFL); // a SIGPIPE would end the test process
  {
    auto c = rpc_client::adopt(from[0], to[1]);
    REQUIRE(c.ok());
    auto r = (*c)->call("ping", nullptr, 10s);
    CHECK(!r.answered);
    CHECK(r.value.code() == errc::unavailable);
    INFO(r.value.err().message);
    CHECK(r.value.err().message.find("write") != std::string::npos);
    CHECK(!(*c)->connected());
  }
  std::signal(SIGPIPE, old);
  for (int fd : {to[1], from[0], from[1]})
    ::close(fd);
}

TEST_CASE("client adopt: one connected socket with a token; descriptors that are not open and TLS "
          "are refused with invalid_argument") {
  temp_dir dir;
  auto tokens = (dir.path() / "tokens").string();
  const std::string token = "adopt-test-token-0123456789abcdef";
  write_text(tokens, token + " *\n");
  ::chmod(tokens.c_str(), 0600);
  auto sock = (dir.path() / "s.sock").string();
  server_process srv({"--memory", "--listen", "unix:" + sock, "--auth-file", tokens},
                     (dir.path() / "log").string());
  srv.wait_serving();
  auto connect_unix = [&] {
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, sock.c_str(), sizeof a.sun_path - 1);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    return fd;
  };

  int fd = connect_unix();
  client_options o;
  o.token = token;
  {
    auto c = rpc_client::adopt(fd, fd, o);
    INFO("adopt: ", c.err().message);
    REQUIRE(c.ok());
    CHECK((*c)->call("create_session", sref_params("app", "a")).value.ok());
    auto got = (*c)->call("get_session", sref_params("app", "a"));
    REQUIRE(got.value.ok());
    CHECK((*got.value)["id"] == "a");
  }
  ::close(fd);

  int other = connect_unix();
  o.token = "a-wrong-token-0123456789abcdef";
  CHECK(rpc_client::adopt(other, other, o).code() == errc::unauthenticated);
  ::close(other);

  CHECK(rpc_client::adopt(-1, -1).code() == errc::invalid_argument); // no descriptor
  client_options tls;
  tls.tls = true;
  int p[2];
  REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
  CHECK(rpc_client::adopt(p[0], p[1], tls).code() == errc::invalid_argument);
  ::close(p[0]);
  ::close(p[1]);
}
