// SPDX-License-Identifier: Apache-2.0
// `agentstate cluster init --replicas`, on a real etcd: the settings it
// writes and refuses, `cluster status` of replicated shards (their replicas
// and in-sync sets, those out of sync), and the clear refusal of `move`,
// `drain` and `adopt` on a replicated cluster.
#include <doctest/doctest.h>

#include "cluster/coordinator.hpp"
#include "server/net_support.hpp"
#include "support/etcd_process.hpp"

namespace {

using namespace agentstate;

std::string tool(const test::etcd_process& etcd, const std::string& cluster,
                 const std::string& rest) {
  return std::string(AGENTSTATE_BIN) + " cluster " + rest + " --etcd " + etcd.url() + " --cluster "
    + cluster;
}

} // namespace

TEST_CASE("cluster init --replicas: expect_nodes and min_insync follow R; bad counts are refused") {
  test::etcd_process etcd;
  auto made = test::net::shell(tool(etcd, "r3", "init --shards 8 --replicas 3 --json"), false);
  INFO(made.second);
  REQUIRE(made.first == 0);
  auto out = json::parse(made.second);
  CHECK(out["replicas"] == 3);
  CHECK(out["min_insync"] == 2); // a majority of 3
  CHECK(out["expect_nodes"] == 3); // as many nodes as copies

  auto too_few = test::net::shell(tool(etcd, "r3b", "init --replicas 3 --expect-nodes 2"));
  CHECK(too_few.first == 1);
  CHECK(too_few.second.find("expects at least as many nodes") != std::string::npos);
  auto insync = test::net::shell(tool(etcd, "r2", "init --replicas 2 --min-insync 3"));
  CHECK(insync.first == 1);
  CHECK(insync.second.find("minimum in-sync count must be 1..replicas") != std::string::npos);
  CHECK(test::net::shell(tool(etcd, "r8", "init --replicas 8 --expect-nodes 8")).first == 1);
  // Nothing refused was created.
  for (auto name : {"r3b", "r2", "r8"})
    CHECK(test::net::shell(tool(etcd, name, "status")).first == 1);

  auto one = test::net::shell(tool(etcd, "r1", "init --json"), false);
  REQUIRE(one.first == 0);
  auto single = json::parse(one.second);
  CHECK(single["replicas"] == 1);
  CHECK(single["min_insync"] == 1);
  CHECK(single["expect_nodes"] == 1);
}

TEST_CASE("cluster status shows each replicated shard's replicas and in-sync set") {
  test::etcd_process etcd;
  REQUIRE(test::net::shell(tool(etcd, "c", "init --shards 4 --replicas 3")).first == 0);
  auto c = cluster::make_etcd_coordinator(etcd.url(), "c");
  REQUIRE(c.ok());
  auto v = (*c)->load();
  REQUIRE(v.ok());
  std::vector<cluster::shard_entry> next;
  for (std::uint32_t s = 0; s < 3; ++s) {
    cluster::shard_entry e;
    e.owner = "a";
    e.epoch = 1;
    e.replicas = {"a", "b", "c"};
    e.isr = s == 0 ? std::vector<std::string>{"a", "c"} : e.replicas;
    if (s == 2)
      e.isr = {"a"};
    next.push_back(std::move(e));
  }
  REQUIRE((*c)->update_shards({v->shards[0], v->shards[1], v->shards[2]}, next).ok());

  auto r = test::net::shell(tool(etcd, "c", "status --json"), false);
  INFO(r.second);
  REQUIRE(r.first == 0);
  auto status = json::parse(r.second);
  CHECK(status["replicas"] == 3);
  CHECK(status["min_insync"] == 2);
  CHECK(status["under_replicated"] == 2);
  CHECK(status["below_min_insync"] == 1);
  REQUIRE(status["map"].size() == 3);
  CHECK(status["map"][0]["replicas"] == json::array({"a", "b", "c"}));
  CHECK(status["map"][0]["isr"] == json::array({"a", "c"}));
  CHECK(status["unowned"] == json::array({3}));

  auto text = test::net::shell(tool(etcd, "c", "status"));
  REQUIRE(text.first == 0);
  CHECK(text.second.find("shard 0 (owner 'a', epoch 1): out of sync: b") != std::string::npos);
  CHECK(text.second.find("shard 2 (owner 'a', epoch 1): out of sync: b, c") != std::string::npos);
  CHECK(text.second.find("replicas: 3 per shard") != std::string::npos);
}

TEST_CASE("move, drain and adopt refuse a replicated cluster, whose shards do not move yet") {
  test::etcd_process etcd;
  test::temp_dir dir;
  REQUIRE(test::net::shell(tool(etcd, "c", "init --shards 4 --replicas 2")).first == 0);
  auto move = test::net::shell(tool(etcd, "c", "move 0 a"));
  CHECK(move.first == 1);
  CHECK(move.second.find("not built yet") != std::string::npos);
  auto drain = test::net::shell(tool(etcd, "c", "drain a"));
  CHECK(drain.first == 1);
  CHECK(drain.second.find("not built yet") != std::string::npos);
  MUST(test::open_store_dir(dir.str() + "/single")->close());
  auto adopt = test::net::shell(tool(etcd, "c", "adopt " + dir.str() + "/single"));
  CHECK(adopt.first == 1);
  CHECK(adopt.second.find("not built yet") != std::string::npos);
}
