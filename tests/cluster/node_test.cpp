// SPDX-License-Identifier: Apache-2.0
// cluster::node on a real etcd: nodes started together share the never-owned
// shards evenly, a shard keeps its owner when that node dies, a restart
// within the old lease's TTL waits for it, and a node cut off from etcd stops
// serving by its own clock.
#include <doctest/doctest.h>

#include "cluster/node.hpp"
#include "server/net_support.hpp"
#include "support/etcd_process.hpp"

#include <condition_variable>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

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
// The keeper's waits are stepped by the test (config::renew_wait): each
// wait asks for TTL/3, and each step lets exactly one keepalive reach etcd.
// While the keeper is held in its wait, etcd's count cannot move: that is
// the barrier the "exactly one" rests on.
TEST_CASE("a node renews its lease once per TTL/3 wait, never without one (regression: a 2 s "
          "TTL was renewed ~1,500 times a second)") {
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
  // The keeper's waits: how many began, what each asked for, and the steps
  // the test has allowed.
  std::mutex mtx;
  std::condition_variable cv;
  std::vector<std::chrono::steady_clock::duration> asked;
  int steps = 0;
  bool released = false;
  cluster::node::config cfg;
  cfg.id = "n1";
  cfg.address = "127.0.0.1:7001";
  cfg.ttl = 2s;
  cfg.renew_wait = [&](std::chrono::steady_clock::duration d) {
    std::unique_lock<std::mutex> lk(mtx);
    asked.push_back(d);
    cv.notify_all();
    cv.wait(lk, [&] { return released || steps > 0; });
    if (steps > 0)
      --steps;
  };
  auto waits_begun = [&](std::size_t n) {
    std::unique_lock<std::mutex> lk(mtx);
    return cv.wait_for(lk, 30s, [&] { return asked.size() >= n; });
  };
  auto started = cluster::node::start(c, cfg);
  REQUIRE_MESSAGE(started.ok(), started.err().message);
  auto n = std::move(*started);
  // The keeper renewed once as it started and now waits.
  REQUIRE(waits_begun(1));
  const auto first = keepalives();
  CHECK(first >= 1);
  for (std::size_t k = 1; k <= 4; ++k) {
    CAPTURE(k);
    {
      std::lock_guard<std::mutex> lk(mtx);
      ++steps;
    }
    cv.notify_all();
    // The keeper renews once, then waits again: the count is then final.
    REQUIRE(waits_begun(k + 1));
    CHECK(keepalives() == first + double(k));
  }
  {
    std::lock_guard<std::mutex> lk(mtx);
    for (auto d : asked)
      CHECK(std::chrono::duration_cast<std::chrono::milliseconds>(d) == 666ms);
    released = true;
  }
  cv.notify_all();
  n.reset();
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
