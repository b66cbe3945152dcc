// SPDX-License-Identifier: Apache-2.0
// tools/serve_cluster.cpp: a cluster node's routing of requests by the
// shard map, its peer connections and its app: scope (docs/cluster.md).
// Over 600 lines: the three share one impl (the map's view, the peers).
#include "tools/serve_cluster.hpp"
#include "tools/shard_replicator.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include <atomic>
#include <condition_variable>
#include <list>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "agentstate/client.hpp"
#include "cluster/node.hpp"
#include "cluster/span.hpp"
#include "model/shard.hpp"
#include "tools/cli.hpp"
#include "tools/shard_mover.hpp"
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

/// Methods whose answer shows a session's merged state, app: keys included.
bool shows_app_state(std::string_view m) {
  return m == "get_session" || m == "create_session" || m == "fork_session" || m == "list_sessions";
}

} // namespace

struct cluster_member::impl {
  std::unique_ptr<cluster::node> node;
  /// Set by start_moves; its thread ends before the engine closes.
  std::unique_ptr<shard_mover> mover;
  /// Set by start_moves in a cluster with replicas; stopped before the
  /// engine closes.
  std::unique_ptr<shard_replicator> replicator;
  std::shared_ptr<cluster::coordinator> coord;
  std::chrono::milliseconds lag_timeout{1000};
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
  /// A call waiting for its peer's connection: made with the connection,
  /// or (null) answered with why it could not be made.
  using waiting_call = std::function<void(const std::shared_ptr<rpc_client>&, const std::string&)>;
  struct peer_slot {
    std::shared_ptr<rpc_client> c;
    /// A connector thread is making the connection: calls queue in
    /// `waiting`, in the order they were made, and go out in that order.
    bool connecting = false;
    std::vector<waiting_call> waiting;
  };
  std::map<std::string, peer_slot> peers;
  std::vector<std::shared_ptr<rpc_client>> retired;
  /// Connector threads (one per connection being made, ≤ 2 s each) and
  /// whether each has finished; joined by the reaper.
  std::list<std::pair<std::thread, std::shared_ptr<std::atomic<bool>>>> connectors;
  bool stopping = false;
  std::thread reaper;

  void reap() {
    std::unique_lock<std::mutex> lock(peers_mtx);
    for (;;) {
      peers_cv.wait_for(lock, std::chrono::seconds(1));
      std::vector<std::shared_ptr<rpc_client>> done;
      std::vector<std::thread> finished;
      for (auto it = connectors.begin(); it != connectors.end();) {
        if (*it->second || stopping) {
          finished.push_back(std::move(it->first));
          it = connectors.erase(it);
        } else {
          ++it;
        }
      }
      for (auto it = retired.begin(); it != retired.end();) {
        if (it->use_count() == 1 || stopping) {
          done.push_back(std::move(*it));
          it = retired.erase(it);
        } else {
          ++it;
        }
      }
      if (stopping) {
        for (auto& [addr, slot] : peers)
          if (slot.c)
            done.push_back(std::move(slot.c));
        peers.clear();
      }
      lock.unlock();
      for (auto& t : finished)
        t.join(); // a connector ends within its connect timeout
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

  /// Runs `call` with the connection to `peer`: at once when it is up,
  /// else once a connector thread has made it (or, null, could not), after
  /// the calls made before it. Never blocks on the network.
  void with_peer(const std::string& peer, waiting_call call) {
    std::shared_ptr<rpc_client> c;
    {
      std::lock_guard<std::mutex> lock(peers_mtx);
      auto& slot = peers[peer];
      if (!slot.connecting && slot.c && slot.c->connected()) {
        c = slot.c;
      } else {
        slot.waiting.push_back(std::move(call));
        if (slot.connecting)
          return;
        slot.connecting = true;
        if (slot.c)
          retired.push_back(std::move(slot.c));
        auto finished = std::make_shared<std::atomic<bool>>(false);
        connectors.emplace_back(std::thread([this, peer, finished] {
                                  connect_peer(peer);
                                  *finished = true;
                                }),
                                finished);
        return;
      }
    }
    call(c, std::string());
  }

  /// A connector thread's body: makes the connection to `peer`, then sends
  /// the calls that waited for it, in order, until none is left.
  void connect_peer(const std::string& peer) {
    client_options o = peer_options;
    o.address = peer;
    o.connect_timeout = std::chrono::milliseconds(2000);
    auto made = rpc_client::connect(o);
    std::shared_ptr<rpc_client> c;
    std::string failed;
    if (made)
      c = std::shared_ptr<rpc_client>(std::move(*made));
    else
      failed = made.err().message;
    for (;;) {
      std::vector<waiting_call> batch;
      {
        std::lock_guard<std::mutex> lock(peers_mtx);
        auto& slot = peers[peer];
        batch.swap(slot.waiting);
        if (batch.empty()) {
          slot.connecting = false;
          if (c && !stopping)
            slot.c = c;
          else if (c)
            retired.push_back(c);
          return;
        }
      }
      for (auto& call : batch)
        call(c, failed);
    }
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

  /// Sets `r`'s step that reads app `app`'s app: state at its home shard's
  /// node for `method`'s answer: false (and `r` untouched) when the home
  /// is this node; throws nothing. `refused` gets the home's refusal when
  /// its owner is down or unknown.
  bool app_state_step(const cluster::cluster_view& v, const std::string& method,
                      const std::string& app, protocol::route_refusal& r,
                      std::optional<protocol::route_refusal>& refused) const {
    auto home = for_shard(v, model::home_shard(app, v.settings.shards));
    if (!home)
      return false;
    if (home->kind != "moved") {
      home->message = "'" + method + "' shows app '" + app
        + "''s app: state, kept on its home shard: " + home->message;
      refused = std::move(home);
      return false;
    }
    r.then_peer = home->data["address"].get<std::string>();
    r.then_method = "get_app_state";
    r.then_params = json{{"app_name", app}};
    r.then = [method, app](json result, protocol::span_answer step) {
      return cluster::with_app_state(method, app, std::move(result), std::move(step));
    };
    return true;
  }

  /// The refusal for shard `shard` of view `v`, or nullopt when it is ours.
  std::optional<protocol::route_refusal> for_shard(const cluster::cluster_view& v,
                                                   std::uint32_t shard) const {
    const auto& e = v.shards[shard];
    json data = {{"shard", shard}, {"epoch", e.epoch}};
    if (e.owner == id && e.to.empty() && replicator && !replicator->leads(shard, e.epoch)) {
      data["owner"] = e.owner;
      return refusal("unavailable",
                     "shard " + std::to_string(shard) + " is being taken over by node '" + id
                       + "' at epoch " + std::to_string(e.epoch) + "; retry",
                     std::move(data));
    }
    if (e.owner == id && (e.to.empty() || e.copying))
      return std::nullopt;
    if (e.owner.empty())
      return refusal("unavailable", "shard " + std::to_string(shard) + " has no owner yet",
                     std::move(data));
    data["owner"] = e.owner;
    if (!e.to.empty() && !e.copying) {
      data["to"] = e.to;
      return refusal("unavailable",
                     "shard " + std::to_string(shard) + " is moving from node '" + e.owner
                       + "' to node '" + e.to + "'; retry",
                     std::move(data));
    }
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
  p->lag_timeout = std::chrono::milliseconds(f.lag_timeout_ms);
  p->max_response_bytes = f.max_response_bytes;
  // A peer's answer is as long as this node's own may be (the response
  // limit), plus the envelope.
  p->peer_options.max_line_bytes = f.max_response_bytes + (std::size_t{1} << 20);
  if (!f.node_token_file.empty()) {
    auto token = read_token_file(f.node_token_file);
    if (!token)
      return std::move(token).err();
    p->peer_options.token = std::move(*token);
  }
  if (f.peers_use_tls) {
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
  p->coord = std::shared_ptr<cluster::coordinator>(std::move(*c));
  auto n = cluster::node::start(p->coord, cfg);
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
  if (one_user && q.app_name && q.user_id) {
    if (auto r = p_->for_shard(*v, model::shard_of(*q.app_name, *q.user_id, shards))) {
      if (q.method == "watch" && !r->forward_to.empty()) {
        // Relayed from the owner, under its own cursors.
        protocol::route_refusal w;
        w.kind = "invalid_argument";
        w.message = "'watch' here is of another node's shard, and this stream does not forward";
        w.span_relay = true;
        w.span_peers.push_back(std::move(r->forward_to));
        w.span_cursor = [](const std::string&, std::size_t, const std::string& at) { return at; };
        w.span_watch_open = [m = p_.get()](const std::string& peer, json params,
                                           std::function<void(protocol::peer_watch_event)> on) {
          return m->open_watch(peer, std::move(params), std::move(on));
        };
        return w;
      }
      return r;
    }
    // The session is here; its answer shows the app: state kept at the
    // app's home (docs/cluster.md).
    protocol::route_refusal r;
    std::optional<protocol::route_refusal> refused;
    if (shows_app_state(q.method)
        && p_->app_state_step(*v, std::string(q.method), *q.app_name, r, refused))
      return r;
    if (q.method == "inject_state"
        && p_->app_state_step(*v, std::string(q.method), *q.app_name, r, refused)) {
      // The template renders the app: state read at the home first.
      r.then = nullptr;
      r.before = [app = *q.app_name](json params, protocol::span_answer step) {
        if (!step.error.is_null())
          return cluster::with_app_state("inject_state", app, nullptr, std::move(step));
        if (!step.result.is_object())
          throw std::runtime_error("the app's home answered get_app_state with no object");
        params["home_app_state"] = std::move(step.result);
        return protocol::span_answer{std::move(params), nullptr};
      };
      return r;
    }
    return refused; // the home is down: the answer cannot be whole
  }
  if (one_user)
    return std::nullopt; // params the method itself refuses
  if ((q.method == "get_app_state" || q.method == "apply_app_write") && q.app_name)
    return p_->for_shard(*v, model::home_shard(*q.app_name, shards));
  // Spans the app's (or every app's) shards.
  std::size_t mine = static_cast<std::size_t>(std::count_if(
    v->shards.begin(), v->shards.end(), [&](const auto& e) { return e.owner == p_->id; }));
  if (q.method == "list_sessions" && p_->replicator) {
    // This node's part lists its own copies: of shards it leads only.
    for (std::uint32_t s = 0; s < shards; ++s)
      if (v->shards[s].owner == p_->id)
        if (auto r = p_->for_shard(*v, s))
          return r;
  }
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
  if (q.method == "watch" && q.from && *q.from != "start" && !cluster::parse_merged_cursor(*q.from))
    return refusal("invalid_argument",
                   "'from' is not a cursor of a watch or read across nodes (one starting "
                   "\"nodes:\", as such a watch or read answers it)",
                   nullptr);
  // Runs here and at every other owner: each shard's owner must be live. A
  // shard that is moving is read at its owner, which holds its rows until
  // the map names the next one.
  protocol::route_refusal r;
  std::vector<std::string> ids{p_->id}; // each part's node: this one, then span_peers'
  for (std::uint32_t s = 0; s < shards; ++s) {
    const auto& e = v->shards[s];
    if (e.owner == p_->id)
      continue;
    const auto* n = e.owner.empty() ? nullptr : v->node(e.owner);
    if (!n || !n->alive)
      return p_->for_shard(*v, s);
    if (std::find(r.span_peers.begin(), r.span_peers.end(), n->address) == r.span_peers.end()) {
      r.span_peers.push_back(n->address);
      ids.push_back(e.owner);
    }
  }
  if (feed) {
    r.span_params = [ids](const json& params, std::size_t part) {
      json p = params;
      p["this_node"] = true;
      p.erase("from");
      if (auto from = params.find("from"); from != params.end() && from->is_string()) {
        const auto& text = from->get_ref<const std::string&>();
        if (text == "start")
          p["from"] = text; // each node's log from the oldest change it keeps
        else if (auto at = cluster::parse_merged_cursor(text))
          if (auto mine = at->find(ids[part]); mine != at->end())
            p["from"] = mine->second;
      }
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
    // Each node lists and counts only the shards this view names it owner
    // of: its store may also hold copies (a follower's, a shard moving to
    // or from it), which another node answers for.
    std::vector<json> owned(ids.size(), json::array());
    for (std::uint32_t s = 0; s < shards; ++s)
      for (std::size_t i = 0; i < ids.size(); ++i)
        if (v->shards[s].owner == ids[i])
          owned[i].push_back(s);
    r.span_params = [owned = std::move(owned), shards](const json& params, std::size_t part) {
      json p = params;
      p["session_tokens"] = true;
      p["this_node"] = true;
      p["shard_count"] = shards;
      p["shards"] = owned[part];
      p.erase("offset"); // refused by the merge: no part skips anything
      return p;
    };
    // Each session is taken from its shard's owner alone, as this view
    // names it (a part's node may answer from a newer view).
    r.span = [max = p_->max_response_bytes, ids, v](const json& params,
                                                    std::vector<protocol::span_answer> parts) {
      const auto shards = v->settings.shards;
      return cluster::merge_pages(
        params, std::move(parts), max, [&](std::size_t part, const json& s) {
          auto app = s.find("app_name"), user = s.find("user_id");
          if (app == s.end() || user == s.end() || !app->is_string() || !user->is_string())
            return true;
          const auto shard = model::shard_of(app->get_ref<const std::string&>(),
                                             user->get_ref<const std::string&>(), shards);
          return v->shards[shard].owner == ids[part];
        });
    };
    // The sessions of nodes other than the app's home show its app: state
    // as read there once the page is merged.
    std::optional<protocol::route_refusal> refused;
    if (!p_->app_state_step(*v, std::string(q.method), *q.app_name, r, refused)) {
      if (refused)
        return refused;
      r.then_method = "get_app_state"; // the home is this node
      r.then_params = json{{"app_name", *q.app_name}};
      r.then = [method = std::string(q.method), app = *q.app_name](json result,
                                                                   protocol::span_answer step) {
        return cluster::with_app_state(method, app, std::move(result), std::move(step));
      };
    }
  }
  return r;
}

void cluster_member::forward(const std::string& peer, const std::string& method, json params,
                             protocol::forward_done done) const {
  // One connection per peer; a lost one is replaced by the next request.
  // A request started after another's call returned is behind it on the
  // wire (with_peer keeps the order of calls waiting for a connection),
  // which is the order the dispatcher starts a session's requests in.
  p_->with_peer(
    peer,
    [id = p_->id, peer, method, params = std::move(params), done = std::move(done)](
      const std::shared_ptr<rpc_client>& c, const std::string& failed) mutable {
      if (!c) {
        done(error{errc::unavailable,
                   "node '" + id + "' cannot reach the node at " + peer + ": " + failed},
             nullptr);
        return;
      }
      const auto deadline = std::chrono::milliseconds(30000);
      if (params.is_binary()) {
        // The params' text, unread: the result comes back as text too.
        const auto& bytes = params.get_binary();
        c->call_raw_async(
          method, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()),
          [done = std::move(done)](rpc_raw_reply r) mutable {
            result<json> value = r.value
              ? result<json>(
                json::binary(json::binary_t::container_type(r.value->begin(), r.value->end())))
              : result<json>(std::move(r.value).err());
            done(std::move(value), r.answered ? std::move(r.error_object) : json(nullptr));
          },
          deadline);
        return;
      }
      c->call_async(
        method, std::move(params),
        [done = std::move(done)](rpc_reply r) mutable {
          done(std::move(r.value), r.answered ? std::move(r.error_object) : json(nullptr));
        },
        deadline);
    });
}

result<void> cluster_member::start_moves(engine& eng, const std::string& store_dir, bool new_store,
                                         server::logger& log) {
  auto m = shard_mover::start(eng, *p_->node, p_->id, store_dir, log);
  if (!m)
    return std::move(m).err();
  p_->mover = std::move(*m);
  if (p_->node->view()->settings.replicas > 1) {
    shard_replicator::config rc;
    rc.id = p_->id;
    rc.lag_timeout = p_->lag_timeout;
    rc.new_store = new_store;
    rc.send = [this](const std::string& peer, const std::string& method, json params,
                     protocol::forward_done done) {
      forward(peer, method, std::move(params), std::move(done));
    };
    p_->replicator = shard_replicator::start(eng, *p_->node, p_->coord, std::move(rc), log);
  }
  return {};
}

json cluster_member::stats() const {
  auto v = p_->node->view();
  const auto owns = std::count_if(v->shards.begin(), v->shards.end(),
                                  [&](const cluster::shard_entry& e) { return e.owner == p_->id; });
  json out{{"node", p_->id}, {"owns", owns}, {"serving", p_->node->serving()}};
  if (p_->replicator)
    out["replication"] = p_->replicator->stats();
  return out;
}

void cluster_member::stop_moves() {
  if (p_->replicator)
    p_->replicator->stop();
  if (p_->mover)
    p_->mover->stop();
}

void cluster_member::ship(replica_shipment s, std::function<void(result<void>)> done) const {
  if (!p_->replicator) {
    done(error{errc::unavailable, "node '" + p_->id + "' is not ready to replicate yet"});
    return;
  }
  p_->replicator->ship(std::move(s), std::move(done));
}

void cluster_member::node_call(const std::string& method, json params,
                               std::function<void(result<json>)> done) const {
  if (method == "replicate" || method == "replica_state" || method == "replica_position"
      || method == "replica_copy") {
    if (!p_->replicator) {
      done(error{errc::unavailable, "node '" + p_->id + "' does not replicate shards"});
      return;
    }
    if (method == "replicate")
      p_->replicator->replicate(std::move(params), std::move(done));
    else if (method == "replica_position")
      p_->replicator->replica_position(std::move(params), std::move(done));
    else if (method == "replica_copy")
      p_->replicator->replica_copy(std::move(params), std::move(done));
    else
      p_->replicator->replica_state(std::move(params), std::move(done));
    return;
  }
  if (!p_->mover) {
    done(error{errc::unavailable, "node '" + p_->id + "' is not ready to move shards yet"});
    return;
  }
  p_->mover->call(method, std::move(params), std::move(done));
}

bool cluster_member::app_here(const std::string& app) const {
  auto v = p_->node->view();
  if (!v || v->shards.empty())
    return false;
  // With replicas, an app's app: writes are the home shard's own write sets
  // (shipped with it), never part of another shard's.
  if (v->settings.replicas > 1)
    return false;
  return v->shards[model::home_shard(app, v->settings.shards)].owner == p_->id;
}

void cluster_member::send_app_write(app_write_request req, callback<app_write_result> cb) const {
  if (!p_->node->serving()) {
    cb(error{errc::unavailable,
             "node '" + p_->id
               + "' cannot reach the cluster's coordinator to find the home of app '" + req.app_name
               + "'"});
    return;
  }
  auto v = p_->node->view();
  const auto shard = model::home_shard(req.app_name, v->settings.shards);
  const auto& e = v->shards[shard];
  const auto* n = e.owner.empty() ? nullptr : v->node(e.owner);
  if (!n || !n->alive) {
    cb(error{errc::unavailable,
             "app '" + req.app_name + "''s home shard " + std::to_string(shard)
               + (e.owner.empty() ? " has no owner yet"
                                  : " is on node '" + e.owner + "', which is down")});
    return;
  }
  json modify = json::array();
  for (auto& m : req.modify)
    modify.push_back(m.spec);
  json params{{"app_name", req.app_name},       {"write_id", req.write_id},
              {"state_delta", req.state_delta}, {"state_remove", req.state_remove},
              {"modify", std::move(modify)},    {"forget", req.forget}};
  forward(n->address, "apply_app_write", std::move(params),
          [cb = std::move(cb)](result<json> value, json error_object) {
            if (!value) {
              auto e = std::move(value).err();
              // The shard moved on: the write is sent again (to the new home).
              if (error_object.is_object() && error_object.contains("data")
                  && error_object["data"].value("kind", "") == "moved")
                e.code = errc::unavailable;
              cb(std::move(e));
              return;
            }
            app_write_result out;
            const json& r = *value;
            try {
              out.values = r.at("values");
              out.removed = r.at("removed").get<std::vector<std::string>>();
              out.duplicate = r.at("duplicate").get<bool>();
            } catch (const std::exception& x) {
              cb(error{errc::internal,
                       std::string("the app's home answered an app write without its outcome: ")
                         + x.what()});
              return;
            }
            if (!out.values.is_object()) {
              cb(error{errc::internal, "the app's home answered values that are not an object"});
              return;
            }
            cb(std::move(out));
          });
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
                      {"epoch", e.epoch},
                      {"to", e.to.empty() ? json(nullptr) : json(e.to)},
                      {"copying", e.copying}});
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
