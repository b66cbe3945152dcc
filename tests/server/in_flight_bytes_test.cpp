// SPDX-License-Identifier: Apache-2.0
// test-tiers: tsan
// `agentstate serve --max-in-flight-bytes` (#44): the requests a connection
// has in flight were capped by count only, so pipelined large appends held
// up to that many lines (and their parsed form) in the server. Now the bytes
// of the request lines admitted and not yet answered are capped too, by
// back-pressure: the connection is not read until answers free room, and
// every request is answered. A real `serve` child on a Unix socket.
#include "server/net_support.hpp"

#include <thread>

using namespace agentstate;
using namespace agentstate::test;
using namespace agentstate::test::net;

namespace {

constexpr std::size_t cap = std::size_t{2} << 20;
constexpr int appends = 64;
constexpr std::size_t text_bytes = std::size_t{512} << 10;

json server_stats(client& c) {
  auto r = c.call("stats");
  REQUIRE(r);
  INFO("stats: ", r->dump());
  REQUIRE(r->contains("result"));
  return (*r)["result"]["server"];
}

} // namespace

TEST_CASE("serve: requests in flight were capped by count, not bytes; pipelined large appends now "
          "hold at most --max-in-flight-bytes, and every one is answered (#44)") {
  temp_dir tmp;
  const auto sock = tmp.str() + "/sock";
  server_process srv(
    {"--memory", "--listen", "unix:" + sock, "--max-in-flight-bytes", std::to_string(cap)},
    tmp.str() + "/serve.log");
  srv.wait_serving();
  // Raw: `a` reads no answer until every request byte is written.
  raw_socket a(sock);
  client b(sock);
  REQUIRE(a.connected());
  REQUIRE(b.connected());
  REQUIRE(ok(a.call("create_session", sref_params("app", "s"))));

  std::string lines;
  std::size_t line_bytes = 0;
  for (int i = 0; i < appends; ++i) {
    json ev{{"author", "a"},
            {"content", {{"parts", json::array({{{"text", std::string(text_bytes, 'x')}}})}}}};
    auto line = rpc(i, "append_event", with(sref_params("app", "s"), "event", ev)).dump() + "\n";
    line_bytes = line.size() - 1;
    lines += line;
  }
  // All of them at once, none of the answers read until every byte is sent
  // (32 MiB of answers fit under the default --max-output-bytes, so the
  // server reads everything while the client reads nothing).
  bool sent = false;
  std::thread writer([&] { sent = a.send(lines); });
  writer.join();
  REQUIRE(sent);
  for (int i = 0; i < appends; ++i) {
    auto r = a.next(30s);
    REQUIRE(r);
    CHECK((*r)["id"] == i);
    REQUIRE(r->contains("result"));
    CHECK((*r)["result"]["version"] == i + 1);
  }

  auto st = server_stats(b);
  INFO("stats: ", st.dump());
  // The peak is taken after each admission, of every connection's bytes in
  // flight: this connection's appends and, at most, one stats line of b.
  CHECK(st["in_flight_bytes_peak"].get<std::uint64_t>() >= line_bytes);
  CHECK(st["in_flight_bytes_peak"].get<std::uint64_t>() <= cap + 1024);
  CHECK(st["in_flight_bytes"].get<std::uint64_t>() < 1024); // b's stats request alone
  CHECK(st["requests"].get<std::uint64_t>() == appends + 2);
  srv.signal(SIGTERM);
  CHECK(srv.wait_exit() == 0);
}
