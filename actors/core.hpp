// SPDX-License-Identifier: Apache-2.0
// actors/core.hpp: the state one engine shares between its API, its actors
// and its writer. Owned by agentstate::engine; outlives every actor it spawns
// (close() waits for all of them).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include "actors/registry.hpp"
#include "actors/watch_hub.hpp"
#include "actors/messages.hpp"
#include "agentstate/engine.hpp"
#include "model/ids.hpp"
#include "model/shard.hpp"
#include "store/change_log.hpp"
#include "store/kv.hpp"
#include "store/lock.hpp"
#include "store/replica.hpp"

namespace agentstate::detail {

struct counters {
  std::atomic<std::uint64_t> activations{0}, passivations{0}, appends{0}, deduplicated{0},
    commits{0}, batched_writes{0}, max_batch{0}, failed_writes{0}, sessions_live{0}, users_live{0},
    apps_live{0}, heap_trims{0};
};

struct job_queue;

struct engine_core {
  options opts;
  /// True while a commit runs (the writer's batch, or an inline commit):
  /// from its first write set until its replies are delivered. Waiters keep polling past spin_wait
  /// while it holds (see commit_poll). Declared before `sys`, whose workers
  /// read it, so it outlives them.
  std::atomic<bool> committing{false};
  /// Set when deleted sessions' rows may be left to purge (store/purge.hpp):
  /// at open when the store holds a mark, after every committed delete. The
  /// writer purges a step at a time between group commits and clears it
  /// once nothing is left. Written by the writer (and open) only.
  std::atomic<bool> purge_pending{false};
  /// Moves when what actors cache may have changed under them: a committed
  /// delete_user / delete_app fence (store/scope_delete.hpp), a range
  /// written, merged or dropped (engine::write_range, merge_range,
  /// drop_range). Session and scope actors compare it
  /// with the value they loaded under and reload what they cache when it
  /// moved.
  std::atomic<std::uint64_t> fence_epoch{0};
  /// engine::fence_range's ranges: a write set in one fails unavailable at
  /// commit (writer.cpp). Read and changed under commit_mtx only.
  std::vector<model::hash_range> range_fences;
  /// engine::lead_range's ranges: the epoch this engine's writes of each
  /// commit under, and the position of the last one committed (written in
  /// the same transaction, store/replica.hpp). Their write sets are shipped
  /// through opts.replicator and answered once it confirms them (writer.cpp).
  /// Read and changed under commit_mtx only.
  struct led_range {
    model::hash_range range;
    std::uint64_t epoch = 0;
    store::replica_position pos;
  };
  std::vector<led_range> led;
  std::unique_ptr<store::kv_store> kv;
  /// Held by every commit (the writer's group commits, try_commit_inline) and
  /// purge step, with its change-log state and scope notices, so commits
  /// reach the store, the change feed and the scope actors in one order.
  std::mutex commit_mtx;
  /// The change log's writer state (under commit_mtx, after open).
  store::change_log log;
  /// The store's epoch (meta["epoch"]), which cursors name. Set at open.
  std::string epoch;
  /// The watches (engine::watch); created at open, closed first by close().
  std::unique_ptr<watch_hub> hub;
  std::unique_ptr<caf::actor_system_config> cfg;
  std::unique_ptr<caf::actor_system> sys;
  writer_hdl writer;
  registry<session_actor_hdl, evict_cmd> sessions; ///< live session actors
  registry<scope_actor_hdl, evict_cmd> scopes; ///< live user and app scope actors
  caf::actor heap_trimmer; ///< actors/heap_trimmer.hpp; null in deterministic mode
  caf::actor reaper; ///< actors/reaper.hpp
  caf::actor idle_sweeper; ///< actors/idle_sweeper.hpp
  counters stats;
  std::atomic<bool> closed{false};
  /// Threads polling in a blocking call (at most one; see options::spin_wait).
  std::atomic<int> spinners{0};
  /// The polling scheduler's job queue (actors/polling_sharing.hpp), which
  /// the polling thread of a blocking call helps to drain (help_until); null
  /// under any other scheduler. Set while `sys` is built; valid until
  /// close() resets `sys`, which it does only once `helping` is zero.
  job_queue* jobs = nullptr;
  /// Threads between begin_helping and end_helping (at most one).
  std::atomic<int> helping{0};
  store::store_lock lock; ///< held while open, in LMDB modes
  /// The actors run on CAF's test coordinator (engine_factory::open).
  bool deterministic = false;
  /// A session actor commits its own write set (try_commit_inline) instead
  /// of sending it to the writer when the command is the last in its
  /// mailbox, no write set waits for the writer and commit_mtx comes free
  /// within a short poll: durability::memory, where no commit waits for a
  /// disk and the hop to the writer and back is the cost. Set at open; not
  /// in deterministic mode.
  bool inline_commits = false;
  /// Write sets sent to the writer and not yet committed, under every
  /// durability (every sender counts through sent_to_writer, the writer
  /// uncounts what it commits; one relaxed atomic step each). With
  /// inline_commits, while any wait, session actors send theirs to the
  /// writer too, so that under load they share its group commits.
  std::atomic<std::size_t> writer_backlog{0};
  /// Every input key of opts.derived (a quick "does this touch one" test).
  std::set<std::string, std::less<>> derived_inputs;
  /// options::app_home: per app, the write ids of app writes whose appends
  /// have committed here; the next write sent to that app's home asks it to
  /// forget them (app_write_request::forget).
  std::mutex forget_mtx;
  std::unordered_map<std::string, std::vector<std::string>> forget;
};

/// The engine's wall clock, epoch seconds: options::wall_clock, or the
/// system clock when that is empty. Every timed rule of the engine reads it.
inline double wall_now(const engine_core& core) {
  return core.opts.wall_clock ? core.opts.wall_clock() : model::now_seconds();
}

/// Directory keys: a kind byte, then the store key of the identity.
std::string session_registry_key(const session_ref& r);
std::string user_registry_key(const std::string& app, const std::string& user);
std::string app_registry_key(const std::string& app);

/// Spawns a session actor for `r` (lazily started, rehydrates on first use).
session_actor_hdl spawn_session_actor(engine_core& core, session_ref r);
/// Spawns the user-scope actor (user set) or the app-scope actor.
scope_actor_hdl spawn_scope_actor(engine_core& core, std::string app,
                                  std::optional<std::string> user);
/// Whether a session or user scope of (app, user) is in a range fenced by
/// engine::fence_range now. Takes commit_mtx.
bool range_fenced(engine_core& core, std::string_view app, std::string_view user);

/// Adds `r` to core.range_fences (once). REQUIRES: core.commit_mtx held.
void add_fence(engine_core& core, const model::hash_range& r);
/// Ends the lead of `r` (engine::lead_range) and fences it: engine::unlead_range,
/// and a shipment the replicator refused. REQUIRES: core.commit_mtx held.
void end_lead(engine_core& core, const model::hash_range& r);

/// Starts the actors of the sessions `skeys` (session keys): each session
/// with an append waiting in the outbox finishes it when its actor starts.
void wake_sessions(engine_core& core, const std::vector<std::string>& skeys);
/// Spawns the detached store writer.
writer_hdl spawn_writer(engine_core& core);

/// Counts a write set about to be sent to the writer (write_cmd) into
/// writer_backlog. Every sender of write_cmd calls it.
inline void sent_to_writer(engine_core& core) {
  core.writer_backlog.fetch_add(1, std::memory_order_relaxed);
}

/// Commits `plan` on the calling thread as the writer commits a group of
/// one (same change-feed sequence, stats, and scope notices, queued before
/// this returns) if it can take commit_mtx within 200 µs, polling and
/// yielding the CPU (a commit holds it for microseconds); otherwise returns
/// nullopt and leaves `plan` as it was, never sleeping. Wakes the writer to
/// purge a deleted session's rows. For engine_core::inline_commits.
std::optional<write_reply> try_commit_inline(engine_core& core, write_plan& plan);

/// Makes the calling thread, about to wait in a blocking call as the
/// engine's polling waiter, its helper: until end_helping, an enqueue counts
/// on it to take one queued job (so the job its call queues does not wake a
/// parked worker). False, with nothing done, when the scheduler is not
/// polling_sharing or the engine is closing. Call end_helping after a true.
bool begin_helping(engine_core& core) noexcept;
/// Ends begin_helping; wakes a parked worker for jobs left queued.
void end_helping(engine_core& core) noexcept;
/// For a helper (begin_helping): until `done` is set, runs queued actor
/// jobs on this thread, as a worker would (each for up to 16 messages, then
/// requeued; actors still run one message at a time); with
/// no job queued, polls as spin_until does, for up to `budget`, or `cap`
/// while a commit runs. Returns whether `done` was set. The answer a
/// waiting call needs is then often computed on its own thread, with no
/// hand-off to a worker and back. A job never blocks, so each check of
/// `done` follows at most one job's run.
bool help_until(engine_core& core, const std::atomic<bool>& done, std::chrono::microseconds budget,
                std::chrono::microseconds cap);

/// How long a waiter polls in all while the writer is committing
/// (`engine_core::committing`): max(spin_wait, 1 ms) under durability::sync,
/// whose commits outlast spin_wait; spin_wait otherwise (docs/performance.md,
/// "Polling").
std::chrono::microseconds commit_poll(const options& o);

} // namespace agentstate::detail
