// SPDX-License-Identifier: Apache-2.0
// tools/shard_mover.hpp: a cluster node's side of `agentstate cluster move`
// (docs/cluster.md, "Moving a shard"): the methods shard_export (at the
// shard's owner), shard_import (at the node it moves to) and shard_digest
// (at both), and what the node does with the shard's rows once the map has
// moved on.
//
// A move of shard s from node A to node B, as the map shows it:
//   {owner A, epoch E}                A serves s.
//   {owner A, epoch E+1, to B,        A serves s. `cluster move` reads s's
//    copying}                         rows from A (shard_export, whose first
//                                     answer carries A's change-log mark) and
//                                     writes them at B (shard_import: B fences
//                                     s in its engine first, so nothing at B
//                                     writes, reaps or prunes them).
//   {owner A, epoch E+2, to B}        No node serves s (requests answer
//                                     unavailable). The first shard_export at
//                                     this epoch fences s in A's engine
//                                     (engine::fence_range), so no write of s
//                                     commits at A after it; with `since` (the
//                                     mark) it reads what A's log names after
//                                     the mark. shard_digest at both ends
//                                     tells whether B holds what A holds.
//   {owner B, epoch E+3}              B serves s (it lifts its fence and
//                                     wakes the appends waiting in its
//                                     outbox); A drops its rows of s.
// Each node keeps what it is in the middle of in a file beside its store
// (`cluster-moves.json`: the shards it fenced and the shards it is
// importing), so that after a restart it fences them again at once, and
// then, as the map has each, keeps the fence, lifts it, or drops the rows
// it no longer owns; a node with --memory keeps it in memory. A node never
// drops rows of a shard it did not fence or import itself.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "agentstate/engine.hpp"
#include "agentstate/error.hpp"
#include "agentstate/json.hpp"
#include "cluster/node.hpp"
#include "server/log.hpp"

namespace agentstate::tools {

class shard_mover {
public:
  /// Starts the mover's thread for node `n` (its id `id`) and engine `eng`,
  /// keeping its record in `store_dir` ("" : in memory). It first acts on
  /// the record a previous run left (fences again, drops, resumes). Errors:
  /// io_error, data_corrupt (a record that cannot be read). `eng`, `n` and
  /// `log` must outlive the mover.
  static result<std::unique_ptr<shard_mover>> start(engine& eng, const cluster::node& n,
                                                    std::string id, std::string store_dir,
                                                    server::logger& log);
  /// stop().
  ~shard_mover();
  shard_mover(const shard_mover&) = delete;
  shard_mover& operator=(const shard_mover&) = delete;

  /// Runs shard_export, shard_import, shard_digest or shard_adopt (`method`)
  /// with `params` on the
  /// mover's thread and calls `done` there. Errors: invalid_argument (bad
  /// params), version_conflict (the map does not show the move the params
  /// name, after waiting up to 5 s for this node's view to reach its
  /// epoch), unavailable (stopped), the engine's errors.
  void call(const std::string& method, json params, std::function<void(result<json>)> done);

  /// Ends the thread after the call it runs; later calls answer
  /// unavailable. Idempotent. REQUIRES: before `eng` closes.
  void stop();

  struct impl;

private:
  explicit shard_mover(std::unique_ptr<impl> p);
  std::unique_ptr<impl> p_;
};

} // namespace agentstate::tools
