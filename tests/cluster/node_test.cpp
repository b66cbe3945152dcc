// SPDX-License-Identifier: Apache-2.0
// cluster::node on a real etcd: nodes started together share the never-owned
// shards evenly, a shard keeps its owner when that node dies, a restart
// within the old lease's TTL waits for it, and a node cut off from etcd stops
// serving by its own clock.
#include <doctest/doctest.h>

#include "cluster/node.hpp"
#include "server/net_support.hpp"
#include "support/etcd_process.hpp"

#include <map>
#include <sstream>
#include <thread>

namespace {

using namespace agentstate;
using namespace std::chrono_literals;

std::shared_ptr<cluster::coordinator> shared_coordinator(const test::etcd_process& etcd,
                                                         const std::string& name) {
  auto c = cluster::make_etcd_coordinator(etcd.url(), name);
  REQUIRE(c.ok());
  return std::shared_ptr<cluster::coordinator>(std::move(*c));
}

std::unique_ptr<cluster::node> start_node(std::shared_ptr<cluster::coordinator> c,
                                          const std::string& id, std::chrono::seconds ttl = 5s) {
  cluster::node::config cfg;
  cfg.id = id;
  cfg.address = "127.0.0.1:" + std::to_string(7000 + id.back());
  cfg.ttl = ttl;
  auto n = cluster::node::start(std::move(c), cfg);
  REQUIRE_MESSAGE(n.ok(), n.err().message);
  return std::move(*n);
}

bool all_owned(const cluster::cluster_view& v) {
  for (auto& s : v.shards)
    if (s.owner.empty())
      return false;
  return true;
}

} // namespace

TEST_CASE("with 3 replicas, four nodes started together keep 3 copies of every shard, spread") {
  test::etcd_process etcd;
  auto c = shared_coordinator(etcd, "replicated");
  cluster::cluster_settings s;
  s.shards = 64;
  s.expect_nodes = 4;
  s.replicas = 3;
  s.min_insync = 2;
  REQUIRE(c->create(s).ok());
  std::vector<std::unique_ptr<cluster::node>> nodes;
  for (auto id : {"n1", "n2", "n3", "n4"})
    nodes.push_back(start_node(c, id));
  for (auto& n : nodes)
    REQUIRE(n->wait_for(all_owned, 10s));
  auto v = nodes[0]->view();
  std::map<std::string, int> owned, copies;
  for (auto& e : v->shards) {
    CHECK(e.epoch == 1);
    CHECK(cluster::check_entry(e) == "");
    REQUIRE(e.replicas.size() == 3);
    CHECK(e.isr == e.replicas); // nothing written yet: all in sync
    ++owned[e.owner];
    for (auto& id : e.replicas)
      ++copies[id];
  }
  REQUIRE(owned.size() == 4);
  REQUIRE(copies.size() == 4);
  for (auto& [id, k] : owned) {
    INFO(id, " owns ", k);
    CHECK(k >= 64 / 4 - 1);
    CHECK(k <= 64 / 4 + 1);
  }
  for (auto& [id, k] : copies) {
    INFO(id, " keeps ", k, " copies");
    CHECK(k >= 64 * 3 / 4 - 2);
    CHECK(k <= 64 * 3 / 4 + 2);
  }
}

TEST_CASE("three nodes started together own every shard within 5 s, S/3 +- 1 each") {
  test::etcd_process etcd;
  auto c = shared_coordinator(etcd, "three");
  cluster::cluster_settings s;
  s.shards = 256;
  s.expect_nodes = 3;
  REQUIRE(c->create(s).ok());
  auto n1 = start_node(c, "n1");
  auto n2 = start_node(c, "n2");
  // Fewer than expect_nodes live: nothing is given out (the view after both
  // joins, read through the coordinator, is the barrier).
  REQUIRE(n1->wait_for(
    [](const cluster::cluster_view& v) { return v.node("n2") && v.node("n2")->alive; }, 10s));
  CHECK_FALSE(all_owned(*n1->view()));
  auto started = std::chrono::steady_clock::now();
  auto n3 = start_node(c, "n3");
  for (auto* n : {n1.get(), n2.get(), n3.get()})
    REQUIRE(n->wait_for(all_owned, 10s));
  CHECK(std::chrono::steady_clock::now() - started < 5s);
  auto v = n3->view();
  std::map<std::string, int> count;
  for (auto& e : v->shards) {
    CHECK(e.epoch == 1);
    ++count[e.owner];
  }
  REQUIRE(count.size() == 3);
  for (auto& [id, k] : count) {
    INFO(id, " owns ", k);
    CHECK(k >= 256 / 3 - 1);
    CHECK(k <= 256 / 3 + 1);
  }
  CHECK(!v->controller.empty());
  for (auto* n : {n1.get(), n2.get(), n3.get()})
    CHECK(n->serving());
}

TEST_CASE("a shard keeps its owner when the owner leaves; the owner's restart finds it again") {
  test::etcd_process etcd;
  auto c = shared_coordinator(etcd, "keep");
  cluster::cluster_settings s;
  s.shards = 8;
  s.expect_nodes = 2;
  REQUIRE(c->create(s).ok());
  auto n1 = start_node(c, "n1");
  auto n2 = start_node(c, "n2");
  REQUIRE(n1->wait_for(all_owned, 10s));
  auto before = n1->view()->shards;
  n2.reset(); // leaves: its lease ends at once
  REQUIRE(n1->wait_for([](const cluster::cluster_view& v) { return !v.node("n2")->alive; }, 10s));
  auto after = n1->view();
  for (std::size_t i = 0; i < before.size(); ++i) {
    CHECK(after->shards[i].owner == before[i].owner);
    CHECK(after->shards[i].epoch == before[i].epoch);
  }
  auto back = start_node(c, "n2");
  REQUIRE(back->wait_for([](const cluster::cluster_view& v) { return v.node("n2")->alive; }, 10s));
  std::size_t mine = 0;
  for (auto& e : back->view()->shards)
    mine += e.owner == "n2";
  CHECK(mine == 4);
}

TEST_CASE("a node id still live after a crash is taken once its lease expires") {
  test::etcd_process etcd;
  auto c = shared_coordinator(etcd, "crash");
  REQUIRE(c->create(cluster::cluster_settings{}).ok());
  // A registration whose process "died": never renewed, never left.
  auto ghost = c->join("n1", "127.0.0.1:7001", 2s);
  REQUIRE(ghost.ok());
  cluster::node::config cfg;
  cfg.id = "n1";
  cfg.address = "127.0.0.1:7001";
  cfg.ttl = 2s;
  cfg.join_wait = 500ms;
  CHECK(cluster::node::start(c, cfg).code() == errc::already_exists);
  cfg.join_wait = 0ms; // 3 × ttl
  auto n = cluster::node::start(c, cfg);
  REQUIRE_MESSAGE(n.ok(), n.err().message);
  CHECK((*n)->serving());
}

// Regression test: the keeper paused cfg.ttl / 3 in whole seconds between
// renewals, 0 s for a TTL of 2 s, and renewed about 1,500 times a second.
// The count is an upper bound over a window at least 3 s long: a slow
// machine renews less, never more.
TEST_CASE("a node renews its lease every TTL/3, not without a pause (regression: a 2 s TTL was "
          "renewed ~1,500 times a second)") {
  test::etcd_process etcd;
  auto c = shared_coordinator(etcd, "renew");
  REQUIRE(c->create(cluster::cluster_settings{}).ok());
  // etcd's count of the lease keepalives it received (its /metrics).
  auto keepalives = [&] {
    auto [rc, out] = test::net::shell("curl -s --max-time 10 " + etcd.url() + "/metrics", false);
    REQUIRE(rc == 0);
    double n = 0;
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);)
      if (line.rfind("grpc_server_msg_received_total{", 0) == 0
          && line.find("grpc_method=\"LeaseKeepAlive\"") != std::string::npos)
        n += std::stod(line.substr(line.rfind(' ') + 1));
    return n;
  };
  auto n = start_node(c, "n1", 2s);
  REQUIRE(n->wait_for(all_owned, 10s));
  const auto before = keepalives();
  const auto t0 = std::chrono::steady_clock::now();
  // why: the window renewals are counted over (3 s, four to five periods of 667 ms)
  std::this_thread::sleep_for(3s);
  const auto renewed = keepalives() - before;
  const auto window = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO("renewals: ", renewed, " in ", window, " s");
  CHECK(before + renewed >= 1); // the metric is read (the keeper renews once as it starts)
  CHECK(renewed <= window / (2.0 / 3) + 2);
}

TEST_CASE("a node cut off from etcd stops serving within its lease's TTL, and resumes after") {
  test::etcd_process etcd;
  auto c = shared_coordinator(etcd, "cut");
  REQUIRE(c->create(cluster::cluster_settings{}).ok());
  auto n = start_node(c, "n1", 2s);
  REQUIRE(n->wait_for(all_owned, 10s));
  CHECK(n->serving());
  etcd.pause(); // unreachable: requests hang until their timeout
  // The node's own clock runs out (TTL 2 s, 6 s bound).
  CHECK(test::eventually([&] { return !n->serving(); }, 6s, 50ms));
  etcd.resume();
  // The keeper renews (or joins again, on its own thread) within a few periods.
  CHECK(test::eventually([&] { return n->serving(); }, 15s, 50ms));
  REQUIRE(n->wait_for([](const cluster::cluster_view& v) { return v.node("n1")->alive; }, 10s));
}
