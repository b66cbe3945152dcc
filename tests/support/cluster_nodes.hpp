// SPDX-License-Identifier: Apache-2.0
// tests/support/cluster_nodes.hpp: `agentstate serve --cluster` nodes of
// cluster "c" on loopback for the cluster tier's suites, and the shard map
// once every shard is owned. REQUIRES: the including target defines
// AGENTSTATE_BIN; doctest is included.
#pragma once

#include "server/net_support.hpp"
#include "support/etcd_process.hpp"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace agentstate::test {

/// A node: its process and its TCP port.
struct cluster_node {
  std::unique_ptr<net::server_process> proc;
  int port = 0;
};

/// `agentstate cluster init` of cluster "c" with `shards` shards, given out
/// once `expect_nodes` nodes are live (REQUIREs success).
inline void init_cluster_c(const etcd_process& etcd, std::uint32_t shards,
                           std::uint32_t expect_nodes) {
  auto r = net::shell(std::string(AGENTSTATE_BIN) + " cluster init --etcd " + etcd.url()
                      + " --cluster c --shards " + std::to_string(shards) + " --expect-nodes "
                      + std::to_string(expect_nodes));
  INFO(r.second);
  REQUIRE(r.first == 0);
}

/// Node `id` of cluster "c" on a memory store, listening on a free loopback
/// port, with a 2 s lease and `extra` arguments; returns once it serves.
inline cluster_node start_cluster_node(const etcd_process& etcd, const temp_dir& dir,
                                       const std::string& id,
                                       const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args{"--memory", "--listen", "127.0.0.1:0", "--cluster", "c",
                                "--etcd",   etcd.url(), "--node-id",   id,          "--lease-ttl-s",
                                "2"};
  args.insert(args.end(), extra.begin(), extra.end());
  cluster_node n;
  n.proc = std::make_unique<net::server_process>(args, dir.str() + "/" + id + ".log");
  n.port = n.proc->port();
  n.proc->wait_serving();
  return n;
}

/// Node `id` of cluster "c" on an LMDB store at DIR/ID (kept across
/// restarts), listening on loopback port `port` (0: a free one), with a 2 s
/// lease and `extra` arguments; returns once it serves.
inline cluster_node start_store_cluster_node(const etcd_process& etcd, const temp_dir& dir,
                                             const std::string& id, int port = 0,
                                             const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args{"--store",       dir.str() + "/" + id,
                                "--listen",      "127.0.0.1:" + std::to_string(port),
                                "--cluster",     "c",
                                "--etcd",        etcd.url(),
                                "--node-id",     id,
                                "--lease-ttl-s", "2"};
  args.insert(args.end(), extra.begin(), extra.end());
  cluster_node n;
  n.proc = std::make_unique<net::server_process>(args, dir.str() + "/" + id + ".log");
  n.port = n.proc->port();
  n.proc->wait_serving();
  return n;
}

/// Replies pushed by client connections' I/O threads, each with the index
/// of its call and the time it reached the test; a consumer waits on `cv`
/// under `mtx` and takes `items`.
struct timed_replies {
  struct item {
    std::size_t index;
    rpc_reply reply;
    std::chrono::steady_clock::time_point at;
  };
  std::mutex mtx;
  std::condition_variable cv;
  std::deque<item> items;
  void push(std::size_t index, rpc_reply r) {
    std::lock_guard<std::mutex> g(mtx);
    items.push_back(item{index, std::move(r), std::chrono::steady_clock::now()});
    cv.notify_all();
  }
};

/// The error kind of a node's answer `r` (`data.kind`), or "" (a success,
/// or no answer).
inline std::string kind_of_reply(const rpc_reply& r) {
  if (!r.answered || !r.error_object.is_object())
    return "";
  auto data = r.error_object.find("data");
  if (data == r.error_object.end() || !data->is_object())
    return "";
  auto kind = data->find("kind");
  return kind != data->end() && kind->is_string() ? kind->get<std::string>() : "";
}

/// The cluster status (`cluster status --json`) that `status` reads once
/// every copy of every shard is in sync again (the owners repair the
/// others); REQUIREs it within `limit`, asking every 100 ms.
inline json when_in_sync(const std::function<json()>& status,
                         std::chrono::seconds limit = std::chrono::seconds(30)) {
  json st;
  INFO("status: ", st.dump());
  REQUIRE(eventually(
    [&] {
      st = status();
      return st["under_replicated"] == 0;
    },
    limit, std::chrono::milliseconds(100)));
  return st;
}

/// The cluster_map once every node of `ports` names an owner for every shard
/// (authenticating with `token` when given); REQUIREs it within 15 s.
inline json settled_map(const std::vector<int>& ports, const std::string& token = "") {
  // A bounded poll of the nodes' controller and watches (other processes).
  std::optional<json> first;
  REQUIRE(eventually(
    [&] {
      first.reset();
      bool all = true;
      for (int port : ports) {
        net::client c(port);
        if (!token.empty())
          REQUIRE(net::ok(c.call("authenticate", {{"token", token}})));
        auto r = c.call("cluster_map", json::object());
        REQUIRE(net::ok(r));
        json m = (*r)["result"];
        for (auto& s : m["shards"])
          all = all && !s["owner"].is_null();
        if (!first)
          first = std::move(m);
      }
      return all;
    },
    std::chrono::seconds(15), std::chrono::milliseconds(50)));
  return *first;
}

} // namespace agentstate::test
