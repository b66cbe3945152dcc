// SPDX-License-Identifier: Apache-2.0
// tools/shard_replicator.hpp: a cluster node's part in its shards' replicas
// (docs/cluster.md, "Replicas"), in a cluster that keeps R > 1 copies of each
// shard.
//
// As the map shows it, for each shard s:
// - owner here (not moving): the node leads s in its engine under the map's
//   epoch (engine::lead_range). A lead begins by asking each other member of
//   s's in-sync set where its copy is (node method `replica_position`): one
//   behind is sent the batches it lacks from those this node keeps (its
//   recent commits and applies of s, up to 64 MiB over all shards); one it
//   cannot bring to the lead's start leaves the in-sync set. Then each run
//   of write sets committed in s goes to every other in-sync member as node
//   method `replicate`; the writes are answered once all of them have
//   applied it (durably, as their store's durability makes a commit), and
//   only while the node serves (cluster::node::serving: its lease is good
//   by its own clock), else unavailable (in doubt). Per follower one
//   request is in flight per shard; the runs that wait meanwhile go together
//   in the next.
// - a follower here: the node applies what the owners send, the requests
//   queued together in one commit (engine::apply_replicas).
// - not led here: fenced in the engine, so that no write of it commits here
//   unshipped (a shard given to this node answers unavailable until its
//   lead begins, within 20 ms of the view that shows it). The node logs event
//   `replicas` (leads, follows, revision) when the number it leads changes.
//
// A follower that refuses a run, cannot be reached, or has not answered
// within `lag_timeout` is removed from s's in-sync set by a compare-and-swap
// in the coordinator (the epoch stays), never below settings.min_insync: the
// writes that waited for it are then answered. When removing it would leave
// fewer than min_insync, those writes are answered unavailable (in doubt:
// committed at the owner), and the engine stops leading s; it leads it
// again 500 ms later.
//
// Repair (log events `repair`, `isr`): a copy out of the in-sync set on a
// live node is copied again by the owner, one copy at a time per owner: a
// snapshot of the shard (engine::snapshot_range) in chunks of 1 MiB at most
// 32 MiB/s (node method `replica_copy` at the copy's node), then the runs
// committed since; once it holds them all, every write waits for it and a
// compare-and-swap adds it to the in-sync set. A repair that fails is tried
// again a second later.
//
// Failover (log event `failover`): when s's owner is down (its lease
// expired), the first live member of s's in-sync set asks the others where
// their copies are and, once at least min_insync copies answer, gives s by
// one compare-and-swap to the copy furthest on, at the next epoch, with the
// copies that answered in sync. A node that starts owning shards (a restart)
// leads each only once an in-sync copy that answers is where its own is and
// none is further on; otherwise it gives the shard the same way to the
// furthest of the others and leaves its in-sync set (its copy may have lost
// what was acknowledged, with its store, or hold what never was).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "agentstate/engine.hpp"
#include "agentstate/error.hpp"
#include "agentstate/json.hpp"
#include "cluster/coordinator.hpp"
#include "cluster/node.hpp"
#include "protocol/rpc_session.hpp"
#include "server/log.hpp"

namespace agentstate::tools {

class shard_replicator {
public:
  struct config {
    std::string id; ///< this node's id
    std::chrono::milliseconds lag_timeout{1000};
    /// The node's store was made at this start: before it answers
    /// replica_position or applies a replicate, the node leaves the in-sync
    /// set of every shard it follows (its copies are empty, whatever the map
    /// says).
    bool new_store = false;
    /// Sends a request to the peer at an address (cluster_member::forward).
    std::function<void(const std::string& peer, const std::string& method, json params,
                       protocol::forward_done done)>
      send;
  };

  /// Starts the replicator's threads for node `n` over engine `eng`: one acts
  /// on every view of the map (lead, unlead, fence) and on followers that
  /// lag, one fails over dead owners' shards and confirms this node's own,
  /// one repairs copies out of the in-sync set of the shards it leads, one
  /// applies what followers receive. `eng`, `n`, `coord` and `log` must
  /// outlive it.
  static std::unique_ptr<shard_replicator> start(engine& eng, const cluster::node& n,
                                                 std::shared_ptr<cluster::coordinator> coord,
                                                 config cfg, server::logger& log);
  /// stop().
  ~shard_replicator();
  shard_replicator(const shard_replicator&) = delete;
  shard_replicator& operator=(const shard_replicator&) = delete;

  /// options::replicator: sends `s` to the in-sync followers of its shard
  /// and calls `done` once all have applied it (or with why not). Never
  /// blocks.
  void ship(replica_shipment s, std::function<void(result<void>)> done);

  /// The node method `replicate` at a follower: params {shard, epoch,
  /// batches: [base64 of replica batches, in order]}; applies each on the
  /// replicator's apply thread, with the other replicate requests queued
  /// beside it in one commit (engine::apply_replicas), and calls `done`
  /// there. Result {shard, epoch, seq}: the position reached; a refused
  /// batch answers why (the request's later batches are not applied).
  /// Errors: invalid_argument (bad params), condition_failed (this node is
  /// not a follower of the shard in its view of the map, or the sender's
  /// epoch is below the map's), unavailable (stopping), the engine's. Never
  /// blocks.
  void replicate(json params, std::function<void(result<json>)> done);

  /// The node method `replica_state`: params {shard}; this node's position
  /// and digest of the shard from one snapshot (engine::replica_state), on
  /// the apply thread. Result {shard, epoch, seq, sessions, rows, bytes,
  /// crc}. Errors: invalid_argument, the engine's. Never blocks.
  void replica_state(json params, std::function<void(result<json>)> done);

  /// The node method `replica_position`: params {shards: [S...]} (1 to the
  /// cluster's shard count); this node's position of each (engine::
  /// range_position), on the apply thread, after every replicate received
  /// before it. Result {positions: [{shard, epoch, seq}]}. Errors:
  /// invalid_argument, the engine's. Never blocks.
  void replica_position(json params, std::function<void(result<json>)> done);

  /// The node method `replica_copy`, one step of a repair of this node's
  /// copy of a shard that another node leads, on the apply thread: params
  /// {shard, epoch, op}, op "begin" (engine::begin_replica_copy), "chunk"
  /// with `chunk` (base64 of a range_snapshot chunk; engine::write_range) or
  /// "end" with `position` {epoch, seq} and `digest` {sessions, rows,
  /// bytes, crc} (engine::end_replica_copy). Result {shard, op}. Errors:
  /// invalid_argument, condition_failed (this node keeps no copy of the
  /// shard that another leads in its view, or the sender's epoch is below
  /// the map's), the engine's. Never blocks.
  void replica_copy(json params, std::function<void(result<json>)> done);

  /// Figures for `stats`: {leads, follows, writes_waiting (answers waiting
  /// for followers), followers_behind (followers of the shards it leads
  /// with runs queued or a request out, or being copied),
  /// slowest_followers (up to 16 of them, the longest request out first:
  /// {shard, node, queued_runs, in_flight_ms, catching_up}),
  /// kept_run_bytes (the runs kept for followers to catch up from),
  /// failovers (shards this node gave to a copy by compare-and-swap),
  /// isr_removals, repairs (copies it brought back), shards: one entry per
  /// shard it leads, {shard, epoch, head_seq (its last write set's sequence
  /// number), writes_waiting, followers: [{node, state (in_sync,
  /// catching_up or out_of_sync), acked_seq (the sequence number its copy
  /// confirmed; null before its first answer), lag_records (head_seq -
  /// acked_seq; null when acked_seq is, or out of sync), lag_ms (the age of
  /// the oldest write set it has not confirmed, 0 when none; null out of
  /// sync)}]}}. Any thread.
  json stats() const;

  /// Whether this node leads `shard` at `epoch`: its copy was found to hold
  /// every acknowledged write of the shard (a restarted owner's is checked
  /// against the in-sync copies first), and its writes commit. An owner that
  /// does not lead a shard yet answers no request of it, reads included: its
  /// copy may be behind (a store deleted, a restart). Any thread.
  bool leads(std::uint32_t shard, std::uint64_t epoch) const;

  /// Ends the threads; later shipments answer unavailable. Idempotent.
  /// REQUIRES: before the engine closes.
  void stop();

  struct impl;

private:
  explicit shard_replicator(std::shared_ptr<impl> p);
  std::shared_ptr<impl> p_;
};

} // namespace agentstate::tools
