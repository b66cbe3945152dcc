// SPDX-License-Identifier: Apache-2.0
// `prune` on a cluster node (two forwarding `serve --cluster` nodes on a real
// etcd, 16 shards): without app_name a node prunes its own store only (the
// sessions of the shards it owns); with app_name, on a node that does not own
// every shard, it is refused as a request that spans every shard, deleting
// nothing; a prune on each node covers the cluster.
#include <doctest/doctest.h>

#include "model/ids.hpp"
#include "model/shard.hpp"
#include "server/net_support.hpp"
#include "support/cluster_nodes.hpp"
#include "support/etcd_process.hpp"

#include <set>

namespace {

using namespace agentstate;
using namespace agentstate::test::net;
using namespace std::chrono_literals;

constexpr std::uint32_t shards = 16;

} // namespace

TEST_CASE("serve --cluster: prune without app_name prunes the node's own store; with app_name a "
          "node that does not own every shard refuses it") {
  test::etcd_process etcd;
  test::temp_dir dir;
  auto init = shell(std::string(AGENTSTATE_BIN) + " cluster init --etcd " + etcd.url()
                    + " --cluster c --shards 16 --expect-nodes 2");
  INFO(init.second);
  REQUIRE(init.first == 0);
  auto a = test::start_cluster_node(etcd, dir, "a");
  auto b = test::start_cluster_node(etcd, dir, "b");
  const json map = test::settled_map({a.port, b.port});

  // Old sessions of users on a's shards and on b's, each made old by its
  // event's timestamp; one fresh session.
  std::set<std::string> on_a, on_b;
  client ca(a.port);
  for (int u = 0; u < 64 && (on_a.size() < 3 || on_b.size() < 3); ++u) {
    std::string user = "u" + std::to_string(u);
    auto owner = map["shards"][model::shard_of("app", user, shards)]["owner"].get<std::string>();
    auto& mine = owner == "a" ? on_a : on_b;
    if (mine.size() >= 3)
      continue;
    mine.insert(user);
    json ref{{"app_name", "app"}, {"user_id", user}, {"session_id", "s"}};
    REQUIRE(ok(ca.call("create_session", ref)));
    REQUIRE(ok(ca.call(
      "append_event",
      with(ref, "event", json{{"author", "t"}, {"timestamp", model::now_seconds() - 86400 * 3}}))));
  }
  REQUIRE(on_a.size() == 3);
  REQUIRE(on_b.size() == 3);

  // With app_name: the app's sessions are on both nodes; refused, nothing deleted.
  auto refused = ca.call("prune", json{{"older_than_s", 86400}, {"app_name", "app"}});
  REQUIRE(refused);
  INFO(refused->dump());
  CHECK(kind_of(refused) == "invalid_argument");
  CHECK((*refused)["error"]["message"].get<std::string>().find("spans every shard")
        != std::string::npos);

  // Without: each node its own.
  auto on = [](const json& result) {
    std::set<std::string> users;
    for (const auto& s : result["sessions"])
      users.insert(s["user_id"].get<std::string>());
    return users;
  };
  auto pa = ca.call("prune", json{{"older_than_s", 86400}, {"dry_run", true}});
  REQUIRE(ok(pa));
  CHECK(on((*pa)["result"]) == on_a);
  pa = ca.call("prune", json{{"older_than_s", 86400}});
  REQUIRE(ok(pa));
  CHECK((*pa)["result"]["deleted"] == 3);
  CHECK(on((*pa)["result"]) == on_a);
  client cb(b.port);
  auto pb = cb.call("prune", json{{"older_than_s", 86400}});
  REQUIRE(ok(pb));
  CHECK(on((*pb)["result"]) == on_b);
  for (const auto& user : on_b) {
    auto r =
      ca.call("get_session", json{{"app_name", "app"}, {"user_id", user}, {"session_id", "s"}});
    REQUIRE(ok(r));
    CHECK((*r)["result"].is_null());
  }
  a.proc->signal(SIGTERM);
  b.proc->signal(SIGTERM);
  CHECK(a.proc->wait_exit() == 0);
  CHECK(b.proc->wait_exit() == 0);
}
