// SPDX-License-Identifier: Apache-2.0
// agentstate cluster: creates a cluster's configuration in etcd and shows it
// (docs/cluster.md).
#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "agentstate/json.hpp"
#include "cluster/coordinator.hpp"
#include "tools/cli.hpp"
#include "tools/remote_flags.hpp"
#include "tools/cluster_move.hpp"
#include "tools/commands.hpp"

namespace agentstate::tools {

namespace {

struct cluster_args {
  std::string action;
  std::string etcd;
  std::string cluster;
  std::uint32_t shards = 256;
  std::uint32_t expect_nodes = 1;
  std::uint32_t replicas = 1;
  std::uint32_t min_insync = 0; ///< 0: a majority of replicas
  bool expect_nodes_given = false;
  bool json = false;
  std::vector<std::string> args; ///< move: SHARD NODE; drain: NODE; adopt: DIR
  remote_flags remote;
};

int fail(const std::string& action, const error& e) {
  say("cluster", "%s: %s", action.c_str(), e.message.c_str());
  return exit_failed;
}

int run_init(cluster::coordinator& c, const cluster_args& a) {
  cluster::cluster_settings s;
  s.shards = a.shards;
  s.replicas = a.replicas;
  s.expect_nodes = a.expect_nodes_given ? a.expect_nodes : std::max(a.expect_nodes, a.replicas);
  s.min_insync = a.min_insync == 0 ? cluster::majority(a.replicas) : a.min_insync;
  if (auto r = c.create(s); !r)
    return fail("init", r.err());
  if (a.json) {
    std::printf("%s\n",
                json{{"cluster", c.name()},
                     {"shards", s.shards},
                     {"expect_nodes", s.expect_nodes},
                     {"replicas", s.replicas},
                     {"min_insync", s.min_insync}}
                  .dump()
                  .c_str());
    return 0;
  }
  std::printf("created %s: %u shards; shards are given out once %u node%s live\n",
              c.describe().c_str(), s.shards, s.expect_nodes,
              s.expect_nodes == 1 ? " is" : "s are");
  if (s.replicas > 1)
    std::printf("each shard keeps %u replicas and takes writes while %u are in sync\n", s.replicas,
                s.min_insync);
  return 0;
}

/// status, move, drain, adopt, verify: the nodes' client options from the flags.
result<move_options> node_options(const cluster_args& a);

/// One follower's lag as status prints it: "b in_sync 3 records 12 ms".
std::string lag_text(const json& f) {
  auto num = [](const json& j) { return j.is_number() ? j.dump() : std::string("?"); };
  return f.value("node", std::string("?")) + " " + f.value("state", std::string("?")) + " "
    + num(f.value("lag_records", json())) + " records " + num(f.value("lag_ms", json())) + " ms";
}

int run_status(cluster::coordinator& c, const cluster_args& a) {
  if (auto problem = a.remote.problem(); !problem.empty())
    return usage_error("cluster", problem);
  auto v = c.load();
  if (!v)
    return fail("status", v.err());
  lag_report lags;
  if (v->settings.replicas > 1) {
    auto o = node_options(a);
    if (!o)
      return fail("status", o.err());
    o->node.connect_timeout = std::chrono::milliseconds(2000);
    o->call_timeout = std::chrono::milliseconds(3000); // a paused node is named, not waited for
    ::signal(SIGPIPE, SIG_IGN);
    lags = read_lags(*v, *o);
  }
  std::map<std::string, std::size_t> owned, copies;
  std::size_t unowned = 0, on_down = 0, under = 0, below = 0;
  for (auto& s : v->shards) {
    if (s.owner.empty()) {
      ++unowned;
      continue;
    }
    ++owned[s.owner];
    for (auto& id : s.replicas)
      ++copies[id];
    if (s.isr.size() < s.replicas.size())
      ++under;
    if (s.isr.size() < v->settings.min_insync)
      ++below;
    auto* n = v->node(s.owner);
    if (!n || !n->alive)
      ++on_down;
  }
  if (a.json) {
    json nodes = json::array(), map = json::array(), without = json::array();
    for (auto& n : v->nodes)
      nodes.push_back({{"id", n.id},
                       {"address", n.address},
                       {"alive", n.alive},
                       {"shards", owned[n.id]},
                       {"copies", copies[n.id]}});
    for (auto& s : v->shards) {
      if (s.owner.empty()) {
        without.push_back(s.shard);
        continue;
      }
      json e = {{"shard", s.shard}, {"owner", s.owner}, {"epoch", s.epoch}};
      if (!s.to.empty()) {
        e["to"] = s.to;
        e["copying"] = s.copying;
      }
      if (v->settings.replicas > 1) {
        e["replicas"] = s.replicas;
        e["isr"] = s.isr;
        auto l = lags.shards.find(s.shard);
        e["followers"] = l == lags.shards.end() ? json(nullptr) : l->second;
      }
      map.push_back(std::move(e));
    }
    json out = {{"cluster", v->cluster},
                {"revision", v->revision},
                {"shards", v->settings.shards},
                {"expect_nodes", v->settings.expect_nodes},
                {"replicas", v->settings.replicas},
                {"min_insync", v->settings.min_insync},
                {"under_replicated", under},
                {"below_min_insync", below},
                {"controller", v->controller.empty() ? json(nullptr) : json(v->controller)},
                {"nodes", std::move(nodes)},
                {"map", std::move(map)},
                {"unowned", std::move(without)},
                {"on_down_nodes", on_down}};
    if (v->settings.replicas > 1)
      out["lag_unknown"] = lags.unreachable;
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  std::printf("%s: %u shards, revision %lld\n", c.describe().c_str(), v->settings.shards,
              static_cast<long long>(v->revision));
  if (v->settings.replicas > 1)
    std::printf("replicas: %u per shard, writes while %u are in sync; %zu shards have a "
                "replica out of sync, %zu have fewer than %u in sync\n",
                v->settings.replicas, v->settings.min_insync, under, below, v->settings.min_insync);
  std::printf("controller: %s\n", v->controller.empty() ? "(none)" : v->controller.c_str());
  std::printf("nodes: %zu\n", v->nodes.size());
  for (auto& n : v->nodes) {
    std::printf("  %-20s %-24s %-5s %zu shards", n.id.c_str(), n.address.c_str(),
                n.alive ? "alive" : "down", owned[n.id]);
    if (v->settings.replicas > 1)
      std::printf(", %zu copies", copies[n.id]);
    std::printf("\n");
  }
  std::printf("shards without an owner: %zu\n", unowned);
  std::printf("shards on nodes that are down: %zu\n", on_down);
  for (auto& s : v->shards)
    if (!s.to.empty())
      std::printf("shard %u is moving from node '%s' to node '%s' (epoch %llu%s)\n", s.shard,
                  s.owner.c_str(), s.to.c_str(), static_cast<unsigned long long>(s.epoch),
                  s.copying ? ", copying while it serves" : ", not served");
  if (v->settings.replicas > 1)
    for (auto& s : v->shards)
      if (!s.owner.empty() && s.isr.size() < s.replicas.size()) {
        std::string out;
        for (auto& id : s.replicas)
          if (std::find(s.isr.begin(), s.isr.end(), id) == s.isr.end())
            out += (out.empty() ? "" : ", ") + id;
        std::printf("shard %u (owner '%s', epoch %llu): out of sync: %s\n", s.shard,
                    s.owner.c_str(), static_cast<unsigned long long>(s.epoch), out.c_str());
      }
  if (v->settings.replicas > 1) {
    for (auto& [id, why] : lags.unreachable)
      std::printf("followers' lag at node '%s' unknown: %s\n", id.c_str(), why.c_str());
    for (auto& s : v->shards) {
      if (s.owner.empty())
        continue;
      std::string isr;
      for (auto& id : s.isr)
        isr += (isr.empty() ? "" : ",") + id;
      std::printf("shard %u: owner '%s', epoch %llu, in sync [%s]", s.shard, s.owner.c_str(),
                  static_cast<unsigned long long>(s.epoch), isr.c_str());
      auto l = lags.shards.find(s.shard);
      if (l != lags.shards.end())
        for (std::size_t i = 0; i < l->second.size(); ++i)
          std::printf("%s%s", i == 0 ? "; lag: " : ", ", lag_text(l->second[i]).c_str());
      std::printf("\n");
    }
  }
  return 0;
}

void print_move(const move_report& r, bool as_json) {
  if (as_json) {
    std::printf("%s\n", r.to_json().dump().c_str());
  } else if (r.nothing_to_do) {
    std::printf("shard %u is on node '%s' already\n", r.shard, r.to.c_str());
  } else if (r.undone) {
    std::printf("shard %u stays on node '%s' (epoch %llu): the move away from it is undone\n",
                r.shard, r.to.c_str(), static_cast<unsigned long long>(r.epoch));
  } else {
    std::printf("moved shard %u from node '%s' to node '%s' (epoch %llu): %llu sessions, %llu "
                "rows in %llu chunks; its requests were refused for %.0f ms\n",
                r.shard, r.from.c_str(), r.to.c_str(), static_cast<unsigned long long>(r.epoch),
                static_cast<unsigned long long>(r.sessions),
                static_cast<unsigned long long>(r.rows), static_cast<unsigned long long>(r.chunks),
                r.unavailable_ms);
  }
  std::fflush(stdout);
}

result<move_options> node_options(const cluster_args& a) {
  auto made = client_options_of(a.remote);
  if (!made)
    return std::move(made).err();
  move_options o;
  o.node = std::move(*made);
  o.node.connect_timeout = std::chrono::milliseconds(5000);
  return o;
}

int run_move(cluster::coordinator& c, const cluster_args& a) {
  if (a.args.size() != 2)
    return usage_error("cluster", "move takes SHARD NODE");
  char* end = nullptr;
  unsigned long shard = std::strtoul(a.args[0].c_str(), &end, 10);
  if (a.args[0].empty() || *end != '\0' || a.args[0][0] == '-' || shard > 65535)
    return usage_error("cluster", "SHARD is a shard number, not '" + a.args[0] + "'");
  if (auto problem = a.remote.problem(); !problem.empty())
    return usage_error("cluster", problem);
  auto o = node_options(a);
  if (!o)
    return fail("move", o.err());
  ::signal(SIGPIPE, SIG_IGN);
  auto r = move_shard(c, static_cast<std::uint32_t>(shard), a.args[1], *o);
  if (!r)
    return fail("move", r.err());
  print_move(*r, a.json);
  return 0;
}

int run_drain(cluster::coordinator& c, const cluster_args& a) {
  if (a.args.size() != 1)
    return usage_error("cluster", "drain takes NODE");
  if (auto problem = a.remote.problem(); !problem.empty())
    return usage_error("cluster", problem);
  auto o = node_options(a);
  if (!o)
    return fail("drain", o.err());
  ::signal(SIGPIPE, SIG_IGN);
  auto r = drain_node(c, a.args[0], *o, [&a](const move_report& m) { print_move(m, a.json); });
  if (!r)
    return fail("drain", r.err());
  if (!a.json)
    std::printf("node '%s' owns no shard now (%zu moved)\n", a.args[0].c_str(), *r);
  return 0;
}

int run_cluster_verify(cluster::coordinator& c, const cluster_args& a) {
  if (!a.args.empty())
    return usage_error("cluster", "verify takes no further arguments");
  if (auto problem = a.remote.problem(); !problem.empty())
    return usage_error("cluster", problem);
  auto o = node_options(a);
  if (!o)
    return fail("verify", o.err());
  o->retries = 2; // a node that is down is reported, not waited for
  ::signal(SIGPIPE, SIG_IGN);
  auto r = verify_replicas(c, *o, [&a](const json& p) {
    if (a.json)
      return;
    std::printf("shard %u at node '%s': %s\n", p["shard"].get<std::uint32_t>(),
                p["node"].get<std::string>().c_str(), p["why"].get<std::string>().c_str());
    std::fflush(stdout);
  });
  if (!r)
    return fail("verify", r.err());
  if (a.json)
    std::printf("%s\n", r->to_json().dump().c_str());
  else
    std::printf("%u replicated shards: %llu in-sync copies compared with their owners, %llu "
                "equal, %llu different; %llu copies out of sync (not compared)\n",
                r->shards, static_cast<unsigned long long>(r->copies),
                static_cast<unsigned long long>(r->equal),
                static_cast<unsigned long long>(r->different),
                static_cast<unsigned long long>(r->out_of_sync));
  return r->different == 0 ? 0 : exit_failed;
}

int run_adopt(cluster::coordinator& c, const cluster_args& a) {
  if (a.args.size() != 1)
    return usage_error("cluster", "adopt takes DIR");
  if (auto problem = a.remote.problem(); !problem.empty())
    return usage_error("cluster", problem);
  const std::string& dir = a.args[0];
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::path(dir) / "data.mdb", ec))
    return fail("adopt", error{errc::not_found, "no store in '" + dir + "' (no data.mdb)"});
  auto o = node_options(a);
  if (!o)
    return fail("adopt", o.err());
  options opts;
  opts.dir = dir;
  // Only read: the store's expired sessions go with it (the cluster's
  // reapers delete them there), none is deleted here.
  opts.reap_interval = std::chrono::hours(24 * 365);
  auto local = engine::open(opts);
  if (!local)
    return fail("adopt", error{local.code(), "cannot open '" + dir + "': " + local.err().message});
  ::signal(SIGPIPE, SIG_IGN);
  auto r = adopt_store(
    c, **local, *o, [&a](std::uint32_t shard, const std::string& owner, const adopt_report& t) {
      if (a.json)
        return;
      std::printf("shard %u: adopted by node '%s' (%llu sessions so far)\n", shard, owner.c_str(),
                  static_cast<unsigned long long>(t.sessions));
      std::fflush(stdout);
    });
  (*local)->close();
  if (!r)
    return fail("adopt", r.err());
  if (a.json)
    std::printf("%s\n", r->to_json().dump().c_str());
  else
    std::printf("adopted '%s' into %s: %llu sessions added, %llu sessions and scopes were there "
                "already; '%s' is unchanged\n",
                dir.c_str(), c.describe().c_str(), static_cast<unsigned long long>(r->sessions),
                static_cast<unsigned long long>(r->present), dir.c_str());
  return 0;
}

runner define_cluster(command_line& cl) {
  auto a = std::make_shared<cluster_args>();
  cl.usage = "agentstate cluster init --etcd URLS --cluster NAME [--shards N]\n"
             "    [--expect-nodes N] [--replicas R [--min-insync M]]\n"
             "agentstate cluster status --etcd URLS --cluster NAME [--json]\n"
             "    [--token-file FILE] [--tls] [--tls-ca FILE]\n"
             "    [--tls-cert FILE --tls-key FILE]\n"
             "agentstate cluster move SHARD NODE --etcd URLS --cluster NAME [--json]\n"
             "    [--token-file FILE] [--tls] [--tls-ca FILE]\n"
             "    [--tls-cert FILE --tls-key FILE]\n"
             "agentstate cluster drain NODE --etcd URLS --cluster NAME [--json]\n"
             "    [options of move]\n"
             "agentstate cluster adopt DIR --etcd URLS --cluster NAME [--json]\n"
             "    [options of move]\n"
             "agentstate cluster verify --etcd URLS --cluster NAME [--json]\n"
             "    [options of move]";
  cl.description = "A cluster is several `agentstate serve` nodes holding disjoint shards of one\n"
                   "logical store; etcd holds its configuration (the shard map, the node\n"
                   "registry). init creates the cluster's keys (refused when it exists). status\n"
                   "lists its nodes (id, address, alive, shards owned), the controller, and the\n"
                   "shards without an owner or on nodes that are down, and those moving; with\n"
                   "replicas, each shard's owner, epoch and in-sync set, and each follower's\n"
                   "lag in records (write sets) and ms, asked of the owners (stats). move\n"
                   "copies shard SHARD from its owner to node NODE and makes NODE its owner; its\n"
                   "requests answer unavailable (retryable) while it is copied. drain moves every\n"
                   "shard of node NODE to the other live nodes, two at a time. adopt adds the\n"
                   "store in DIR (a single-node store no process holds) to the cluster: each\n"
                   "session, with its events and its user: and app: state, goes to its shard's\n"
                   "owner; DIR is left as it was. verify compares, online, every in-sync copy\n"
                   "of every replicated shard with its owner's (position and digest) and exits 1\n"
                   "when one differs. They reach the nodes with a token granting '*'\n"
                   "(--token-file, or $AGENTSTATE_TOKEN).";
  cl.exit_status(exit_failed,
                 "etcd or a node could not be reached, the cluster exists (init) or "
                 "does not, a move or an adoption failed (run it again: it carries on), or "
                 "verify found a copy that differs");
  cl.environment = remote_environment("status, move, drain, adopt, verify: ");
  cl.app.add_option("ACTION", a->action, "init, status, move, drain, adopt or verify")
    ->required()
    ->type_name("ACTION");
  cl.app.add_option("ARGS", a->args, "move: SHARD NODE; drain: NODE; adopt: DIR")
    ->type_name("ARGS");
  cl.app.add_option("--etcd", a->etcd, "etcd's client URLs, comma-separated (http://HOST:PORT)")
    ->required()
    ->type_name("URLS");
  cl.app.add_option("--cluster", a->cluster, "the cluster's name (A-Z a-z 0-9 . _ -)")
    ->required()
    ->type_name("NAME");
  cl.app.add_option("--shards", a->shards, "init: the shard count, fixed for good (default 256)")
    ->type_name("N");
  auto* expect = cl.app
                   .add_option("--expect-nodes", a->expect_nodes,
                               "init: give shards out once this many nodes are live (default 1, "
                               "or R with --replicas R)")
                   ->type_name("N");
  cl.app
    .add_option("--replicas", a->replicas,
                "init: the copies kept of each shard, each on another node (1..7, default "
                "1; move, drain and adopt need 1)")
    ->type_name("R");
  cl.app
    .add_option("--min-insync", a->min_insync,
                "init: the in-sync copies a shard needs to take writes (1..R, default a "
                "majority of R)")
    ->type_name("M");
  add_json_flag(cl, a->json);
  add_remote_flags(cl, a->remote, "reaching the nodes (status, move, drain, adopt, verify)",
                   "the nodes");
  return [a, expect]() -> int {
    a->expect_nodes_given = expect->count() > 0;
    const bool takes_args = a->action == "move" || a->action == "drain" || a->action == "adopt";
    if (a->action != "init" && a->action != "status" && a->action != "verify" && !takes_args)
      return usage_error(
        "cluster", "ACTION is init, status, move, drain, adopt or verify, not '" + a->action + "'");
    if (!takes_args && a->action != "verify" && !a->args.empty())
      return usage_error("cluster", a->action + " takes no further arguments");
    auto c = cluster::make_etcd_coordinator(a->etcd, a->cluster);
    if (!c)
      return usage_error("cluster", c.err().message);
    if (a->action == "move")
      return run_move(**c, *a);
    if (a->action == "drain")
      return run_drain(**c, *a);
    if (a->action == "adopt")
      return run_adopt(**c, *a);
    if (a->action == "verify")
      return run_cluster_verify(**c, *a);
    return a->action == "init" ? run_init(**c, *a) : run_status(**c, *a);
  };
}

const bool cluster_registered = register_command(
  {"cluster", "create, show and rebalance a cluster (configuration in etcd)", define_cluster});

} // namespace

} // namespace agentstate::tools
