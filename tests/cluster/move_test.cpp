// SPDX-License-Identifier: Apache-2.0
// `agentstate cluster move` and `drain` under load: three `serve --cluster`
// nodes on LMDB stores take appends (with app: writes) and reads through
// every node while 8 shards move, the app's home shard among them, and then
// one node is drained. Every operation goes into a JSONL history that the
// history checker (tools/history_check.py) judges; an append refused while
// its shard moves is sent again with the same event id. Afterwards every
// session is listed once, the drained node owns nothing, and the nodes the
// shards left dropped their rows.
#include <doctest/doctest.h>

#include "cluster/coordinator.hpp"
#include "model/shard.hpp"
#include "server/net_support.hpp"
#include "support/cluster_nodes.hpp"
#include "support/etcd_process.hpp"
#include "support/history.hpp"

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>

namespace {

using namespace agentstate;
using namespace agentstate::test::net;
using namespace std::chrono_literals;

constexpr std::uint32_t shard_count = 16;
constexpr int workers = 6;
constexpr int sessions_per_worker = 4;

using node_proc = test::cluster_node;

node_proc start_store_node(const test::etcd_process& etcd, const test::temp_dir& dir,
                           const std::string& id, int port = 0) {
  return test::start_store_cluster_node(etcd, dir, id, port, {"--log-format", "json"});
}

json params_of(const std::string& app, const std::string& user) {
  return json{{"app_name", app}, {"user_id", user}, {"session_id", "s"}};
}

/// `method` at the node on `port` once it answers other than unavailable
/// (REQUIREd ok within 10 s: each node's view of the map follows etcd on its
/// own, so one may refuse a moved shard for a moment).
std::optional<json> until_served(int port, const std::string& method, const json& params) {
  std::optional<json> r;
  REQUIRE(test::eventually(
    [&] {
      r = client(port).call(method, params);
      return kind_of(r) != "unavailable";
    },
    10s, 20ms));
  const std::string answer = r ? r->dump() : "no answer";
  INFO(answer);
  REQUIRE(ok(r));
  return r;
}

/// The first user "uN" of app "app" whose shard (of 4) node `owner` owns
/// in `map`, and that shard.
std::pair<std::string, std::uint32_t> user_owned_by(const json& map, const std::string& owner) {
  for (int u = 0; u < 1000; ++u) {
    std::string user = "u" + std::to_string(u);
    auto shard = model::shard_of("app", user, 4);
    if (map["shards"][shard]["owner"] == owner)
      return {user, shard};
  }
  FAIL("no user of app 'app' on a shard of node '", owner, "'");
  return {};
}

std::string cluster_tool(const test::etcd_process& etcd, const std::string& args) {
  return std::string(AGENTSTATE_BIN) + " cluster " + args + " --etcd " + etcd.url()
    + " --cluster c";
}

} // namespace

TEST_CASE("cluster move of 8 shards and a drain under load: the history checker finds nothing "
          "lost or duplicated") {
  test::etcd_process etcd;
  test::temp_dir dir;
  test::init_cluster_c(etcd, shard_count, 3);
  const std::vector<std::string> ids{"a", "b", "c"};
  std::vector<node_proc> nodes;
  for (auto& id : ids)
    nodes.push_back(start_store_node(etcd, dir, id));
  std::vector<int> ports;
  for (auto& n : nodes)
    ports.push_back(n.port);
  json map = test::settled_map(ports);
  auto owner_of = [&](std::uint32_t shard) {
    return map["shards"][shard]["owner"].get<std::string>();
  };

  const std::string app = "moving";
  const auto home = model::home_shard(app, shard_count);
  std::vector<std::string> users;
  for (int u = 0; static_cast<int>(users.size()) < workers * sessions_per_worker; ++u)
    users.push_back("u" + std::to_string(u));
  std::set<std::uint32_t> used; // shards holding sessions
  for (auto& u : users) {
    used.insert(model::shard_of(app, u, shard_count));
    REQUIRE(ok(client(ports[0]).call("create_session", params_of(app, u))));
  }

  // 8 shards to move: the app's home, then those holding sessions, then
  // any; each to the next node after its owner.
  std::vector<std::uint32_t> to_move{home};
  for (auto s : used)
    if (to_move.size() < 8 && s != home)
      to_move.push_back(s);
  for (std::uint32_t s = 0; to_move.size() < 8; ++s)
    if (std::find(to_move.begin(), to_move.end(), s) == to_move.end())
      to_move.push_back(s);

  test::history_log h;
  std::atomic<bool> stop{false};
  std::atomic<int> acked{0}, refused{0};
  std::mutex acked_mtx; // with acked_cv: the workers tell the test of each ack
  std::condition_variable acked_cv;
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w)
    threads.emplace_back([&, w] {
      std::vector<std::unique_ptr<client>> conns(ports.size());
      auto conn = [&](std::size_t i) -> client* {
        if (!conns[i] || !conns[i]->connected())
          conns[i] = std::make_unique<client>(ports[i]);
        return conns[i]->connected() ? conns[i].get() : nullptr;
      };
      const std::size_t first = static_cast<std::size_t>(w) * sessions_per_worker;
      // Bounded: 3,000 operations or the stop flag.
      for (int i = 0; i < 3000 && !stop.load(); ++i) {
        const std::string& user = users[first + static_cast<std::size_t>(i) % sessions_per_worker];
        const json session = json::array({app, user, "s"});
        const bool read = i % 5 == 4;
        json ev;
        if (!read)
          ev = json{{"id", "w" + std::to_string(w) + "-" + std::to_string(i)},
                    {"author", "worker"},
                    {"actions",
                     {{"artifact_delta", json::object()},
                      {"state_delta", {{"n", i}, {"app:w" + std::to_string(w), i}}}}}};
        // An append refused while its shard moves (or in doubt) is sent
        // again with the same id, through the next node, every 10 ms for at
        // most 20 s (test::eventually paces the attempts).
        int attempt = 0;
        (void)test::eventually(
          [&] {
            if (stop.load())
              return true;
            const std::size_t via = static_cast<std::size_t>(i + attempt + w) % ports.size();
            json inv{{"process", w},
                     {"type", "invoke"},
                     {"f", read ? "read" : "append"},
                     {"session", session},
                     {"value", read ? json::object() : json{{"event", ev}}}};
            h.add(inv);
            client* c = conn(via);
            std::optional<json> got;
            if (c)
              got = read
                ? c->call("get_session", params_of(app, user), "r", 10s)
                : c->call("append_event", with(params_of(app, user), "event", ev), "w", 10s);
            json done{{"process", w}, {"f", read ? "read" : "append"}, {"session", session}};
            if (ok(got)) {
              auto& res = (*got)["result"];
              done["type"] = "ok";
              done["value"] = read ? json{{"version", res["version"]}, {"events", res["events"]}}
                                   : json{{"version", res["version"]}, {"event", res["event"]}};
              h.add(done);
              if (!read) {
                std::lock_guard<std::mutex> lk(acked_mtx);
                ++acked;
                acked_cv.notify_all();
              }
              return true;
            }
            std::string kind = got ? kind_of(got) : "";
            done["type"] = c == nullptr ? "fail" : "info";
            done["value"] = json{{"error", kind.empty() ? "connection" : kind}};
            h.add(done);
            if (!got && c)
              conns[via].reset();
            ++refused;
            ++attempt;
            return read; // a refused read is not retried
          },
          20s, 10ms);
      }
    });

  auto progress = [&](int n) {
    // n more acks (within 20 s).
    std::unique_lock<std::mutex> lk(acked_mtx);
    const int start = acked.load();
    REQUIRE(acked_cv.wait_for(lk, 20s, [&] { return acked.load() >= start + n; }));
  };
  progress(100);
  std::map<std::uint32_t, std::string> moved_to;
  std::set<std::string> sources;
  int caught_up = 0; // moves whose catch-up from the log was used
  for (std::size_t k = 0; k < to_move.size(); ++k) {
    const auto s = to_move[k];
    const std::string from = owner_of(s);
    const std::string to = from == "a" ? "b" : from == "b" ? "c" : "a";
    auto r = shell(cluster_tool(etcd, "move " + std::to_string(s) + " " + to + " --json"), false);
    INFO("move ", s, " from ", from, " to ", to, ": ", r.second);
    REQUIRE(r.first == 0);
    json report = json::parse(r.second);
    CHECK(report["shard"] == s);
    CHECK(report["from"] == from);
    CHECK(report["to"] == to);
    CHECK(report["epoch"].get<std::uint64_t>()
          == map["shards"][s]["epoch"].get<std::uint64_t>() + 3);
    if (used.count(s))
      CHECK(report["sessions"].get<std::uint64_t>() > 0);
    CHECK(report["fenced_sessions"].get<std::uint64_t>()
          <= report["sessions"].get<std::uint64_t>());
    caught_up += report["whole_copy_fenced"] == false;
    MESSAGE("shard ", s, " moved: ", report.dump());
    moved_to[s] = to;
    sources.insert(from);
    progress(30); // load between moves
  }
  // A move copies the shard ahead and catches up under the fence; it falls
  // back to a whole copy only when the digests differ (a write that logs
  // no change), which the load makes rare.
  CHECK(caught_up > 0);
  // Drain node c under the same load: it ends owning nothing.
  auto drained = shell(cluster_tool(etcd, "drain c"), false);
  INFO(drained.second);
  REQUIRE(drained.first == 0);
  CHECK(drained.second.find("node 'c' owns no shard now") != std::string::npos);
  progress(50);
  stop.store(true);
  for (auto& t : threads)
    t.join();
  MESSAGE("appends acknowledged: ", acked.load(), ", refused or in doubt: ", refused.load());

  auto status = shell(cluster_tool(etcd, "status --json"), false);
  REQUIRE(status.first == 0);
  json st = json::parse(status.second);
  for (auto& m : st["map"]) {
    CHECK(m["owner"] != "c");
    CHECK_FALSE(m.contains("to"));
    auto s = m["shard"].get<std::uint32_t>();
    if (moved_to.count(s) && moved_to[s] != "c")
      CHECK(m["owner"] == moved_to[s]);
  }
  // Every node's view has caught up (the map's last change is seen within
  // a second: bounded poll of the nodes' watches, other processes).
  for (int port : ports)
    REQUIRE(test::eventually(
      [&] {
        auto r = client(port).call("cluster_map", json::object());
        REQUIRE(ok(r));
        return (*r)["result"]["revision"] == st["revision"];
      },
      10s, 20ms));
  // The final log of every session, read through each node in turn.
  for (std::size_t i = 0; i < users.size(); ++i) {
    auto r = client(ports[i % ports.size()]).call("get_session", params_of(app, users[i]));
    REQUIRE(ok(r));
    auto& res = (*r)["result"];
    h.add(json{{"type", "final"},
               {"session", json::array({app, users[i], "s"})},
               {"value", {{"version", res["version"]}, {"events", res["events"]}}}});
  }
  h.check(dir.str() + "/history.jsonl");

  // A listing of the app through every node names each session once.
  for (int port : ports) {
    auto r = client(port).call("list_sessions", json{{"app_name", app}, {"page_size", 100}});
    REQUIRE(ok(r));
    std::multiset<std::string> listed;
    for (auto& s : (*r)["result"]["sessions"])
      listed.insert(s["user_id"].get<std::string>());
    CHECK(listed.size() == users.size());
    CHECK(std::set<std::string>(listed.begin(), listed.end()).size() == users.size());
  }
  // The nodes the shards left dropped their rows there.
  for (std::size_t i = 0; i < nodes.size(); ++i)
    if (sources.count(ids[i]) || ids[i] == "c")
      CHECK(nodes[i].proc->log().find("shard_moved_away") != std::string::npos);
  for (auto& n : nodes) {
    n.proc->signal(SIGTERM);
    CHECK(n.proc->wait_exit() == 0);
  }
}

TEST_CASE("cluster move refuses what it cannot do: bad shard, unknown node, bad usage") {
  test::etcd_process etcd;
  test::temp_dir dir;
  test::init_cluster_c(etcd, 4, 1);
  auto a = start_store_node(etcd, dir, "a");
  test::settled_map({a.port});
  auto beyond = shell(cluster_tool(etcd, "move 9 a"));
  CHECK(beyond.first == 1);
  CHECK(beyond.second.find("beyond") != std::string::npos);
  auto unknown = shell(cluster_tool(etcd, "move 1 zz"));
  CHECK(unknown.first == 1);
  CHECK(unknown.second.find("'zz' is not a node") != std::string::npos);
  auto same = shell(cluster_tool(etcd, "move 1 a --json"), false);
  REQUIRE(same.first == 0);
  CHECK(json::parse(same.second)["nothing_to_do"] == true);
  CHECK(shell(cluster_tool(etcd, "move one a")).first == 2);
  CHECK(shell(cluster_tool(etcd, "move 1")).first == 2);
  CHECK(shell(cluster_tool(etcd, "drain")).first == 2);
  auto alone = shell(cluster_tool(etcd, "drain a"));
  CHECK(alone.first == 1);
  CHECK(alone.second.find("no other node is live") != std::string::npos);
  // A record of moves the node cannot read stops it at start, naming the file.
  std::filesystem::create_directories(dir.str() + "/bad");
  write_text(dir.str() + "/bad/cluster-moves.json", "{\"fenced\":7}\n");
  server_process broken({"--store", dir.str() + "/bad", "--listen", "127.0.0.1:0", "--cluster", "c",
                         "--etcd", etcd.url(), "--node-id", "bad", "--lease-ttl-s", "2"},
                        dir.str() + "/bad.log");
  CHECK(broken.wait_exit() == 1);
  CHECK(broken.log().find("is not a record of shard moves") != std::string::npos);
  // The node's own methods need the cluster's shard in motion.
  auto r = client(a.port).call("shard_export", json{{"shard", 1}, {"epoch", 1}});
  CHECK(kind_of(r) == "version_conflict");
  auto bad = client(a.port).call("shard_import", json{{"shard", 1}, {"epoch", 1}, {"chunk", "@"}});
  CHECK(kind_of(bad) == "invalid_argument");
  a.proc->signal(SIGTERM);
  CHECK(a.proc->wait_exit() == 0);
}

TEST_CASE("cluster move: a fenced owner restarted mid-move stays fenced, the move carries on, "
          "and a move back undoes one and drops the abandoned copy") {
  test::etcd_process etcd;
  test::temp_dir dir;
  test::init_cluster_c(etcd, 4, 2);
  auto a = start_store_node(etcd, dir, "a");
  auto b = start_store_node(etcd, dir, "b");
  json map = test::settled_map({a.port, b.port});
  auto c = cluster::make_etcd_coordinator(etcd.url(), "c");
  REQUIRE(c.ok());
  // A session on one of a's shards, with events.
  const auto [user, shard] = user_owned_by(map, "a");
  const json p = params_of("app", user);
  REQUIRE(ok(client(a.port).call("create_session", p)));
  for (int i = 0; i < 5; ++i)
    REQUIRE(ok(client(b.port).call("append_event",
                                   with(p, "event",
                                        {{"id", "e" + std::to_string(i)},
                                         {"author", "t"},
                                         {"actions", {{"state_delta", {{"n", i}}}}}}))));
  // The move's first steps by hand: the shard marked moving, a's rows read
  // once (which fences it there).
  auto v = (*c)->load();
  REQUIRE(v.ok());
  auto moving = (*c)->set_shard(v->shards[shard], "a", v->shards[shard].epoch + 1, "b");
  REQUIRE(moving.ok());
  auto first =
    client(a.port).call("shard_export", json{{"shard", shard}, {"epoch", moving->epoch}});
  REQUIRE(ok(first));
  CHECK((*first)["result"]["sessions"] == 1);
  auto refused = client(b.port).call(
    "append_event", with(p, "event", {{"id", "x"}, {"author", "t"}, {"actions", json::object()}}));
  CHECK(kind_of(refused) == "unavailable");
  CHECK(read_text(dir.str() + "/a/cluster-moves.json").find("\"fenced\"") != std::string::npos);
  // a dies and comes back on its store: it fences the shard again from its
  // record, and the move carries on.
  const int a_port = a.port;
  a.proc->signal(SIGKILL);
  REQUIRE(a.proc->exited_within(5s));
  a.proc.reset();
  a = start_store_node(etcd, dir, "a", a_port);
  auto moved = shell(cluster_tool(etcd, "move " + std::to_string(shard) + " b --json"), false);
  INFO(moved.second);
  REQUIRE(moved.first == 0);
  CHECK(json::parse(moved.second)["sessions"] == 1);
  auto read = until_served(a.port, "get_session", p); // forwarded to b
  CHECK((*read)["result"]["version"] == 5);
  CHECK((*read)["result"]["state"]["n"] == 4);
  a.proc->wait_log("shard_moved_away");
  // b's shard marked moving to a, a copy started there, then moved back to
  // b: b serves it again, a drops its copy.
  v = (*c)->load();
  REQUIRE(v.ok());
  auto back = (*c)->set_shard(v->shards[shard], "b", v->shards[shard].epoch + 1, "a");
  REQUIRE(back.ok());
  auto chunk = client(b.port).call("shard_export", json{{"shard", shard}, {"epoch", back->epoch}});
  REQUIRE(ok(chunk));
  REQUIRE(ok(client(a.port).call(
    "shard_import",
    json{{"shard", shard}, {"epoch", back->epoch}, {"chunk", (*chunk)["result"]["chunk"]}})));
  auto undone = shell(cluster_tool(etcd, "move " + std::to_string(shard) + " b --json"), false);
  INFO(undone.second);
  REQUIRE(undone.first == 0);
  CHECK(json::parse(undone.second)["undone"] == true);
  a.proc->wait_log("shard_copy_dropped");
  b.proc->wait_log("shard_move_undone");
  // Writes are served again.
  auto again =
    until_served(a.port, "append_event",
                 with(p, "event", {{"id", "e5"}, {"author", "t"}, {"actions", json::object()}}));
  CHECK((*again)["result"]["version"] == 6);
  for (auto* n : {&a, &b}) {
    n->proc->signal(SIGTERM);
    CHECK(n->proc->wait_exit() == 0);
  }
}

TEST_CASE("cluster move: the owner serves the shard while its first copy is made, and the move "
          "catches up from its change log") {
  test::etcd_process etcd;
  test::temp_dir dir;
  test::init_cluster_c(etcd, 4, 2);
  auto a = start_store_node(etcd, dir, "a");
  auto b = start_store_node(etcd, dir, "b");
  json map = test::settled_map({a.port, b.port});
  auto c = cluster::make_etcd_coordinator(etcd.url(), "c");
  REQUIRE(c.ok());
  const auto [user, shard] = user_owned_by(map, "a");
  const json p = params_of("app", user);
  auto event = [](int i) {
    return json{
      {"id", "e" + std::to_string(i)}, {"author", "t"}, {"actions", {{"state_delta", {{"n", i}}}}}};
  };
  REQUIRE(ok(client(a.port).call("create_session", p)));
  for (int i = 0; i < 3; ++i)
    REQUIRE(ok(client(b.port).call("append_event", with(p, "event", event(i)))));
  // The first step by hand: the shard copying to b while a serves it.
  auto v = (*c)->load();
  REQUIRE(v.ok());
  auto copying = (*c)->set_shard(v->shards[shard], "a", v->shards[shard].epoch + 1, "b", true);
  REQUIRE(copying.ok());
  CHECK(copying->copying);
  auto first =
    client(a.port).call("shard_export", json{{"shard", shard}, {"epoch", copying->epoch}});
  REQUIRE(ok(first));
  CHECK((*first)["result"]["mark"].is_number_unsigned());
  CHECK((*first)["result"]["sessions"] == 1);
  // Not fenced: an append through b is forwarded to a and served.
  auto served = until_served(b.port, "append_event", with(p, "event", event(3)));
  CHECK((*served)["result"]["version"] == 4);
  auto seen = client(b.port).call("cluster_map", json::object());
  REQUIRE(ok(seen));
  CHECK((*seen)["result"]["shards"][shard]["copying"] == true);
  // A catch-up or a digest needs the shard's writes stopped.
  auto early = client(a.port).call("shard_export",
                                   json{{"shard", shard}, {"epoch", copying->epoch}, {"since", 0}});
  CHECK(kind_of(early) == "invalid_argument");
  auto digest =
    client(a.port).call("shard_digest", json{{"shard", shard}, {"epoch", copying->epoch}});
  CHECK(kind_of(digest) == "version_conflict");
  REQUIRE(ok(client(b.port).call(
    "shard_import",
    json{{"shard", shard}, {"epoch", copying->epoch}, {"chunk", (*first)["result"]["chunk"]}})));
  CHECK(read_text(dir.str() + "/b/cluster-moves.json").find("\"importing\"") != std::string::npos);
  // The tool carries the move on from its first copy: copy, stop, catch
  // up, compare, switch.
  auto moved = shell(cluster_tool(etcd, "move " + std::to_string(shard) + " b --json"), false);
  INFO(moved.second);
  REQUIRE(moved.first == 0);
  json report = json::parse(moved.second);
  CHECK(report["epoch"] == copying->epoch + 2);
  CHECK(report["whole_copy_fenced"] == false);
  CHECK(report["fenced_sessions"] == 0); // nothing changed after the first copy
  b.proc->wait_log("shard_moved_here");
  auto read = until_served(a.port, "get_session", p); // forwarded to b
  CHECK((*read)["result"]["version"] == 4);
  CHECK((*read)["result"]["state"]["n"] == 3);
  a.proc->wait_log("shard_moved_away");
  for (auto* n : {&a, &b}) {
    n->proc->signal(SIGTERM);
    CHECK(n->proc->wait_exit() == 0);
  }
}
