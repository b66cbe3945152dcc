// SPDX-License-Identifier: Apache-2.0
// `agentstate serve --cluster ... --no-forward` on a real etcd: nodes join and
// share the shards, `cluster_map` answers the map and a pair's shard, a node
// serves its own shards and answers `moved` (with the owner's address) for
// the others, a client that follows `moved` reaches every session, requests
// across shards are refused, app: writes reach the app's home, and a node
// killed with kill -9
// turns its shards `unavailable` on the others while theirs keep serving.
// Forwarding nodes: requests forwarded in order, listings, feeds and watches
// of an app or of everything across the nodes (merged cursors), with tokens
// and TLS between nodes.
#include <doctest/doctest.h>

#include "cluster/span.hpp"
#include "model/shard.hpp"
#include "server/net_support.hpp"
#include "support/cluster_nodes.hpp"
#include "support/etcd_process.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

namespace {

using namespace agentstate;
using namespace agentstate::test::net;
using namespace std::chrono_literals;

constexpr std::uint32_t shard_count = 16;

using node_proc = test::cluster_node;
using test::settled_map;

node_proc start_node(const test::etcd_process& etcd, const test::temp_dir& dir,
                     const std::string& id, std::vector<std::string> extra = {}) {
  extra.insert(extra.begin(), "--no-forward");
  return test::start_cluster_node(etcd, dir, id, extra);
}

/// A node that forwards requests for other nodes' shards.
node_proc start_forwarding(const test::etcd_process& etcd, const test::temp_dir& dir,
                           const std::string& id, const std::vector<std::string>& extra = {}) {
  return test::start_cluster_node(etcd, dir, id, extra);
}

/// `agentstate cluster init` of cluster "c": 16 shards, given out once 2
/// nodes are live.
void init_cluster(const test::etcd_process& etcd) {
  auto r = test::net::shell(std::string(AGENTSTATE_BIN) + " cluster init --etcd " + etcd.url()
                            + " --cluster c --shards 16 --expect-nodes 2");
  INFO(r.second);
  REQUIRE(r.first == 0);
}

/// The cluster_map a node answers (REQUIREs success).
json map_of(int port, json params = json::object()) {
  client c(port);
  auto r = c.call("cluster_map", std::move(params));
  REQUIRE(r);
  INFO(r->dump());
  REQUIRE(ok(r));
  return (*r)["result"];
}

/// The results of `method` paged from nodes `a` and `b` in turn: each page
/// asks with `params` and, after the first, `resume` set to the previous
/// result's `next`, until `last(result)` (REQUIREd within 20 pages).
std::vector<json> pages_in_turn(client& a, client& b, const std::string& method, const json& params,
                                const std::string& resume, const std::string& next,
                                const std::function<bool(const json&)>& last) {
  std::vector<json> out;
  for (int page = 0;; ++page) {
    REQUIRE(page < 20);
    json p = params;
    if (!out.empty())
      p[resume] = out.back()[next];
    auto r = (page % 2 ? b : a).call(method, p);
    REQUIRE(r);
    INFO(r->dump());
    REQUIRE(ok(r));
    out.push_back((*r)["result"]);
    if (last(out.back()))
      return out;
  }
}

/// An etcd, cluster "c" and two forwarding nodes, a and b (each with its
/// extra serve flags), once each node's view names every shard's owner.
struct forwarding_pair {
  test::etcd_process etcd;
  test::temp_dir dir;
  node_proc a, b;
  json map;

  explicit forwarding_pair(const std::vector<std::string>& extra_a = {},
                           const std::vector<std::string>& extra_b = {}) {
    init_cluster(etcd);
    a = start_forwarding(etcd, dir, "a", extra_a);
    b = start_forwarding(etcd, dir, "b", extra_b);
    map = settled_map({a.port, b.port});
  }
};

json create_params(const std::string& user, const std::string& id) {
  return json{{"app_name", "app"}, {"user_id", user}, {"session_id", id}};
}

/// A change of a watch, by what it did: (user, version).
using change_key = std::pair<std::string, int>;

change_key key_of(const json& c) {
  return {c["user_id"].get<std::string>(), c["version"].get<int>()};
}

/// The changes of watch `id` read from `c` until `n` have come (each line
/// within 10 s); every batch's and change's cursor is a merged one.
std::vector<json> watched(client& c, const std::string& id, std::size_t n) {
  std::vector<json> out;
  while (out.size() < n) {
    auto line = c.next();
    REQUIRE(line);
    INFO(line->dump());
    REQUIRE((*line)["method"] == "changes");
    REQUIRE((*line)["params"]["watch_id"] == id);
    CHECK((*line)["params"]["cursor"].get<std::string>().rfind("nodes:", 0) == 0);
    for (auto& ch : (*line)["params"]["changes"]) {
      CHECK(ch["cursor"].get<std::string>().rfind("nodes:", 0) == 0);
      out.push_back(ch);
    }
  }
  CHECK(out.size() == n);
  return out;
}

/// Starts a watch on `c` (a client or a raw_socket; REQUIREs its answer,
/// the first line) and returns its id.
template <class Conn>
std::string start_watch(Conn& c, const json& params) {
  std::optional<json> r = c.call("watch", params, "w");
  REQUIRE(r);
  INFO(r->dump());
  REQUIRE(ok(r));
  CHECK((*r)["result"]["cursor"].get<std::string>().rfind("nodes:", 0) == 0);
  return (*r)["result"]["watch_id"];
}

/// Each session's changes in the order they came are its versions 0, 1, ...
void check_session_order(const std::vector<json>& changes) {
  std::map<std::string, int> next;
  for (auto& c : changes) {
    const std::string user = c["user_id"];
    auto it = next.emplace(user, c["version"].get<int>()).first;
    CHECK(c["version"] == it->second);
    it->second = c["version"].get<int>() + 1;
  }
}

json event_of(int n) {
  return json{
    {"author", "t"}, {"id", "e" + std::to_string(n)}, {"actions", {{"state_delta", {{"k", n}}}}}};
}

} // namespace

TEST_CASE("serve --cluster: moved names the owner; following it reaches every session") {
  test::etcd_process etcd;
  test::temp_dir dir;
  init_cluster(etcd);
  auto a = start_node(etcd, dir, "a");
  auto b = start_node(etcd, dir, "b");
  json m = settled_map({a.port, b.port});
  CHECK(m["cluster"] == "c");
  CHECK(m["node"] == "a");
  CHECK(m["shard_count"] == shard_count);
  REQUIRE(m["nodes"].size() == 2);
  std::map<std::string, int> port_of{{"a", a.port}, {"b", b.port}};
  std::map<std::string, std::string> address_of;
  for (auto& n : m["nodes"]) {
    CHECK(n["alive"] == true);
    address_of[n["id"]] = n["address"];
  }
  CHECK(address_of["a"] == "127.0.0.1:" + std::to_string(a.port));
  std::map<std::string, int> owned;
  for (auto& s : m["shards"])
    ++owned[s["owner"].get<std::string>()];
  CHECK(owned["a"] == 8);
  CHECK(owned["b"] == 8);
  // The pair's shard, as model/shard.hpp (and docs/cluster.md) compute it.
  json pm = map_of(b.port, {{"app_name", "app"}, {"user_id", "u1"}});
  CHECK(pm["shard"] == model::shard_of("app", "u1", shard_count));
  CHECK(pm["home_shard"] == model::home_shard("app", shard_count));
  client bad(a.port);
  CHECK(kind_of(bad.call("cluster_map", {{"app_name", 3}})) == "invalid_argument");

  // 24 users: each session is created through node a, following moved.
  for (int u = 0; u < 24; ++u) {
    const std::string user = "u" + std::to_string(u);
    const auto shard = model::shard_of("app", user, shard_count);
    const std::string owner = m["shards"][shard]["owner"];
    const std::string other = owner == "a" ? "b" : "a";
    client wrong(port_of[other]);
    auto r = wrong.call("create_session", create_params(user, "s"));
    REQUIRE(r);
    INFO(r->dump());
    REQUIRE(kind_of(r) == "moved");
    auto data = (*r)["error"]["data"];
    CHECK(data["shard"] == shard);
    CHECK(data["owner"] == owner);
    CHECK(data["address"] == address_of[owner]);
    CHECK(data["epoch"] == 1);
    // Nothing was created on the wrong node: the owner creates it once.
    client right(port_of[owner]);
    CHECK(ok(right.call("create_session", create_params(user, "s"))));
    auto ev = json{{"author", "t"}, {"id", "e1"}, {"actions", {{"state_delta", {{"k", u}}}}}};
    CHECK(ok(right.call("append_event", with(create_params(user, "s"), "event", ev))));
    // The direct reader of append_event lines routes too.
    CHECK(kind_of(wrong.call("append_event", with(create_params(user, "s"), "event", ev)))
          == "moved");
    auto got = right.call("get_session", create_params(user, "s"));
    REQUIRE(ok(got));
    CHECK((*got)["result"]["version"] == 1);
    CHECK((*got)["result"]["state"]["k"] == u);
    CHECK(kind_of(wrong.call("get_session", create_params(user, "s"))) == "moved");
  }
  // A user's scope lives with its sessions; the app's scope on its home shard.
  client ca(a.port);
  const std::string home = m["shards"][model::home_shard("app", shard_count)]["owner"];
  CHECK(ok(client(port_of[home]).call("get_app_state", {{"app_name", "app"}})));
  CHECK(
    kind_of(client(port_of[home == "a" ? "b" : "a"]).call("get_app_state", {{"app_name", "app"}}))
    == "moved");
  // Without forwarding, requests across the nodes' shards are refused, not
  // answered in part.
  CHECK(kind_of(ca.call("list_sessions", {{"app_name", "app"}})) == "invalid_argument");
  CHECK(kind_of(ca.call("read_changes", {{"scope", "all"}})) == "invalid_argument");
  CHECK(kind_of(ca.call("watch", {{"scope", "all"}})) == "invalid_argument");
  CHECK(kind_of(ca.call("delete_app", {{"app_name", "app"}})) == "invalid_argument");
  // app: writes reach the app's home from the session's node (--no-forward
  // or not), and its reads show the home's app: state.
  const auto s0 = model::shard_of("app", "u0", shard_count);
  client owner0(port_of[m["shards"][s0]["owner"].get<std::string>()]);
  auto appw = json{{"author", "t"}, {"id", "e2"}, {"actions", {{"state_delta", {{"app:x", 1}}}}}};
  REQUIRE(ok(owner0.call("append_event", with(create_params("u0", "s"), "event", appw))));
  auto after = owner0.call("get_session", create_params("u0", "s"));
  REQUIRE(ok(after));
  CHECK((*after)["result"]["version"] == 2);
  CHECK((*after)["result"]["state"]["app:x"] == 1);
  auto at_home = client(port_of[home]).call("get_app_state", {{"app_name", "app"}});
  REQUIRE(ok(at_home));
  CHECK((*at_home)["result"] == json{{"x", 1}});
  // ping and stats are the node's own.
  CHECK(ok(ca.call("ping")));
}

TEST_CASE("serve --cluster: a node killed with kill -9 leaves its shards unavailable, "
          "the others serving") {
  test::etcd_process etcd;
  test::temp_dir dir;
  init_cluster(etcd);
  auto a = start_node(etcd, dir, "a");
  auto b = start_node(etcd, dir, "b");
  json m = settled_map({a.port, b.port});
  // An app whose home shard is on a, the node that stays up (a session's
  // answers show its app: state), and one whose home is on b.
  std::string app, app_b;
  for (int i = 0; i < 1000 && (app.empty() || app_b.empty()); ++i) {
    const std::string name = "app" + std::to_string(i);
    (m["shards"][model::home_shard(name, shard_count)]["owner"] == "a" ? app : app_b) = name;
  }
  REQUIRE(!app.empty());
  REQUIRE(!app_b.empty());
  auto params = [](const std::string& in, const std::string& user) {
    return json{{"app_name", in}, {"user_id", user}, {"session_id", "s"}};
  };
  std::string on_a, on_b; // a user on each node's shards
  for (int u = 0; u < 64 && (on_a.empty() || on_b.empty()); ++u) {
    std::string user = "u" + std::to_string(u);
    auto owner = m["shards"][model::shard_of(app, user, shard_count)]["owner"];
    (owner == "a" ? on_a : on_b) = user;
  }
  REQUIRE(!on_a.empty());
  REQUIRE(!on_b.empty());
  std::string b_home_user; // a user of app_b on a's shards
  for (int u = 0; u < 64 && b_home_user.empty(); ++u)
    if (m["shards"][model::shard_of(app_b, "u" + std::to_string(u), shard_count)]["owner"] == "a")
      b_home_user = "u" + std::to_string(u);
  REQUIRE(!b_home_user.empty());
  b.proc->signal(SIGKILL);
  // b's lease (2 s) expires in etcd and a's view follows (polled every 100 ms).
  std::optional<json> r;
  REQUIRE(test::eventually(
    [&] {
      client ca(a.port);
      r = ca.call("create_session", params(app, on_b));
      REQUIRE(r);
      if (kind_of(r) == "unavailable")
        return true;
      REQUIRE(kind_of(r) == "moved"); // to the dead address, until the lease expires
      return false;
    },
    15s, 100ms));
  INFO(r->dump());
  CHECK((*r)["error"]["data"]["owner"] == "b");
  // a's own shards never stopped.
  client ca(a.port);
  CHECK(ok(ca.call("create_session", params(app, on_a))));
  // A session of an app whose home is b's: its answer would lack the app:
  // state, so it is refused before it runs, naming the home.
  auto partial = ca.call("create_session", params(app_b, b_home_user));
  CHECK(kind_of(partial) == "unavailable");
  CHECK((*partial)["error"]["message"].get<std::string>().find("app: state") != std::string::npos);
  auto nothing = client(a.port).call(
    "read_changes", {{"scope", "user"}, {"app_name", app_b}, {"user_id", b_home_user}});
  REQUIRE(ok(nothing));
  CHECK((*nothing)["result"]["changes"].empty());
  // The map still names b the owner: a shard keeps its owner while it is down.
  json after = map_of(a.port);
  for (std::size_t i = 0; i < shard_count; ++i)
    CHECK(after["shards"][i]["owner"] == m["shards"][i]["owner"]);
}

TEST_CASE("serve --cluster: a node forwards another node's requests in order, and answers "
          "unavailable when the owner is down") {
  forwarding_pair nodes;
  auto& fa = nodes.a;
  auto& fb = nodes.b;
  const json& m = nodes.map;
  std::vector<std::string> on_b;
  for (int u = 0; u < 200 && on_b.size() < 4; ++u) {
    std::string user = "u" + std::to_string(u);
    if (m["shards"][model::shard_of("app", user, shard_count)]["owner"] == "b")
      on_b.push_back(user);
  }
  REQUIRE(on_b.size() == 4);
  client ca(fa.port);
  for (auto& user : on_b)
    REQUIRE(ok(ca.call("create_session", create_params(user, "s"))));
  // 100 appends per session pipelined through a, without waiting: b stores
  // them in the order a received them.
  int id = 0;
  for (int k = 0; k < 100; ++k)
    for (auto& user : on_b) {
      json ev{{"author", "t"}, {"id", "e" + std::to_string(k)}};
      REQUIRE(ca.send_line(rpc(id++, "append_event", with(create_params(user, "s"), "event", ev))));
    }
  std::map<std::string, std::vector<int>> versions; // per session, in answer order
  for (int i = 0; i < id; ++i) {
    auto r = ca.next(30s);
    REQUIRE(r);
    INFO(r->dump());
    REQUIRE(ok(r));
    auto n = (*r)["id"].get<int>();
    versions[on_b[static_cast<std::size_t>(n) % on_b.size()]].push_back(
      (*r)["result"]["version"].get<int>());
  }
  for (auto& user : on_b) {
    auto& v = versions[user];
    REQUIRE(v.size() == 100);
    for (int k = 0; k < 100; ++k)
      CHECK(v[static_cast<std::size_t>(k)] == k + 1);
    // The events are on b: read through a and on b itself alike.
    auto via_a = ca.call("get_session", create_params(user, "s"));
    REQUIRE(ok(via_a));
    CHECK((*via_a)["result"]["version"] == 100);
    CHECK((*via_a)["result"]["events"][99]["id"] == "e99");
    auto direct = client(fb.port).call("get_session", create_params(user, "s"));
    REQUIRE(ok(direct));
    CHECK((*direct)["result"]["events"] == (*via_a)["result"]["events"]);
  }
  // A forwarded error keeps its kind and data.
  CHECK(kind_of(ca.call("create_session", create_params(on_b[0], "s"))) == "already_exists");
  auto conflict =
    ca.call("append_event",
            with(with(create_params(on_b[0], "s"), "event", json{{"author", "t"}, {"id", "x"}}),
                 "expected_version", 3));
  CHECK(kind_of(conflict) == "version_conflict");
  CHECK((*conflict)["error"]["data"]["current_version"] == 100);
  // The owner is down: a answers unavailable at once, and serves its own.
  fb.proc->signal(SIGKILL);
  // Its reaping, bounded (5 s); the answers below are the checks.
  (void)fb.proc->exited_within(5s);
  auto down = ca.call("get_session", create_params(on_b[0], "s"), "d", 10s);
  CHECK(kind_of(down) == "unavailable");
  CHECK(ok(ca.call("ping")));
}

TEST_CASE("serve --cluster: a forwarded request's params go on as its line has them (any "
          "layout, an escaped member name, params twice) and its answer is the owner's line") {
  forwarding_pair nodes;
  const json& m = nodes.map;
  std::string user;
  for (int u = 0; u < 200 && user.empty(); ++u)
    if (m["shards"][model::shard_of("app", "u" + std::to_string(u), shard_count)]["owner"] == "b")
      user = "u" + std::to_string(u);
  REQUIRE(!user.empty());
  // Raw: lines in layouts no client writes, and the answers' bytes compared.
  raw_socket ca(nodes.a.port), cb(nodes.b.port);
  const std::string ref = R"("app_name":"app","user_id":")" + user + R"(","session_id":"s")";
  REQUIRE(ok(ca.call("create_session", create_params(user, "s"))));
  // A value holding what a scanner of the line could trip on.
  std::string append = R"({"jsonrpc":"2.0","id":1,"method":"append_event","params":{)" + ref
    + R"(,"event":{"author":"t","id":"e1","actions":{"state_delta":{"k":"}\"],{[\u00e9 \\"}}}}})";
  REQUIRE(ca.send(append + "\n"));
  auto appended = ca.next();
  REQUIRE(appended);
  INFO(appended->dump());
  REQUIRE(ok(appended));
  CHECK((*appended)["result"]["event"]["actions"]["state_delta"]["k"] == "}\"],{[\xc3\xa9 \\");
  const std::string lines[] = {
    // Spaces around every token, params first.
    R"( { "params" : { )" + ref
      + R"( } , "id" : 7 , "jsonrpc" : "2.0" , "method" : "get_session" } )",
    // An escaped member name: read as JSON.
    R"({"jsonrpc":"2.0","id":7,"method":"get_session","par\u0061ms":{)" + ref + "}}",
    // params twice: the last one counts, forwarded or not.
    R"({"jsonrpc":"2.0","id":7,"method":"get_session","params":{"app_name":"app","user_id":")"
      + user + R"(","session_id":"none"},"params":{)" + ref + "}}",
    // An error answer (the session is not there).
    R"({"jsonrpc":"2.0","id":7,"method":"get_session","params":{"app_name":"app","user_id":")"
      + user + R"(","session_id":"none"}})",
  };
  for (const auto& line : lines) {
    INFO("line: ", line);
    REQUIRE(ca.send(line + "\n"));
    REQUIRE(cb.send(line + "\n"));
    auto via_a = ca.next_raw();
    auto on_b = cb.next_raw();
    REQUIRE(via_a);
    REQUIRE(on_b);
    CHECK(*via_a == *on_b);
    CHECK(via_a->find("\"id\":7,") != std::string::npos);
  }
}

TEST_CASE("serve --cluster: list_sessions of an app pages across the nodes, each session once in "
          "order; read_changes merges the nodes' feeds; delete_app removes the app from every "
          "node") {
  forwarding_pair nodes;
  auto& fa = nodes.a;
  auto& fb = nodes.b;
  const json& m = nodes.map;
  client ca(fa.port), cb(fb.port);
  using id_pair = std::pair<std::string, std::string>;
  std::set<id_pair> made;
  std::map<std::string, int> per_owner;
  for (int u = 0; u < 10; ++u)
    for (int k = 0; k < 3; ++k) {
      std::string user = "u" + std::to_string(u), id = "s" + std::to_string(k);
      REQUIRE(ok(ca.call("create_session", create_params(user, id))));
      made.insert({user, id});
      ++per_owner[m["shards"][model::shard_of("app", user, shard_count)]["owner"]];
    }
  REQUIRE(per_owner["a"] > 0);
  REQUIRE(per_owner["b"] > 0);
  REQUIRE(
    ok(ca.call("create_session", {{"app_name", "other"}, {"user_id", "u0"}, {"session_id", "x"}})));
  for (std::string order_by : {"id", "created", "update_time"})
    for (std::string order : {"asc", "desc"}) {
      INFO(order_by, " ", order);
      std::vector<id_pair> listed;
      std::vector<double> times;
      // Pages of 7 from the two nodes in turn: a token made by one serves on the other.
      json p{{"app_name", "app"},
             {"page_size", 7},
             {"order_by", order_by},
             {"order", order},
             {"include_total", true}};
      for (auto& res :
           pages_in_turn(ca, cb, "list_sessions", p, "page_token", "next_page_token",
                         [](const json& r) { return r["next_page_token"].is_null(); })) {
        CHECK(res["sessions"].size() <= 7);
        CHECK(res["total"] == 30);
        for (auto& s : res["sessions"]) {
          CHECK(!s.contains("page_token"));
          listed.emplace_back(s["user_id"], s["id"]);
          times.push_back(s["last_update_time"]);
        }
      }
      CHECK(listed.size() == 30);
      CHECK(std::set<id_pair>(listed.begin(), listed.end()) == made);
      if (order_by == "id") {
        auto sorted = listed;
        std::sort(sorted.begin(), sorted.end());
        if (order == "desc")
          std::reverse(sorted.begin(), sorted.end());
        CHECK(listed == sorted);
      }
      if (order_by == "update_time") {
        auto sorted = times;
        std::sort(sorted.begin(), sorted.end());
        if (order == "desc")
          std::reverse(sorted.begin(), sorted.end());
        CHECK(times == sorted);
      }
    }
  // A session's own token (session_tokens) continues after it, on any node.
  json p{{"app_name", "app"}, {"order_by", "id"}, {"session_tokens", true}};
  auto all = ca.call("list_sessions", p);
  REQUIRE(ok(all));
  auto& sessions = (*all)["result"]["sessions"];
  REQUIRE(sessions.size() == 30);
  auto rest =
    cb.call("list_sessions",
            {{"app_name", "app"}, {"order_by", "id"}, {"page_token", sessions[11]["page_token"]}});
  REQUIRE(ok(rest));
  REQUIRE((*rest)["result"]["sessions"].size() == 18);
  CHECK((*rest)["result"]["sessions"][0]["id"] == sessions[12]["id"]);
  CHECK((*rest)["result"]["sessions"][0]["user_id"] == sessions[12]["user_id"]);
  CHECK(kind_of(ca.call("list_sessions", {{"app_name", "app"}, {"offset", 2}}))
        == "invalid_argument");
  // The app's change feed across nodes, in pages of 7 from the two nodes in
  // turn: every create once, then at_head.
  std::vector<json> feed;
  json fp{{"scope", "app"}, {"app_name", "app"}, {"include_sessions", true}, {"limit", 7}};
  for (auto& res : pages_in_turn(ca, cb, "read_changes", fp, "from", "cursor",
                                 [](const json& r) { return r["at_head"] == true; })) {
    CHECK(res["changes"].size() <= 7);
    for (auto& c : res["changes"])
      feed.push_back(c);
    CHECK(res["cursor"].get<std::string>().rfind("nodes:", 0) == 0);
  }
  std::multiset<id_pair> created;
  for (auto& c : feed) {
    CHECK(c["kind"] == "create");
    created.emplace(c["user_id"], c["session_id"]);
  }
  CHECK(created.size() == 30);
  CHECK(std::set<id_pair>(created.begin(), created.end()) == made);
  // A change's own cursor resumes right after it.
  REQUIRE(feed.size() == 30);
  auto after = cb.call("read_changes",
                       {{"scope", "app"},
                        {"app_name", "app"},
                        {"include_sessions", true},
                        {"from", feed[9]["cursor"]}});
  REQUIRE(ok(after));
  std::set<id_pair> resumed, expected;
  for (auto& c : (*after)["result"]["changes"])
    resumed.emplace(c["user_id"], c["session_id"]);
  for (std::size_t i = 10; i < feed.size(); ++i)
    expected.emplace(feed[i]["user_id"], feed[i]["session_id"]);
  CHECK((*after)["result"]["changes"].size() == 20);
  CHECK(resumed == expected);
  // Every app: the other app's create too. One node's own cursor is refused.
  auto everything = ca.call("read_changes", {{"scope", "all"}, {"limit", 1000}});
  REQUIRE(ok(everything));
  CHECK((*everything)["result"]["changes"].size() == 31);
  auto own = ca.call("read_changes", {{"scope", "all"}, {"this_node", true}, {"limit", 1}});
  REQUIRE(ok(own));
  CHECK(kind_of(ca.call("read_changes", {{"scope", "all"}, {"from", (*own)["result"]["cursor"]}}))
        == "invalid_argument");
  // delete_app through one node: gone from both.
  REQUIRE(ok(cb.call("delete_app", {{"app_name", "app"}})));
  auto empty = ca.call("list_sessions", {{"app_name", "app"}, {"include_total", true}});
  REQUIRE(ok(empty));
  CHECK((*empty)["result"]["sessions"].empty());
  CHECK((*empty)["result"]["total"] == 0);
  for (int u = 0; u < 10; ++u) {
    auto got = ca.call("get_session", create_params("u" + std::to_string(u), "s0"));
    REQUIRE(ok(got));
    CHECK((*got)["result"].is_null());
  }
  auto other = cb.call("list_sessions", {{"app_name", "other"}});
  REQUIRE(ok(other));
  CHECK((*other)["result"]["sessions"].size() == 1);
  // A node down: the request spanning it is unavailable, not answered in part.
  fb.proc->signal(SIGKILL);
  // Its reaping, bounded (5 s); the answers below are the checks.
  (void)fb.proc->exited_within(5s);
  CHECK(kind_of(ca.call("list_sessions", {{"app_name", "other"}}, "d", 10s)) == "unavailable");
}

TEST_CASE("serve --cluster with --auth-file: nodes forward with their node token; a client's "
          "token is checked by the node it reached") {
  test::etcd_process etcd;
  test::temp_dir dir;
  init_cluster(etcd);
  const std::string node_token = "node-token-0123456789abcdef";
  const std::string app_token = "app-token-0123456789abcdef";
  write_text(dir.str() + "/tokens", node_token + " *\n" + app_token + " app\n");
  ::chmod((dir.str() + "/tokens").c_str(), 0600);
  write_text(dir.str() + "/node-token", node_token + "\n");
  std::vector<std::string> secured{"--auth-file", dir.str() + "/tokens", "--node-token-file",
                                   dir.str() + "/node-token"};
  auto fa = start_forwarding(etcd, dir, "a", secured);
  auto fb = start_forwarding(etcd, dir, "b", secured);
  client ca(fa.port);
  REQUIRE(ok(ca.call("authenticate", {{"token", node_token}})));
  json m = settled_map({fa.port, fb.port}, node_token);
  std::string user;
  for (int u = 0; u < 200 && user.empty(); ++u)
    if (m["shards"][model::shard_of("app", "u" + std::to_string(u), shard_count)]["owner"] == "b")
      user = "u" + std::to_string(u);
  REQUIRE(!user.empty());
  client app(fa.port);
  REQUIRE(ok(app.call("authenticate", {{"token", app_token}})));
  CHECK(ok(app.call("create_session", create_params(user, "s"))));
  CHECK(ok(app.call("append_event",
                    with(create_params(user, "s"), "event", json{{"author", "t"}, {"id", "e1"}}))));
  auto got = app.call("get_session", create_params(user, "s"));
  REQUIRE(ok(got));
  CHECK((*got)["result"]["version"] == 1);
  // The app token does not reach another app, forwarded or not.
  CHECK(kind_of(app.call("get_session",
                         json{{"app_name", "other"}, {"user_id", user}, {"session_id", "s"}}))
        == "permission_denied");
  // A watch of the app across the nodes: the app token here, the node token
  // to node b; another app's or everything's is refused here.
  CHECK(kind_of(app.call("watch", {{"scope", "app"}, {"app_name", "other"}}))
        == "permission_denied");
  CHECK(kind_of(app.call("watch", {{"scope", "all"}})) == "permission_denied");
  auto wid = start_watch(app, {{"scope", "app"}, {"app_name", "app"}, {"include_sessions", true}});
  CHECK(ok(ca.call("append_event",
                   with(create_params(user, "s"), "event", json{{"author", "t"}, {"id", "e2"}}))));
  auto changes = watched(app, wid, 1);
  CHECK(changes[0]["user_id"] == user);
  CHECK(changes[0]["version"] == 2);
}

TEST_CASE("serve --cluster with TLS: a node forwards to its peer over TLS, checking the peer's "
          "certificate") {
  test::etcd_process etcd;
  test::temp_dir dir;
  init_cluster(etcd);
  auto tls = make_tls_pair(dir.str(), "node");
  std::vector<std::string> secured{"--tls-cert", tls.cert,        "--tls-key",
                                   tls.key,      "--peer-tls-ca", tls.ca};
  auto fa = start_forwarding(etcd, dir, "a", secured);
  auto fb = start_forwarding(etcd, dir, "b", secured);
  // Each node logs its half once its view has the map; then the map, from etcd.
  for (auto* n : {&fa, &fb})
    n->proc->wait_log("event=shards .*owned=8 shards=16", 15s);
  auto r = test::net::shell(std::string(AGENTSTATE_BIN) + " cluster status --json --etcd "
                              + etcd.url() + " --cluster c",
                            false);
  REQUIRE(r.first == 0);
  json status = json::parse(r.second);
  REQUIRE(status["unowned"].empty());
  std::string user;
  for (int u = 0; u < 200 && user.empty(); ++u) {
    auto shard = model::shard_of("app", "u" + std::to_string(u), shard_count);
    for (auto& e : status["map"])
      if (e["shard"] == shard && e["owner"] == "b")
        user = "u" + std::to_string(u);
  }
  REQUIRE(!user.empty());
  auto p = create_params(user, "s");
  auto out = python_tls(
    fa.port, tls.ca,
    {rpc(1, "create_session", p).dump(),
     rpc(2, "append_event", with(p, "event", json{{"author", "t"}, {"id", "e1"}})).dump(),
     rpc(3, "get_session", p).dump()});
  INFO(out.second);
  REQUIRE(out.first == 0);
  std::istringstream lines(out.second);
  std::string line;
  int answered = 0;
  while (std::getline(lines, line)) {
    if (line.rfind("VERSION ", 0) == 0)
      continue; // the script's report of the TLS version
    auto r = json::parse(line, nullptr, false);
    REQUIRE(r.is_object());
    CHECK(r.contains("result"));
    if (r["id"] == 3)
      CHECK(r["result"]["version"] == 1);
    ++answered;
  }
  CHECK(answered == 3);
}

TEST_CASE("serve --cluster: bad cluster options are usage errors; a missing cluster fails") {
  test::temp_dir dir;
  auto r = test::net::shell(std::string(AGENTSTATE_BIN)
                            + " serve --memory --listen 127.0.0.1:0 --cluster c 2>&1");
  CHECK(r.first == 2);
  CHECK(r.second.find("needs --cluster, --etcd and --node-id") != std::string::npos);
  r = test::net::shell(std::string(AGENTSTATE_BIN)
                       + " serve --memory --cluster c --etcd http://127.0.0.1:1 --node-id n "
                         "--no-forward 2>&1");
  CHECK(r.first == 2);
  CHECK(r.second.find("TCP --listen") != std::string::npos);
  r = test::net::shell(std::string(AGENTSTATE_BIN)
                       + " serve --memory --listen 127.0.0.1:0 --auth-file /nonexistent "
                         "--cluster c --etcd http://127.0.0.1:1 --node-id n 2>&1");
  CHECK(r.first == 2);
  CHECK(r.second.find("--node-token-file") != std::string::npos);
  r = test::net::shell(std::string(AGENTSTATE_BIN)
                       + " serve --memory --listen 0.0.0.0:0 --insecure --cluster c --etcd "
                         "http://127.0.0.1:1 --node-id n 2>&1");
  CHECK(r.first == 1);
  CHECK(r.second.find("give --advertise") != std::string::npos);
  test::etcd_process etcd;
  r = test::net::shell(std::string(AGENTSTATE_BIN)
                       + " serve --memory --listen 127.0.0.1:0 --cluster nope --etcd " + etcd.url()
                       + " --node-id n --no-forward 2>&1");
  CHECK(r.first == 1);
  CHECK(r.second.find("does not exist") != std::string::npos);
}

TEST_CASE("serve --cluster: apply_app_write reaches the app's home through any node, and a write "
          "id sent again is applied once") {
  forwarding_pair nodes;
  auto& fa = nodes.a;
  auto& fb = nodes.b;
  const json& m = nodes.map;
  const auto home = m["shards"][model::home_shard("app", shard_count)]["owner"].get<std::string>();
  client at_home(home == "a" ? fa.port : fb.port);
  client elsewhere(home == "a" ? fb.port : fa.port);
  auto write = [](const std::string& id, int by) {
    return json{{"app_name", "app"},
                {"write_id", id},
                {"state_delta", {{"app:mode", "on"}}},
                {"modify", json::array({{{"key", "app:count"}, {"op", "increment"}, {"by", by}}})}};
  };
  auto first = elsewhere.call("apply_app_write", write("w1", 3)); // forwarded to the home
  REQUIRE(ok(first));
  CHECK((*first)["result"]["values"] == json{{"app:mode", "on"}, {"app:count", 3}});
  CHECK((*first)["result"]["duplicate"] == false);
  auto again = at_home.call("apply_app_write", write("w1", 3));
  REQUIRE(ok(again));
  CHECK((*again)["result"]["duplicate"] == true);
  CHECK((*again)["result"]["values"]["app:count"] == 3);
  REQUIRE(ok(elsewhere.call("apply_app_write", write("w2", 4))));
  for (auto* c : {&at_home, &elsewhere}) {
    auto state = c->call("get_app_state", json{{"app_name", "app"}});
    REQUIRE(ok(state));
    CHECK((*state)["result"] == json{{"mode", "on"}, {"count", 7}});
  }
  // Refused input keeps its kind through the forward.
  CHECK(kind_of(elsewhere.call(
          "apply_app_write",
          json{{"app_name", "app"}, {"write_id", "w3"}, {"state_delta", {{"count", 1}}}}))
        == "invalid_argument");
}

TEST_CASE("serve --cluster: a watch of an app or of everything spans the nodes under merged "
          "cursors; it resumes on another node; a node's death ends it") {
  forwarding_pair nodes;
  auto& fa = nodes.a;
  auto& fb = nodes.b;
  const json& m = nodes.map;
  client ca(fa.port), cb(fb.port);
  // Users on each node's shards.
  std::vector<std::string> users;
  std::map<std::string, std::string> owner_of;
  std::map<std::string, int> per_owner;
  for (int u = 0; u < 8; ++u) {
    std::string user = "u" + std::to_string(u);
    users.push_back(user);
    owner_of[user] = m["shards"][model::shard_of("app", user, shard_count)]["owner"];
    ++per_owner[owner_of[user]];
  }
  REQUIRE(per_owner["a"] > 0);
  REQUIRE(per_owner["b"] > 0);

  // The app's watch through node a, from now.
  client wa(fa.port);
  json wp{{"scope", "app"}, {"app_name", "app"}, {"include_sessions", true}};
  auto wid = start_watch(wa, wp);
  // Each user's session: created, then 3 appends, through both nodes in turn.
  std::set<change_key> made;
  for (int v = 0; v < 4; ++v)
    for (std::size_t i = 0; i < users.size(); ++i) {
      client& via = (i + v) % 2 ? cb : ca;
      auto r = v == 0
        ? via.call("create_session", create_params(users[i], "s"))
        : via.call("append_event", with(create_params(users[i], "s"), "event", event_of(v)));
      REQUIRE(ok(r));
      made.insert({users[i], v});
    }
  auto first = watched(wa, wid, made.size());
  std::set<change_key> got;
  for (auto& c : first)
    got.insert(key_of(c));
  CHECK(got == made); // each once (sizes equal)
  check_session_order(first);
  // unwatch: its watch_ended (cancelled) first, then the answer.
  REQUIRE(wa.send_line(rpc("u", "unwatch", {{"watch_id", wid}})));
  auto ended = wa.next();
  REQUIRE(ended);
  CHECK((*ended)["method"] == "watch_ended");
  CHECK((*ended)["params"]["reason"] == "cancelled");
  auto unwatched = wa.next();
  REQUIRE(unwatched);
  CHECK((*unwatched)["id"] == "u");
  CHECK((*unwatched)["result"]["resume_from"] == (*ended)["params"]["resume_from"]);

  // Resumed through node b from a cursor received mid-way: exactly the
  // changes after it, then one more of each node's (a barrier: a node's
  // changes keep their order, so nothing of it repeats after its barrier).
  const std::size_t mid = first.size() / 2;
  client wb(fb.port);
  auto wid2 = start_watch(wb, with(wp, "from", first[mid - 1]["cursor"]));
  std::string ua, ub;
  for (auto& u : users)
    (owner_of[u] == "a" ? ua : ub) = u;
  REQUIRE(ok(ca.call("append_event", with(create_params(ua, "s"), "event", event_of(4)))));
  REQUIRE(ok(ca.call("append_event", with(create_params(ub, "s"), "event", event_of(4)))));
  auto rest = watched(wb, wid2, first.size() - mid + 2);
  std::multiset<change_key> resumed, expected;
  for (auto& c : rest)
    resumed.insert(key_of(c));
  for (std::size_t i = mid; i < first.size(); ++i)
    expected.insert(key_of(first[i]));
  expected.insert({ua, 4});
  expected.insert({ub, 4});
  CHECK(resumed == expected);
  // Each node's barrier came after the rest of that node's changes.
  std::map<std::string, std::size_t> barrier_at;
  for (std::size_t i = 0; i < rest.size(); ++i)
    if (rest[i]["version"] == 4)
      barrier_at[owner_of[rest[i]["user_id"].get<std::string>()]] = i;
  for (std::size_t i = 0; i < rest.size(); ++i)
    CHECK(i <= barrier_at[owner_of[rest[i]["user_id"].get<std::string>()]]);

  // From "start": every node's log from its oldest change, each change once.
  client ws(fa.port);
  auto wid_start = start_watch(ws, with(wp, "from", "start"));
  std::multiset<change_key> replayed, everything(made.begin(), made.end());
  everything.insert({ua, 4});
  everything.insert({ub, 4});
  for (auto& c : watched(ws, wid_start, everything.size()))
    replayed.insert(key_of(c));
  CHECK(replayed == everything);

  // A node's own cursor is not a merged one.
  auto own = ca.call("read_changes", {{"scope", "all"}, {"this_node", true}, {"limit", 1}});
  REQUIRE(ok(own));
  CHECK(kind_of(cb.call("watch", {{"scope", "all"}, {"from", (*own)["result"]["cursor"]}}))
        == "invalid_argument");

  // Everything, through node b: another app's sessions on both nodes.
  client wall(fb.port);
  auto wid3 = start_watch(wall, {{"scope", "all"}});
  std::set<change_key> others;
  for (auto& u : {ua, ub}) {
    REQUIRE(
      ok(cb.call("create_session", {{"app_name", "other"}, {"user_id", u}, {"session_id", "x"}})));
    others.insert({u, 0});
  }
  std::set<change_key> got_all;
  for (auto& c : watched(wall, wid3, 2)) {
    CHECK(c["app_name"] == "other");
    got_all.insert(key_of(c));
  }
  CHECK(got_all == others);

  // Node a dies: the watches through b end, retryably (failed, unavailable),
  // with a merged cursor to resume from.
  fa.proc->signal(SIGKILL);
  for (client* w : {&wb, &wall}) {
    auto end = w->next(15s);
    // Progress (an empty batch) may come first.
    for (int i = 0; i < 100 && end && (*end)["method"] == "changes"; ++i) {
      CHECK((*end)["params"]["changes"].empty());
      end = w->next(15s);
    }
    REQUIRE(end);
    INFO(end->dump());
    CHECK((*end)["method"] == "watch_ended");
    CHECK((*end)["params"]["reason"] == "failed");
    CHECK((*end)["params"]["error"]["kind"] == "unavailable");
    CHECK((*end)["params"]["resume_from"].get<std::string>().rfind("nodes:", 0) == 0);
  }
}

TEST_CASE("serve --cluster: a watch across nodes whose client stops reading pauses and resumes "
          "from its merged cursor, every change once and in order") {
  // Node a keeps at most 1 MiB of a connection's output: 20 MiB of changes
  // unread overflow it (and the sockets' buffers) many times over.
  forwarding_pair nodes({"--max-output-bytes", "1048576"});
  auto& fa = nodes.a;
  auto& fb = nodes.b;
  const json& m = nodes.map;
  client cb(fb.port);
  std::string ua, ub;
  for (int u = 0; u < 16 && (ua.empty() || ub.empty()); ++u) {
    std::string user = "u" + std::to_string(u);
    (m["shards"][model::shard_of("app", user, shard_count)]["owner"] == "a" ? ua : ub) = user;
  }
  REQUIRE(!ua.empty());
  REQUIRE(!ub.empty());
  for (auto& u : {ua, ub})
    REQUIRE(ok(cb.call("create_session", create_params(u, "s"))));
  raw_socket wa(fa.port); // raw: it reads nothing while the appends run
  auto wid = start_watch(wa, {{"scope", "app"}, {"app_name", "app"}, {"include_sessions", true}});
  // 2,000 appends of 10 KiB, to both nodes' sessions, while wa reads nothing.
  constexpr int n = 2000;
  const std::string text(10240, 'x');
  for (int i = 0; i < n; ++i) {
    auto ev = json{{"author", "t"}, {"content", {{"parts", json::array({{{"text", text}}})}}}};
    REQUIRE(
      cb.send_line(rpc(i, "append_event", with(create_params(i % 2 ? ub : ua, "s"), "event", ev))));
  }
  for (int i = 0; i < n; ++i)
    REQUIRE(ok(cb.next(60s)));
  // A barrier on each node's session: the last change of each.
  for (auto& u : {ua, ub})
    REQUIRE(ok(cb.call("append_event", with(create_params(u, "s"), "event", event_of(n)))));
  const int last = n / 2 + 1;
  std::vector<json> got;
  std::set<std::string> barriers;
  for (int lines_read = 0; barriers.size() < 2; ++lines_read) {
    REQUIRE(lines_read < 10 * n);
    auto line = wa.next(30s);
    REQUIRE(line);
    REQUIRE((*line)["method"] == "changes");
    REQUIRE((*line)["params"]["watch_id"] == wid);
    for (auto& c : (*line)["params"]["changes"]) {
      got.push_back(c);
      if (c["version"] == last)
        barriers.insert(c["user_id"].get<std::string>());
    }
  }
  CHECK(got.size() == n + 2);
  std::set<change_key> keys;
  for (auto& c : got)
    keys.insert(key_of(c));
  CHECK(keys.size() == n + 2); // none twice
  std::map<std::string, int> next{{ua, 1}, {ub, 1}};
  for (auto& c : got) {
    auto& v = next[c["user_id"].get<std::string>()];
    CHECK(c["version"] == v);
    v = c["version"].get<int>() + 1;
  }
}

TEST_CASE("serve --cluster: a watch across nodes from a cursor one node no longer keeps answers "
          "cursor_expired with a merged data.oldest, which resumes") {
  forwarding_pair nodes({}, {"--change-retention", "10"});
  auto& fa = nodes.a;
  const json& m = nodes.map;
  std::string ub;
  for (int u = 0; u < 16 && ub.empty(); ++u)
    if (m["shards"][model::shard_of("app", "u" + std::to_string(u), shard_count)]["owner"] == "b")
      ub = "u" + std::to_string(u);
  REQUIRE(!ub.empty());
  client ca(fa.port);
  std::string start;
  {
    client w0(fa.port); // its watch ends with its connection
    auto started = w0.call("watch", {{"scope", "app"}, {"app_name", "app"}}, "w");
    REQUIRE(ok(started));
    start = (*started)["result"]["cursor"];
  }
  REQUIRE(ok(ca.call("create_session", create_params(ub, "s"))));
  for (int i = 1; i <= 60; ++i)
    REQUIRE(ok(ca.call("append_event", with(create_params(ub, "s"), "event", event_of(i)))));
  client wa(fa.port);
  auto r = wa.call("watch", {{"scope", "app"}, {"app_name", "app"}, {"from", start}}, "w2");
  REQUIRE(r);
  INFO(r->dump());
  REQUIRE(kind_of(r) == "cursor_expired");
  const std::string oldest = (*r)["error"]["data"]["oldest"];
  auto from = cluster::parse_merged_cursor(oldest);
  auto was = cluster::parse_merged_cursor(start);
  REQUIRE(from);
  REQUIRE(was);
  CHECK(from->at("a") == was->at("a")); // node a's part kept its place
  CHECK(from->at("b") != was->at("b"));
  // From there: the changes node b still keeps, the last append last.
  auto wid = start_watch(
    wa, {{"scope", "app"}, {"app_name", "app"}, {"include_sessions", true}, {"from", oldest}});
  std::vector<json> got;
  while (got.empty() || got.back()["version"] != 60) {
    REQUIRE(got.size() < 60);
    auto line = wa.next();
    REQUIRE(line);
    REQUIRE((*line)["params"]["watch_id"] == wid);
    for (auto& c : (*line)["params"]["changes"])
      got.push_back(c);
  }
  CHECK(got.size() <= 10 + 20);
  check_session_order(got);
}
