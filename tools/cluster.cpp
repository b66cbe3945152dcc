// SPDX-License-Identifier: Apache-2.0
// agentstate cluster: creates a cluster's configuration in etcd and shows it
// (docs/cluster.md).
#include <cstdio>
#include <map>
#include <string>

#include "agentstate/json.hpp"
#include "cluster/coordinator.hpp"
#include "tools/cli.hpp"
#include "tools/commands.hpp"

namespace agentstate::tools {

namespace {

struct cluster_args {
  std::string action;
  std::string etcd;
  std::string cluster;
  std::uint32_t shards = 256;
  std::uint32_t expect_nodes = 1;
  bool json = false;
};

int fail(const std::string& action, const error& e) {
  std::fprintf(stderr, "cluster %s: %s\n", action.c_str(), e.message.c_str());
  return 1;
}

int run_init(cluster::coordinator& c, const cluster_args& a) {
  cluster::cluster_settings s;
  s.shards = a.shards;
  s.expect_nodes = a.expect_nodes;
  if (auto r = c.create(s); !r)
    return fail("init", r.err());
  if (a.json)
    std::printf("%s\n",
                json{{"cluster", c.name()}, {"shards", s.shards}, {"expect_nodes", s.expect_nodes}}
                  .dump()
                  .c_str());
  else
    std::printf("created %s: %u shards; shards are given out once %u node%s live\n",
                c.describe().c_str(), s.shards, s.expect_nodes,
                s.expect_nodes == 1 ? " is" : "s are");
  return 0;
}

int run_status(cluster::coordinator& c, const cluster_args& a) {
  auto v = c.load();
  if (!v)
    return fail("status", v.err());
  std::map<std::string, std::size_t> owned;
  std::size_t unowned = 0, on_down = 0;
  for (auto& s : v->shards) {
    if (s.owner.empty()) {
      ++unowned;
      continue;
    }
    ++owned[s.owner];
    auto* n = v->node(s.owner);
    if (!n || !n->alive)
      ++on_down;
  }
  if (a.json) {
    json nodes = json::array(), map = json::array(), without = json::array();
    for (auto& n : v->nodes)
      nodes.push_back(
        {{"id", n.id}, {"address", n.address}, {"alive", n.alive}, {"shards", owned[n.id]}});
    for (auto& s : v->shards) {
      if (s.owner.empty())
        without.push_back(s.shard);
      else
        map.push_back({{"shard", s.shard}, {"owner", s.owner}, {"epoch", s.epoch}});
    }
    json out = {{"cluster", v->cluster},
                {"revision", v->revision},
                {"shards", v->settings.shards},
                {"expect_nodes", v->settings.expect_nodes},
                {"controller", v->controller.empty() ? json(nullptr) : json(v->controller)},
                {"nodes", std::move(nodes)},
                {"map", std::move(map)},
                {"unowned", std::move(without)},
                {"on_down_nodes", on_down}};
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  std::printf("%s: %u shards, revision %lld\n", c.describe().c_str(), v->settings.shards,
              static_cast<long long>(v->revision));
  std::printf("controller: %s\n", v->controller.empty() ? "(none)" : v->controller.c_str());
  std::printf("nodes: %zu\n", v->nodes.size());
  for (auto& n : v->nodes)
    std::printf("  %-20s %-24s %-5s %zu shards\n", n.id.c_str(), n.address.c_str(),
                n.alive ? "alive" : "down", owned[n.id]);
  std::printf("shards without an owner: %zu\n", unowned);
  std::printf("shards on nodes that are down: %zu\n", on_down);
  return 0;
}

runner define_cluster(command_line& cl) {
  auto a = std::make_shared<cluster_args>();
  cl.usage = "agentstate cluster init --etcd URLS --cluster NAME [--shards S]\n"
             "    [--expect-nodes N]\n"
             "agentstate cluster status --etcd URLS --cluster NAME [--json]";
  cl.description = "A cluster is several `agentstate serve` nodes holding disjoint shards of one\n"
                   "logical store; etcd holds its configuration (the shard map, the node\n"
                   "registry). init creates the cluster's keys (refused when it exists). status\n"
                   "lists its nodes (id, address, alive, shards owned), the controller, and the\n"
                   "shards without an owner or on nodes that are down.";
  cl.footer = "Exit status: 0 done; 1 etcd could not be reached, the cluster exists (init) or\n"
              "does not (status); 2 bad usage.";
  cl.app.add_option("ACTION", a->action, "init or status")->required()->type_name("ACTION");
  cl.app.add_option("--etcd", a->etcd, "etcd's client URLs, comma-separated (http://HOST:PORT)")
    ->required()
    ->type_name("URLS");
  cl.app.add_option("--cluster", a->cluster, "the cluster's name (A-Z a-z 0-9 . _ -)")
    ->required()
    ->type_name("NAME");
  cl.app.add_option("--shards", a->shards, "init: the shard count, fixed for good (default 256)")
    ->type_name("S");
  cl.app
    .add_option("--expect-nodes", a->expect_nodes,
                "init: give shards out once this many nodes are live (default 1)")
    ->type_name("N");
  add_json_flag(cl, a->json);
  return [a]() -> int {
    if (a->action != "init" && a->action != "status")
      return usage_error("cluster", "ACTION is init or status, not '" + a->action + "'");
    auto c = cluster::make_etcd_coordinator(a->etcd, a->cluster);
    if (!c)
      return usage_error("cluster", c.err().message);
    return a->action == "init" ? run_init(**c, *a) : run_status(**c, *a);
  };
}

const bool registered = register_command(
  {"cluster", "create and show a cluster's configuration in etcd", define_cluster});

} // namespace

} // namespace agentstate::tools
