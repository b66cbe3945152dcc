// SPDX-License-Identifier: Apache-2.0
// Partitions and pauses in a cluster of 3 replicas (docs/cluster.md,
// "Replicas", "Failures and their cost"): three `serve --cluster` nodes a, b,
// c on LMDB stores, 8 shards, a 2 s lease, --lag-timeout-ms 500 and a real
// etcd. Node c is cut off by a TCP proxy of the test (tests/support/tcp_proxy.hpp)
// from etcd or from its peers, or paused with SIGSTOP past its lease; or etcd
// itself is frozen (SIGSTOP) for all three past their leases. Every
// attempt of every append is recorded, each append retried with its event id
// until acknowledged, and the history checker judges the run against the
// sessions' final logs read from their owners' stores once the nodes stopped:
// nothing acknowledged is lost, whichever node acknowledged it. Afterwards c
// is repaired back into every in-sync set, and each in-sync copy holds what
// its owner holds.
#include <doctest/doctest.h>

#include "model/shard.hpp"
#include "server/net_support.hpp"
#include "support/cluster_nodes.hpp"
#include "support/etcd_process.hpp"
#include "support/history.hpp"
#include "support/replica_stores.hpp"
#include "support/tcp_proxy.hpp"

#include <signal.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>

namespace {

using namespace agentstate;
using namespace agentstate::test::net;
using namespace std::chrono_literals;

constexpr std::uint32_t shard_count = 8;
const std::vector<std::string> ids{"a", "b", "c"};
constexpr std::size_t node_c = 2;

json ref_params(const std::string& user) {
  return json{{"app_name", "app"}, {"user_id", user}, {"session_id", "s"}};
}

json session_of(const std::string& user) {
  return json::array({"app", user, "s"});
}

std::string message_of(const json& answer) {
  return answer.contains("error") ? answer["error"].value("message", std::string()) : "";
}

/// Where node c is cut off from, through the fixture's proxy.
enum class proxied {
  nothing, ///< no proxy
  etcd, ///< c reaches etcd only through the proxy
  peers, ///< c is advertised at the proxy: its peers reach it only through it
};

/// Three nodes a, b, c of cluster "c" (8 shards, 3 replicas, 2 in sync at
/// least) on LMDB stores under DIR/ID, with c behind `proxy` as `proxied`
/// says, and the map once every shard is owned and led.
struct partitioned {
  test::etcd_process etcd;
  test::temp_dir dir;
  std::unique_ptr<test::tcp_proxy> proxy;
  std::vector<test::cluster_node> n;
  json map;

  explicit partitioned(proxied where) {
    auto r = shell(std::string(AGENTSTATE_BIN) + " cluster init --etcd " + etcd.url()
                   + " --cluster c --shards " + std::to_string(shard_count) + " --replicas 3");
    INFO(r.second);
    REQUIRE(r.first == 0);
    n.push_back(start("a", etcd.url()));
    n.push_back(start("b", etcd.url()));
    if (where == proxied::etcd) {
      const auto colon = etcd.url().rfind(':');
      proxy = std::make_unique<test::tcp_proxy>(std::stoi(etcd.url().substr(colon + 1)));
      n.push_back(start("c", "http://127.0.0.1:" + std::to_string(proxy->port())));
    } else if (where == proxied::peers) {
      const int listen = test::free_loopback_port();
      proxy = std::make_unique<test::tcp_proxy>(listen);
      n.push_back(start("c", etcd.url(), listen,
                        {"--advertise", "127.0.0.1:" + std::to_string(proxy->port())}));
    } else {
      n.push_back(start("c", etcd.url()));
    }
    map = test::settled_map({n[0].port, n[1].port, n[2].port});
    for (std::size_t k = 0; k < n.size(); ++k) {
      int owned = 0;
      for (auto& s : map["shards"])
        owned += s["owner"] == ids[k] ? 1 : 0;
      n[k].proc->wait_log("node '" + ids[k] + "' leads (" + std::to_string(owned) + ") shards");
    }
  }

  /// Node `id` on its store, reaching etcd at `etcd_url`, listening on
  /// loopback port `port` (0: a free one), with a 2 s lease, a 500 ms lag
  /// timeout and `extra`; returns once it serves.
  test::cluster_node start(const std::string& id, const std::string& etcd_url, int port = 0,
                           const std::vector<std::string>& extra = {}) const {
    std::vector<std::string> args{"--store",          dir.str() + "/" + id,
                                  "--listen",         "127.0.0.1:" + std::to_string(port),
                                  "--cluster",        "c",
                                  "--etcd",           etcd_url,
                                  "--node-id",        id,
                                  "--lease-ttl-s",    "2",
                                  "--lag-timeout-ms", "500"};
    args.insert(args.end(), extra.begin(), extra.end());
    test::cluster_node node;
    node.proc = std::make_unique<server_process>(args, dir.str() + "/" + id + ".log");
    node.port = node.proc->port();
    node.proc->wait_serving();
    return node;
  }

  std::string tool(const std::string& rest) const {
    return std::string(AGENTSTATE_BIN) + " cluster " + rest + " --etcd " + etcd.url()
      + " --cluster c";
  }

  /// The cluster's status in etcd (cluster status --json), asked again
  /// (every 200 ms, for 10 s at most) while the tool cannot reach etcd in
  /// time (a busy machine).
  json status() const {
    std::pair<int, std::string> r;
    INFO("cluster status exited ", r.first, ": ", r.second);
    REQUIRE(test::eventually(
      [&] {
        r = shell(tool("status --json"), false);
        return r.first == 0;
      },
      10s, 200ms));
    return json::parse(r.second);
  }

  /// The status once every copy of every shard is in sync again (the
  /// owners repair the others); REQUIREs it within 30 s.
  json in_sync() const {
    return test::when_in_sync([this] { return status(); });
  }

  /// The shard map as node k sees it.
  json map_at(std::size_t k) const {
    client cl(n[k].port);
    auto r = cl.call("cluster_map", json::object());
    REQUIRE(ok(r));
    return (*r)["result"];
  }

  /// Whether node k's map names no shard of `users` owned by `id`.
  bool none_owned_by(std::size_t k, const std::string& id,
                     const std::vector<std::string>& users) const {
    auto m = map_at(k);
    for (auto& u : users)
      if (m["shards"][model::shard_of("app", u, shard_count)]["owner"] == id)
        return false;
    return true;
  }

  /// Node k's log from byte `from` on.
  std::string log_after(std::size_t k, std::size_t from) const {
    auto text = n[k].proc->log();
    return from < text.size() ? text.substr(from) : std::string();
  }

  /// Waits (10 s at most) until node k's log from byte `from` on holds
  /// `needle`.
  void wait_log_after(std::size_t k, std::size_t from, const std::string& needle) const {
    INFO("waiting for '", needle, "' in ", ids[k], "'s log from byte ", from);
    n[k].proc->log_when([&](const std::string& log) {
      return from < log.size() && log.find(needle, from) != std::string::npos;
    });
  }
};

/// The node of `via` an attempt of user i goes through.
using route_fn = std::function<std::size_t(std::size_t user, int attempt)>;
/// Called with every answer: the node it came through, the user, the
/// answer, and when the attempt's requests began to be sent (each was sent
/// after that).
using seen_fn = std::function<void(std::size_t via, std::size_t user, const json& answer,
                                   std::chrono::steady_clock::time_point sent)>;

void add_attempt(test::history_log& h, const std::string& process, const std::string& user,
                 const json& ev) {
  h.add({{"process", process},
         {"type", "invoke"},
         {"f", "append"},
         {"session", session_of(user)},
         {"value", {{"event", ev}}}});
}

void add_outcome(test::history_log& h, const std::string& process, const std::string& user,
                 const json& a) {
  if (ok(a))
    h.add({{"process", process},
           {"type", "ok"},
           {"f", "append"},
           {"session", session_of(user)},
           {"value", {{"version", a["result"]["version"]}, {"event", a["result"]["event"]}}}});
  else
    h.add({{"process", process},
           {"type", "info"},
           {"f", "append"},
           {"session", session_of(user)},
           {"value", {{"error", kind_of(a)}}}});
}

/// Append `id` of user `u` with its request id `i` (the user's index):
/// increments of a session key and a user: key.
json append_call(std::size_t i, const std::string& u, const json& ev) {
  json p = ref_params(u);
  p["event"] = ev;
  p["modify"] = json::array({{{"key", "step"}, {"op", "increment"}, {"by", 1}},
                             {{"key", "user:n"}, {"op", "increment"}, {"by", 1}}});
  return rpc(i, "append_event", p);
}

/// Round `r` of the appends of `users` (event id USER-eR, process USER):
/// each attempt pipelined through `via[route(i, attempt)]`, an attempt that
/// answers an error retried with the same event id, for at most 30 s;
/// every attempt recorded in `h`, every answer shown to `seen`.
void append_round(std::vector<client>& via, const std::vector<std::string>& users, int r,
                  test::history_log& h, const route_fn& route, const seen_fn& seen = {}) {
  std::vector<std::size_t> left(users.size());
  for (std::size_t i = 0; i < users.size(); ++i)
    left[i] = i;
  int attempt = 0;
  // One attempt sends every append still unacknowledged; test::eventually
  // repeats it every 50 ms while the map changes, for at most 30 s.
  const bool all_acked = test::eventually(
    [&] {
      INFO("round ", r, ", attempt ", attempt, ", ", left.size(), " appends left");
      std::vector<std::vector<std::size_t>> sent(via.size());
      const auto sent_at = std::chrono::steady_clock::now();
      for (auto i : left) {
        const auto k = route(i, attempt);
        json ev = {{"author", "t"}, {"id", users[i] + "-e" + std::to_string(r)}};
        add_attempt(h, users[i], users[i], ev);
        REQUIRE(via[k].send_line(append_call(i, users[i], ev)));
        sent[k].push_back(i);
      }
      left.clear();
      for (std::size_t k = 0; k < via.size(); ++k)
        for (std::size_t m = 0; m < sent[k].size(); ++m) {
          auto a = via[k].next(30s);
          REQUIRE(a);
          const auto i = (*a)["id"].get<std::size_t>();
          add_outcome(h, users[i], users[i], *a);
          if (seen)
            seen(k, i, *a, sent_at);
          if (!ok(a))
            left.push_back(i);
        }
      ++attempt;
      return left.empty();
    },
    30s, 50ms);
  INFO("round ", r, ": ", left.size(), " appends left after ", attempt, " attempts");
  REQUIRE(all_acked);
}

/// An engine on node `id`'s store (the node stopped).
std::unique_ptr<engine> open_store(const test::temp_dir& dir, const std::string& id) {
  return test::open_store_dir(dir.str() + "/" + id);
}

/// User `u`'s session as `store` holds it: {version, events}.
json final_of(engine& store, const std::string& u) {
  return test::final_session(store, "app", u, "s");
}

/// test::check_replicas_equal over this file's shards.
int check_replicas_equal(const json& status,
                         std::map<std::string, std::unique_ptr<engine>>& stores) {
  return test::check_replicas_equal(status, stores, shard_count);
}

/// Stops the nodes (SIGTERM), adds each user's final log, read from its
/// shard's owner in `status`, to `h`, checks `h` with the history checker
/// and every in-sync copy against its owner.
void finish(partitioned& c, const std::vector<std::string>& users, const json& status,
            test::history_log& h) {
  for (auto& node : c.n) {
    node.proc->signal(SIGTERM);
    CHECK(node.proc->wait_exit() == 0);
  }
  std::map<std::string, std::unique_ptr<engine>> stores;
  for (auto& id : ids)
    stores[id] = open_store(c.dir, id);
  for (auto& u : users) {
    const std::string owner = status["map"][model::shard_of("app", u, shard_count)]["owner"];
    h.add({{"type", "final"}, {"session", session_of(u)}, {"value", final_of(*stores[owner], u)}});
  }
  h.check(c.dir.str() + "/history.jsonl");
  CHECK(check_replicas_equal(status, stores) == static_cast<int>(shard_count) * 2);
}

/// 24 users (over every shard) with their sessions created; `on_c` gets
/// those whose shard c owns in `c.map`.
std::vector<std::string> users_of(partitioned& c, std::vector<client>& via,
                                  std::vector<std::string>& on_c) {
  std::vector<std::string> users;
  for (int i = 0; i < 24; ++i)
    users.push_back("u" + std::to_string(i));
  for (std::size_t i = 0; i < users.size(); ++i) {
    // A create answered unavailable (a follower slow to answer its first
    // runs on a busy machine) is sent again; one that ran already answers
    // already_exists.
    REQUIRE(test::eventually(
      [&] {
        auto r = via[i % 3].call("create_session", ref_params(users[i]));
        INFO("create_session of ", users[i], ": ", r ? r->dump() : "no answer");
        if (ok(r) || kind_of(r) == "already_exists")
          return true;
        REQUIRE(kind_of(r) == "unavailable");
        return false;
      },
      10s, 50ms));
    if (c.map["shards"][model::shard_of("app", users[i], shard_count)]["owner"] == "c")
      on_c.push_back(users[i]);
  }
  REQUIRE_FALSE(on_c.empty());
  return users;
}

std::vector<client> clients_of(const partitioned& c) {
  std::vector<client> via;
  for (auto& node : c.n)
    via.emplace_back(node.port);
  return via;
}

} // namespace

namespace {

/// Case a: node c, reaching etcd through the proxy, cut off from it while
/// users of every shard append through all three nodes, then healed. With
/// `lead_checks`, also that c's log and stats show it leads none of its
/// shards.
void cut_off_from_etcd(bool lead_checks) {
  partitioned c(proxied::etcd);
  auto via = clients_of(c);
  std::vector<std::string> on_c;
  const auto users = users_of(c, via, on_c);
  test::history_log h;
  int round = 0;
  auto rotate = [&](std::size_t i, int attempt) {
    return (i + static_cast<std::size_t>(round + attempt)) % 3;
  };
  for (; round < 2; ++round)
    append_round(via, users, round, h, rotate);

  std::vector<std::size_t> from;
  for (auto& node : c.n)
    from.push_back(node.proc->log().size());
  c.proxy->cut();
  // c cannot renew its lease: it refuses every write once its TTL passed by
  // its own clock, and from then on acknowledges none; its shards fail over
  // to a and b once etcd let its lease expire. The appends go on through all
  // three nodes meanwhile. Had c acknowledged a write after the failover
  // that its new owner lacks, the checker would find it lost. Answers of c
  // come in any order (a write it forwarded before it stopped may answer
  // after one it refused), so what must get no ok is a write sent to c once
  // it refused one.
  std::optional<std::chrono::steady_clock::time_point> refused;
  std::vector<json> acked_after_refusal;
  auto seen = [&](std::size_t k, std::size_t, const json& a,
                  std::chrono::steady_clock::time_point sent) {
    if (k != node_c)
      return;
    if (kind_of(a) == "unavailable"
        && message_of(a).find("cannot reach the cluster's coordinator") != std::string::npos
        && !refused)
      refused = std::chrono::steady_clock::now();
    else if (ok(a) && refused && sent > *refused)
      acked_after_refusal.push_back(a);
  };
  for (auto deadline = std::chrono::steady_clock::now() + 20s;; ++round) {
    append_round(via, users, round, h, rotate, seen);
    if (refused && c.none_owned_by(0, "c", on_c) && c.none_owned_by(1, "c", on_c))
      break;
    REQUIRE(std::chrono::steady_clock::now() < deadline);
  }
  for (int end = round + 3; ++round < end;) // c's users now through their new owners
    append_round(via, users, round, h, rotate, seen);
  INFO("acknowledged by c after it refused: ", json(acked_after_refusal).dump());
  CHECK(acked_after_refusal.empty());
  const auto taken = c.log_after(0, from[0]) + c.log_after(1, from[1]);
  CHECK(taken.find("event=failover") != std::string::npos);
  CHECK(taken.find("its owner 'c' is down: node '") != std::string::npos);
  auto status = c.status();
  for (auto& u : on_c)
    CHECK(status["map"][model::shard_of("app", u, shard_count)]["owner"] != "c");

  // Healed: c joins again, leads none of the shards it lost, and is
  // repaired back into their in-sync sets while the appends go on.
  c.proxy->heal();
  c.wait_log_after(node_c, from[node_c], "node 'c' owns 0 of 8 shards");
  if (lead_checks) {
    // It leads none of them: its log says so and its stats count none.
    c.wait_log_after(node_c, from[node_c], "node 'c' leads 0 shards");
    client cl(c.n[node_c].port);
    auto st = cl.call("stats", json::object());
    REQUIRE(ok(st));
    INFO("stats of c: ", (*st)["result"]["server"]["cluster"].dump());
    CHECK((*st)["result"]["server"]["cluster"]["replication"]["leads"] == 0);
  }
  append_round(via, users, round++, h, rotate);
  c.in_sync();
  append_round(via, users, round++, h, rotate);
  CHECK((c.log_after(0, from[0]) + c.log_after(1, from[1])).find("' is back in the in-sync set")
        != std::string::npos);
  status = c.in_sync();
  finish(c, users, status, h);
}

} // namespace

TEST_CASE("an owner cut off from etcd stops acknowledging before its shards fail over; nothing "
          "acknowledged is lost") {
  cut_off_from_etcd(false);
}

// A regression test, which fails in some runs only (a few in a hundred
// before the fix): c's lead of a shard ends (a write it committed was
// answered unavailable as its lease ran out by its own clock: it is led
// again 500 ms later) and the view in which c lost the shard reaches its
// replicator in the same pass as that relead comes due; the shard must
// still be unled: event `replicas` says c leads 0 shards, and stats' leads
// counts none.
TEST_CASE("a node whose lead ended as it lost the shard logs that it leads 0 shards and its stats "
          "count no lead") {
  cut_off_from_etcd(true);
}

// Also a regression test (it failed in about one run in three on a busy
// machine before the fix): a repair of a copy that is back in the in-sync
// set already (its owner's repair loop working from a view that has not
// seen the return) reset the follower's stream, the follower refused it,
// the owner dropped it, and the repair's compare-and-swap put it back in
// the set: etcd named c in sync while its owner acknowledged every write
// without it (c never left the set while cut off, or an in-sync copy ended
// behind its owner).
TEST_CASE("a follower cut off from its owner leaves the in-sync set and is repaired when it comes "
          "back") {
  partitioned c(proxied::peers);
  auto via = clients_of(c);
  std::vector<std::string> on_c;
  const auto users = users_of(c, via, on_c);
  const std::set<std::string> c_users(on_c.begin(), on_c.end());
  test::history_log h;
  int round = 0;
  auto rotate = [&](std::size_t i, int attempt) {
    return (i + static_cast<std::size_t>(round + attempt)) % 3;
  };
  // While c's peers cannot reach it, c's own users go to c (a forward to c
  // would wait for the partition); the others through every node (c reaches
  // its peers).
  auto around = [&](std::size_t i, int attempt) {
    return c_users.count(users[i]) ? node_c : rotate(i, attempt);
  };
  for (; round < 2; ++round)
    append_round(via, users, round, h, rotate);

  // First a silent partition (the lag timeout), then one that closes the
  // connections (the replicate calls fail).
  for (bool silent : {true, false}) {
    const std::string how = silent ? "blackholed" : "cut";
    INFO("partition: ", how);
    std::vector<std::size_t> from;
    for (auto& node : c.n)
      from.push_back(node.proc->log().size());
    if (silent)
      c.proxy->blackhole();
    else
      c.proxy->cut();
    // a and b drop c from the in-sync sets of their shards; the writes go
    // on everywhere (c keeps leading its own shards: a and b answer it).
    auto c_left = [&] {
      auto st = c.status();
      for (auto& e : st["map"]) {
        if (e["owner"] == "c")
          continue;
        for (auto& id : e["isr"])
          if (id == "c")
            return false;
      }
      return true;
    };
    for (auto deadline = std::chrono::steady_clock::now() + 20s;; ++round) {
      append_round(via, users, round, h, around);
      if (c_left())
        break;
      REQUIRE(std::chrono::steady_clock::now() < deadline);
    }
    for (int end = round + 3; ++round < end;)
      append_round(via, users, round, h, around);
    const auto dropped = c.log_after(0, from[0]) + c.log_after(1, from[1]);
    CHECK(dropped.find("event=isr") != std::string::npos);
    CHECK(dropped.find("node 'c' left the in-sync set") != std::string::npos);
    if (silent) // the lag timeout, not an error, took it out
      CHECK(dropped.find("node 'c' left the in-sync set: no answer within 500 ms")
            != std::string::npos);
    auto status = c.status();
    for (auto& u : on_c) // c's own shards stayed its own
      CHECK(status["map"][model::shard_of("app", u, shard_count)]["owner"] == "c");

    c.proxy->heal();
    c.in_sync();
    CHECK((c.log_after(0, from[0]) + c.log_after(1, from[1])).find("' is back in the in-sync set")
          != std::string::npos);
    append_round(via, users, round++, h, rotate);
  }
  auto status = c.in_sync();
  finish(c, users, status, h);
}

TEST_CASE("an owner paused past its lease (SIGSTOP) acknowledges nothing after it resumes") {
  partitioned c(proxied::nothing);
  auto via = clients_of(c);
  std::vector<std::string> on_c;
  const auto users = users_of(c, via, on_c);
  test::history_log h;
  int round = 0;
  auto rotate = [&](std::size_t i, int attempt) {
    return (i + static_cast<std::size_t>(round + attempt)) % 3;
  };
  auto a_or_b = [&](std::size_t i, int attempt) {
    return (i + static_cast<std::size_t>(round + attempt)) % 2;
  };
  for (; round < 2; ++round)
    append_round(via, users, round, h, rotate);

  std::vector<std::size_t> from;
  for (auto& node : c.n)
    from.push_back(node.proc->log().size());
  // Appends of c's users sent to c, pipelined, `per_user` of each user
  // (event USER-SUFFIX-K, process TAG-USER-K, one request each): right
  // before it stops, once it answered the first (so it is in the middle of
  // them when it stops), and right after it resumes. The checker judges
  // whatever c answers them: an ok for a write that did not reach the new
  // owner is lost.
  constexpr int per_user = 4;
  std::vector<std::pair<std::string, std::string>> to_c; // by request id: process, user
  auto send_to_c = [&](const std::string& tag, const std::string& suffix) {
    for (int k = 0; k < per_user; ++k)
      for (auto& u : on_c) {
        const auto tail = "-" + std::to_string(k);
        json ev = {{"author", "t"}, {"id", u + suffix + tail}};
        add_attempt(h, tag + u + tail, u, ev);
        REQUIRE(via[node_c].send_line(append_call(to_c.size(), u, ev)));
        to_c.emplace_back(tag + u + tail, u);
      }
  };
  int acked = 0;
  auto answer_of_c = [&] {
    auto a = via[node_c].next(30s);
    REQUIRE(a);
    const auto& [process, u] = to_c.at((*a)["id"].get<std::size_t>());
    add_outcome(h, process, u, *a);
    acked += ok(a) ? 1 : 0;
  };
  send_to_c("pause-", "-p");
  answer_of_c();
  c.n[node_c].proc->signal(SIGSTOP);
  // c's lease expires in etcd; a or b takes over c's shards (a bounded poll
  // of their maps), then c's users append through a and b, and a and b drop
  // c from the in-sync sets of theirs (it does not answer).
  REQUIRE(test::eventually(
    [&] { return c.none_owned_by(0, "c", on_c) && c.none_owned_by(1, "c", on_c); }, 15s, 50ms));
  for (int end = round + 3; round < end; ++round)
    append_round(via, users, round, h, a_or_b);
  const auto taken = c.log_after(0, from[0]) + c.log_after(1, from[1]);
  CHECK(taken.find("its owner 'c' is down: node '") != std::string::npos);

  c.n[node_c].proc->signal(SIGCONT);
  send_to_c("resume-", "-q");
  for (std::size_t m = 1; m < to_c.size(); ++m)
    answer_of_c();
  MESSAGE("c acknowledged ", acked, " of the ", to_c.size(),
          " appends sent to it around its pause");
  // c leads none of the shards it lost and is repaired back.
  c.wait_log_after(node_c, from[node_c], "node 'c' leads 0 shards");
  append_round(via, users, round++, h, rotate);
  auto status = c.in_sync();
  CHECK((c.log_after(0, from[0]) + c.log_after(1, from[1])).find("' is back in the in-sync set")
        != std::string::npos);
  append_round(via, users, round++, h, rotate);
  status = c.in_sync();
  for (auto& u : on_c)
    CHECK(status["map"][model::shard_of("app", u, shard_count)]["owner"] != "c");
  finish(c, users, status, h);
}

namespace {

using steady = std::chrono::steady_clock;

/// The lease's TTL of the fixture's nodes (--lease-ttl-s 2).
constexpr auto lease_ttl = 2s;

/// A load on the sessions of `users`, driven from the test's thread: each
/// user (history process USER) appends through its shard's owner in the
/// map the load starts with (`owner`), one append outstanding, a fresh
/// event id 100 ms after an acknowledgement and the same event again 50 ms
/// after anything else (an error, or no answer within 10 s); read(TAG)
/// reads every user's session through that same node (history process
/// TAG-USER). Every attempt and answer goes to the history; each answer is
/// timed when it reached the test (on the connection's I/O thread), never
/// earlier than the node sent it.
class outage_load {
public:
  struct answer {
    std::size_t user;
    std::size_t node; ///< the node it came through: the user's initial owner
    bool read;
    std::string tag; ///< a read's
    bool ok;
    std::string kind; ///< the error's kind ("" for a success or no answer)
    std::string message; ///< the error's message
    steady::time_point at; ///< when it reached the test
  };

  outage_load(std::vector<client>& via, const std::vector<std::string>& users,
              std::vector<std::size_t> owner, test::history_log& h)
    : via_(via), users_(users), owner_(std::move(owner)), h_(h), st_(users.size()) {}

  /// Runs the load until `pred` holds (checked between steps) or `t`
  /// passed; true when `pred` held.
  bool run_until(const std::function<bool()>& pred, steady::time_point t) {
    for (;;) {
      if (pred())
        return true;
      if (steady::now() >= t)
        return false;
      step(t);
    }
  }
  /// Runs the load until `t`.
  void run_to(steady::time_point t) {
    run_until([] { return false; }, t);
  }

  /// Sends get_session of every user to its node, as processes TAG-USER.
  void read(const std::string& tag) {
    for (std::size_t i = 0; i < users_.size(); ++i) {
      const std::string process = tag + "-" + users_[i];
      h_.add({{"process", process},
              {"type", "invoke"},
              {"f", "read"},
              {"session", session_of(users_[i])},
              {"value", json::object()}});
      send(i, "get_session", ref_params(users_[i]), true, tag);
    }
  }

  /// Stops offering appends and waits for every call outstanding (each has a
  /// deadline), recording them.
  void drain() {
    stopping_ = true;
    const auto guard = steady::now() + 30s; // past every call's deadline
    while (outstanding_ > 0) {
      REQUIRE(steady::now() < guard);
      step(guard);
    }
  }

  /// Every answer so far, in the order the test took them.
  const std::vector<answer>& answers() const { return answers_; }
  /// The number of appends of user i acknowledged so far.
  int acked(std::size_t i) const { return st_[i].acked; }

private:
  struct user_state {
    int next_event = 0;
    std::optional<json> pending; ///< the append in flight or to be sent again
    bool busy = false;
    int acked = 0;
    steady::time_point not_before{};
  };

  /// Answers pushed by the connections' I/O threads (index: the op).
  using arrivals = test::timed_replies;
  using arrival = arrivals::item;

  /// A call: of which user, read or append, a read's tag.
  struct op {
    std::size_t user;
    bool read;
    std::string tag;
  };

  void send(std::size_t i, const std::string& method, json params, bool read,
            const std::string& tag) {
    const std::size_t k = owner_[i];
    REQUIRE(via_[k].connected());
    const std::size_t id = ops_.size();
    ops_.push_back(op{i, read, tag});
    ++outstanding_;
    auto q = q_;
    via_[k].rpc()->call_async(
      method, std::move(params), [q, id](rpc_reply r) { q->push(id, std::move(r)); }, 10s);
  }

  /// Sends the appends due, then takes the answers that came (waiting up to
  /// 5 ms, never past `t`).
  void step(steady::time_point t) {
    const auto now = steady::now();
    for (std::size_t i = 0; i < users_.size() && !stopping_; ++i) {
      auto& s = st_[i];
      if (s.busy || now < s.not_before)
        continue;
      if (!s.pending) {
        json ev = {{"author", "t"}, {"id", users_[i] + "-o" + std::to_string(s.next_event++)}};
        s.pending = std::move(ev);
      }
      add_attempt(h_, users_[i], users_[i], *s.pending);
      s.busy = true;
      send(i, "append_event", append_call(i, users_[i], *s.pending)["params"], false, "");
    }
    std::deque<arrival> got;
    {
      std::unique_lock<std::mutex> lock(q_->mtx);
      q_->cv.wait_for(lock, std::min<steady::duration>(5ms, t - steady::now()),
                      [&] { return !q_->items.empty(); });
      got.swap(q_->items);
    }
    for (auto& a : got)
      take(a);
  }

  void take(arrival& a) {
    const auto& o = ops_.at(a.index);
    --outstanding_;
    const auto& u = users_[o.user];
    const bool good = a.reply.value.ok();
    answer out{o.user,
               owner_[o.user],
               o.read,
               o.tag,
               good,
               test::kind_of_reply(a.reply),
               a.reply.answered && !good ? a.reply.value.err().message : std::string(),
               a.at};
    if (o.read) {
      json done{{"process", o.tag + "-" + u}, {"f", "read"}, {"session", session_of(u)}};
      if (good) {
        done["type"] = "ok";
        done["value"] = {{"version", (*a.reply.value)["version"]},
                         {"events", (*a.reply.value)["events"]}};
      } else { // a read changes nothing: one that failed did not happen
        done["type"] = a.reply.answered ? "fail" : "info";
        done["value"] = {{"error", out.kind.empty() ? "no answer" : out.kind}};
      }
      h_.add(std::move(done));
    } else {
      auto& s = st_[o.user];
      s.busy = false;
      json r{{"id", o.user}};
      if (good)
        r["result"] = *a.reply.value;
      else
        r["error"] = {{"data", {{"kind", out.kind.empty() ? "no answer" : out.kind}}}};
      add_outcome(h_, u, u, r);
      if (good) {
        s.pending.reset();
        ++s.acked;
        s.not_before = a.at + 100ms;
      } else { // in doubt: the same event again
        s.not_before = a.at + 50ms;
      }
    }
    answers_.push_back(std::move(out));
  }

  std::vector<client>& via_;
  const std::vector<std::string>& users_;
  std::vector<std::size_t> owner_;
  test::history_log& h_;
  std::vector<user_state> st_;
  std::vector<op> ops_;
  std::vector<answer> answers_;
  std::shared_ptr<arrivals> q_ = std::make_shared<arrivals>();
  int outstanding_ = 0;
  bool stopping_ = false;
};

double seconds_between(steady::time_point from, steady::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

} // namespace

// etcd itself frozen (SIGSTOP: it accepts connections and answers nothing)
// for all three nodes under appends to every node's shards, each sent to its
// shard's owner, then thawed (SIGCONT). docs/cluster.md: an owner
// acknowledges only while its last renewal was sent less than one TTL ago,
// so no append is acknowledged later than the TTL after etcd stopped, + 0.5
// s for the answer's way to the test (a safety bound: the latest
// acknowledgement seen is reported too); reads of a node's own shards answer
// while its lease holds and `unavailable` ("cannot reach the cluster's
// coordinator") once it ran out; once etcd answers again the nodes renew or
// join again and appends are acknowledged again on every node's shards
// within 5 s (issue #47), + 0.5 s: a user sends its append again 50 ms after
// a refusal, and the answer crosses a loaded machine to the test. The
// history checker then judges every attempt and read against the final logs
// in the owners' stores.
TEST_CASE("etcd frozen under load: no append is acknowledged after the lease's TTL + 0.5 s, "
          "reads answer while the lease holds, appends resume once etcd is back, nothing "
          "acknowledged is lost") {
  partitioned c(proxied::nothing);
  auto via = clients_of(c);
  std::vector<std::string> on_c;
  const auto users = users_of(c, via, on_c);
  std::vector<std::size_t> owner; // per user: its shard's owner (index in ids)
  std::vector<int> owned(ids.size(), 0);
  for (auto& u : users) {
    const std::string id = c.map["shards"][model::shard_of("app", u, shard_count)]["owner"];
    owner.push_back(static_cast<std::size_t>(std::find(ids.begin(), ids.end(), id) - ids.begin()));
    REQUIRE(owner.back() < ids.size());
    ++owned[owner.back()];
  }
  for (std::size_t k = 0; k < ids.size(); ++k) {
    INFO("users on node ", ids[k]);
    REQUIRE(owned[k] > 0);
  }
  test::history_log h;
  outage_load load(via, users, owner, h);
  // Every user has `n` more appends acknowledged than `base` says.
  auto acked_past = [&](std::vector<int> base, int n) {
    return [&load, base, n] {
      for (std::size_t i = 0; i < base.size(); ++i)
        if (load.acked(i) < base[i] + n)
          return false;
      return true;
    };
  };
  auto acked_now = [&] {
    std::vector<int> out;
    for (std::size_t i = 0; i < users.size(); ++i)
      out.push_back(load.acked(i));
    return out;
  };
  REQUIRE(load.run_until(acked_past(acked_now(), 3), steady::now() + 30s));

  std::vector<std::size_t> from;
  for (auto& node : c.n)
    from.push_back(node.proc->log().size());
  // etcd is stopped once kill() returned: every renewal it answered was sent
  // before `stopped`, so each node's lease ends by stopped + TTL by its clock.
  c.etcd.pause();
  const auto stopped = steady::now();
  load.read("lease"); // at once: well within every lease
  load.run_to(stopped + lease_ttl + 1s);
  load.read("expired"); // past every lease
  load.run_to(stopped + lease_ttl + 2s);
  // Taken before kill(): times from it are upper bounds.
  const auto resumed = steady::now();
  c.etcd.resume();
  // A hang guard: every user has 2 appends acknowledged within 30 s.
  REQUIRE(load.run_until(acked_past(acked_now(), 2), steady::now() + 30s));
  load.drain();

  // Per node: its shards' latest acknowledgement while etcd was frozen, its
  // first refusal naming the coordinator then, and its first
  // acknowledgement after etcd returned (seconds; -1: none).
  std::vector<double> latest(ids.size(), -1), refused(ids.size(), -1), resume(ids.size(), -1);
  int acked_during = 0, refused_during = 0;
  std::map<std::string, int> lease_reads, expired_reads; // by outcome
  double lease_reads_by = 0; // the latest answer of a "lease" read
  for (auto& a : load.answers()) {
    const double t = seconds_between(stopped, a.at);
    const std::string outcome = a.ok ? "ok" : a.kind.empty() ? "no answer" : a.kind;
    const bool coordinator =
      a.message.find("cannot reach the cluster's coordinator") != std::string::npos;
    if (a.read) {
      INFO("read ", a.tag, " of ", users[a.user], " on ", ids[a.node], " answered ", t,
           " s after the stop: ", outcome, " ", a.message);
      if (a.tag == "lease") {
        ++lease_reads[outcome];
        lease_reads_by = std::max(lease_reads_by, t);
        CHECK(a.ok);
      } else {
        ++expired_reads[outcome];
        CHECK(a.kind == "unavailable");
        CHECK(coordinator);
      }
    } else if (a.at >= resumed) {
      if (a.ok && resume[a.node] < 0)
        resume[a.node] = seconds_between(resumed, a.at);
    } else if (a.at >= stopped) {
      if (a.ok) {
        ++acked_during;
        latest[a.node] = std::max(latest[a.node], t);
      } else if (coordinator) {
        ++refused_during;
        if (refused[a.node] < 0)
          refused[a.node] = t;
      }
    }
  }
  std::string figures;
  for (std::size_t k = 0; k < ids.size(); ++k)
    figures += "\n  " + ids[k] + "'s shards: latest ack " + std::to_string(latest[k])
      + " s after the stop, first refusal " + std::to_string(refused[k]) + " s after it, first ack "
      + std::to_string(resume[k]) + " s after etcd returned";
  MESSAGE("etcd frozen ", seconds_between(stopped, resumed), " s: ", acked_during,
          " appends acknowledged after the stop, ", refused_during,
          " refused; reads at once (answered within ", lease_reads_by,
          " s): ", json(lease_reads).dump(), ", past the lease: ", json(expired_reads).dump(),
          figures);
  CHECK(acked_during > 0); // the appends went on while the leases held
  const double bound = std::chrono::duration<double>(lease_ttl).count() + 0.5;
  for (std::size_t k = 0; k < ids.size(); ++k) {
    INFO("node ", ids[k]);
    CHECK(latest[k] <= bound);
    CHECK(refused[k] >= 0);
    CHECK(resume[k] >= 0);
    CHECK(resume[k] <= 5.5);
  }
  CHECK(lease_reads["ok"] == static_cast<int>(users.size()));
  CHECK(expired_reads["unavailable"] == static_cast<int>(users.size()));

  // Reported, not asserted: what the nodes logged about their copies since
  // the stop (failovers, in-sync removals, repairs), the first 12 lines.
  std::string events;
  int logged = 0;
  for (std::size_t k = 0; k < ids.size(); ++k) {
    std::istringstream in(c.log_after(k, from[k]));
    for (std::string l; std::getline(in, l);)
      if ((l.find("event=failover") != std::string::npos || l.find("event=isr") != std::string::npos
           || l.find("event=repair") != std::string::npos)
          && ++logged <= 12)
        events += "\n  " + ids[k] + ": " + l;
  }
  MESSAGE(logged, " copy events logged since the stop", events);

  auto status = c.in_sync();
  finish(c, users, status, h);
}
