// SPDX-License-Identifier: Apache-2.0
// test-name: regression_watch_closing_test
// Regression (bug "serve ended watches silently at shutdown"): on SIGTERM or
// at the end of input, `agentstate serve` closed streams with live watches
// without the `watch_ended` (reason closing) that docs/protocol.md promises,
// so a client could not tell a shutdown from a lost connection nor where to
// resume. Now each watch ends with `closing` and a resume_from after the last
// `changes` written, over TCP and over pipes, and a watch from that cursor
// on the restarted server continues with no gap and no duplicate.
#include "server/net_support.hpp"
#include "support/change_feed.hpp"
#include "support/serve_process.hpp"

namespace {

using namespace agentstate;
using namespace agentstate::test;
using namespace std::chrono_literals;
using test::seq_of;

json append_params(const std::string& session, int n) {
  return json{{"app_name", "app"},
              {"user_id", "u"},
              {"session_id", session},
              {"event", {{"author", "a"}, {"actions", {{"state_delta", {{"n", n}}}}}}}};
}

} // namespace

TEST_CASE("regression: serve ends each watch with watch_ended closing at SIGTERM (TCP); a "
          "watch from its resume_from on the restarted server misses nothing") {
  temp_dir dir;
  const auto store = (dir.path() / "store").string();
  const auto err = (dir.path() / "stderr.txt").string();
  std::string resume;
  int written = 0;
  {
    net::server_process srv({"--listen", "127.0.0.1:0", "--store", store}, err);
    net::client c(srv.port());
    REQUIRE(c.connected());
    c.send_line(net::rpc(1, "create_session",
                         json{{"app_name", "app"}, {"user_id", "u"}, {"session_id", "s"}}));
    REQUIRE(net::ok(c.next()));
    c.send_line(net::rpc(2, "watch", json{{"scope", "all"}}));
    auto w = c.next();
    REQUIRE(net::ok(w));
    const auto watch_id = (*w)["result"]["watch_id"].get<std::string>();
    for (int i = 0; i < 5; ++i)
      c.send_line(net::rpc(10 + i, "append_event", append_params("s", i)));
    // Five answers and every change, in any interleaving.
    int answers = 0;
    std::string last_sent = (*w)["result"]["cursor"];
    while (answers < 5 || written < 5) {
      auto line = c.next();
      REQUIRE(line);
      if (line->contains("id")) {
        CHECK(net::ok(line));
        ++answers;
        continue;
      }
      REQUIRE((*line)["method"] == "changes");
      written += int((*line)["params"]["changes"].size());
      last_sent = (*line)["params"]["cursor"];
    }
    srv.signal(SIGTERM);
    std::optional<json> ended;
    for (auto line = c.next(); line; line = c.next())
      if ((*line).value("method", "") == "watch_ended")
        ended = line;
    REQUIRE_MESSAGE(ended, "no watch_ended before the connection closed");
    CHECK((*ended)["params"]["watch_id"] == watch_id);
    CHECK((*ended)["params"]["reason"] == "closing");
    resume = (*ended)["params"]["resume_from"];
    CHECK(seq_of(resume) >= seq_of(last_sent));
    CHECK(srv.wait_exit() == 0);
  }
  // The restarted server: appends made now come after the resume point,
  // and nothing before it is delivered again.
  server s({"--store", store}, err);
  s.ok("append_event", append_params("s", 99));
  auto page = s.ok("read_changes", json{{"scope", "all"}, {"from", resume}});
  REQUIRE(page["changes"].size() == 1);
  CHECK(page["changes"][0]["version"] == 6);
}

TEST_CASE("regression: serve over pipes ends each watch with watch_ended closing at the end "
          "of input, after every change it wrote") {
  temp_dir dir;
  server s({"--store", (dir.path() / "store").string()}, (dir.path() / "stderr.txt").string());
  s.ok("create_session", json{{"app_name", "app"}, {"user_id", "u"}, {"session_id", "s"}});
  auto w1 =
    s.ok("watch",
         json{{"scope", "session"}, {"app_name", "app"}, {"user_id", "u"}, {"session_id", "s"}});
  auto w2 = s.ok("watch", json{{"scope", "app"}, {"app_name", "other"}});
  s.send_line(json{{"jsonrpc", "2.0"},
                   {"id", "a"},
                   {"method", "append_event"},
                   {"params", append_params("s", 1)}});
  // The append's answer and w1's change, in either order.
  std::string last_changes;
  bool answered = false;
  while (!answered || last_changes.empty()) {
    auto line = s.next();
    if (line.value("id", "") == "a") {
      answered = true;
      continue;
    }
    REQUIRE(line["method"] == "changes");
    CHECK(line["params"]["watch_id"] == w1["watch_id"]);
    last_changes = line["params"]["cursor"];
  }
  s.close_stdin();
  std::map<std::string, json> ended;
  while (ended.size() < 2) {
    auto line = s.next();
    REQUIRE(line["method"] == "watch_ended");
    ended[line["params"]["watch_id"]] = line["params"];
  }
  CHECK(ended[w1["watch_id"]]["reason"] == "closing");
  CHECK(ended[w2["watch_id"]]["reason"] == "closing");
  CHECK(ended[w1["watch_id"]]["resume_from"] == last_changes);
  CHECK(ended[w2["watch_id"]]["resume_from"] == w2["cursor"]); // it wrote nothing
  CHECK(s.wait_exit(15s, false) == 0);
}

TEST_CASE("regression: a TCP connection with a live watch is not closed by --idle-timeout-s "
          "while the store is quiet; one without a watch is") {
  temp_dir dir;
  net::server_process srv({"--listen", "127.0.0.1:0", "--memory", "--idle-timeout-s", "1"},
                          (dir.path() / "stderr.txt").string());
  const int port = srv.port();
  net::client watcher(port);
  net::raw_socket plain(port); // raw: its close by the server is read off the wire
  REQUIRE(watcher.connected());
  REQUIRE(plain.connected());
  watcher.send_line(net::rpc(1, "watch", json{{"scope", "all"}}));
  REQUIRE(net::ok(watcher.next()));
  plain.send_line(net::rpc(1, "ping"));
  REQUIRE(net::ok(plain.next()));
  // The plain connection is closed once idle for the timeout.
  CHECK(plain.closed_within(5s));
  // The watching one is not: its timer, set before the plain one's, fires
  // again past the plain close (the server counts every idle timeout that
  // fires; the admin connection polling the count is never idle, so the
  // watcher is the only one left to count), and the watcher still answers
  // a ping and gets the next change.
  net::client admin(port);
  auto idle_timeouts = [&] {
    auto st = admin.call("stats", nullptr, "stats");
    REQUIRE(st);
    return (*st)["result"]["server"]["idle_timeouts"].get<std::uint64_t>();
  };
  const auto at_close = idle_timeouts();
  CHECK(at_close >= 1);
  {
    INFO("no idle timeout fired since the plain close (", at_close,
         "): the watcher's timer does not run, or it closed the watcher");
    // The serve child's count (its timers run in it).
    net::stats_when(
      admin, [&](json& s) { return s["idle_timeouts"].get<std::uint64_t>() != at_close; }, 30s);
  }
  watcher.send_line(net::rpc(2, "ping"));
  auto pong = watcher.next();
  REQUIRE(pong);
  CHECK(net::ok(pong));
  net::client writer(port);
  writer.send_line(net::rpc(1, "create_session",
                            json{{"app_name", "app"}, {"user_id", "u"}, {"session_id", "s"}}));
  REQUIRE(net::ok(writer.next()));
  auto line = watcher.next();
  REQUIRE(line);
  CHECK((*line)["method"] == "changes");
  CHECK((*line)["params"]["changes"][0]["kind"] == "create");
}
