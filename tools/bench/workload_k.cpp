// SPDX-License-Identifier: Apache-2.0
// Over 600 lines: one workload whose phases run on the same children (etcd,
// the nodes and the clusters they form), with the helpers only it uses.
//
// tools/bench/workload_k.cpp: workload k, a cluster's overhead. Workload b's
// shape (sessions over users, 20 appends each, 64 in flight as 64 chains)
// through the C++ client (include/agentstate/client.hpp) against, in one run:
//   one_node   one `serve` (no cluster), 8 connections;
//   forwarded  three `serve --cluster` nodes and an etcd of the bench's own,
//              every connection to node 1, which forwards the other nodes'
//              shards;
//   smart      the same three nodes, each session's requests sent to its
//              shard's owner (from cluster_map), 3 connections per node;
//   replicated three nodes of a cluster keeping 3 copies of each shard (2 in
//              sync at least), routed as smart: each append acknowledged
//              once both followers applied it;
//   rejoin     on the replicated cluster still up: fresh sessions, one per
//              shard, take appends of 4 KiB of text (64 in flight, each to
//              its owner) until node n2's copies hold 100* MiB of rows; once
//              every copy is in sync, n2 is killed (SIGKILL), its store
//              directory emptied, and it is started again with the same
//              arguments. events: the load's appends; copy_bytes: the rows
//              of n2's copies before the kill (replica_state's bytes over
//              the shards: what a repair copies); store_bytes: its data.mdb
//              then (none in memory mode);
//              restart_to_joined_s: from the new process's start until etcd
//              has it registered and alive (its old lease runs out first);
//              restart_to_in_sync_s: until every shard's in-sync set in etcd
//              names it again; repair_mb_per_s: copy_bytes in MiB per second
//              between the two; verify_equal and verify_different: `cluster
//              verify`'s counts after it (different: an error).
// The forwarded hop is shown twice: under load (forwarded p50 less one
// node's, the target's figure, queueing included) and one request at a time
// (one_in_flight: node 1's own session against one it forwards).
// On one machine the nodes share its cores: the ratios measure the cluster's
// overhead, not its scaling. Needs `etcd` on PATH (Debian etcd-server).
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "agentstate/client.hpp"
#include "cluster/coordinator.hpp"
#include "model/shard.hpp"
#include "tools/bench/serve_client.hpp"
#include "tools/bench/session_load.hpp"
#include "tools/bench/via_workloads.hpp"
#include "tools/bench/workloads.hpp"
#include "tools/cluster_move.hpp"

extern char** environ;

namespace agentstate::tools::bench {

namespace {

using steady = std::chrono::steady_clock;

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0
      && ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

/// etcd as a child of the bench: one member on free loopback ports, its data
/// in a directory of its own; killed and reaped by the destructor.
class etcd_child {
public:
  /// Starts it and waits (up to 20 s) until it answers; null with `why`.
  static std::unique_ptr<etcd_child> start(std::string& why) {
    auto e = std::unique_ptr<etcd_child>(new etcd_child());
    char tmpl[] = "/tmp/agentstate-bench-etcd-XXXXXX";
    if (!::mkdtemp(tmpl)) {
      why = "cannot make a directory for etcd";
      return nullptr;
    }
    e->dir_ = tmpl;
    int client = free_port(), peer = free_port();
    e->url_ = "http://127.0.0.1:" + std::to_string(client);
    std::string peer_url = "http://127.0.0.1:" + std::to_string(peer);
    std::vector<std::string> args{"etcd",
                                  "--name",
                                  "k",
                                  "--data-dir",
                                  e->dir_ + "/d",
                                  "--listen-client-urls",
                                  e->url_,
                                  "--advertise-client-urls",
                                  e->url_,
                                  "--listen-peer-urls",
                                  peer_url,
                                  "--initial-advertise-peer-urls",
                                  peer_url,
                                  "--initial-cluster",
                                  "k=" + peer_url,
                                  "--log-level",
                                  "error"};
    std::vector<char*> argv;
    for (auto& a : args)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    int rc = ::posix_spawnp(&e->pid_, "etcd", &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
      e->pid_ = -1;
      why = "cannot start etcd (Debian etcd-server; tools/setup.sh --all installs it)";
      return nullptr;
    }
    auto c = cluster::make_etcd_coordinator(e->url_, "probe");
    for (auto deadline = steady::now() + std::chrono::seconds(20); steady::now() < deadline;) {
      if (c && (*c)->load().code() == errc::not_found)
        return e; // answers: the probe cluster does not exist
      // bounded poll of the child's start (etcd has no readiness signal)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    why = "etcd did not answer within 20 s at " + e->url_;
    return nullptr;
  }

  ~etcd_child() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (!dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    }
  }

  const std::string& url() const { return url_; }

private:
  etcd_child() = default;
  pid_t pid_ = -1;
  std::string dir_, url_;
};

/// A `serve` child with its store (none in memory mode) and the arguments it
/// was started with.
struct node {
  std::unique_ptr<temp_store> dir;
  std::unique_ptr<serve_child> child;
  std::vector<std::string> args;
};

/// Starts `n.child` with `n.args`; false with the error added to `x`.
bool spawn_node(run_ctx& x, const config& cfg, node& n) {
  std::string why;
  n.child =
    serve_child::start(cfg.serve_bin.empty() ? self_binary() : cfg.serve_bin, n.args, true, why);
  if (!n.child)
    x.errors.add(why);
  return n.child != nullptr;
}

bool start_node(run_ctx& x, const config& cfg, const std::vector<std::string>& extra, node& n) {
  auto store_args = serve_store_args(x, cfg, n.dir);
  if (!store_args)
    return false;
  n.args = std::move(*store_args);
  n.args.push_back("--listen");
  n.args.push_back("127.0.0.1:0");
  n.args.insert(n.args.end(), extra.begin(), extra.end());
  return spawn_node(x, cfg, n);
}

void stop_node(run_ctx& x, node& n) {
  if (n.child) {
    int code = n.child->stop();
    if (code != 0)
      x.errors.add("serve exited with status " + std::to_string(code)
                   + "; stderr: " + n.child->stderr_text());
  }
  n.child.reset();
  n.dir.reset();
}

std::unique_ptr<rpc_client> connect(run_ctx& x, const std::string& address) {
  client_options o;
  o.address = address;
  auto c = rpc_client::connect(o);
  if (!c) {
    x.errors.add("connect to " + address + ": " + c.err().message);
    return nullptr;
  }
  return std::move(*c);
}

json ref_params(const session_ref& r) {
  return json{{"app_name", r.app_name}, {"user_id", r.user_id}, {"session_id", r.session_id}};
}

/// Runs `jobs` jobs as `width` chains: job j's `steps` requests go one after
/// the other, each through client_of(j); returns the seconds from the first
/// request to the last answer. Each answer's latency lands in
/// lat[j * steps + step]; a failed request or a failed `check` is logged and
/// ends its chain.
double run_chains(run_ctx& x, std::size_t jobs, std::size_t steps, std::size_t width,
                  const std::function<rpc_client&(std::size_t)>& client_of,
                  const std::function<std::pair<std::string, json>(std::size_t, std::size_t)>& req,
                  const std::function<std::string(std::size_t, const json&)>& check,
                  std::vector<double>& lat) {
  struct state {
    std::atomic<std::size_t> next{0};
    std::mutex mtx;
    std::condition_variable cv;
    std::size_t active = 0;
  };
  auto st = std::make_shared<state>();
  lat.assign(jobs * steps, 0);
  std::function<void()> chain;
  std::function<void(std::size_t, std::size_t)> step;
  auto finish_chain = [st] {
    std::lock_guard<std::mutex> lock(st->mtx);
    if (--st->active == 0)
      st->cv.notify_all();
  };
  chain = [&, st] {
    std::size_t j = st->next.fetch_add(1);
    if (j >= jobs)
      return finish_chain();
    step(j, 0);
  };
  step = [&, st](std::size_t j, std::size_t k) {
    auto [method, params] = req(j, k);
    auto t0 = steady::now();
    client_of(j).call_async(method, std::move(params), [&, j, k, t0](rpc_reply r) {
      lat[j * steps + k] = std::chrono::duration<double, std::micro>(steady::now() - t0).count();
      std::string bad = r.value ? check(k, *r.value) : r.value.err().message;
      if (!bad.empty()) {
        x.errors.add("job " + std::to_string(j) + " step " + std::to_string(k) + ": " + bad);
        return chain(); // the next job; this one stops
      }
      if (k + 1 < steps)
        step(j, k + 1);
      else
        chain();
    });
  };
  auto t0 = steady::now();
  {
    std::lock_guard<std::mutex> lock(st->mtx);
    st->active = std::min(width, jobs);
  }
  for (std::size_t c = 0; c < std::min(width, jobs); ++c)
    chain();
  std::unique_lock<std::mutex> lock(st->mtx);
  st->cv.wait(lock, [&] { return st->active == 0; });
  return std::chrono::duration<double>(steady::now() - t0).count();
}

/// One phase's figures: the creates (not timed), then the timed appends.
ojson phase(run_ctx& x, const std::vector<session_ref>& refs, std::size_t per, std::size_t width,
            const std::function<rpc_client&(std::size_t)>& client_of) {
  std::vector<double> lat;
  run_chains(
    x, refs.size(), 1, width, client_of,
    [&](std::size_t j, std::size_t) {
      return std::make_pair(std::string("create_session"), ref_params(refs[j]));
    },
    [](std::size_t, const json&) { return std::string(); }, lat);
  ojson out;
  if (x.errors.count != 0)
    return out;
  double secs = run_chains(
    x, refs.size(), per, width, client_of,
    [&](std::size_t j, std::size_t k) {
      json p = ref_params(refs[j]);
      p["event"] = json{{"author", "bench"},
                        {"invocation_id", "inv-" + refs[j].session_id},
                        {"actions", {{"state_delta", step_delta(k)}}}};
      return std::make_pair(std::string("append_event"), std::move(p));
    },
    [](std::size_t k, const json& v) {
      auto version = v.value("version", std::uint64_t{0});
      return version == k + 1
        ? std::string()
        : "version " + std::to_string(version) + ", expected " + std::to_string(k + 1);
    },
    lat);
  samples s;
  s.us = std::move(lat);
  out["events_per_s"] = round_to(double(refs.size() * per) / secs, 0);
  out["p50_us"] = round_to(s.p50(), 1);
  out["p99_us"] = round_to(s.p99(), 1);
  return out;
}

/// Creates cluster `name` (256 shards, `replicas` copies of each) in the etcd
/// at `url`, starts its three nodes and waits (bounded, 20 s) until every
/// node's view names every shard's owner and, with replicas, each node leads
/// the shards it owns; owner_of[j] is refs[j]'s owner's index.
void start_cluster(run_ctx& x, const config& cfg, const std::string& url, const std::string& name,
                   std::uint32_t replicas, const std::vector<session_ref>& refs, node (&nodes)[3],
                   std::vector<int>& owner_of) {
  const std::uint32_t shards = 256;
  auto coord = cluster::make_etcd_coordinator(url, name);
  cluster::cluster_settings settings;
  settings.shards = shards;
  settings.expect_nodes = 3;
  settings.replicas = replicas;
  settings.min_insync = cluster::majority(replicas);
  if (!coord || !(*coord)->create(settings)) {
    x.errors.add("cannot create cluster '" + name + "' in etcd at " + url);
    return;
  }
  for (int i = 0; i < 3 && x.errors.count == 0; ++i)
    start_node(x, cfg, {"--cluster", name, "--etcd", url, "--node-id", "n" + std::to_string(i)},
               nodes[i]);
  if (x.errors.count != 0)
    return;
  // Every shard owned in every node's view (bounded poll of the nodes'
  // controller and watches): a node answers `unavailable` for a shard until
  // its own view names the owner, and, with replicas, until it leads it.
  std::vector<std::unique_ptr<rpc_client>> probes;
  for (auto& n : nodes)
    if (auto c = connect(x, n.child->address()))
      probes.push_back(std::move(c));
  bool settled = false;
  int owned[3] = {0, 0, 0};
  for (auto deadline = steady::now() + std::chrono::seconds(20);
       probes.size() == std::size(nodes) && !settled && steady::now() < deadline;) {
    json map;
    settled = true;
    for (auto& probe : probes) {
      auto r = probe->call("cluster_map", json::object());
      settled = settled && r.value && r.value->contains("shards");
      if (settled) {
        map = std::move(*r.value);
        for (auto& s : map["shards"])
          settled = settled && s["owner"].is_string();
      }
    }
    if (settled) {
      for (std::size_t j = 0; j < refs.size(); ++j) {
        auto shard = model::shard_of(refs[j].app_name, refs[j].user_id, shards);
        owner_of[j] = map["shards"][shard]["owner"].get<std::string>().back() - '0';
      }
      for (auto& s : map["shards"])
        ++owned[s["owner"].get<std::string>().back() - '0'];
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(50)); // bounded poll, see above
    }
  }
  if (!settled) {
    x.errors.add("the cluster's shards were not all owned within 20 s");
    return;
  }
  if (replicas < 2)
    return;
  for (int i = 0; i < 3; ++i) {
    const auto line = "leads " + std::to_string(owned[i]) + " shards";
    auto deadline = steady::now() + std::chrono::seconds(20);
    while (nodes[i].child->stderr_text().find(line) == std::string::npos) {
      if (steady::now() > deadline) {
        x.errors.add("node n" + std::to_string(i) + " did not lead its shards within 20 s");
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20)); // bounded poll of its log
    }
  }
}

constexpr double mib = 1024.0 * 1024.0;

/// Loads `c`'s view until `done(view)` or `deadline`; false when the
/// deadline passed first (a load that fails counts as not done).
bool poll_view(cluster::coordinator& c, steady::time_point deadline,
               const std::function<bool(const cluster::cluster_view&)>& done) {
  for (;;) {
    auto v = c.load();
    if (v && done(*v))
      return true;
    if (steady::now() >= deadline)
      return false;
    // bounded poll: etcd's view of the cluster, until `deadline`
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

bool contains_id(const std::vector<std::string>& ids, const std::string& id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

/// The bytes of the rows of every shard's copy at `c` (node method
/// replica_state's `bytes`, summed); -1, with the error added, when a call
/// fails.
std::int64_t rows_bytes(run_ctx& x, rpc_client& c, std::uint32_t shards) {
  std::int64_t sum = 0;
  for (std::uint32_t s = 0; s < shards; ++s) {
    auto r = c.call("replica_state", json{{"shard", s}});
    if (!r.value) {
      x.errors.add("replica_state of shard " + std::to_string(s) + ": " + r.value.err().message);
      return -1;
    }
    sum += r.value->value("bytes", std::int64_t{0});
  }
  return sum;
}

/// The rejoin part on the replicated cluster `name` (its nodes `nodes`,
/// `clients` connections to each): loads it until node n2's copies hold
/// `target` bytes of rows, waits until every shard is in sync on all three, kills n2
/// (SIGKILL), empties its store directory, starts it again with the same
/// arguments and times its way back into every in-sync set; then compares
/// every copy with its owner's (verify_replicas). Clears `clients`. The
/// fields of "rejoin"; those not measured are absent, with an error added.
ojson rejoin(run_ctx& x, const config& cfg, const std::string& url, const std::string& name,
             std::size_t target, node (&nodes)[3],
             std::vector<std::unique_ptr<rpc_client>> (&clients)[3]) {
  const std::uint32_t shards = 256;
  const std::size_t width = 64;
  const std::string app = "bench-k", n2 = "n2";
  ojson out;
  out["shards"] = shards;
  auto coord = cluster::make_etcd_coordinator(url, name);
  if (!coord) {
    x.errors.add("coordinator of '" + name + "': " + coord.err().message);
    return out;
  }
  auto& c = **coord;
  // One user per shard, so that every shard gets data.
  std::vector<std::string> user_of(shards);
  std::uint32_t found = 0;
  for (std::size_t i = 0; found < shards && i < 1000000; ++i) {
    auto u = "ru" + std::to_string(i);
    auto& slot = user_of[model::shard_of(app, u, shards)];
    if (slot.empty()) {
      slot = std::move(u);
      ++found;
    }
  }
  auto v = c.load();
  if (found < shards || !v) {
    x.errors.add(found < shards ? "no user found for every shard"
                                : "cannot load cluster '" + name + "': " + v.err().message);
    return out;
  }
  std::vector<int> owner(shards, 0);
  for (auto& e : v->shards)
    owner[e.shard] = e.owner.empty() ? 0 : e.owner.back() - '0';
  // Rounds of fresh sessions, one per shard, each of `per` appends of an
  // event with 4 KiB of text, until n2's copies hold `target` bytes of rows:
  // the first aims at half of it, the next at the rest by the bytes per event
  // measured.
  const json content = {{"parts", json::array({json{{"text", std::string(4096, 'k')}}})}};
  const std::int64_t size0 = rows_bytes(x, *clients[2][0], shards);
  std::int64_t size = size0;
  std::size_t written = 0;
  for (int round = 0; round < 10 && size >= 0 && size < std::int64_t(target) && x.errors.count == 0;
       ++round) {
    double per_event = written > 0 && size > size0 ? double(size - size0) / double(written) : 4096;
    double want = double(std::int64_t(target) - size) / (round == 0 ? 2 : 1);
    std::size_t per = static_cast<std::size_t>(want / per_event) / shards + 1;
    std::vector<session_ref> refs;
    for (std::uint32_t s = 0; s < shards; ++s)
      refs.push_back({app, user_of[s], "j" + std::to_string(round) + "-" + std::to_string(s)});
    auto client_of = [&](std::size_t j) -> rpc_client& {
      auto& of = clients[owner[j]];
      return *of[j % of.size()];
    };
    std::vector<double> lat;
    run_chains(
      x, shards, 1, width, client_of,
      [&](std::size_t j, std::size_t) {
        return std::make_pair(std::string("create_session"), ref_params(refs[j]));
      },
      [](std::size_t, const json&) { return std::string(); }, lat);
    if (x.errors.count != 0)
      break;
    run_chains(
      x, shards, per, width, client_of,
      [&](std::size_t j, std::size_t) {
        json p = ref_params(refs[j]);
        p["event"] = json{{"author", "bench"}, {"content", content}};
        return std::make_pair(std::string("append_event"), std::move(p));
      },
      [](std::size_t k, const json& r) {
        auto version = r.value("version", std::uint64_t{0});
        return version == k + 1
          ? std::string()
          : "version " + std::to_string(version) + ", expected " + std::to_string(k + 1);
      },
      lat);
    written += std::size_t{shards} * per;
    size = rows_bytes(x, *clients[2][0], shards);
  }
  out["events"] = written;
  if (x.errors.count != 0 || size < 0)
    return out;
  // Every copy in sync before the kill (one that lagged under the load is
  // repaired first).
  const auto all_in_sync = [&](const cluster::cluster_view& view) {
    for (auto& e : view.shards)
      if (e.isr.size() != 3)
        return false;
    return true;
  };
  if (!poll_view(c, steady::now() + std::chrono::seconds(120), all_in_sync)) {
    x.errors.add("the replicated cluster's copies were not all in sync within 120 s of the load");
    return out;
  }
  const std::int64_t copy = rows_bytes(x, *clients[2][0], shards);
  for (auto& of : clients)
    of.clear();
  if (copy < 0)
    return out;
  out["copy_bytes"] = copy;
  if (nodes[2].dir)
    out["store_bytes"] = std::llround(nodes[2].dir->size_mb() * mib);

  nodes[2].child.reset(); // ~serve_child: SIGKILL to its PID, then reaped
  // The entries as of the kill: n2 is back in a shard's in-sync set once it
  // is named there by a change made after it (a new store is added only by
  // a repair; a change while it is down drops it).
  auto at_kill = c.load();
  if (!at_kill) {
    x.errors.add("cannot load cluster '" + name + "': " + at_kill.err().message);
    return out;
  }
  if (nodes[2].dir) {
    std::error_code ec;
    for (auto& entry : std::filesystem::directory_iterator(nodes[2].dir->path(), ec))
      std::filesystem::remove_all(entry.path(), ec);
    if (ec) {
      x.errors.add("cannot empty " + nodes[2].dir->path() + ": " + ec.message());
      return out;
    }
  }
  const auto t0 = steady::now();
  if (!spawn_node(x, cfg, nodes[2]))
    return out;
  const std::string address = nodes[2].child->address();
  std::optional<double> joined, in_sync;
  auto since = [&] { return std::chrono::duration<double>(steady::now() - t0).count(); };
  poll_view(c, t0 + std::chrono::seconds(120), [&](const cluster::cluster_view& view) {
    auto* n = view.node(n2);
    if (!joined && n && n->alive && n->address == address)
      joined = since();
    if (!joined)
      return false;
    for (auto& e : view.shards)
      if (e.revision == at_kill->shards[e.shard].revision || !contains_id(e.isr, n2))
        return false;
    in_sync = since();
    return true;
  });
  if (!joined || !in_sync) {
    auto log = nodes[2].child->stderr_text();
    x.errors.add((!joined ? "n2 did not join again within 120 s of its restart"
                          : "n2 was not back in every in-sync set within 120 s of its restart")
                 + std::string("; its stderr ends: ")
                 + log.substr(log.size() - std::min<std::size_t>(log.size(), 2000)));
    return out;
  }
  out["restart_to_joined_s"] = round_to(*joined, 2);
  out["restart_to_in_sync_s"] = round_to(*in_sync, 2);
  if (*in_sync > *joined)
    out["repair_mb_per_s"] = round_to(double(copy) / mib / (*in_sync - *joined), 1);
  auto verified = tools::verify_replicas(c, tools::move_options{}, nullptr);
  if (!verified) {
    x.errors.add("cluster verify: " + verified.err().message);
    return out;
  }
  out["verify_equal"] = verified->equal;
  out["verify_different"] = verified->different;
  if (verified->different != 0)
    x.errors.add("cluster verify after the rejoin: " + verified->problems[0].dump());
  return out;
}

} // namespace

ojson workload_k(const config& cfg) {
  run_ctx x(cfg, "k");
  const std::size_t sessions = scaled(cfg, 1000, 8), per = 20, width = 64, conns = 8;
  const std::size_t users = std::min<std::size_t>(100, sessions);
  const std::uint32_t shards = 256;
  const std::size_t rejoin_bytes = scaled(cfg, 100 * mib, 2 * (std::size_t{1} << 20));
  x.describe("b's appends through one serve and through a 3-node cluster (forwarded; routed "
             "by cluster_map; routed, with 3 replicas), in one run; then a replicated node "
             "killed, wiped and started again (rejoin)",
             {{"sessions", sessions},
              {"users", users},
              {"events", sessions * per},
              {"in_flight", std::min(width, sessions)},
              {"nodes", 3},
              {"shards", shards},
              {"rejoin_mb", round_to(double(rejoin_bytes) / mib, 1)}});
  const char* target = "forwarded ratio_to_one_node >= 0.6, smart >= 0.8, replicated >= 0.4, "
                       "forward_hop_p50_us <= 200, rejoin restart_to_in_sync_s <= 30";
  std::vector<session_ref> refs;
  for (std::size_t j = 0; j < sessions; ++j)
    refs.push_back({"bench-k", "u" + std::to_string(j % users), "s" + std::to_string(j)});

  // One node.
  ojson one;
  {
    node n;
    std::vector<std::unique_ptr<rpc_client>> clients;
    if (start_node(x, cfg, {}, n))
      for (std::size_t i = 0; i < conns && x.errors.count == 0; ++i)
        clients.push_back(connect(x, n.child->address()));
    if (x.errors.count == 0)
      one = phase(x, refs, per, width,
                  [&](std::size_t j) -> rpc_client& { return *clients[j % clients.size()]; });
    clients.clear();
    stop_node(x, n);
  }
  x.out["one_node"] = one;
  if (x.errors.count != 0)
    return x.finish(target, false);

  // The cluster.
  std::string why;
  auto etcd = etcd_child::start(why);
  if (!etcd) {
    x.errors.add(why);
    return x.finish(target, false);
  }
  node nodes[3];
  std::vector<int> owner_of(sessions, 0);
  ojson forwarded, smart, replicated, rejoined;
  start_cluster(x, cfg, etcd->url(), "bench", 1, refs, nodes, owner_of);
  if (x.errors.count == 0) {
    // Forwarded: every connection to node 0; each phase on sessions of its own.
    std::vector<std::unique_ptr<rpc_client>> clients;
    for (std::size_t i = 0; i < conns && x.errors.count == 0; ++i)
      clients.push_back(connect(x, nodes[0].child->address()));
    auto fwd_refs = refs;
    for (auto& r : fwd_refs)
      r.session_id = "f" + r.session_id;
    if (x.errors.count == 0)
      forwarded = phase(x, fwd_refs, per, width,
                        [&](std::size_t j) -> rpc_client& { return *clients[j % clients.size()]; });
    // The hop alone: appends one at a time (no queueing) to a session of
    // node 1's own and to one it forwards, through the same connection.
    std::optional<std::size_t> own, other;
    for (std::size_t j = 0; j < sessions && (!own || !other); ++j)
      (owner_of[j] == 0 ? own : other) = j;
    if (x.errors.count == 0 && own && other) {
      const std::size_t steps = 300;
      auto one_at_a_time = [&](std::size_t j) {
        std::vector<double> lat;
        run_chains(
          x, 1, steps, 1, [&](std::size_t) -> rpc_client& { return *clients[0]; },
          [&](std::size_t, std::size_t k) {
            json p = ref_params(fwd_refs[j]);
            p["event"] =
              json{{"author", "bench"}, {"actions", {{"state_delta", step_delta(per + k)}}}};
            return std::make_pair(std::string("append_event"), std::move(p));
          },
          [](std::size_t, const json&) { return std::string(); }, lat);
        samples s;
        s.us = std::move(lat);
        return s.p50();
      };
      double here = one_at_a_time(*own), forwarded_one = one_at_a_time(*other);
      x.out["one_in_flight"] = ojson{{"own_p50_us", round_to(here, 1)},
                                     {"forwarded_p50_us", round_to(forwarded_one, 1)},
                                     {"forward_hop_p50_us", round_to(forwarded_one - here, 1)}};
    }
  }
  if (x.errors.count == 0) {
    // Smart: 3 connections per node, each session to its owner.
    std::vector<std::unique_ptr<rpc_client>> clients[3];
    for (int i = 0; i < 3; ++i)
      for (int c = 0; c < 3 && x.errors.count == 0; ++c)
        clients[i].push_back(connect(x, nodes[i].child->address()));
    auto smart_refs = refs;
    for (auto& r : smart_refs)
      r.session_id = "r" + r.session_id;
    if (x.errors.count == 0)
      smart = phase(x, smart_refs, per, width, [&](std::size_t j) -> rpc_client& {
        auto& of = clients[owner_of[j]];
        return *of[j % of.size()];
      });
  }
  for (auto& n : nodes)
    stop_node(x, n);
  if (x.errors.count == 0) {
    // Replicated: three copies of each shard, each session to its owner.
    node rnodes[3];
    start_cluster(x, cfg, etcd->url(), "bench-r", 3, refs, rnodes, owner_of);
    std::vector<std::unique_ptr<rpc_client>> clients[3];
    for (int i = 0; i < 3 && x.errors.count == 0; ++i)
      for (int c = 0; c < 3 && x.errors.count == 0; ++c)
        clients[i].push_back(connect(x, rnodes[i].child->address()));
    if (x.errors.count == 0)
      replicated = phase(x, refs, per, width, [&](std::size_t j) -> rpc_client& {
        auto& of = clients[owner_of[j]];
        return *of[j % of.size()];
      });
    if (x.errors.count == 0)
      rejoined = rejoin(x, cfg, etcd->url(), "bench-r", rejoin_bytes, rnodes, clients);
    for (int i = 0; i < 3; ++i)
      clients[i].clear();
    for (auto& n : rnodes)
      stop_node(x, n);
  }
  etcd.reset();
  x.out["forwarded"] = forwarded;
  x.out["smart"] = smart;
  x.out["replicated"] = replicated;
  x.out["rejoin"] = rejoined;
  bool meets = false;
  if (x.errors.count == 0 && one.contains("events_per_s") && forwarded.contains("events_per_s")
      && smart.contains("events_per_s")) {
    double base = one["events_per_s"].get<double>();
    double f = forwarded["events_per_s"].get<double>() / base;
    double s = smart["events_per_s"].get<double>() / base;
    double hop = forwarded["p50_us"].get<double>() - one["p50_us"].get<double>();
    x.out["forwarded"]["ratio_to_one_node"] = round_to(f, 3);
    x.out["smart"]["ratio_to_one_node"] = round_to(s, 3);
    x.out["forward_hop_p50_us"] = round_to(hop, 1);
    meets = f >= 0.6 && s >= 0.8 && hop <= 200;
    if (replicated.contains("events_per_s")) {
      double r = replicated["events_per_s"].get<double>() / base;
      x.out["replicated"]["ratio_to_one_node"] = round_to(r, 3);
      meets = meets && r >= 0.4;
    } else {
      meets = false;
    }
    if (rejoined.contains("restart_to_in_sync_s"))
      meets = meets && rejoined["restart_to_in_sync_s"].get<double>() <= 30;
  }
  return x.finish(target, meets);
}

} // namespace agentstate::tools::bench
