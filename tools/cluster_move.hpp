// SPDX-License-Identifier: Apache-2.0
// tools/cluster_move.hpp: `agentstate cluster move` and `drain`: moving
// shards between nodes through the map in etcd and the nodes' shard_export
// and shard_import (tools/shard_mover.hpp; docs/cluster.md, "Moving a shard").
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "agentstate/client.hpp"
#include "agentstate/engine.hpp"
#include "agentstate/error.hpp"
#include "agentstate/json.hpp"
#include "cluster/coordinator.hpp"

namespace agentstate::tools {

/// How the tool reaches the nodes (token, TLS; the address is each node's).
struct move_options {
  client_options node;
  /// Read and write at most this many bytes per chunk.
  std::size_t chunk_bytes = std::size_t{1} << 20;
  /// A node that answers unavailable (restarting, a delete in progress) is
  /// asked again this many times, waiting 100 ms more each time (≤ 2 s).
  unsigned retries = 40;
  /// How long one call to a node may take before it counts as unanswered.
  std::chrono::milliseconds call_timeout{60000};
};

/// What one move did.
struct move_report {
  std::uint32_t shard = 0;
  std::string from, to;
  std::uint64_t epoch = 0; ///< the shard's epoch on `to`
  /// Chunks, sessions, rows and bytes copied, first copy and catch-up.
  std::uint64_t chunks = 0, sessions = 0, rows = 0, bytes = 0;
  /// Sessions copied while the shard was not served (the catch-up's, or
  /// a whole copy's when the catch-up could not be used).
  std::uint64_t fenced_sessions = 0;
  /// The catch-up could not be used (the owner's change log no longer
  /// held the first copy's start, a user or app was deleted meanwhile, the
  /// copies' digests differed, or the move was found under way): the
  /// shard was copied whole while it was not served.
  bool whole_copy_fenced = false;
  /// From the step that stopped serving the shard to the map's switch:
  /// how long its requests answered unavailable.
  double unavailable_ms = 0;
  bool nothing_to_do = false; ///< it was on `to` already
  bool undone = false; ///< `to` was its owner: a move away was undone

  json to_json() const;
};

/// Moves shard `shard` to node `to`, in map steps each a compare-and-swap:
/// it marks it copying to `to` (epoch + 1; the owner still serves it) and
/// copies its rows from the owner to `to` chunk by chunk; marks it moving
/// (epoch + 2; no node serves it), has the owner fence it and copies what
/// its change log names since the first copy began; compares the two
/// nodes' digests of the shard (copying it whole again when they differ);
/// and names `to` its owner (epoch + 3). A shard already moving to `to` is
/// carried on (a first copy from its start; a move that stopped serving it
/// with a whole copy); one moving elsewhere is redirected; one moving away
/// from `to` stays there (the move is undone). Errors:
/// invalid_argument (no such shard or node), unavailable (the owner or `to`
/// is down or cannot be reached, etcd cannot be reached), version_conflict
/// (the map changed under the move: run it again), data_corrupt (the
/// digests differ after a whole copy), the nodes' errors.
result<move_report> move_shard(cluster::coordinator& c, std::uint32_t shard, const std::string& to,
                               const move_options& o);

/// Moves every shard of node `node` (owned, or moving away from it) to the
/// other live nodes, each to the one owning fewest at that moment, at most
/// two at a time; `on_moved` is called (on one thread at a time) after each.
/// Errors: invalid_argument (no such node, no other live node), the first
/// failed move's (the moves already made stay made).
result<std::size_t> drain_node(cluster::coordinator& c, const std::string& node,
                               const move_options& o,
                               const std::function<void(const move_report&)>& on_moved);

/// What `cluster adopt` did.
struct adopt_report {
  std::uint32_t shards = 0; ///< shards the store held rows of
  std::uint64_t chunks = 0, bytes = 0;
  /// Sessions written, and sessions and scopes (user, app) written or found
  /// in the cluster already with the same rows (an adoption run again).
  std::uint64_t sessions = 0, added = 0, present = 0;

  json to_json() const;
};

/// Adds everything a single-node store holds (`local`, an engine open on
/// it) to the cluster: for each shard, the store's rows of it (read_range)
/// to the shard's owner (node method shard_adopt, engine::merge_range), chunk
/// by chunk; `on_shard` is called after each shard the store held rows of,
/// with the shard, its owner and the totals so far. Sessions keep their
/// ids, versions, times, events and rewinds; the `user:` and `app:` scopes
/// go with them. Errors: unavailable (a shard without a live owner, or
/// moving: run it again later), already_exists (the cluster holds a
/// session or scope of the store with other contents: named), the nodes'
/// errors; what was adopted before stays adopted, and running it again
/// carries on.
result<adopt_report> adopt_store(
  cluster::coordinator& c, engine& local, const move_options& o,
  const std::function<void(std::uint32_t, const std::string&, const adopt_report&)>& on_shard);

/// What `cluster verify` found.
struct verify_report {
  std::uint32_t shards = 0; ///< replicated shards with an owner
  /// In-sync followers compared with their owners, those equal, those that
  /// differ or could not be read, and followers out of sync (not compared).
  std::uint64_t copies = 0, equal = 0, different = 0, out_of_sync = 0;
  json problems = json::array(); ///< one object per copy that differs
  json to_json() const;
};

/// Compares every in-sync follower of every shard with the shard's owner,
/// online (node method replica_state: position and digest from one
/// snapshot at each): equal when both are at the same position with the
/// same digest. A follower behind its owner is read again (10 tries, 100 ms
/// apart) until the positions meet; one still elsewhere, with other rows at
/// the same position, or that cannot be read is a problem, passed to
/// `on_problem` as found. Errors: etcd's.
result<verify_report> verify_replicas(cluster::coordinator& c, const move_options& o,
                                      const std::function<void(const json&)>& on_problem);

/// The followers' lag of every replicated shard, as `cluster status`
/// shows it: each live node that owns a shard is asked for its `stats`
/// (once, no retry), and `shards` maps each shard it leads to the
/// `followers` list of its stats entry (shard_replicator::stats); a node that
/// does not answer is in `unreachable` with why. Never fails: a shard absent
/// from `shards` has no lag known.
struct lag_report {
  std::map<std::uint32_t, json> shards;
  std::map<std::string, std::string> unreachable;
};
lag_report read_lags(const cluster::cluster_view& v, const move_options& o);

} // namespace agentstate::tools
