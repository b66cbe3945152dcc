// SPDX-License-Identifier: Apache-2.0
// Two `serve --cluster` nodes on LMDB stores under a load of appends and reads
// from client threads that follow `moved`; one node is killed with kill -9 and
// restarted on its store. Every operation goes into a JSONL history that the
// history checker (tools/history_check.py) judges: nothing acknowledged lost,
// nothing phantom, no gap or duplicate, real-time order, reads after acks.
// The surviving node's shards keep serving while the other is down.
#include <doctest/doctest.h>

#include "model/shard.hpp"
#include "server/net_support.hpp"
#include "support/cluster_nodes.hpp"
#include "support/etcd_process.hpp"
#include "support/history.hpp"

#include <atomic>
#include <map>
#include <mutex>

namespace {

using namespace agentstate;
using namespace agentstate::test::net;
using namespace std::chrono_literals;

constexpr std::uint32_t shard_count = 16;
constexpr int sessions_per_worker = 2;
constexpr int workers = 4;

/// The app of the run's sessions (kill_history_run picks it).
std::string the_app = "app";

json session_of(const std::string& user) {
  return json::array({the_app, user, "s"});
}

json params_of(const std::string& user) {
  return json{{"app_name", the_app}, {"user_id", user}, {"session_id", "s"}};
}

/// Ports by node address ("127.0.0.1:P" -> P), shared by the workers.
int port_of_address(const std::string& address) {
  return std::stoi(address.substr(address.rfind(':') + 1));
}

using node_proc = test::cluster_node;

node_proc start_node(const test::etcd_process& etcd, const test::temp_dir& dir,
                     const std::string& id, bool forward, int port = 0) {
  return test::start_store_cluster_node(etcd, dir, id, port,
                                        forward ? std::vector<std::string>{}
                                                : std::vector<std::string>{"--no-forward"});
}

/// One client thread's view: where each session is, from `moved` answers.
struct router {
  std::map<std::string, int> port; ///< user -> the port to try first
  std::map<int, std::unique_ptr<client>> conns;

  client* to(int p) {
    auto& c = conns[p];
    if (!c || !c->connected())
      c = std::make_unique<client>(p);
    return c->connected() ? c.get() : nullptr;
  }
  void drop(int p) { conns.erase(p); }
};

/// Sends one request for `user`'s session, following `moved` (up to 4 hops).
/// nullopt with `sent` false: it never reached a node; with `sent` true: the
/// answer was lost (connection closed or timed out).
std::optional<json> call_routed(router& r, const std::string& user, const std::string& method,
                                const json& params, bool& sent) {
  sent = false;
  for (int hop = 0; hop < 4; ++hop) {
    int p = r.port[user];
    client* c = r.to(p);
    if (!c)
      return std::nullopt;
    auto got = c->call(method, params, "w", 5s);
    sent = true;
    if (!got) {
      r.drop(p);
      return std::nullopt;
    }
    if (kind_of(got) == "moved") {
      r.port[user] = port_of_address((*got)["error"]["data"]["address"]);
      sent = false; // refused before it ran: as if never sent
      continue;
    }
    return got;
  }
  return json{{"error", {{"data", {{"kind", "moved"}}}}}};
}

/// The run: with `forward`, every request goes to node a, which forwards
/// b's; without, clients start at a and follow `moved`.
void kill_history_run(bool forward) {
  test::etcd_process etcd;
  test::temp_dir dir;
  REQUIRE(shell(std::string(AGENTSTATE_BIN) + " cluster init --etcd " + etcd.url()
                + " --cluster c --shards 16 --expect-nodes 2")
            .first
          == 0);
  auto a = start_node(etcd, dir, "a", forward);
  auto b = start_node(etcd, dir, "b", forward);
  // Settled map: every shard owned in both nodes' views (a node answers
  // `unavailable` for a shard until its own view names the owner); a's view.
  json map = test::settled_map({a.port, b.port});
  // The app's home shard on a, the node that stays up: the sessions' reads
  // show its app: state, which is unavailable while its home is down.
  for (int i = 0;; ++i) {
    REQUIRE(i < 1000);
    the_app = "app" + std::to_string(i);
    if (map["shards"][model::home_shard(the_app, shard_count)]["owner"] == "a")
      break;
  }
  // Users whose sessions land on each node, half and half.
  std::vector<std::string> users;
  std::map<std::string, std::string> owner_of;
  int on_a = 0, on_b = 0;
  for (int u = 0; static_cast<int>(users.size()) < workers * sessions_per_worker; ++u) {
    REQUIRE(u < 1000);
    std::string user = "u" + std::to_string(u);
    std::string owner = map["shards"][model::shard_of(the_app, user, shard_count)]["owner"];
    int& n = owner == "a" ? on_a : on_b;
    if (n >= workers * sessions_per_worker / 2)
      continue;
    ++n;
    users.push_back(user);
    owner_of[user] = owner;
    auto port = owner == "a" ? a.port : b.port;
    REQUIRE(ok(client(port).call("create_session", params_of(user))));
  }

  test::history_log h;
  std::atomic<bool> stop{false};
  std::atomic<bool> b_down{false};
  std::atomic<int> a_ok_while_b_down{0}, a_failed_while_b_down{0};
  std::atomic<int> oks{0}; ///< every acknowledged operation
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w)
    threads.emplace_back([&, w] {
      router r;
      std::vector<std::string> mine(users.begin() + w * sessions_per_worker,
                                    users.begin() + (w + 1) * sessions_per_worker);
      for (auto& u : mine)
        r.port[u] = a.port; // every session starts at a: b's follow moved
      // Bounded: 4,000 operations or the stop flag.
      for (int i = 0; i < 4000 && !stop.load(); ++i) {
        const std::string& user = mine[static_cast<std::size_t>(i) % mine.size()];
        const bool read = i % 5 == 4;
        json inv{{"process", w},
                 {"type", "invoke"},
                 {"f", read ? "read" : "append"},
                 {"session", session_of(user)}};
        json ev;
        if (read) {
          inv["value"] = json::object();
        } else {
          ev = json{{"id", "w" + std::to_string(w) + "-" + std::to_string(i)},
                    {"author", "worker"},
                    {"actions",
                     {{"artifact_delta", json::object()}, {"state_delta", {{"n", i}, {"w", w}}}}}};
          inv["value"] = json{{"event", ev}};
        }
        h.add(inv);
        bool sent = false;
        auto got = read
          ? call_routed(r, user, "get_session", params_of(user), sent)
          : call_routed(r, user, "append_event", with(params_of(user), "event", ev), sent);
        json done{{"process", w}, {"f", read ? "read" : "append"}, {"session", session_of(user)}};
        const bool on_a_now = owner_of[user] == "a" && b_down.load();
        if (ok(got)) {
          done["type"] = "ok";
          auto& res = (*got)["result"];
          if (read)
            done["value"] = json{{"version", res["version"]}, {"events", res["events"]}};
          else
            done["value"] = json{{"version", res["version"]}, {"event", res["event"]}};
          ++oks;
          if (on_a_now)
            ++a_ok_while_b_down;
        } else {
          if (on_a_now)
            ++a_failed_while_b_down;
          std::string kind = got ? kind_of(got) : "";
          // Never sent, or refused by routing (moved): it did not happen.
          // Anything else (unavailable, a lost answer) may have.
          done["type"] = !sent || kind == "moved" ? "fail" : "info";
          done["value"] = json{{"error", kind.empty() ? "connection" : kind}};
          // A backoff before the next operation while the node is down or
          // moving: up to 20 ms, cut short when b goes down or comes back
          // or the run stops.
          const bool down = b_down.load();
          (void)test::eventually([&] { return stop.load() || b_down.load() != down; }, 20ms, 1ms);
        }
        h.add(done);
      }
    });

  auto wait_oks = [&](int n) {
    // The workers' progress (they run on their own), bounded (20 s), and not
    // a check: the CHECKs after the run count the acknowledgements.
    auto start = a_ok_while_b_down.load();
    (void)test::eventually([&] { return a_ok_while_b_down.load() >= start + n; }, 20s, 20ms);
  };
  // The load before the fault: 200 operations acknowledged.
  REQUIRE(test::eventually([&] { return oks.load() >= 200; }, 20s, 20ms));
  b.proc->signal(SIGKILL);
  b_down.store(true);
  REQUIRE(b.proc->exited_within(5s));
  wait_oks(200);
  // Restart b on its store and port: it waits out its old lease, rejoins, serves.
  int b_port = b.port;
  b.proc.reset();
  b = start_node(etcd, dir, "b", forward, b_port);
  b_down.store(false);
  // The load after the restart: 200 more operations acknowledged.
  const int oks_at_restart = oks.load();
  REQUIRE(test::eventually([&] { return oks.load() >= oks_at_restart + 200; }, 20s, 20ms));
  stop.store(true);
  for (auto& t : threads)
    t.join();

  CHECK(a_ok_while_b_down.load() >= 200);
  CHECK(a_failed_while_b_down.load() == 0);

  // The final log of every session, from its owner.
  for (auto& user : users) {
    auto port = owner_of[user] == "a" ? a.port : b.port;
    auto r = client(port).call("get_session", params_of(user));
    REQUIRE(ok(r));
    auto& res = (*r)["result"];
    h.add(json{{"type", "final"},
               {"session", session_of(user)},
               {"value", {{"version", res["version"]}, {"events", res["events"]}}}});
  }
  h.check(dir.str() + "/history.jsonl");
}

} // namespace

TEST_CASE("cluster kill -9 of a node under load, clients following moved: the history checker "
          "finds nothing lost") {
  kill_history_run(false);
}

TEST_CASE("cluster kill -9 of a node under load, requests forwarded by the other: the history "
          "checker finds nothing lost") {
  kill_history_run(true);
}
