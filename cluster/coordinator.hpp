// SPDX-License-Identifier: Apache-2.0
// cluster/coordinator.hpp: the seam between agentstate's nodes and the service
// that holds a cluster's configuration (etcd: cluster/etcd_coordinator.cpp).
// The coordinator holds configuration only, never session data: the settings
// fixed at creation (the shard count), the node registry (each node's address,
// and whether its lease is live), the shard map (each shard's owner and
// epoch), and which node is the controller (the one that gives shards never
// owned to live nodes).
//
// Rules every implementation keeps:
// - Every change of a shard is a compare-and-swap on the shard's revision, and
//   its epoch only increases; a shard never owned has no entry (revision 0).
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
};

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
};

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

  /// Sets shard `expected.shard` to (owner, epoch, to) if its entry is
  /// still `expected` (same revision; 0: never owned). version_conflict when
  /// it changed; invalid_argument when epoch is not above expected.epoch or
  /// a name is not one. The new entry.
  virtual result<shard_entry> set_shard(const shard_entry& expected, const std::string& owner,
                                        std::uint64_t epoch, const std::string& to,
                                        bool copying = false) = 0;

  /// Several set_shard (with `to` "") in one atomic step: all or none
  /// (version_conflict when any entry changed).
  virtual result<void> set_shards(const std::vector<shard_entry>& expected,
                                  const std::vector<std::string>& owners,
                                  const std::vector<std::uint64_t>& epochs) = 0;

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

/// A cluster or node name: 1..64 of [A-Za-z0-9._-], not starting with '.' or
/// '-'. "" when `name` is one, else why not (naming `what`).
std::string check_name(const std::string& what, const std::string& name);

/// The coordinator of cluster `cluster` in the etcd cluster at `urls`
/// (comma-separated client URLs). invalid_argument for a bad URL or name;
/// contacts nobody.
result<std::unique_ptr<coordinator>> make_etcd_coordinator(const std::string& urls,
                                                           const std::string& cluster);

} // namespace agentstate::cluster
