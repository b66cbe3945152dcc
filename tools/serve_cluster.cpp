// SPDX-License-Identifier: Apache-2.0
// tools/serve_cluster.cpp: serve's cluster options and the routing of
// requests by the shard map.
#include "tools/serve_cluster.hpp"

#include <algorithm>
#include <utility>

#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "agentstate/client.hpp"
#include "cluster/node.hpp"
#include "cluster/span.hpp"
#include "model/shard.hpp"
#include "tools/cli.hpp"
#include "tools/watch_remote.hpp"

namespace agentstate::tools {

namespace {

/// Methods that read or write one session or one user: they name app_name
/// and user_id and live on shard_of(app, user).
bool per_user(std::string_view m) {
  static constexpr std::string_view names[] = {
    "create_session", "get_session",      "delete_session", "append_event",
    "end_invocation", "inject_state",     "get_user_state", "rewind_session",
    "rewind_plan",    "list_invocations", "fork_session",   "delete_user",
  };
  return std::find(std::begin(names), std::end(names), m) != std::end(names);
}

/// A refusal of kind `kind` (with forward_to: a request to forward there).
protocol::route_refusal refusal(std::string kind, std::string message, json data,
                                std::string forward_to = {}) {
  protocol::route_refusal r;
  r.kind = std::move(kind);
  r.message = std::move(message);
  r.data = std::move(data);
  r.forward_to = std::move(forward_to);
  return r;
}

} // namespace

void add_cluster_flags(command_line& cl, cluster_flags& f) {
  const std::string group = "cluster (docs/cluster.md)";
  cl.app.add_option("--cluster", f.cluster, "join this cluster as a node (with --etcd, --node-id)")
    ->type_name("NAME")
    ->group(group);
  cl.app.add_option("--etcd", f.etcd, "etcd's client URLs, comma-separated")
    ->type_name("URLS")
    ->group(group);
  cl.app.add_option("--node-id", f.node_id, "this node's id in the cluster, for good")
    ->type_name("ID")
    ->group(group);
  cl.app
    .add_option("--advertise", f.advertise,
                "HOST:PORT others reach this node at (default: the\nfirst TCP --listen)")
    ->type_name("HOST:PORT")
    ->group(group);
  cl.app
    .add_flag("--no-forward", f.no_forward,
              "answer a request for another node's shard with\n"
              "`moved` (its owner's address) instead of forwarding it")
    ->group(group);
  cl.app
    .add_option("--node-token-file", f.node_token_file,
                "with --auth-file: the token this node presents to\n"
                "the other nodes when it forwards (one granting '*')")
    ->type_name("FILE")
    ->group(group);
  cl.app
    .add_option("--peer-tls-ca", f.peer_tls_ca,
                "with TLS: the CAs the other nodes' certificates are\n"
                "checked against when this node forwards")
    ->type_name("FILE")
    ->group(group);
  cl.app
    .add_option("--lease-ttl-s", f.lease_ttl_s,
                "the node's lease in etcd, in seconds (default 5):\n"
                "it stops serving this long after it last reached etcd")
    ->type_name("N")
    ->group(group);
}

std::string check_cluster_flags(const cli_app& app, cluster_flags& f, bool tcp_listener) {
  for (const char* name : {"--cluster", "--etcd", "--node-id", "--advertise", "--no-forward",
                           "--lease-ttl-s", "--node-token-file", "--peer-tls-ca"})
    if (app.get_option(name)->count() > 0)
      f.given = true;
  if (!f.given)
    return "";
  if (f.cluster.empty() || f.etcd.empty() || f.node_id.empty())
    return "a cluster node needs --cluster, --etcd and --node-id";
  if (!tcp_listener)
    return "a cluster node needs a TCP --listen that clients and other nodes reach";
  if (!f.no_forward && f.peers_need_token && f.node_token_file.empty())
    return "a node with --auth-file forwards with --node-token-file FILE (a token the other "
           "nodes grant '*'), or answers `moved` with --no-forward";
  if (!f.no_forward && f.peers_use_tls && f.peer_tls_ca.empty())
    return "a node with TLS forwards with --peer-tls-ca FILE (the CAs of the other nodes' "
           "certificates), or answers `moved` with --no-forward";
  if (f.lease_ttl_s < 1 || f.lease_ttl_s > 3600)
    return "--lease-ttl-s must be an integer 1..3600";
  if (auto why = cluster::check_name("cluster name", f.cluster); !why.empty())
    return why;
  if (auto why = cluster::check_name("node id", f.node_id); !why.empty())
    return why;
  return "";
}

struct cluster_member::impl {
  std::unique_ptr<cluster::node> node;
  std::string id;
  bool forwarding = false;
  std::size_t max_response_bytes = 0; ///< cluster_flags::max_response_bytes
  client_options peer_options; ///< token and TLS settings for every peer
  /// Peer connections by address. A lost one is replaced, and the old one
  /// retired: destroyed by the reaper thread once nothing else holds it (a
  /// client may not be destroyed on its own I/O thread, where the request
  /// that finds it lost may run).
  std::mutex peers_mtx;
  std::condition_variable peers_cv;
  std::map<std::string, std::shared_ptr<rpc_client>> peers;
  std::vector<std::shared_ptr<rpc_client>> retired;
  bool stopping = false;
  std::thread reaper;

  void reap() {
    std::unique_lock<std::mutex> lock(peers_mtx);
    for (;;) {
      peers_cv.wait_for(lock, std::chrono::seconds(1));
      std::vector<std::shared_ptr<rpc_client>> done;
      for (auto it = retired.begin(); it != retired.end();) {
        if (it->use_count() == 1 || stopping) {
          done.push_back(std::move(*it));
          it = retired.erase(it);
        } else {
          ++it;
        }
      }
      if (stopping) {
        for (auto& [addr, c] : peers)
          done.push_back(std::move(c));
        peers.clear();
      }
      lock.unlock();
      done.clear(); // destroyed here, on the reaper's thread
      lock.lock();
      if (stopping)
        return;
    }
  }

  ~impl() {
    {
      std::lock_guard<std::mutex> lock(peers_mtx);
      stopping = true;
      peers_cv.notify_all();
    }
    if (reaper.joinable())
      reaper.join();
  }

  /// route_refusal::span_watch_open: a watch at `peer` on a connection of
  /// its own (its notifications come as they are sent, and a close ends
  /// that part alone), retired at once so that the reaper destroys it when
  /// the watch has let it go. Blocks until the peer answered (connect: 2 s,
  /// the watch: 10 s).
  result<protocol::peer_watch>
  open_watch(const std::string& peer, json params,
             std::function<void(protocol::peer_watch_event)> on_event) {
    client_options o = peer_options;
    o.address = peer;
    o.connect_timeout = std::chrono::milliseconds(2000);
    auto made = rpc_client::connect(o);
    if (!made)
      return error{errc::unavailable,
                   "node '" + id + "' cannot reach the node at " + peer
                     + " to watch its part: " + made.err().message};
    std::shared_ptr<rpc_client> c(std::move(*made));
    {
      std::lock_guard<std::mutex> lock(peers_mtx);
      retired.push_back(c);
    }
    auto reply = c->watch(
      std::move(params),
      [on_event = std::move(on_event)](const watch_event& e) {
        protocol::peer_watch_event out;
        out.what = e.what == watch_event::kind::changes ? protocol::peer_watch_event::kind::changes
          : e.what == watch_event::kind::ended          ? protocol::peer_watch_event::kind::ended
                                                        : protocol::peer_watch_event::kind::lost;
        out.params = e.params;
        out.why = e.why.message;
        on_event(std::move(out));
      },
      std::chrono::milliseconds(10000));
    if (!reply.value) {
      c->close();
      auto e = std::move(reply.value).err();
      if (!reply.answered)
        e.message = "node '" + id + "' got no answer from the node at " + peer
          + " to watch its part: " + e.message;
      return e;
    }
    const auto& cursor = reply.value->at("cursor");
    protocol::peer_watch w;
    w.cursor = cursor.is_string() ? cursor.get<std::string>() : std::string();
    w.close = [c] { c->close(); };
    return w;
  }

  /// The refusal for shard `shard` of view `v`, or nullopt when it is ours.
  std::optional<protocol::route_refusal> for_shard(const cluster::cluster_view& v,
                                                   std::uint32_t shard) const {
    const auto& e = v.shards[shard];
    if (e.owner == id)
      return std::nullopt;
    json data = {{"shard", shard}, {"epoch", e.epoch}};
    if (e.owner.empty())
      return refusal("unavailable", "shard " + std::to_string(shard) + " has no owner yet",
                     std::move(data));
    data["owner"] = e.owner;
    const auto* n = v.node(e.owner);
    if (!n || !n->alive)
      return refusal("unavailable",
                     "shard " + std::to_string(shard) + "'s owner, node '" + e.owner + "', is down",
                     std::move(data));
    data["address"] = n->address;
    return refusal(
      "moved", "shard " + std::to_string(shard) + " is on node '" + e.owner + "' at " + n->address,
      std::move(data), forwarding ? n->address : std::string());
  }
};

cluster_member::cluster_member(std::unique_ptr<impl> p) : p_(std::move(p)) {}
cluster_member::~cluster_member() = default;

result<std::unique_ptr<cluster_member>>
cluster_member::join(const cluster_flags& f, const std::string& address, server::logger& log) {
  auto p = std::make_unique<impl>();
  p->id = f.node_id;
  p->forwarding = !f.no_forward;
  p->max_response_bytes = f.max_response_bytes;
  if (p->forwarding && !f.node_token_file.empty()) {
    auto token = read_token_file(f.node_token_file);
    if (!token)
      return std::move(token).err();
    p->peer_options.token = std::move(*token);
  }
  if (p->forwarding && f.peers_use_tls) {
    p->peer_options.tls = true;
    p->peer_options.tls_ca = f.peer_tls_ca;
    p->peer_options.tls_cert = f.tls_cert;
    p->peer_options.tls_key = f.tls_key;
  }
  auto c = cluster::make_etcd_coordinator(f.etcd, f.cluster);
  if (!c)
    return std::move(c).err();
  cluster::node::config cfg;
  cfg.id = f.node_id;
  cfg.address = address;
  cfg.ttl = std::chrono::seconds(f.lease_ttl_s);
  cfg.on_view = [&log, id = f.node_id,
                 last = std::optional<std::size_t>()](const cluster::cluster_view& v) mutable {
    auto owned = static_cast<std::size_t>(std::count_if(
      v.shards.begin(), v.shards.end(), [&](const auto& e) { return e.owner == id; }));
    if (last == owned)
      return;
    last = owned;
    log.info("shards",
             "node '" + id + "' owns " + std::to_string(owned) + " of "
               + std::to_string(v.shards.size()) + " shards (map revision "
               + std::to_string(v.revision) + ")",
             {{"owned", owned}, {"shards", v.shards.size()}, {"revision", v.revision}});
  };
  auto n = cluster::node::start(std::shared_ptr<cluster::coordinator>(std::move(*c)), cfg);
  if (!n)
    return std::move(n).err();
  p->node = std::move(*n);
  auto* raw = p.get();
  p->reaper = std::thread([raw] { raw->reap(); });
  return std::unique_ptr<cluster_member>(new cluster_member(std::move(p)));
}

std::optional<protocol::route_refusal> cluster_member::route(const protocol::route_query& q) const {
  const bool feed = q.method == "read_changes" || q.method == "watch";
  if (!q.app_name && !feed)
    return std::nullopt; // ping, stats, flush: this node's own
  if (!p_->node->serving())
    return refusal("unavailable",
                   "node '" + p_->id
                     + "' cannot reach the cluster's coordinator: it serves no "
                       "shard until it can",
                   nullptr);
  auto v = p_->node->view();
  const std::uint32_t shards = v->settings.shards;
  bool one_user = false;
  if (feed)
    one_user = q.scope && (*q.scope == "session" || *q.scope == "user");
  else
    one_user = per_user(q.method) || (q.method == "list_sessions" && q.user_id);
  if (one_user && q.app_name && q.user_id)
    return p_->for_shard(*v, model::shard_of(*q.app_name, *q.user_id, shards));
  if (one_user)
    return std::nullopt; // params the method itself refuses
  if ((q.method == "get_app_state" || q.method == "apply_app_write") && q.app_name)
    return p_->for_shard(*v, model::home_shard(*q.app_name, shards));
  // Spans the app's (or every app's) shards.
  std::size_t mine = static_cast<std::size_t>(std::count_if(
    v->shards.begin(), v->shards.end(), [&](const auto& e) { return e.owner == p_->id; }));
  if (mine == shards)
    return std::nullopt;
  const bool spannable = q.method == "list_sessions" || q.method == "delete_app"
    || q.method == "read_changes" || q.method == "watch";
  if (spannable && q.this_node)
    return std::nullopt; // a part of a request another node runs across nodes
  if (!spannable || !p_->forwarding || (!q.app_name && !feed))
    return refusal("invalid_argument",
                   "'" + std::string(q.method) + "' here spans every shard, and node '" + p_->id
                     + "' owns " + std::to_string(mine) + " of " + std::to_string(shards)
                     + (p_->forwarding
                          ? ": across nodes a cluster serves list_sessions, read_changes, watch "
                            "and delete_app"
                          : ": a node with --no-forward serves it only when it owns them all")
                     + " (docs/cluster.md)",
                   nullptr);
  if (q.method == "watch" && q.from && !cluster::parse_merged_cursor(*q.from))
    return refusal("invalid_argument",
                   "'from' is not a cursor of a watch or read across nodes (one starting "
                   "\"nodes:\", as such a watch or read answers it)",
                   nullptr);
  // Runs here and at every other owner: each shard's owner must be live.
  protocol::route_refusal r;
  std::vector<std::string> ids{p_->id}; // each part's node: this one, then span_peers'
  for (std::uint32_t s = 0; s < shards; ++s) {
    auto refused = p_->for_shard(*v, s);
    if (!refused)
      continue;
    if (refused->kind != "moved")
      return refused;
    auto& address = refused->data["address"].get_ref<const std::string&>();
    if (std::find(r.span_peers.begin(), r.span_peers.end(), address) == r.span_peers.end()) {
      r.span_peers.push_back(address);
      ids.push_back(refused->data["owner"].get<std::string>());
    }
  }
  if (feed) {
    r.span_params = [ids](const json& params, std::size_t part) {
      json p = params;
      p["this_node"] = true;
      p.erase("from");
      if (auto from = params.find("from"); from != params.end() && from->is_string())
        if (auto at = cluster::parse_merged_cursor(from->get_ref<const std::string&>()))
          if (auto mine = at->find(ids[part]); mine != at->end())
            p["from"] = mine->second;
      return p;
    };
    if (q.method == "watch") {
      // Refused by a stream that cannot run it (no forwarding there).
      r.kind = "invalid_argument";
      r.message = "'watch' here spans several nodes, and this stream does not forward";
      r.span_cursor = [ids](const std::string& merged, std::size_t part, const std::string& at) {
        return cluster::with_node_cursor(merged, ids[part], at);
      };
      r.span_watch_open = [m = p_.get()](const std::string& peer, json params,
                                         std::function<void(protocol::peer_watch_event)> on) {
        return m->open_watch(peer, std::move(params), std::move(on));
      };
      return r;
    }
    r.span = [ids](const json& params, std::vector<protocol::span_answer> parts) {
      return cluster::merge_changes(params, std::move(parts), ids);
    };
    return r;
  }
  if (q.method == "delete_app") {
    r.span_params = [](const json& params, std::size_t) {
      json p = params;
      p["this_node"] = true;
      return p;
    };
    r.span = [](const json&, std::vector<protocol::span_answer> parts) {
      if (auto e = cluster::first_error(parts))
        return *e;
      return protocol::span_answer{nullptr, nullptr};
    };
  } else {
    r.span_params = [](const json& params, std::size_t) {
      json p = params;
      p["session_tokens"] = true;
      p["this_node"] = true;
      p.erase("offset"); // refused by the merge: no part skips anything
      return p;
    };
    r.span = [max = p_->max_response_bytes](const json& params,
                                            std::vector<protocol::span_answer> parts) {
      return cluster::merge_pages(params, std::move(parts), max);
    };
  }
  return r;
}

void cluster_member::forward(const std::string& peer, const std::string& method, json params,
                             protocol::forward_done done) const {
  // One connection per peer; a lost one is replaced by the next request
  // (connected under the lock: one connection per peer at a time). The call
  // is made outside it (a refused call answers on this thread): a request
  // started after another's call returned is behind it on the wire, which
  // is the order the dispatcher starts a session's requests in.
  std::shared_ptr<rpc_client> c;
  std::string failed;
  {
    std::lock_guard<std::mutex> lock(p_->peers_mtx);
    auto& slot = p_->peers[peer];
    if (!slot || !slot->connected()) {
      if (slot)
        p_->retired.push_back(std::move(slot));
      client_options o = p_->peer_options;
      o.address = peer;
      o.connect_timeout = std::chrono::milliseconds(2000);
      auto made = rpc_client::connect(o);
      if (made)
        slot = std::shared_ptr<rpc_client>(std::move(*made));
      else {
        slot.reset();
        failed = made.err().message;
      }
    }
    c = slot;
  }
  if (!c) {
    done(error{errc::unavailable,
               "node '" + p_->id + "' cannot reach the shard's owner at " + peer + ": " + failed},
         nullptr);
    return;
  }
  c->call_async(
    method, std::move(params),
    [done = std::move(done)](rpc_reply r) mutable {
      done(std::move(r.value), r.answered ? std::move(r.error_object) : json(nullptr));
    },
    std::chrono::milliseconds(30000));
}

result<json> cluster_member::cluster_map(const json& params) const {
  auto app = params.find("app_name");
  auto user = params.find("user_id");
  if (app != params.end() && !app->is_string())
    return error{errc::invalid_argument, "'app_name' must be a string"};
  if (user != params.end() && (!user->is_string() || app == params.end()))
    return error{errc::invalid_argument, "'user_id' must be a string, with 'app_name'"};
  auto v = p_->node->view();
  json shards = json::array(), nodes = json::array();
  for (auto& e : v->shards)
    shards.push_back({{"shard", e.shard},
                      {"owner", e.owner.empty() ? json(nullptr) : json(e.owner)},
                      {"epoch", e.epoch}});
  for (auto& n : v->nodes)
    nodes.push_back({{"id", n.id}, {"address", n.address}, {"alive", n.alive}});
  json out = {{"cluster", v->cluster},
              {"revision", v->revision},
              {"node", p_->id},
              {"shard_count", v->settings.shards},
              {"shards", std::move(shards)},
              {"nodes", std::move(nodes)}};
  if (app != params.end()) {
    const auto& a = app->get_ref<const std::string&>();
    out["home_shard"] = model::home_shard(a, v->settings.shards);
    if (user != params.end())
      out["shard"] = model::shard_of(a, user->get_ref<const std::string&>(), v->settings.shards);
  }
  return out;
}

} // namespace agentstate::tools
