// SPDX-License-Identifier: Apache-2.0
// User and app actors: each owns the in-memory view of one shared scope,
// loaded from the store on first use, kept current by the writer's
// notifications (applied in commit order, skipping commits the loaded
// snapshot already contains), serving scope reads, passivated when idle.
#include <caf/all.hpp>

#include "actors/core.hpp"
#include "actors/idle.hpp"
#include "actors/messages.hpp"
#include "store/change_log.hpp"
#include "store/reads.hpp"

namespace agentstate::detail {

namespace {

struct scope_state {
  engine_core* core = nullptr;
  std::string app;
  std::optional<std::string> user;
  std::string registry_key;
  std::uint64_t handled = 0;
  std::uint64_t handled_at_tick = 0; ///< `handled` at the previous idle tick
  bool loaded = false;
  /// Id of the last commit the load read. Notifications of later commits are
  /// applied; several may share one id (one group commit), so applying one
  /// must not advance this.
  std::uint64_t snapshot = 0;
  /// The change-log sequence `values` reflects: the load's newest change,
  /// then each applied commit's. Every later change of this scope has a
  /// greater sequence and is not in `values`.
  std::uint64_t seq = 0;
  json values = json::object();
  /// engine_core::fence_epoch when `values` was loaded: a delete_user /
  /// delete_app since then makes the next get reload (X2/X3).
  std::uint64_t fence_epoch = 0;
  static inline const char* name = "agentstate.scope";
};

using scope_actor_t = scope_actor_hdl::stateful_pointer<scope_state>;

result<void> load_scope(scope_actor_t self) {
  auto& st = self->state;
  st.fence_epoch = st.core->fence_epoch.load();
  auto txn = store::begin_read(*st.core->kv);
  if (!txn)
    return std::move(txn).err();
  auto v = store::read_scope(**txn, st.app, st.user ? &*st.user : nullptr);
  if (!v)
    return std::move(v).err();
  auto last = store::read_log_last(**txn);
  if (!last)
    return std::move(last).err();
  st.values = std::move(*v);
  st.seq = *last;
  st.snapshot = (*txn)->txn_id();
  st.loaded = true;
  return {};
}

scope_actor_hdl::behavior_type scope_actor(scope_actor_t self, engine_core* core, std::string app,
                                           std::optional<std::string> user) {
  auto& st = self->state;
  st.core = core;
  st.registry_key = user ? user_registry_key(app, *user) : app_registry_key(app);
  st.app = std::move(app);
  st.user = std::move(user);
  auto& live = st.user ? core->stats.users_live : core->stats.apps_live;
  core->stats.activations.fetch_add(1, std::memory_order_relaxed);
  live.fetch_add(1, std::memory_order_relaxed);
  // However the actor ends, it leaves the registry (a no-op when it already
  // did), so close() never waits on an actor that is gone.
  self->attach_functor([&live, core, key = st.registry_key, addr = self->address()] {
    core->scopes.remove(key, addr);
    live.fetch_sub(1, std::memory_order_relaxed);
  });
  return {
    [self](scope_get_cmd& c) {
      auto& st = self->state;
      ++st.handled;
      if (st.loaded && st.fence_epoch != st.core->fence_epoch.load())
        st.loaded = false;
      if (!st.loaded)
        if (auto r = load_scope(self); !r) {
          c.fail(std::move(r).err());
          return;
        }
      if (c.snapshot_cb)
        c.snapshot_cb(scope_snapshot{st.values, store::format_cursor(st.core->epoch, st.seq)});
      else
        c.cb(st.values);
    },
    [self](scope_commit& c) {
      auto& st = self->state;
      ++st.handled;
      // Not loaded: the store already holds this commit for the first load.
      if (!st.loaded || c.txn_id <= st.snapshot)
        return;
      st.seq = std::max(st.seq, c.seq);
      for (auto& w : c.writes) {
        if (w.erase)
          st.values.erase(w.key);
        else
          st.values[w.key] = std::move(w.value);
      }
    },
    [self](shutdown_cmd&) {
      ++self->state.handled;
      self->state.core->scopes.remove(self->state.registry_key, self->address());
      self->quit();
    },
    [self](idle_tick&) { on_idle_tick(self, self->state.core->scopes, false); },
    [self](evict_cmd&) { on_evict(self, self->state.core->scopes, false); },
  };
}

} // namespace

scope_actor_hdl spawn_scope_actor(engine_core& core, std::string app,
                                  std::optional<std::string> user) {
  return core.sys->spawn<caf::lazy_init>(scope_actor, &core, std::move(app), std::move(user));
}

} // namespace agentstate::detail
