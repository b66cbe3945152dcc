// SPDX-License-Identifier: Apache-2.0
// test-tiers: tsan
// Many clients at once (docs/protocol.md, "Limits"): 2,000 idle connections
// cost no thread and little memory (the budget: 64 MB RSS), a new
// client is still served, one beyond the cap is refused cleanly.
#include "server/net_support.hpp"

using namespace agentstate;
using namespace agentstate::test;
using namespace agentstate::test::net;

namespace {

// The server's "server" stats, read through `admin`.
json server_stats(client& admin) {
  auto r = admin.call("stats", nullptr, "stats");
  REQUIRE(ok(r));
  return (*r)["result"]["server"];
}

} // namespace

TEST_CASE("scale: 2,000 idle connections: threads stay at the pool, RSS within 64 MB, a new "
          "client is served, one over the cap is refused") {
  const int idle_count = 2000;
  need_descriptors(idle_count + 256);
  temp_dir dir;
  // The cap: the idle ones, the admin client, one more.
  server_process srv({"--listen", "0", "--memory", "--max-connections",
                      std::to_string(idle_count + 2), "--io-threads", "2", "--threads", "2"},
                     (dir.path() / "log.txt").string());
  int port = srv.port();
  client admin(port);
  REQUIRE(ok(admin.call("ping")));
  long threads_before = srv.status("Threads");
  long rss_before = srv.status("VmRSS");

  auto t0 = std::chrono::steady_clock::now();
  // Raw sockets: 2,000 connections without a client thread each.
  std::vector<raw_socket> idle;
  idle.reserve(idle_count);
  for (int i = 0; i < idle_count; ++i) {
    idle.emplace_back(port);
    REQUIRE(idle.back().connected());
  }
  // Every one of them is accepted and registered.
  json st = stats_when(
    admin, [&](json& s) { return s["connections_open"] == idle_count + 1; }, 30s * slowdown);
  auto took =
    std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  long threads_after = srv.status("Threads");
  long rss_after = srv.status("VmRSS");
  MESSAGE(idle_count, " idle connections in ", took.count(), " ms: threads ", threads_before,
          " -> ", threads_after, ", VmRSS ", rss_before / 1024, " -> ", rss_after / 1024, " MiB (+",
          (rss_after - rss_before), " KiB, ", (rss_after - rss_before) * 1024 / idle_count,
          " bytes each)");
  CHECK(threads_after == threads_before);
  if (!sanitized_build)
    CHECK(rss_after - rss_before <= 64 * 1024);

  // A newcomer is served while the idle ones stay connected: its answer
  // comes, and the stats read after it still count every idle connection
  // open (the newcomer and the admin client besides). The generous wait is
  // a hang guard only; how quickly the answer comes is for `agentstate bench`.
  client fresh(port);
  auto created = fresh.call("create_session", sref_params("app", "fresh"), "fresh", 60s);
  INFO("create_session from a newcomer: ", created ? created->dump() : "no answer within 60 s");
  REQUIRE(ok(created));
  st = server_stats(admin);
  INFO("stats: ", st.dump());
  CHECK(st["connections_open"] == idle_count + 2);
  // One over the cap: an error line, then closed (read off the wire).
  raw_socket over(port);
  auto r = over.next(5s);
  REQUIRE(r);
  CHECK(kind_of(r) == "unavailable");
  CHECK(over.closed_within(5s));
  // The idle ones still work.
  CHECK(ok(idle.front().call("ping")));
  CHECK(ok(idle.back().call("ping")));
  idle.clear();
  srv.signal(SIGTERM);
  CHECK(srv.wait_exit() == 0);
}
