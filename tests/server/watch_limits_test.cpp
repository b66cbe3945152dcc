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
    bool answered = false;
    for (int tries = 0; tries < 100 && !answered; ++tries) {
      c.send_line(net::rpc(i, "watch", watch_all()));
      auto r = c.next();
      REQUIRE(r);
      if (net::ok(r))
        answered = true;
      else
        std::this_thread::sleep_for(20ms); // the closed connection's slots come back
    }
    CHECK(answered);
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
