// SPDX-License-Identifier: Apache-2.0
// `agentstate cluster adopt DIR`: a single-node store (written by a plain
// `serve --store`) brought into a two-node cluster on LMDB stores that
// already holds sessions of its own. Every session reads through every node
// as it did on the single node (ids, versions, times, events, rewinds, the
// user: and app: state); the cluster's own sessions stay; running it again
// adds nothing; a session the cluster holds with other contents refuses it,
// naming it; a missing or busy store is refused before anything is sent.
#include <doctest/doctest.h>

#include "model/shard.hpp"
#include "server/net_support.hpp"
#include "support/cluster_nodes.hpp"
#include "support/etcd_process.hpp"

#include <csignal>

namespace {

using namespace agentstate;
using namespace agentstate::test::net;
using namespace std::chrono_literals;

std::string adopt_cmd(const test::etcd_process& etcd, const std::string& dir,
                      const std::string& extra = "") {
  return std::string(AGENTSTATE_BIN) + " cluster adopt " + dir + " --etcd " + etcd.url()
    + " --cluster c" + extra;
}

json session_of(const std::string& user, const std::string& id) {
  return json{{"app_name", "chat"}, {"user_id", user}, {"session_id", id}};
}

json event_of(const std::string& id, json delta) {
  return json{{"id", id},
              {"author", "agent"},
              {"invocation_id", "inv-" + id},
              {"content", {{"parts", json::array({{{"text", "said " + id}}})}}},
              {"actions", {{"state_delta", std::move(delta)}}}};
}

/// A single-node store in `dir`: 12 sessions of app "chat" over 6 users,
/// with user: and app: state, events, and one rewind; and what each reads
/// as there (get_session), by "user/id", with the app's state under "app".
json write_single_store(const std::string& dir, const std::string& log) {
  server_process single({"--store", dir, "--listen", "127.0.0.1:0"}, log);
  const int port = single.port();
  single.wait_serving();
  json seen = json::object();
  for (int i = 0; i < 12; ++i) {
    const std::string user = "u" + std::to_string(i % 6), id = "s" + std::to_string(i);
    json p = session_of(user, id);
    REQUIRE(
      ok(client(port).call("create_session", with(p, "state", {{"user:tier", i % 6}, {"k", i}}))));
    for (int j = 0; j < 3; ++j)
      REQUIRE(ok(client(port).call(
        "append_event",
        with(p, "event",
             event_of(id + "-" + std::to_string(j), {{"n", j}, {"app:seen", i * 10 + j}})))));
  }
  REQUIRE(ok(client(port).call("rewind_session",
                               with(session_of("u0", "s0"), "before_invocation_id", "inv-s0-2"))));
  for (int i = 0; i < 12; ++i) {
    const std::string user = "u" + std::to_string(i % 6), id = "s" + std::to_string(i);
    auto r = client(port).call("get_session", session_of(user, id));
    REQUIRE(ok(r));
    seen[user + "/" + id] = (*r)["result"];
  }
  auto app = client(port).call("get_app_state", json{{"app_name", "chat"}});
  REQUIRE(ok(app));
  seen["app"] = (*app)["result"];
  single.signal(SIGTERM);
  REQUIRE(single.wait_exit() == 0);
  return seen;
}

/// Cluster "c" of 8 shards on two LMDB nodes, "a" and "b", settled.
std::pair<test::cluster_node, test::cluster_node> two_nodes(const test::etcd_process& etcd,
                                                            const test::temp_dir& dir) {
  test::init_cluster_c(etcd, 8, 2);
  auto a = test::start_store_cluster_node(etcd, dir, "a");
  auto b = test::start_store_cluster_node(etcd, dir, "b");
  test::settled_map({a.port, b.port});
  return {std::move(a), std::move(b)};
}

} // namespace

TEST_CASE("cluster adopt: a single-node store's sessions read through every node as they did, "
          "beside the cluster's own; again adds nothing; a conflict is named") {
  test::etcd_process etcd;
  test::temp_dir dir;
  const std::string single = dir.str() + "/single";
  const json seen = write_single_store(single, dir.str() + "/single.log");
  auto [a, b] = two_nodes(etcd, dir);
  // The cluster's own session of the same app, and one of another app.
  REQUIRE(ok(client(a.port).call("create_session", session_of("u9", "own"))));
  REQUIRE(ok(client(b.port).call(
    "create_session", json{{"app_name", "other"}, {"user_id", "u0"}, {"session_id", "x"}})));

  auto r = shell(adopt_cmd(etcd, single, " --json"), false);
  INFO(r.second);
  REQUIRE(r.first == 0);
  json report = json::parse(r.second);
  CHECK(report["sessions"] == 12);
  CHECK(report["present"] == 0);
  CHECK(report["shards"].get<int>() >= 2);
  for (int port : {a.port, b.port}) {
    for (auto& [key, want] : seen.items()) {
      if (key == "app")
        continue;
      const auto slash = key.find('/');
      auto got =
        client(port).call("get_session", session_of(key.substr(0, slash), key.substr(slash + 1)));
      REQUIRE(ok(got));
      auto& s = (*got)["result"];
      INFO(key, " through port ", port);
      CHECK(s["version"] == want["version"]);
      CHECK(s["events"] == want["events"]);
      CHECK(s["state"] == want["state"]);
      CHECK(s["last_update_time"] == want["last_update_time"]);
    }
    auto app = client(port).call("get_app_state", json{{"app_name", "chat"}});
    REQUIRE(ok(app));
    CHECK((*app)["result"] == seen["app"]);
    CHECK(seen["app"].value("seen", 0) == 112);
    auto own = client(port).call("get_session", session_of("u9", "own"));
    REQUIRE(ok(own));
    CHECK(own->at("result").is_object());
    auto listed =
      client(port).call("list_sessions", json{{"app_name", "chat"}, {"page_size", 100}});
    REQUIRE(ok(listed));
    CHECK((*listed)["result"]["sessions"].size() == 13);
  }
  // The adopted sessions are live: an append through either node.
  auto more = client(b.port).call(
    "append_event", with(session_of("u1", "s1"), "event", event_of("later", {{"n", 9}})));
  REQUIRE(ok(more));
  CHECK((*more)["result"]["version"] == seen["u1/s1"]["version"].get<int>() + 1);

  // Again: nothing new (the session appended to since is named, and the
  // rest stays).
  auto again = shell(adopt_cmd(etcd, single));
  INFO(again.second);
  CHECK(again.first == 1);
  CHECK(again.second.find("agentstate cluster: adopt:") != std::string::npos);
  CHECK(again.second.find("session 's1' of user 'u1' of app 'chat' is here already")
        != std::string::npos);
  auto kept = client(a.port).call("get_session", session_of("u1", "s1"));
  REQUIRE(ok(kept));
  CHECK((*kept)["result"]["version"] == seen["u1/s1"]["version"].get<int>() + 1);

  // Refused before anything is sent: no store, and a store a process holds.
  auto none = shell(adopt_cmd(etcd, dir.str() + "/nothing"));
  CHECK(none.first == 1);
  CHECK(none.second.find("no store in") != std::string::npos);
  server_process holder({"--store", single, "--listen", "127.0.0.1:0"}, dir.str() + "/holder.log");
  holder.wait_serving();
  auto busy = shell(adopt_cmd(etcd, single));
  INFO(busy.second);
  CHECK(busy.first == 1);
  CHECK(busy.second.find("cannot open") != std::string::npos);
  holder.signal(SIGTERM);
  CHECK(holder.wait_exit() == 0);
  auto usage =
    shell(std::string(AGENTSTATE_BIN) + " cluster adopt --etcd " + etcd.url() + " --cluster c");
  CHECK(usage.first == 2);
  CHECK(usage.second.find("adopt takes DIR") != std::string::npos);
  for (auto* n : {&a, &b}) {
    n->proc->signal(SIGTERM);
    CHECK(n->proc->wait_exit() == 0);
  }
}

TEST_CASE("cluster adopt: run again after it was cut off, it carries on and adds each session "
          "once") {
  test::etcd_process etcd;
  test::temp_dir dir;
  const std::string single = dir.str() + "/single";
  const json seen = write_single_store(single, dir.str() + "/single.log");
  auto [a, b] = two_nodes(etcd, dir);
  // b is down: the shards it owns cannot be adopted, the others are.
  b.proc->signal(SIGTERM);
  REQUIRE(b.proc->wait_exit() == 0);
  auto cut = shell(adopt_cmd(etcd, single), false);
  INFO(cut.second);
  CHECK(cut.first == 1);
  const int b_port = b.port;
  b.proc.reset();
  b = test::start_store_cluster_node(etcd, dir, "b", b_port);
  test::settled_map({a.port, b.port});
  auto done = shell(adopt_cmd(etcd, single, " --json"), false);
  INFO(done.second);
  REQUIRE(done.first == 0);
  json report = json::parse(done.second);
  CHECK(report["sessions"].get<int>() + report["present"].get<int>() >= 12);
  auto listed =
    client(a.port).call("list_sessions", json{{"app_name", "chat"}, {"page_size", 100}});
  REQUIRE(ok(listed));
  CHECK((*listed)["result"]["sessions"].size() == 12);
  auto s0 = client(b.port).call("get_session", session_of("u0", "s0"));
  REQUIRE(ok(s0));
  CHECK((*s0)["result"]["events"] == seen["u0/s0"]["events"]);
  for (auto* n : {&a, &b}) {
    n->proc->signal(SIGTERM);
    CHECK(n->proc->wait_exit() == 0);
  }
}
