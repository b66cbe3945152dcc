// SPDX-License-Identifier: Apache-2.0
// `agentstate watch ADDR`: the real binary against a real `serve --listen`
// child on a store in a temp dir, over TCP, a Unix socket and TLS: --once
// prints the same lines as `watch DIR` for the same content; live lines
// arrive while another client appends; SIGTERM unwatches and names a cursor
// that --from resumes with no gap and no duplicate; tokens (a wrong one is
// refused, exit 3, never printed); a lost connection exits 5 naming the
// cursor printed up to; --from-start live is one watch from "start"; the
// DIR-or-ADDR rule; usage errors exit 2.
#include "server/net_support.hpp"
#include "support/serve_process.hpp"
#include "support/watch_child.hpp"
#include "support/test_support.hpp"

#include <condition_variable>
#include <deque>
#include <mutex>

using namespace agentstate;
using namespace agentstate::test;
using namespace agentstate::test::net;

namespace {

std::string quote(const std::string& s) {
  return "'" + s + "'";
}

/// `agentstate watch ARGS` run to its end.
tool_run watch_tool(const std::string& args, const std::string& err_path,
                    const std::string& env = "") {
  return run_tool("watch " + args, err_path, env);
}

/// The cursor after "--from " in `text` ("" when absent).
std::string from_in(const std::string& text) {
  std::smatch m;
  if (std::regex_search(text, m, std::regex("--from ([0-9a-f]+-[0-9]+)")))
    return m[1].str();
  return "";
}

struct fixture {
  temp_dir dir;
  std::string store = (dir.path() / "store").string();
  std::string sock = (dir.path() / "s.sock").string();
  std::string path(const std::string& name) const { return (dir.path() / name).string(); }
};

json event_params(const std::string& session, int n, const std::string& user = "u1") {
  auto p = sref_params("app", session, user);
  p["event"] =
    json{{"author", "agent"},
         {"invocation_id", "i"},
         {"timestamp", 1700000000.25 + n},
         {"content", {{"parts", json::array({{{"text", "héllo " + std::to_string(n)}}})}}},
         {"actions", {{"state_delta", {{"n", n}, {"user:last", n}, {"app:x", 0.1 * n}}}}}};
  return p;
}

/// Creates `sessions` sessions of user u1/u2 and `appends` appends to each,
/// through `c`; REQUIREs every answer to be a success.
void write_content(client& c, int sessions, int appends, int base = 0) {
  for (int s = 0; s < sessions; ++s) {
    auto id = "s" + std::to_string(base + s);
    auto user = s % 2 ? "u2" : "u1";
    REQUIRE(ok(c.call("create_session",
                      net::with(sref_params("app", id, user), "state", json{{"user:x", s}}))));
    for (int i = 0; i < appends; ++i)
      REQUIRE(ok(c.call("append_event", event_params(id, i, user))));
  }
}

std::string head_of(client& c) {
  auto r = c.call("read_changes", json{{"scope", "all"}});
  REQUIRE(ok(r));
  std::string cur = (*r)["result"]["cursor"];
  for (bool at_head = (*r)["result"]["at_head"]; !at_head;) {
    r = c.call("read_changes", json{{"scope", "all"}, {"from", cur}, {"limit", 10000}});
    REQUIRE(ok(r));
    cur = (*r)["result"]["cursor"];
    at_head = (*r)["result"]["at_head"];
  }
  return cur;
}

} // namespace

TEST_CASE("watch ADDR --once: TCP and a Unix socket print the same lines as watch DIR for the "
          "same store, with every scope flag") {
  fixture f;
  server_process srv({"--store", f.store, "--listen", "0", "--listen", "unix:" + f.sock},
                     f.path("serve.log"));
  int port = srv.port();
  srv.wait_serving();
  client c(port);
  REQUIRE(c.connected());
  auto start = head_of(c);
  write_content(c, 3, 4);
  REQUIRE(ok(c.call("flush")));

  const std::string tcp = "127.0.0.1:" + std::to_string(port);
  const std::vector<std::string> filters = {"",
                                            "--app app",
                                            "--app app --user u1",
                                            "--app app --user u1 --include-sessions",
                                            "--app app --user u2 --session s1",
                                            "--app app --include-sessions --key-prefix user:"};
  for (const auto& flt : filters) {
    INFO("filters: ", flt);
    auto dir = watch_tool(quote(f.store) + " --once --from " + start + " " + flt, f.path("e1"));
    auto over_tcp = watch_tool(tcp + " --once --from " + start + " " + flt, f.path("e2"));
    auto over_tcp2 =
      watch_tool("tcp://" + tcp + " --once --from " + start + " " + flt, f.path("e3"));
    auto over_unix =
      watch_tool(quote("unix:" + f.sock) + " --once --from " + start + " " + flt, f.path("e4"));
    INFO("dir stderr: ", dir.err, " tcp stderr: ", over_tcp.err, " unix stderr: ", over_unix.err);
    CHECK(dir.rc == 0);
    CHECK(over_tcp.rc == 0);
    CHECK(over_tcp2.rc == 0);
    CHECK(over_unix.rc == 0);
    CHECK(over_tcp.out == dir.out);
    CHECK(over_tcp2.out == dir.out);
    CHECK(over_unix.out == dir.out);
    // Both name the same head cursor at the end.
    CHECK(over_tcp.err == dir.err);
  }
  auto all = watch_tool(tcp + " --once --from " + start, f.path("e5"));
  CHECK(lines_of(all.out).size() == 15); // 3 creates + 12 appends
  for (const auto& l : lines_of(all.out))
    CHECK(parse_json(l, 512).ok());

  // Without --from, the feed starts at the head: nothing to print.
  auto none = watch_tool(tcp + " --once", f.path("e6"));
  CHECK(none.rc == 0);
  CHECK(none.out.empty());
  CHECK(none.err.find("watch: at " + head_of(c)) != std::string::npos);
  srv.signal(SIGTERM);
  CHECK(srv.wait_exit() == 0);
}

// Regression: `watch DIR` (the store form) was ended by SIGTERM itself (status
// 143) and never printed the cursor that its --help and docs/tools.md promise.
TEST_CASE("watch DIR live: SIGTERM and SIGINT exit 0 naming the cursor printed up to (was ended "
          "by the signal, status 143)") {
  fixture f;
  server_process srv({"--store", f.store, "--listen", "0"}, f.path("serve.log"));
  int port = srv.port();
  srv.wait_serving();
  client c(port);
  REQUIRE(c.connected());
  auto start = head_of(c);

  for (int sig : {SIGTERM, SIGINT}) {
    INFO("signal ", sig);
    const std::string tag = std::to_string(sig);
    auto from = sig == SIGTERM ? start : head_of(c);
    watch_child live(
      {f.store, "--from", from, "--app", "app", "--include-sessions", "--poll-ms", "5"},
      f.path("live" + tag));
    write_content(c, 2, 5, sig == SIGTERM ? 0 : 30); // 12 changes
    // Its first lines show that the feed loop (and its handlers) runs.
    auto got = live.lines(12);
    live.signal(sig);
    CHECK(live.wait_exit() == 0);
    INFO("stderr: ", live.err());
    std::smatch m;
    auto err = live.err();
    REQUIRE(std::regex_search(err, m, std::regex("watch: stopped at ([0-9a-f]+-[0-9]+)")));
    // The cursor is where it stopped: nothing after it yet, and the 12 lines up to it.
    auto after =
      watch_tool(quote(f.store) + " --once --from " + m[1].str() + " --app app --include-sessions",
                 f.path("after" + tag));
    CHECK(after.rc == 0);
    CHECK(after.out.empty());
    auto upto =
      watch_tool(quote(f.store) + " --once --from " + from + " --app app --include-sessions",
                 f.path("upto" + tag));
    CHECK(lines_of(upto.out) == got);
  }
}

TEST_CASE("watch ADDR live: lines arrive while another client appends; SIGTERM unwatches and "
          "exits 0 naming a cursor that --from resumes with no gap and no duplicate") {
  fixture f;
  server_process srv({"--store", f.store, "--listen", "0"}, f.path("serve.log"));
  int port = srv.port();
  srv.wait_serving();
  const std::string tcp = "127.0.0.1:" + std::to_string(port);
  client c(port);
  REQUIRE(c.connected());
  auto start = head_of(c);

  watch_child live({tcp, "--from", start, "--app", "app", "--include-sessions"}, f.path("live"));
  write_content(c, 2, 5); // 12 changes
  auto first = live.lines(12);
  write_content(c, 1, 3, 10); // 4 more, while it watches
  auto got = live.lines(16);
  live.signal(SIGTERM);
  CHECK(live.wait_exit() == 0);
  CHECK(live.count() == 16);
  INFO("live stderr: ", live.err());
  std::smatch m;
  auto err = live.err();
  REQUIRE(std::regex_search(err, m, std::regex("watch: stopped at ([0-9a-f]+-[0-9]+)")));
  const std::string stopped = m[1].str();

  // What the live watch printed is what the DIR form prints for that range.
  auto dir = watch_tool(
    quote(f.store) + " --once --from " + start + " --app app --include-sessions", f.path("e1"));
  CHECK(dir.rc == 0);
  CHECK(lines_of(dir.out) == got);

  // More writes after the stop; --from the stop cursor gives exactly them.
  write_content(c, 2, 2, 20); // 6 changes
  watch_child resumed({tcp, "--from", stopped, "--app", "app", "--include-sessions"},
                      f.path("resumed"));
  auto rest = resumed.lines(6);
  auto whole = watch_tool(
    quote(f.store) + " --once --from " + start + " --app app --include-sessions", f.path("e2"));
  auto joined = got;
  joined.insert(joined.end(), rest.begin(), rest.end());
  CHECK(lines_of(whole.out) == joined);
  resumed.signal(SIGINT);
  CHECK(resumed.wait_exit() == 0);
  CHECK(resumed.count() == 6);

  // Connection loss: the server dies; the watch exits 5 naming the cursor it
  // printed up to, from which nothing printed is repeated and nothing is missed.
  watch_child lost({tcp, "--from", start}, f.path("lost"));
  auto before = lost.lines(22);
  srv.signal(SIGKILL);
  CHECK(lost.wait_exit() == 5);
  auto lost_err = lost.err();
  INFO("lost stderr: ", lost_err);
  CHECK(lost_err.find(tcp) != std::string::npos);
  auto resume = from_in(lost_err);
  REQUIRE(!resume.empty());
  auto after = watch_tool(quote(f.store) + " --once --from " + resume, f.path("e3"));
  CHECK(after.rc == 0);
  CHECK(after.out.empty());
  auto everything = watch_tool(quote(f.store) + " --once --from " + start, f.path("e4"));
  CHECK(lines_of(everything.out) == before);
}

TEST_CASE("watch ADDR --from-start live: one watch from \"start\", no read_changes pages first, "
          "replays the log and goes on live with the DIR form's lines") {
  fixture f;
  server_process srv({"--store", f.store, "--listen", "0"}, f.path("serve.log"));
  int port = srv.port();
  srv.wait_serving();
  client c(port);
  REQUIRE(c.connected());
  write_content(c, 2, 5); // 12 changes before the watch starts
  // The request lines the server has taken, over every connection (this
  // stats call's own included).
  auto requests = [&c] {
    auto r = c.call("stats", json::object());
    REQUIRE(ok(r));
    return (*r)["result"]["server"]["requests"].get<std::uint64_t>();
  };
  const auto before = requests();
  watch_child live(
    {"127.0.0.1:" + std::to_string(port), "--from-start", "--app", "app", "--include-sessions"},
    f.path("live"));
  auto replayed = live.lines(12); // printed after its watch was answered
  // Since `before`: the watch's one request and the stats call below.
  CHECK(requests() - before == 2);
  write_content(c, 1, 3, 10); // 4 more, while it watches
  auto got = live.lines(16);
  live.signal(SIGTERM);
  CHECK(live.wait_exit() == 0);
  CHECK(live.count() == 16);
  INFO("live stderr: ", live.err());
  auto dir =
    watch_tool(quote(f.store) + " --once --from-start --app app --include-sessions", f.path("e1"));
  CHECK(dir.rc == 0);
  CHECK(lines_of(dir.out) == got);
  CHECK(std::vector<std::string>(got.begin(), got.begin() + 12) == replayed);
  srv.signal(SIGTERM);
  CHECK(srv.wait_exit() == 0);
}

TEST_CASE("watch ADDR with --auth-file: the right token watches; a wrong or missing one is "
          "refused (exit 3) without printing it; a token for other apps is permission_denied") {
  fixture f;
  const std::string good = "3f9c2e8a7b6d4c1e0f5a9b8c7d6e5f4a";
  const std::string other = "b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6";
  const std::string wrong = "0000111122223333444455556666wrong";
  write_text(f.path("tokens"), good + " *\n" + other + " chat\n");
  write_text(f.path("good"), "# the operator's token\n\n" + good + "\n");
  write_text(f.path("other"), other + "\n");
  write_text(f.path("wrong"), wrong + "\n");
  server_process srv(
    {"--store", f.store, "--listen", "unix:" + f.sock, "--auth-file", f.path("tokens")},
    f.path("serve.log"));
  srv.wait_serving();
  client c(f.sock);
  REQUIRE(c.connected());
  REQUIRE(ok(c.call("authenticate", json{{"token", good}})));
  auto start = head_of(c);
  write_content(c, 2, 2);
  const std::string addr = quote("unix:" + f.sock);

  auto yes = watch_tool(addr + " --once --from " + start + " --token-file " + quote(f.path("good")),
                        f.path("e1"));
  INFO("stderr: ", yes.err);
  CHECK(yes.rc == 0);
  CHECK(lines_of(yes.out).size() == 6);
  auto env = watch_tool(addr + " --once --from " + start, f.path("e2"), "AGENTSTATE_TOKEN=" + good);
  CHECK(env.rc == 0);
  CHECK(env.out == yes.out);

  auto no = watch_tool(addr + " --once --from " + start + " --token-file " + quote(f.path("wrong")),
                       f.path("e3"));
  INFO("wrong token's stderr: ", no.err);
  CHECK(no.rc == 3);
  CHECK(no.out.empty());
  CHECK(no.err.find("unauthenticated") != std::string::npos);
  CHECK(no.err.find("refused") != std::string::npos);
  CHECK(no.err.find(wrong) == std::string::npos);
  CHECK(lines_of(no.err).size() == 1);

  auto missing = watch_tool(addr + " --from " + start, f.path("e4"));
  CHECK(missing.rc == 3);
  CHECK(missing.err.find("--token-file") != std::string::npos);

  auto denied = watch_tool(addr + " --once --from " + start + " --app app --token-file "
                             + quote(f.path("other")),
                           f.path("e5"));
  CHECK(denied.rc == 3);
  CHECK(denied.err.find("permission_denied") != std::string::npos);
  CHECK(denied.err.find(other) == std::string::npos);

  auto unreadable =
    watch_tool(addr + " --once --token-file " + quote(f.path("absent")), f.path("e6"));
  CHECK(unreadable.rc == 1);
  CHECK(unreadable.err.find("token file") != std::string::npos);
}

TEST_CASE("watch ADDR: a cursor older than the retention is refused with the oldest cursor "
          "(exit 3); a foreign cursor too") {
  fixture f;
  server_process srv({"--store", f.store, "--listen", "0", "--change-retention", "10"},
                     f.path("serve.log"));
  int port = srv.port();
  srv.wait_serving();
  client c(port);
  REQUIRE(c.connected());
  auto start = head_of(c);
  write_content(c, 1, 60);
  const std::string tcp = "127.0.0.1:" + std::to_string(port);
  for (const std::string& once : {std::string(" --once"), std::string()}) {
    auto r = watch_tool(tcp + " --from " + start + once, f.path("e1"));
    INFO("stderr: ", r.err);
    CHECK(r.rc == 3);
    CHECK(r.err.find("cursor_expired") != std::string::npos);
    auto oldest = from_in(r.err);
    REQUIRE(!oldest.empty());
    auto resumed = watch_tool(tcp + " --once --from " + oldest, f.path("e2"));
    CHECK(resumed.rc == 0);
    CHECK(!resumed.out.empty());
  }
  auto foreign = watch_tool(tcp + " --once --from 0123456789abcdef-3", f.path("e3"));
  CHECK(foreign.rc == 3);
  CHECK(foreign.err.find("invalid_argument") != std::string::npos);
}

TEST_CASE("watch ADDR over TLS: verified against the CA it prints the DIR form's lines; "
          "a server the CA did not sign is refused (exit 1)") {
  fixture f;
  auto pair = make_tls_pair(f.dir.str(), "server");
  auto stranger = make_tls_pair(f.dir.str(), "stranger");
  server_process srv(
    {"--store", f.store, "--listen", "0", "--tls-cert", pair.cert, "--tls-key", pair.key},
    f.path("serve.log"));
  int port = srv.port();
  srv.wait_serving();
  // The head before any write, from the watch itself (over TLS); the writes
  // then go through Python's TLS client.
  const std::string tcp = "127.0.0.1:" + std::to_string(port);
  auto head = watch_tool(tcp + " --once --tls-ca " + quote(pair.ca), f.path("e0"));
  INFO("stderr: ", head.err);
  REQUIRE(head.rc == 0);
  std::smatch m;
  REQUIRE(std::regex_search(head.err, m, std::regex("watch: at ([0-9a-f]+-[0-9]+)")));
  const std::string start = m[1].str();
  auto [code, out] = python_tls(
    port, pair.ca,
    {R"({"jsonrpc":"2.0","id":1,"method":"create_session","params":{"app_name":"a","user_id":"u","session_id":"t1","state":{"k":1}}})",
     R"({"jsonrpc":"2.0","id":2,"method":"append_event","params":{"app_name":"a","user_id":"u","session_id":"t1","event":{"author":"x","actions":{"state_delta":{"k":2}}}}})"});
  INFO("python: ", out);
  REQUIRE(code == 0);

  auto tls =
    watch_tool(tcp + " --once --from " + start + " --tls-ca " + quote(pair.ca), f.path("e1"));
  auto dir = watch_tool(quote(f.store) + " --once --from " + start, f.path("e2"));
  INFO("tls stderr: ", tls.err);
  CHECK(tls.rc == 0);
  CHECK(lines_of(tls.out).size() == 2);
  CHECK(tls.out == dir.out);

  auto bad =
    watch_tool(tcp + " --once --from " + start + " --tls-ca " + quote(stranger.ca), f.path("e3"));
  INFO("bad stderr: ", bad.err);
  CHECK(bad.rc == 1);
  CHECK(bad.out.empty());
  CHECK(bad.err.find("certificate") != std::string::npos);
}

TEST_CASE("watch: DIR or ADDR (an existing path wins over HOST:PORT), and usage errors exit 2") {
  fixture f;
  {
    options o;
    o.dir = f.path("st:1");
    o.mode = durability::nosync;
    auto e = MUST(engine::open(o));
    MUST(e->close());
  }
  auto [rc, out] =
    shell("cd " + quote(f.dir.str()) + " && " + AGENTSTATE_BIN + " watch st:1 --once 2>/dev/null");
  CHECK(rc == 0);
  auto missing = shell("cd " + quote(f.dir.str()) + " && " + AGENTSTATE_BIN + " watch st:2 --once");
  CHECK(missing.first == 1);
  CHECK(missing.second.find("cannot reach st:2") != std::string::npos);
  // Nobody listens on the socket: a clear error, exit 1.
  auto nobody = watch_tool(quote("unix:" + f.path("none.sock")) + " --once", f.path("e1"));
  CHECK(nobody.rc == 1);
  CHECK(nobody.err.find("cannot reach unix:") != std::string::npos);

  CHECK(watch_tool(quote("unix:" + f.sock) + " --poll-ms 5", f.path("e2")).rc == 2);
  CHECK(watch_tool(quote(f.path("st:1")) + " --tls --once", f.path("e3")).rc == 2);
  CHECK(watch_tool(quote(f.path("st:1")) + " --token-file x --once", f.path("e4")).rc == 2);
  CHECK(watch_tool(quote("unix:" + f.sock) + " --tls", f.path("e5")).rc == 2);
  CHECK(watch_tool("127.0.0.1:1 --tls-cert a.pem", f.path("e6")).rc == 2);
  auto help = shell(std::string(AGENTSTATE_BIN) + " watch --help");
  CHECK(help.first == 0);
  CHECK(help.second.find("--token-file") != std::string::npos);
  CHECK(help.second.find("unix:PATH") != std::string::npos);
}

TEST_CASE("watch ADDR: the server's shutdown (SIGTERM) ends the watch with watch_ended closing: "
          "exit 4 naming a --from cursor that resumes with nothing missed or repeated") {
  fixture f;
  std::string start, resume;
  std::vector<std::string> printed;
  {
    server_process srv({"--store", f.store, "--listen", "0"}, f.path("serve.log"));
    int port = srv.port();
    srv.wait_serving();
    client c(port);
    REQUIRE(c.connected());
    start = head_of(c);
    watch_child w({"127.0.0.1:" + std::to_string(port), "--from", start}, f.path("w"));
    write_content(c, 2, 3); // 8 changes
    printed = w.lines(8);
    srv.signal(SIGTERM);
    CHECK(w.wait_exit() == 4);
    auto err = w.err();
    INFO("watch stderr: ", err);
    CHECK(err.find("closing") != std::string::npos);
    resume = from_in(err);
    REQUIRE(!resume.empty());
    CHECK(srv.wait_exit() == 0);
  }
  auto after = watch_tool(quote(f.store) + " --once --from " + resume, f.path("e1"));
  CHECK(after.rc == 0);
  CHECK(after.out.empty());
  auto everything = watch_tool(quote(f.store) + " --once --from " + start, f.path("e2"));
  CHECK(lines_of(everything.out) == printed);
}
