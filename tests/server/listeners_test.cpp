// SPDX-License-Identifier: Apache-2.0
// test-tiers: tsan
// Listeners and operability of `agentstate serve` (docs/protocol.md,
// "Listeners", "Logs"): Unix sockets (0600, removed at exit, stale ones
// replaced, live ones and other files refused), several listeners at once,
// the JSON log format, SIGTERM with requests in flight, network options
// without --listen, and `ping` on standard input.
#include "server/net_support.hpp"

using namespace agentstate;
using namespace agentstate::test;
using namespace agentstate::test::net;

namespace {

struct fixture {
  temp_dir dir;
  std::string log_path() const { return (dir.path() / "log.txt").string(); }
  std::string sock() const { return (dir.path() / "agentstate.sock").string(); }
};

} // namespace

TEST_CASE("listeners: a Unix socket is 0600, serves, and is removed at exit") {
  fixture f;
  server_process srv({"--listen", "unix:" + f.sock(), "--memory"}, f.log_path());
  srv.wait_log("listening on unix:");
  struct stat st {};
  REQUIRE(::lstat(f.sock().c_str(), &st) == 0);
  CHECK(S_ISSOCK(st.st_mode));
  CHECK((st.st_mode & 0777) == 0600);
  client c(f.sock());
  REQUIRE(c.connected());
  auto r = c.call("ping");
  REQUIRE(ok(r));
  CHECK((*r)["result"] == "pong");
  REQUIRE(ok(c.call("create_session", sref_params("app", "s"))));
  srv.signal(SIGTERM);
  CHECK(srv.wait_exit() == 0);
  CHECK(::lstat(f.sock().c_str(), &st) != 0);
  CHECK(srv.log().find("peer=\"unix:pid=") != std::string::npos);
}

TEST_CASE("listeners: a stale socket file is replaced; a live one, or another file, is refused") {
  fixture f;
  // A socket file nobody listens on any more.
  {
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, f.sock().c_str(), sizeof a.sun_path - 1);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    ::close(fd);
  }
  server_process live({"--listen", "unix:" + f.sock(), "--memory"}, f.log_path());
  live.wait_serving();
  CHECK(live.log().find("event=stale_socket_removed") != std::string::npos);
  {
    client c(f.sock());
    CHECK(ok(c.call("ping")));
  }
  // A second server on the same path: refused, the first keeps its socket.
  auto second_log = (f.dir.path() / "second.txt").string();
  {
    server_process second({"--listen", "unix:" + f.sock(), "--memory"}, second_log);
    CHECK(second.wait_exit() == 1);
    CHECK(second.log().find("already listening") != std::string::npos);
  }
  {
    client c(f.sock());
    CHECK(ok(c.call("ping")));
  }
  live.signal(SIGTERM);
  CHECK(live.wait_exit() == 0);

  // A regular file is left alone.
  auto file = (f.dir.path() / "not-a-socket").string();
  write_text(file, "keep me");
  server_process third({"--listen", "unix:" + file, "--memory"}, second_log);
  CHECK(third.wait_exit() == 1);
  CHECK(third.log().find("not a socket") != std::string::npos);
  CHECK(read_text(file) == "keep me");
}

TEST_CASE("listeners: TCP and a Unix socket at once; --log-format json gives one object per "
          "line") {
  fixture f;
  server_process srv(
    {"--listen", "0", "--listen", "unix:" + f.sock(), "--memory", "--log-format", "json"},
    f.log_path());
  int port = srv.port();
  srv.wait_serving();
  {
    client t(port);
    client u(f.sock());
    CHECK(ok(t.call("ping")));
    CHECK(ok(u.call("ping")));
  }
  srv.signal(SIGTERM);
  CHECK(srv.wait_exit() == 0);
  std::istringstream lines(srv.log());
  std::string line;
  std::regex rfc3339(R"(^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$)");
  std::map<std::string, int> events;
  while (std::getline(lines, line)) {
    INFO("log line: ", line);
    auto j = parse_json(line, 16);
    REQUIRE(j.ok());
    REQUIRE(j->is_object());
    CHECK(std::regex_match((*j)["ts"].get<std::string>(), rfc3339));
    CHECK((*j)["level"].is_string());
    events[(*j)["event"].get<std::string>()]++;
  }
  CHECK(events["listening"] == 2);
  CHECK(events["connection_opened"] == 2);
  CHECK(events["connection_closed"] == 2);
  CHECK(events["signal"] == 1);
  CHECK(events["shutdown"] == 1);
}

TEST_CASE("listeners: SIGTERM answers requests in flight, refuses new connections, exits 0") {
  fixture f;
  auto store = (f.dir.path() / "store").string();
  server_process srv({"--listen", "0", "--store", store}, f.log_path());
  int port = srv.port();
  client c(port);
  REQUIRE(ok(c.call("create_session", sref_params("app", "s"))));
  for (int i = 0; i < 200; ++i)
    REQUIRE(c.send_line(
      rpc(i, "append_event", with(sref_params("app", "s"), "event", json{{"author", "a"}}))));
  auto first = c.next();
  REQUIRE(ok(first));
  srv.signal(SIGTERM);
  // Every request read before the signal is answered; then the server closes.
  int answered = 1;
  while (auto r = c.next(5s)) {
    CHECK(ok(r));
    ++answered;
  }
  CHECK(srv.wait_exit() == 0);
  MESSAGE(answered, " of 200 pipelined appends answered across SIGTERM");
  CHECK(answered >= 1);
  client late(port);
  CHECK(!late.connected());
  options o;
  o.dir = store;
  auto eng = MUST(engine::open(o));
  // Whatever was answered is stored, and nothing else.
  CHECK(get_existing(*eng, sref("app", "u", "s")).version == static_cast<std::uint64_t>(answered));
}

TEST_CASE("listeners: network options need --listen; ping answers on standard input") {
  auto [code, out] = shell(std::string(AGENTSTATE_BIN) + " serve --memory --auth-file /x");
  CHECK(code == 2);
  CHECK(out.find("--auth-file applies to --listen") != std::string::npos);
  CHECK(shell(std::string(AGENTSTATE_BIN) + " serve --memory --listen 0 --tls-cert x").first == 2);
  CHECK(shell(std::string(AGENTSTATE_BIN) + " serve --memory --listen unix:").first == 2);
  CHECK(shell(std::string(AGENTSTATE_BIN) + " serve --memory --log-format xml").first == 2);
  CHECK(shell(std::string(AGENTSTATE_BIN) + " serve --memory --listen 0 --max-connections 0").first
        == 2);
  auto [pc, pout] = shell(R"(echo '{"jsonrpc":"2.0","id":1,"method":"ping"}' | )"
                            + std::string(AGENTSTATE_BIN) + " serve --memory",
                          false);
  CHECK(pc == 0);
  CHECK(pout
        == R"({"jsonrpc":"2.0","id":1,"result":"pong"})"
           "\n");
}
