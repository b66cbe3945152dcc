// SPDX-License-Identifier: Apache-2.0
// cluster/node.hpp: one node's part in a cluster (docs/cluster.md): its live
// membership, its view of the shard map, and — while it is the controller —
// giving never-owned shards to live nodes.
//
// A node keeps its lease alive (a keepalive every TTL/3) and follows the
// cluster's keys through the coordinator's watch, reloading its view on every
// change. It may serve a shard only while `serving()`: its last renewal was
// sent less than the lease's TTL ago by its own clock, so a node cut off from
// the coordinator stops before the coordinator can let its lease expire.
//
// The controller (one live node, elected through the coordinator) gives out
// the shards that were never owned once `settings.expect_nodes` nodes are live
// and the live set has not changed for `settle`: each to the live node owning
// the fewest shards (ties by id), so nodes started together end with S/N ± 1
// each; with settings.replicas R > 1, each also to the R - 1 other live nodes
// keeping the fewest copies (ties by id), all of them in sync. A shard with an
// owner keeps it, live or not: moving it is an operator's act.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "agentstate/error.hpp"
#include "cluster/coordinator.hpp"

namespace agentstate::cluster {

class node {
public:
  struct config {
    std::string id; ///< the node's id (check_name)
    std::string address; ///< HOST:PORT it is reached at
    std::chrono::seconds ttl{5}; ///< its lease's TTL
    std::chrono::milliseconds settle{500}; ///< see above
    /// How long start() retries a join refused because the id is live (a
    /// restart within the old lease's TTL).
    /// (etcd expires a lease on its own schedule, later than its TTL when
    /// it is busy.)
    std::chrono::milliseconds join_wait{0}; ///< 0 : 3 × ttl
    /// Called with the first view and then with every view of a higher
    /// revision, one call at a time, on the node's own threads (start()'s
    /// caller, then the control thread). Must not block or throw.
    std::function<void(const cluster_view&)> on_view;
    /// The keeper's wait between two renewals; empty = its own clock. When
    /// set, the keeper calls it after each renewal with the time to the next
    /// (TTL/3) and renews again when it returns, unless the node is being
    /// destroyed then. A test steps the renewals with it; it must return
    /// soon once the test lets the node go, and must not throw.
    std::function<void(std::chrono::steady_clock::duration)> renew_wait;
  };

  /// Joins the cluster and starts following it (two threads of its own).
  /// not_found when the cluster does not exist; already_exists when the id
  /// stays live through join_wait; unavailable when the coordinator cannot be
  /// reached.
  static result<std::unique_ptr<node>> start(std::shared_ptr<coordinator> c, config cfg);

  /// Stops following and leaves the cluster (its lease ends at once).
  ~node();
  node(const node&) = delete;
  node& operator=(const node&) = delete;

  const std::string& id() const;

  /// The latest view (never null). Cheap: a shared pointer copy.
  std::shared_ptr<const cluster_view> view() const;

  /// Whether the node may serve the shards the view names it owner of now:
  /// its lease was renewed and the last renewal was sent less than the TTL
  /// ago.
  bool serving() const;

  /// Waits up to `limit` for a view for which `pred` holds; true when one
  /// came. For tests and tools that wait for the map to settle.
  bool wait_for(const std::function<bool(const cluster_view&)>& pred,
                std::chrono::milliseconds limit) const;

  struct impl;

private:
  explicit node(std::unique_ptr<impl> p);
  std::unique_ptr<impl> p_;
};

} // namespace agentstate::cluster
