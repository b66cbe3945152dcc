// SPDX-License-Identifier: Apache-2.0
// actors/engine_factory.hpp: the engine's internal entry points, for tests:
// opening an engine over a wrapped store (the fault-injection tests put a
// failing store between the engine and LMDB) or on CAF's deterministic test
// scheduler, and reaching its store and actor system. engine::open is
// engine_factory::open with neither.
#pragma once

#include <functional>
#include <memory>

#include <caf/fwd.hpp>

#include "agentstate/engine.hpp"
#include "store/kv.hpp"

namespace agentstate::detail {

using store_wrapper =
  std::function<std::unique_ptr<store::kv_store>(std::unique_ptr<store::kv_store>)>;

/// Internal entry points, in the manner of LevelDB's TEST_ hooks: engine
/// befriends this struct, so tests reach internals only through it.
struct engine_factory {
  /// As engine::open; the opened store is passed through `wrap` (if set)
  /// before the engine uses it. With `deterministic`, the engine's actors
  /// run on CAF's test coordinator (scheduler policy "testing"): nothing
  /// runs until the test runs it (system_of(e).scheduler(), a
  /// caf::scheduler::test_coordinator), timers (idle checks, the reaper's
  /// ticks) fire when the test advances the clock, and the store writer is
  /// a scheduled actor committing one write set per message. Blocking calls
  /// must not be used then.
  static result<std::unique_ptr<engine>> open(const options& opts, const store_wrapper& wrap,
                                              bool deterministic = false);
  /// The engine's store (for tests that read it directly). REQUIRES: open.
  static store::kv_store& store_of(engine& e);
  /// The engine's actor system. REQUIRES: open.
  static caf::actor_system& system_of(engine& e);
  /// Write sets sent to the store writer and not yet committed (queued in
  /// its mailbox or in the group commit under way), under every durability.
  /// REQUIRES: open.
  static std::size_t writer_backlog_of(engine& e);
  /// Scheduler workers blocked on their condition variable (parked, not
  /// polling) now, under scheduler_policy::sharing with spin_wait above 0;
  /// 0 under any other scheduler. REQUIRES: open.
  static std::size_t parked_workers(engine& e);
  /// Asks every live session, user and app actor to passivate now, as the
  /// capacity bound does (options::max_live_sessions): one that is busy or
  /// has a message waiting stays live. Returns how many were asked.
  /// REQUIRES: open.
  static std::size_t passivate_all(engine& e);
};

} // namespace agentstate::detail
