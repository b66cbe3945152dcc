// SPDX-License-Identifier: Apache-2.0
// The `app:` scope across a cluster's nodes (docs/cluster.md): three
// `serve --cluster` nodes on a real etcd. Appends and creates on any shard
// have their app: part applied once at the app's home shard, in one order:
// 300 sessions x 10 increments of one app: key through every node end at
// exactly 3,000, and the values the events show are 1..3,000 each once (the
// history checker judges the appends: nothing lost, duplicated or out of
// order). A
// client that got an ack reads its app: write from every node; listings
// show the home's app: state on every session.
#include <doctest/doctest.h>

#include "model/shard.hpp"
#include "server/net_support.hpp"
#include "support/cluster_nodes.hpp"
#include "support/etcd_process.hpp"
#include "support/history.hpp"

#include <algorithm>
#include <map>
#include <set>

namespace {

using namespace agentstate;
using namespace agentstate::test::net;
using namespace std::chrono_literals;

constexpr std::uint32_t app_shards = 16;

/// Three forwarding nodes of cluster "c" (16 shards) on memory stores, and
/// the map once every shard is owned.
struct three_nodes {
  test::etcd_process etcd;
  test::temp_dir dir;
  std::vector<test::cluster_node> n;
  json map;

  three_nodes() {
    test::init_cluster_c(etcd, app_shards, 3);
    for (const char* id : {"a", "b", "c"})
      n.push_back(test::start_cluster_node(etcd, dir, id));
    map = test::settled_map({n[0].port, n[1].port, n[2].port});
  }

  /// The index in `n` of the node that owns `shard`.
  std::size_t owner_of(std::uint32_t shard) const {
    const std::string id = map["shards"][shard]["owner"];
    return static_cast<std::size_t>(id[0] - 'a');
  }
};

json ref_params(const std::string& user, const std::string& id) {
  return json{{"app_name", "app"}, {"user_id", user}, {"session_id", id}};
}

json increment_event(const std::string& id) {
  return json{{"author", "t"}, {"id", id}};
}

json increment_params(const std::string& user, const std::string& id) {
  json p = ref_params(user, "s");
  p["event"] = increment_event(id);
  p["modify"] = json::array({{{"key", "app:count"}, {"op", "increment"}, {"by", 1}}});
  return p;
}

/// Sends every request of `lines` (method, params) on `c` pipelined, then
/// reads their answers; REQUIREs each to succeed and returns the results in
/// the order sent.
std::vector<json> pipelined(client& c, const std::vector<std::pair<std::string, json>>& lines) {
  for (std::size_t i = 0; i < lines.size(); ++i)
    REQUIRE(c.send_line(rpc(i, lines[i].first, lines[i].second)));
  std::vector<json> results(lines.size());
  for (std::size_t k = 0; k < lines.size(); ++k) {
    auto r = c.next(30s);
    REQUIRE(r);
    INFO(r->dump());
    REQUIRE(ok(r));
    results[(*r)["id"].get<std::size_t>()] = (*r)["result"];
  }
  return results;
}

} // namespace

TEST_CASE("cluster app: scope: 300 sessions x 10 increments through three nodes end at exactly "
          "3000, each value once; every node reads the acknowledged writes") {
  three_nodes c;
  constexpr int sessions = 300, rounds = 10;
  std::vector<client> via;
  for (auto& x : c.n)
    via.emplace_back(x.port);
  const auto home = c.owner_of(model::home_shard("app", app_shards));
  // Sessions spread over the shards; each is created through a node that
  // owns neither it nor (for most) the app's home.
  {
    std::vector<std::vector<std::pair<std::string, json>>> per(3);
    for (int i = 0; i < sessions; ++i)
      per[static_cast<std::size_t>(i) % 3].push_back(
        {"create_session", ref_params("u" + std::to_string(i), "s")});
    for (std::size_t k = 0; k < 3; ++k)
      pipelined(via[k], per[k]);
  }
  // Each round: every session's increment through a different node than
  // the round before, the three nodes' batches in flight together; each
  // request is a process of the history (one operation outstanding each).
  test::history_log h;
  auto session_of = [](const json& p) {
    return json::array({p["app_name"], p["user_id"], p["session_id"]});
  };
  std::vector<int> values;
  for (int r = 0; r < rounds; ++r) {
    std::vector<std::vector<std::pair<std::string, json>>> per(3);
    for (int i = 0; i < sessions; ++i)
      per[static_cast<std::size_t>(i + r) % 3].push_back(
        {"append_event", increment_params("u" + std::to_string(i), "e" + std::to_string(r))});
    for (std::size_t k = 0; k < 3; ++k) {
      for (std::size_t i = 0; i < per[k].size(); ++i) {
        const auto& p = per[k][i].second;
        h.add({{"process", std::to_string(k) + "-" + std::to_string(i)},
               {"type", "invoke"},
               {"f", "append"},
               {"session", session_of(p)},
               {"value", {{"event", p["event"]}}}});
        REQUIRE(via[k].send_line(rpc(i, per[k][i].first, p)));
      }
    }
    for (std::size_t k = 0; k < 3; ++k)
      for (std::size_t n = 0; n < per[k].size(); ++n) {
        auto a = via[k].next(30s);
        REQUIRE(a);
        INFO(a->dump());
        REQUIRE(ok(a));
        const auto i = (*a)["id"].get<std::size_t>();
        const auto& res = (*a)["result"];
        h.add({{"process", std::to_string(k) + "-" + std::to_string(i)},
               {"type", "ok"},
               {"f", "append"},
               {"session", session_of(per[k][i].second)},
               {"value", {{"version", res["version"]}, {"event", res["event"]}}}});
        values.push_back(res["event"]["actions"]["state_delta"]["app:count"].get<int>());
      }
  }
  for (int i = 0; i < sessions; ++i) {
    const auto p = ref_params("u" + std::to_string(i), "s");
    auto s = via[static_cast<std::size_t>(i) % 3].call("get_session", p);
    REQUIRE(ok(s));
    h.add(
      {{"type", "final"},
       {"session", session_of(p)},
       {"value", {{"version", (*s)["result"]["version"]}, {"events", (*s)["result"]["events"]}}}});
  }
  h.check(c.dir.str() + "/history.jsonl");
  // Exactly once, in one order: the resolved values are 1..3000.
  std::sort(values.begin(), values.end());
  REQUIRE(values.size() == static_cast<std::size_t>(sessions * rounds));
  for (std::size_t i = 0; i < values.size(); ++i)
    REQUIRE(values[i] == static_cast<int>(i) + 1);
  for (auto& v : via) {
    auto app = v.call("get_app_state", {{"app_name", "app"}});
    REQUIRE(ok(app));
    CHECK((*app)["result"]["count"] == sessions * rounds);
  }
  // Every session, read through every node, shows the app's count and its
  // own ten events with the values its appends were answered.
  for (int i = 0; i < sessions; i += 37)
    for (auto& v : via) {
      auto s = v.call("get_session", ref_params("u" + std::to_string(i), "s"));
      REQUIRE(ok(s));
      CHECK((*s)["result"]["state"]["app:count"] == sessions * rounds);
      CHECK((*s)["result"]["events"].size() == rounds);
    }
  // Read-your-writes: an acknowledged increment is seen by the next read
  // through any node, of the session and of the app.
  for (int j = 0; j < 12; ++j) {
    const auto k = static_cast<std::size_t>(j) % 3;
    const std::string user = "u" + std::to_string(j * 7);
    auto a = via[k].call("append_event", increment_params(user, "ryw" + std::to_string(j)));
    REQUIRE(ok(a));
    const int acked = (*a)["result"]["event"]["actions"]["state_delta"]["app:count"];
    auto s = via[(k + 1) % 3].call("get_session", ref_params(user, "s"));
    REQUIRE(ok(s));
    CHECK((*s)["result"]["state"]["app:count"].get<int>() >= acked);
    auto app = via[(k + 2) % 3].call("get_app_state", {{"app_name", "app"}});
    REQUIRE(ok(app));
    CHECK((*app)["result"]["count"].get<int>() >= acked);
  }
  CHECK(home < 3);
}

TEST_CASE("cluster app: scope: a create with app: state through any node sets it at the home; "
          "listings show the home's app: state on every session") {
  three_nodes c;
  std::vector<client> via;
  for (auto& x : c.n)
    via.emplace_back(x.port);
  const auto home = c.owner_of(model::home_shard("app", app_shards));
  // A user whose sessions are on a node other than the home.
  std::string away;
  for (int i = 0; away.empty(); ++i)
    if (c.owner_of(model::shard_of("app", "w" + std::to_string(i), app_shards)) != home)
      away = "w" + std::to_string(i);
  for (std::size_t k = 0; k < 3; ++k) {
    auto made = via[k].call("create_session",
                            with(ref_params(away, "c" + std::to_string(k)), "state",
                                 {{"app:mode", "m" + std::to_string(k)}, {"own", k}}));
    REQUIRE(ok(made));
    CHECK((*made)["result"]["state"]["app:mode"] == "m" + std::to_string(k));
    CHECK((*made)["result"]["state"]["own"] == k);
  }
  for (auto& v : via) {
    auto app = v.call("get_app_state", {{"app_name", "app"}});
    REQUIRE(ok(app));
    CHECK((*app)["result"] == json{{"mode", "m2"}});
    auto s = v.call("get_session", ref_params(away, "c0"));
    REQUIRE(ok(s));
    CHECK((*s)["result"]["state"] == json{{"app:mode", "m2"}, {"own", 0}});
  }
  // A template renders the home's app: state on every node.
  for (auto& v : via) {
    auto text =
      v.call("inject_state", with(ref_params(away, "c1"), "template", "{app:mode}/{own}"));
    REQUIRE(ok(text));
    CHECK((*text)["result"] == "m2/1");
  }
  // A removal at the home shows everywhere.
  auto rm = via[0].call(
    "append_event",
    with(ref_params(away, "c0"), "event",
         {{"author", "t"}, {"id", "rm"}, {"actions", {{"state_remove", {"app:mode"}}}}}));
  REQUIRE(ok(rm));
  for (auto& v : via) {
    auto s = v.call("get_session", ref_params(away, "c1"));
    REQUIRE(ok(s));
    CHECK((*s)["result"]["state"] == json{{"own", 1}});
  }
  // Sessions on every node: a listing of the app (across the nodes) and of
  // one user show the app: state on each session, or once.
  {
    for (int i = 0; i < 12; ++i)
      REQUIRE(ok(via[static_cast<std::size_t>(i) % 3].call(
        "create_session", ref_params("l" + std::to_string(i), "s"))));
    REQUIRE(ok(via[1].call(
      "append_event",
      with(ref_params("l0", "s"), "event",
           {{"author", "t"}, {"id", "x"}, {"actions", {{"state_delta", {{"app:k", 7}}}}}}))));
  }
  for (auto& v : via) {
    auto page = v.call("list_sessions", {{"app_name", "app"}, {"page_size", 100}});
    REQUIRE(ok(page));
    const auto& ss = (*page)["result"]["sessions"];
    CHECK(ss.size() == 15);
    for (auto& s : ss) {
      INFO(s.dump());
      CHECK(s["state"]["app:k"] == 7);
    }
    auto once =
      v.call("list_sessions", {{"app_name", "app"}, {"page_size", 100}, {"shared_state", "once"}});
    REQUIRE(ok(once));
    CHECK((*once)["result"]["app_state"] == json{{"app:k", 7}});
    auto user = v.call("list_sessions", {{"app_name", "app"}, {"user_id", away}});
    REQUIRE(ok(user));
    CHECK((*user)["result"]["sessions"].size() == 3);
    for (auto& s : (*user)["result"]["sessions"])
      CHECK(s["state"]["app:k"] == 7);
  }
}
