// SPDX-License-Identifier: Apache-2.0
// test-name: server_watch_limits_test
// Watches cost the engine a thread each, so serve bounds them: per
// connection (--max-watches, also on stdio) and for all connections together
// (--max-server-watches). A watch past either bound is refused with kind
// unavailable, and the slot comes back when a watch ends (unwatch, or its
// connection closing).
#include "server/net_support.hpp"
#include "support/serve_process.hpp"

namespace {

using namespace agentstate;
using namespace agentstate::test;
using namespace std::chrono_literals;

json watch_all() {
  return json{{"scope", "all"}};
}

} // namespace

TEST_CASE("serve --listen: --max-watches per connection and --max-server-watches for all") {
  temp_dir dir;
  net::server_process srv(
    {"--listen", "127.0.0.1:0", "--memory", "--max-watches", "3", "--max-server-watches", "4"},
    (dir.path() / "stderr.txt").string());
  const int port = srv.port();
  net::client a(port), b(port);
  REQUIRE(a.connected());
  REQUIRE(b.connected());
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    a.send_line(net::rpc(i, "watch", watch_all()));
    auto r = a.next();
    REQUIRE(net::ok(r));
    ids.push_back((*r)["result"]["watch_id"]);
  }
  a.send_line(net::rpc(9, "watch", watch_all()));
  auto over = a.next();
  CHECK(net::kind_of(over) == "unavailable");
  CHECK((*over)["error"]["message"].get<std::string>().find("--max-watches") != std::string::npos);

  b.send_line(net::rpc(1, "watch", watch_all()));
  REQUIRE(net::ok(b.next())); // the server's fourth
  b.send_line(net::rpc(2, "watch", watch_all()));
  auto full = b.next();
  CHECK(net::kind_of(full) == "unavailable");
  CHECK((*full)["error"]["message"].get<std::string>().find("--max-server-watches")
        != std::string::npos);

  // An unwatch gives its slot back, to either connection.
  a.send_line(net::rpc(10, "unwatch", json{{"watch_id", ids[0]}}));
  for (auto line = a.next(); line; line = a.next())
    if (line->contains("id")) {
      CHECK(net::ok(line));
      break;
    }
  b.send_line(net::rpc(3, "watch", watch_all()));
  CHECK(net::ok(b.next()));

  // A connection's end gives back all of its slots.
  { net::client gone(std::move(a)); }
  net::client c(port);
  for (int i = 0; i < 2; ++i) {
    // The closed connection's slots come back on the server's I/O threads.
    CHECK(test::eventually(
      [&] {
        c.send_line(net::rpc(i, "watch", watch_all()));
        auto r = c.next();
        REQUIRE(r);
        return net::ok(r);
      },
      10s, 20ms));
  }
}

TEST_CASE("serve over pipes: --max-watches bounds a stream's live watches") {
  temp_dir dir;
  server s({"--memory", "--max-watches", "2"}, (dir.path() / "stderr.txt").string());
  auto w1 = s.ok("watch", watch_all());
  s.ok("watch", watch_all());
  auto refused = s.call("watch", watch_all());
  REQUIRE(refused.contains("error"));
  CHECK(refused["error"]["data"]["kind"] == "unavailable");
  s.send_line(json{{"jsonrpc", "2.0"},
                   {"id", "u"},
                   {"method", "unwatch"},
                   {"params", {{"watch_id", w1["watch_id"]}}}});
  for (auto line = s.next(); !line.contains("id"); line = s.next())
    CHECK(line["method"] == "watch_ended");
  CHECK(s.call("watch", watch_all()).contains("result"));
}

namespace {

// The server's "server" stats, read through `admin`.
json stall_stats(net::client& admin) {
  auto r = admin.call("stats", nullptr, "stats");
  REQUIRE(net::ok(r));
  return (*r)["result"]["server"];
}

} // namespace

// Regression (#44): 16 clients with 64 watches each that never read their
// notifications, then closed their connections after ~1k appends, made an
// unrelated append wait 19-30 s while the server went from 53 to ~930
// threads: each watch without room held a delivery thread (the engine added
// one per stalled watch), and closing a connection waited on the I/O thread
// for every one of its watches to end.
TEST_CASE("regression: watches can stall the server: watches nobody reads and their "
          "connections' close cost a bounded number of threads, and appends go on") {
  temp_dir dir;
  // A small output cap: each connection stops taking notifications early.
  net::server_process srv({"--listen", "127.0.0.1:0", "--memory", "--max-output-bytes", "1048576"},
                          (dir.path() / "stderr.txt").string());
  const int port = srv.port();
  net::client admin(port);
  REQUIRE(net::ok(admin.call("create_session", net::sref_params("busy", "s"))));
  REQUIRE(net::ok(admin.call("create_session", net::sref_params("quiet", "s"))));
  const long base = srv.status("Threads");
  REQUIRE(base > 0);
  // Delivery threads are bounded (16), plus the hub's and the one that
  // releases ended watches; the rest is slack for the engine's own.
  const long bound = base + 24;

  constexpr int clients = 16, per_client = 64;
  // Raw: they never read their notifications.
  std::vector<std::unique_ptr<net::raw_socket>> silent;
  for (int c = 0; c < clients; ++c) {
    silent.push_back(std::make_unique<net::raw_socket>(port));
    auto& cl = *silent.back();
    REQUIRE(cl.connected());
    std::string batch;
    for (int i = 0; i < per_client; ++i)
      batch += net::rpc(i, "watch", watch_all()).dump() + "\n";
    REQUIRE(cl.send(batch));
    // Only the answers are read (no change exists yet to notify); the
    // notifications never are.
    for (int i = 0; i < per_client; ++i)
      REQUIRE(net::ok(cl.next()));
  }
  CHECK(stall_stats(admin)["watches"] == clients * per_client);

  const auto text = std::string(300, 'n');
  constexpr int n_appends = 1000;
  for (int i = 0; i < n_appends; ++i) {
    auto ev = json{{"author", "a"}, {"content", {{"parts", json::array({{{"text", text}}})}}}};
    REQUIRE(admin.send_line(
      net::rpc(i, "append_event", net::with(net::sref_params("busy", "s"), "event", ev))));
  }
  for (int i = 0; i < n_appends; ++i)
    REQUIRE(net::ok(admin.next(60s)));
  // The watches have filled their connections' output and wait for room.
  const long loaded = srv.status("Threads");
  CHECK(loaded <= bound);

  silent.clear(); // every watching connection closes
  auto ev = json{{"author", "a"}, {"content", "after the closes"}};
  auto r =
    admin.call("append_event", net::with(net::sref_params("quiet", "s"), "event", ev), 1, 120s);
  CHECK(net::ok(r));
  const long after = srv.status("Threads");
  CHECK(after <= bound);
  // The closed connections' watches are gone (bounded poll: the closes run
  // on the server's I/O threads after the client's close).
  CHECK(test::eventually([&] { return stall_stats(admin)["watches"] == 0; }, 30s, 20ms));
  CHECK(srv.status("Threads") <= bound);
  MESSAGE("threads: ", base, " at start, ", loaded, " loaded, ", after, " after the closes");
}
