// SPDX-License-Identifier: Apache-2.0
// tools/serve_cluster.hpp: `agentstate serve --cluster`: the node a serve
// process is in a cluster (docs/cluster.md). It joins through the etcd
// coordinator, follows the shard map, serves the requests of the shards it
// owns, and answers the others `moved` (the owner's address) or `unavailable`
// (the owner is down, the shard has no owner yet, or this node cannot reach
// etcd). list_sessions of an app and delete_app run on every owner and are
// answered once all have (the listing merged in order); the other requests
// that span shards it does not all own are refused.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "agentstate/engine.hpp"
#include "agentstate/error.hpp"
#include "agentstate/json.hpp"
#include "protocol/rpc_session.hpp"
#include "server/log.hpp"

namespace agentstate::tools {

class cli_app;
struct command_line;

/// serve's cluster options as given.
struct cluster_flags {
  std::string cluster, etcd, node_id, advertise;
  /// --node-token-file: the token this node presents to its peers (one the
  /// peers' --auth-file grants '*'); --peer-tls-ca: the CAs its peers'
  /// certificates are checked against.
  std::string node_token_file, peer_tls_ca;
  /// Set by serve from its own options: peers require a token (--auth-file)
  /// or TLS (--tls-cert; with --tls-client-ca, a client certificate: this
  /// node's own).
  bool peers_need_token = false, peers_use_tls = false;
  std::string tls_cert, tls_key;
  bool no_forward = false;
  std::uint64_t lease_ttl_s = 5;
  /// --lag-timeout-ms: with replicas, how long a follower may take to apply
  /// what the owner sent before it leaves the in-sync set.
  std::uint64_t lag_timeout_ms = 1000;
  /// Set by serve: the engine's response limit, which a listing merged
  /// from several nodes keeps to as well.
  std::size_t max_response_bytes = std::size_t{64} << 20;
  bool given = false; ///< any of them was on the command line
};

/// Declares --cluster, --etcd, --node-id, --advertise, --no-forward and
/// --lease-ttl-s under their own heading. `given` is set by check.
void add_cluster_flags(command_line& cl, cluster_flags& f);

/// "" when the cluster options fit together (none, or all that are needed),
/// else the usage problem. `tcp_listener`: serve has a TCP --listen.
std::string check_cluster_flags(const cli_app& app, cluster_flags& f, bool tcp_listener);

/// A serve process's membership in its cluster. Thread-safe.
class cluster_member {
public:
  /// Joins as `f.node_id`, reachable at `address` (HOST:PORT). Errors as
  /// cluster::node::start. Logs event `shards` (owned, shards, revision)
  /// with the first view and whenever the number of shards it owns changes;
  /// `log` must outlive the member.
  static result<std::unique_ptr<cluster_member>>
  join(const cluster_flags& f, const std::string& address, server::logger& log);
  /// Leaves the cluster.
  ~cluster_member();

  /// rpc_config::route: nullopt when this node serves the request alone.
  std::optional<protocol::route_refusal> route(const protocol::route_query& q) const;

  /// rpc_config::cluster_map: {cluster, revision, shards, nodes} and, with
  /// app_name (and user_id), that app's home_shard (and the pair's shard).
  result<json> cluster_map(const json& params) const;

  /// options::app_home::here: whether this node owns app `app`'s home
  /// shard in its current view of the map (false before it has one, and
  /// always in a cluster that keeps replicas: there every app: write is its
  /// home shard's own write, sent as apply_app_write, to this node too).
  bool app_here(const std::string& app) const;
  /// options::app_home::send: the app: part of an append made here, to the
  /// owner of the app's home shard as apply_app_write over the peer
  /// connection. unavailable (sent again by the engine) when the home's
  /// owner is down or unknown, cannot be reached, or is no longer the owner.
  void send_app_write(app_write_request req, callback<app_write_result> cb) const;

  /// Starts the node's side of shard moves (tools/shard_mover.hpp) over
  /// `eng`, its record in `store_dir` ("" : memory), and, in a cluster that
  /// keeps replicas, of its shards' replication (tools/shard_replicator.hpp;
  /// `new_store`: the store was made at this start, so it holds no copy).
  /// Errors as shard_mover::start. REQUIRES: once; `eng` outlives
  /// stop_moves().
  result<void> start_moves(engine& eng, const std::string& store_dir, bool new_store,
                           server::logger& log);
  /// Stops them (calls after it answer unavailable). REQUIRES: before the
  /// engine closes. Idempotent.
  void stop_moves();
  /// The node's figures for `stats` ("cluster" in its "server" member):
  /// {node, owns (shards), serving, replication (shard_replicator::stats,
  /// in a cluster keeping replicas)}. Any thread.
  json stats() const;
  /// options::replicator: a run of writes of a shard this node leads, to its
  /// in-sync followers (shard_replicator::ship); unavailable before
  /// start_moves or in a cluster of one replica.
  void ship(replica_shipment s, std::function<void(result<void>)> done) const;
  /// rpc_config::node_call: shard_export, shard_import, shard_digest,
  /// shard_adopt, replicate, replica_state, replica_position and
  /// replica_copy.
  void node_call(const std::string& method, json params,
                 std::function<void(result<json>)> done) const;

  /// rpc_config::forward: one pipelined connection per peer (made on first
  /// use, again after it was lost), requests in the order given, each with
  /// a deadline of 30 s; a peer that cannot be reached answers unavailable.
  void forward(const std::string& peer, const std::string& method, json params,
               protocol::forward_done done) const;

  struct impl;

private:
  explicit cluster_member(std::unique_ptr<impl> p);
  std::unique_ptr<impl> p_;
};

} // namespace agentstate::tools
