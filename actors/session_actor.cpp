// SPDX-License-Identifier: Apache-2.0
// The session actor: the single writer of one session. It validates commands,
// deduplicates event ids, checks expected_version, splits deltas by scope,
// holds the live invocation's temp: state, assigns versions and hands write
// sets to the store writer. It pipelines (never waits on a commit inside a
// handler) and answers every command strictly in arrival order.
#include <caf/all.hpp>

#include "actors/idle.hpp"
#include "actors/session_actor.hpp"
#include "store/keys.hpp"

namespace agentstate::detail {

namespace {

// Work that keeps the actor live: queued or stashed commands, a held lease
// (and the invocation's temp: state), callers waiting for an answer.
bool busy(const session_state& st) {
  return !st.queue.empty() || !st.stash.empty() || !st.lease.empty() || !st.waiters.empty()
    || st.remote;
}

// A command answered unread (session_state::closed_on_remote,
// remote_overdue).
error refused_unread(const session_state& st) {
  if (st.closed_on_remote)
    return error{errc::unavailable,
                 "the engine is closing while an append of this session waits "
                 "for its app: part; retry once the store is open again"};
  return error{errc::unavailable,
               "an earlier write of this session waits for its app: part at the app's home, "
               "which cannot be reached; retry later (appends with their event ids)"};
}
bool refusing(const session_state& st) {
  return st.closed_on_remote || st.remote_overdue;
}
void refuse(const session_state& st, get_cmd& c) {
  if (c.text_cb)
    c.text_cb(refused_unread(st));
  else if (c.cb)
    c.cb(refused_unread(st));
}
void refuse(const session_state& st, rewind_cmd& c) {
  if (c.dry_run)
    c.plan_cb(refused_unread(st));
  else
    c.cb(refused_unread(st));
}
void refuse(const session_state& st, prune_delete_cmd& c) {
  // The session has a write out: it stays.
  c.cb(error{errc::condition_failed,
             "session '" + st.ref.session_id + "' has an append out at its app's home; it stays"});
}
template <class Cmd>
void refuse(const session_state& st, Cmd& c) {
  if (c.cb)
    c.cb(refused_unread(st));
}

// The handler of command `Cmd`: counts it as handled, then runs on(self, cmd)
// now, or through enter() when it must wait (enter owns the command until
// then), then answers what an inline commit made ready.
template <class Cmd>
auto command(session_actor_t self, void (*on)(session_actor_t, Cmd&)) {
  return [self, on](Cmd& c) {
    ++self->state.handled;
    if (std::exchange(self->state.moved_out, false))
      resume_remote_append(self);
    if (refusing(self->state))
      refuse(self->state, c);
    else if (entry_waits(self->state))
      enter(self, [self, on, c = std::move(c)]() mutable {
        if (refusing(self->state))
          refuse(self->state, c);
        else
          on(self, c);
      });
    else
      on(self, c);
    if (self->state.drain_due)
      drain(self);
  };
}

session_actor_hdl::behavior_type session_actor(session_actor_t self, engine_core* core,
                                               session_ref ref) {
  auto& st = self->state;
  st.core = core;
  st.skey = store::session_key(ref.app_name, ref.user_id, ref.session_id);
  st.registry_key = session_registry_key(ref);
  st.ref = std::move(ref);
  core->stats.activations.fetch_add(1, std::memory_order_relaxed);
  core->stats.sessions_live.fetch_add(1, std::memory_order_relaxed);
  // However the actor ends, it leaves the registry (a no-op when it already
  // did), so close() never waits on an actor that is gone.
  self->attach_functor([core, key = st.registry_key, addr = self->address()] {
    core->sessions.remove(key, addr);
    core->stats.sessions_live.fetch_sub(1, std::memory_order_relaxed);
  });
  resume_remote_append(self);
  return {
    command(self, on_create),
    command(self, on_append),
    command(self, on_get),
    command(self, on_delete),
    command(self, on_prune_delete),
    command(self, on_begin_invocation),
    command(self, on_end_invocation),
    command(self, on_rewind),
    command(self, on_fork),
    [self](shutdown_cmd&) {
      auto& st = self->state;
      ++st.handled;
      st.stopping = true;
      if (auto r = std::move(st.remote)) {
        // Its outbox row stays: the next open finishes it.
        if (r->cb)
          r->cb(error{errc::unavailable,
                      "the engine is closing; the append is finished when "
                      "the store is next opened (retry with its event id)"});
        if (r->create_cb)
          r->create_cb(error{errc::unavailable,
                             "the engine is closing; the create is finished when the store "
                             "is next opened"});
        st.closed_on_remote = true;
        st.stale = true;
        drain(self); // the stashed commands are answered unread
      }
      for (auto& w : st.waiters)
        w.cb(error{errc::unavailable, "the engine is closing"});
      st.waiters.clear();
      maybe_finish(self);
    },
    [self](idle_tick&) {
      // A held lease keeps the actor (and the invocation's temp: state).
      on_idle_tick(self, self->state.core->sessions, busy(self->state));
    },
    [self](evict_cmd&) { on_evict(self, self->state.core->sessions, busy(self->state)); },
    [self](app_sent& msg) { // from itself, not routed: not counted as handled
      on_app_sent(self, msg);
      if (self->state.drain_due)
        drain(self);
    },
  };
}

} // namespace

session_actor_hdl spawn_session_actor(engine_core& core, session_ref r) {
  return core.sys->spawn<caf::lazy_init>(session_actor, &core, std::move(r));
}

} // namespace agentstate::detail
