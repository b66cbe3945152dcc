// SPDX-License-Identifier: Apache-2.0
// cluster/coordinator.hpp: the seam between agentstate's nodes and the service
// that holds a cluster's configuration (etcd: cluster/etcd_coordinator.cpp).
// The coordinator holds configuration only, never session data: the settings
// fixed at creation (the shard count, the replicas kept of each shard), the
// node registry (each node's address, and whether its lease is live), the
// shard map (each shard's owner, epoch, replicas and in-sync set), and which
// node is the controller (the one that gives shards never owned to live
// nodes).
//
// Rules every implementation keeps:
// - Every change of a shard is a compare-and-swap on the shard's revision; a
//   shard never owned has no entry (revision 0). Its epoch only increases: a
//   change of its owner, replicas or move raises it; a change of its in-sync
//   set alone keeps it (the owner's term goes on).
// - A node is alive while its membership's lease is: a node that stops
//   renewing it disappears from the live set after the lease's TTL.
// - load() is one consistent snapshot at one revision; revisions increase.
// Errors are errc::unavailable when the service cannot be reached (retry),
// not_found / already_exists / version_conflict / invalid_argument as each
// function says. Nothing here throws. Every function may be called from any
// thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "agentstate/error.hpp"

namespace agentstate::cluster {

/// What is fixed when a cluster is created.
struct cluster_settings {
  /// The number of shards (1..65536); sessions map to them by
  /// model::shard_of, never changing.
  std::uint32_t shards = 256;
  /// The controller gives never-owned shards out only once this many nodes are
  /// live, so that nodes started together share them evenly.
  std::uint32_t expect_nodes = 1;
  /// The copies kept of each shard (1..7): its owner (the primary) and
  /// replicas - 1 followers, each on another node. At most expect_nodes.
  std::uint32_t replicas = 1;
  /// The in-sync set below which a shard takes no write (1..replicas).
  std::uint32_t min_insync = 1;
};

/// The default min_insync for `replicas` copies: a majority of them.
constexpr std::uint32_t majority(std::uint32_t replicas) {
  return replicas / 2 + 1;
}

struct node_info {
  std::string id;
  std::string address; ///< HOST:PORT other nodes and clients reach it at
  bool alive = false; ///< its lease is live
};

struct shard_entry {
  std::uint32_t shard = 0;
  std::string owner; ///< "" : never owned
  std::uint64_t epoch = 0; ///< 0 : never owned; increases with every change
  /// "" : the shard is served by `owner`. Else the node it is being moved
  /// to (`cluster move`): `owner` still holds its rows and serves none of
  /// its requests (they answer unavailable) while they are copied to `to`.
  std::string to;
  std::int64_t revision = 0; ///< the entry's revision in the coordinator (0: none)
  /// With `to`: a first copy is being made while `owner` still serves the
  /// shard (the step before the one that stops serving it).
  bool copying = false;
  /// Every node keeping a copy, the owner first, each once (empty when never
  /// owned; {owner} in a cluster of one replica).
  std::vector<std::string> replicas;
  /// The replicas in sync with the owner, the owner among them, in the
  /// order of `replicas` (empty when never owned).
  std::vector<std::string> isr;
};

/// "" when `e`'s owner, replicas and in-sync set are consistent (see
/// shard_entry), else why not. A never-owned entry (no owner) has neither.
std::string check_entry(const shard_entry& e);

struct cluster_view {
  std::string cluster;
  std::int64_t revision = 0; ///< the snapshot's revision
  cluster_settings settings;
  std::vector<node_info> nodes; ///< every node ever registered, by id
  std::vector<shard_entry> shards; ///< settings.shards entries, by shard
  std::string controller; ///< the live controller's node id, "" : none

  /// The node `id`, or null.
  const node_info* node(const std::string& id) const;
};

/// A node's live registration. The lease ends when keepalive is not called
/// within the TTL, at leave(), or when the process dies.
class membership {
public:
  virtual ~membership() = default;
  /// Renews the lease. not_found when it already expired (the node is no
  /// longer live: join again).
  virtual result<void> keepalive() = 0;
  /// Ends the lease now (the node leaves the live set at once).
  virtual result<void> leave() = 0;
  /// Makes this node the controller if there is none; true when it is the
  /// controller (now or already). The role ends with the lease.
  virtual result<bool> lead() = 0;
  virtual std::chrono::seconds ttl() const = 0;
};

class coordinator {
public:
  virtual ~coordinator() = default;

  /// The cluster's name.
  virtual const std::string& name() const = 0;
  /// Where it lives, for messages ("etcd at URLS, cluster NAME").
  virtual std::string describe() const = 0;

  /// Creates the cluster with `s`. already_exists when it exists;
  /// invalid_argument for settings out of range.
  virtual result<void> create(const cluster_settings& s) = 0;

  /// The cluster as it is now. not_found when it was never created.
  virtual result<cluster_view> load() = 0;

  /// Replaces each shard `expected[i].shard` by `next[i]` (its owner, epoch,
  /// to, copying, replicas and in-sync set; revision and shard ignored) if
  /// every entry is still as expected (same revision; 0: never owned), in
  /// one atomic step: all or none. version_conflict when any changed;
  /// invalid_argument when a next entry is inconsistent (check_entry), names
  /// a bad node id, or breaks the epoch rule above; at most 60 shards. The
  /// revision of the step (every changed entry's new revision).
  virtual result<std::int64_t> update_shards(const std::vector<shard_entry>& expected,
                                             const std::vector<shard_entry>& next) = 0;

  /// Sets shard `expected.shard` to (owner, epoch, to) with update_shards:
  /// the replicas are {owner} when expected kept one copy, else expected's
  /// with owner first; the in-sync set likewise. The new entry.
  result<shard_entry> set_shard(const shard_entry& expected, const std::string& owner,
                                std::uint64_t epoch, const std::string& to, bool copying = false);

  /// Several set_shard (with `to` "") in one atomic step: all or none
  /// (version_conflict when any entry changed; at most 60).
  result<void> set_shards(const std::vector<shard_entry>& expected,
                          const std::vector<std::string>& owners,
                          const std::vector<std::uint64_t>& epochs);

  /// Registers node `id` at `address` and makes it live for `ttl`.
  /// already_exists when a live node holds `id` (another process, or this one
  /// before a crash whose lease has not expired yet).
  virtual result<std::unique_ptr<membership>>
  join(const std::string& id, const std::string& address, std::chrono::seconds ttl) = 0;

  /// Calls `on` with the revision of every change of the cluster's keys after
  /// `after_revision`, until `on` returns false, `stop` is set (seen within a
  /// fraction of a second) or the watch fails (unavailable; cursor_expired
  /// when `after_revision` is older than the coordinator keeps). Blocks.
  virtual result<void> watch(std::int64_t after_revision,
                             const std::function<bool(std::int64_t)>& on,
                             const std::atomic<bool>& stop) = 0;
};

/// "" when `cluster move`, `drain` and `adopt` work on `v`'s cluster, else
/// why not: moving the shards of a cluster keeping more than one copy of
/// each is not built yet.
std::string replicas_not_served(const cluster_view& v);

/// A cluster or node name: 1..64 of [A-Za-z0-9._-], not starting with '.' or
/// '-'. "" when `name` is one, else why not (naming `what`).
std::string check_name(const std::string& what, const std::string& name);

/// The coordinator of cluster `cluster` in the etcd cluster at `urls`
/// (comma-separated client URLs). invalid_argument for a bad URL or name;
/// contacts nobody.
result<std::unique_ptr<coordinator>> make_etcd_coordinator(const std::string& urls,
                                                           const std::string& cluster);

} // namespace agentstate::cluster
