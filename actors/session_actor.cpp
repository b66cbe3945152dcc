// The session actor: the single writer of one session. It validates commands,
// deduplicates event ids, checks expected_version, splits deltas by scope,
// holds the live invocation's temp: state, assigns versions and hands write
// sets to the store writer. It pipelines (never waits on a commit inside a
// handler) and answers every command strictly in arrival order.
#include <list>
#include <memory>
#include <optional>
#include <unordered_map>

#include <caf/all.hpp>

#include "actors/core.hpp"
#include "actors/id_index.hpp"
#include "actors/idle.hpp"
#include "actors/messages.hpp"
#include "actors/validate.hpp"
#include "agentstate/scope.hpp"
#include "model/ids.hpp"
#include "store/keys.hpp"
#include "store/reads.hpp"

namespace agentstate::detail {

namespace {

using append_outcome = std::shared_ptr<std::optional<result<append_result>>>;

/// A write's outcome: the writer's verdict and, for a late-bound write set,
/// its resolved binding.
using write_done = std::function<void(result<void>, std::shared_ptr<late_binding>)>;

/// One command awaiting its turn to answer. `run` answers it; it may run
/// once `ready` (write commands become ready when the writer replies, which
/// hands its verdict to `done`).
struct pending {
  bool ready = false;
  std::function<void()> run;
  write_done done;
};

/// A begin_invocation waiting for the lease.
struct lease_waiter {
  std::string invocation_id;
  callback<session> cb;
};

struct session_state {
  engine_core* core = nullptr;
  session_ref ref;
  std::string skey;
  std::string dir_key;
  std::uint64_t handled = 0; ///< routed messages handled (directory protocol)
  std::uint64_t handled_at_tick = 0; ///< `handled` at the previous idle tick

  bool loaded = false;
  /// exists/version as of every accepted command (including in-flight).
  bool exists = false;
  std::uint64_t version = 0;
  /// Set when a write failed: in-flight followers are doomed; new commands
  /// wait in `stash` until the queue drains and the record is re-read.
  bool stale = false;
  // Queues are lists, not deques: libstdc++'s deque allocates ~580 bytes
  // even when empty, and most live actors (idle ones) hold empty queues.
  std::list<std::function<void()>> stash;

  std::string invocation; ///< the live invocation, "" when none
  json temp = json::object();
  /// The invocation holding the lease ("" when free) and those waiting.
  std::string lease;
  std::list<lease_waiter> waiters;

  std::list<std::shared_ptr<pending>> queue;
  std::unordered_map<std::string, append_outcome> in_flight_ids;
  /// The stored events' ids (A6), built from the store on the first lookup
  /// and told of every append that commits; unset until then, and again
  /// after a failed write or a delete.
  std::optional<event_id_index> ids;
  bool stopping = false;

  static inline const char* name = "agentstate.session";
};

using session_actor_t = caf::stateful_actor<session_state>;

/// Reads the session record. On failure the actor stays unloaded (the next
/// command tries again) and the error says why.
result<void> load(session_actor_t* self) {
  auto& st = self->state;
  auto rec = store::read_record(*st.core->kv, st.skey);
  if (!rec) {
    st.loaded = false;
    auto e = std::move(rec).err();
    e.message = "cannot read the session record: " + e.message;
    return e;
  }
  st.exists = rec->has_value();
  st.version = *rec ? (**rec).version : 0;
  st.loaded = true;
  return {};
}

void maybe_finish(session_actor_t* self);

// Answers queued commands from the front while they are ready; once the queue
// is empty after a failed write, re-reads the record and replays the stash.
void drain(session_actor_t* self) {
  auto& st = self->state;
  while (!st.queue.empty() && st.queue.front()->ready) {
    auto p = std::move(st.queue.front());
    st.queue.pop_front();
    p->run();
  }
  if (st.queue.empty() && st.stale) {
    st.stale = false;
    st.loaded = false; // re-read the record before the next command
    st.ids.reset();
    auto stash = std::move(st.stash);
    st.stash.clear();
    for (auto& f : stash)
      f();
  }
  maybe_finish(self);
}

void maybe_finish(session_actor_t* self) {
  auto& st = self->state;
  if (st.stopping && st.queue.empty() && st.stash.empty()) {
    st.core->dir.remove(st.dir_key, self->address());
    self->quit();
  }
}

/// Runs a command now, or, while a failed write is being resolved, after the
/// queue drains (so every command is still answered in arrival order).
void enter(session_actor_t* self, std::function<void()> fn) {
  auto& st = self->state;
  if (st.stale) {
    st.stash.push_back(std::move(fn));
    return;
  }
  fn();
}

/// Queues an answer that is ready now (it still waits for earlier ones).
void answer(session_actor_t* self, std::function<void()> fn) {
  auto& st = self->state;
  if (st.queue.empty()) {
    fn();
    return;
  }
  auto p = std::make_shared<pending>();
  p->ready = true;
  p->run = std::move(fn);
  st.queue.push_back(std::move(p));
}

/// Sends `plan` to the writer; `done` runs in order with the writer's verdict.
/// The closures given to CAF hold only `self` and the pending entry, so
/// nothing large is copied per append.
void submit(session_actor_t* self, write_plan plan, write_done done) {
  auto& st = self->state;
  auto p = std::make_shared<pending>();
  p->done = std::move(done);
  st.queue.push_back(p);
  auto finish = [self, p](result<void> r, std::shared_ptr<late_binding> late) {
    if (!r)
      self->state.stale = true;
    // Raw pointer: drain() holds the entry while it runs (no shared_ptr cycle).
    p->run = [q = p.get(), r = std::move(r), late = std::move(late)]() mutable {
      q->done(std::move(r), std::move(late));
    };
    p->ready = true;
    drain(self);
  };
  self->request(st.core->writer, caf::infinite, write_cmd{std::move(plan)})
    .then(
      [finish](write_reply& r) {
        if (r.code == errc::ok)
          finish(result<void>{}, std::move(r.late));
        else
          finish(error{r.code, std::move(r.message)}, nullptr);
      },
      [finish](caf::error& e) {
        finish(error{errc::unavailable, "store writer unreachable: " + to_string(e)}, nullptr);
      });
}

/// Loads the record on first use. Returns false (after answering `cb` in
/// order) when the store cannot be read.
template <class T>
bool ensure_loaded(session_actor_t* self, callback<T>& cb) {
  if (self->state.loaded)
    return true;
  auto r = load(self);
  if (r)
    return true;
  answer(self, [cb = std::move(cb), e = std::move(r).err()] { cb(e); });
  return false;
}

// -- commands ------------------------------------------------------------------

void on_create(session_actor_t* self, create_cmd& cmd) {
    auto& st = self->state;
    if (!ensure_loaded(self, cmd.cb))
      return;
    if (st.exists) {
      answer(self, [cb = std::move(cmd.cb), id = st.ref.session_id] {
        cb(error{errc::already_exists, "session '" + id + "' already exists"});
      });
      return;
    }
    auto plan = prepare_create(*st.core, cmd.req);
    if (!plan) {
      answer(self, [cb = std::move(cmd.cb), e = std::move(plan).err()] { cb(e); });
      return;
    }
    st.exists = true;
    st.version = 0;
    json own = json::object();
    for (auto& w : plan->ws.session_writes)
      own[w.key] = w.value;
    double created = plan->ws.time;
    submit(self, std::move(*plan),
           [self, cb = std::move(cmd.cb), own = std::move(own),
            created](result<void> r, std::shared_ptr<late_binding> late) mutable {
             if (!r) {
               cb(std::move(r).err());
               return;
             }
             if (late) // derived keys the writer computed
               for (auto it = late->added.begin(); it != late->added.end(); ++it)
                 own[it.key()] = it.value();
             auto& st = self->state;
             session s;
             s.app_name = st.ref.app_name;
             s.user_id = st.ref.user_id;
             s.id = st.ref.session_id;
             s.last_update_time = created;
             s.version = 0;
             // The session is created; when the shared scopes cannot be
             // read now, its merged view is completed by the next read.
             json user = json::object(), app = json::object();
             if (auto txn = store::begin_read(*st.core->kv)) {
               if (auto u = store::read_scope(**txn, st.ref.app_name, &st.ref.user_id))
                 user = std::move(*u);
               if (auto a = store::read_scope(**txn, st.ref.app_name, nullptr))
                 app = std::move(*a);
             }
             s.state = merge_state(own, user, app);
             cb(std::move(s));
           });
}

/// The stored event of the session with `id`, if any: the first of the id
/// index's candidates whose stored event has that id. Builds the index from
/// the store first when unset (decoding every stored event once). A
/// committed append not yet answered may be in the store already or not; it
/// is added to the index when answered either way (add keeps one entry).
result<std::optional<append_result>> find_stored(session_state& st, const std::string& id) {
  auto txn = store::begin_read(*st.core->kv);
  if (!txn)
    return std::move(txn).err();
  if (!st.ids) {
    event_id_index index;
    auto built = store::scan_event_ids(
      **txn, st.skey, [&index](std::uint64_t v, const std::string& i) { index.add(i, v); });
    if (!built)
      return std::move(built).err();
    st.ids = std::move(index);
  }
  std::optional<append_result> out;
  std::optional<error> err;
  st.ids->candidates(id, [&](std::uint64_t version) {
    auto r = store::read_event(**txn, st.skey, version);
    if (!r)
      err = std::move(r).err();
    else if (*r && (*r)->ev.id == id)
      out = std::move(**r);
    else
      return true; // stale, or another id of the same hash
    return false;
  });
  if (err)
    return std::move(*err);
  return out;
}

/// A6 for a caller's event id: when an append with `cmd`'s id is in flight
/// or stored, queues `cmd`'s answer as that append's outcome and returns
/// true. Costs a hash lookup, a read transaction and a read of each
/// candidate event (one, unless hashes collide); the first lookup after
/// activation builds the id index (find_stored).
bool answer_duplicate(session_actor_t* self, append_cmd& cmd) {
  auto& st = self->state;
  const auto& ev = cmd.req.ev;
  // A6: an id in flight answers with that append's outcome, in order.
  if (auto it = st.in_flight_ids.find(ev.id); it != st.in_flight_ids.end()) {
    auto outcome = it->second;
    auto p = std::make_shared<pending>();
    p->ready = true;
    p->run = [outcome, cb = std::move(cmd.cb), core = st.core] {
      if (outcome->has_value() && (*outcome)->ok())
        core->stats.deduplicated.fetch_add(1, std::memory_order_relaxed);
      if (outcome->has_value())
        cb(**outcome);
      else
        cb(error{errc::internal, "duplicate of an unfinished append"});
    };
    st.queue.push_back(std::move(p));
    return true;
  }
  // A6: an id already stored answers with the stored event and version.
  auto found = find_stored(st, ev.id);
  if (!found) {
    answer(self, [cb = std::move(cmd.cb), e = std::move(found).err()] { cb(e); });
    return true;
  }
  if (*found) {
    st.core->stats.deduplicated.fetch_add(1, std::memory_order_relaxed);
    answer(self, [cb = std::move(cmd.cb), r = std::move(**found)]() mutable {
      cb(std::move(r));
    });
    return true;
  }
  return false;
}

void on_append(session_actor_t* self, append_cmd& cmd) {
  auto& st0 = self->state;
  auto checked = validate_event(st0.core->opts.limit, cmd.req.ev);
  if (!checked) {
    answer(self, [cb = std::move(cmd.cb), e = std::move(checked).err()] { cb(e); });
    return;
  }
  if (cmd.req.ev.partial.value_or(false)) {
    // A1: returned unchanged with the session's version; not stored, no
    // state or time change.
    if (!ensure_loaded(self, cmd.cb))
      return;
    answer(self, [cb = std::move(cmd.cb), ev = std::move(cmd.req.ev),
                  version = st0.version]() mutable {
      cb(append_result{std::move(ev), version});
    });
    return;
  }
    auto& st = self->state;
    if (!ensure_loaded(self, cmd.cb))
      return;
    if (!st.exists) {
      answer(self, [cb = std::move(cmd.cb), id = st.ref.session_id] {
        cb(error{errc::not_found, "session '" + id + "' not found"});
      });
      return;
    }
    auto& ev = cmd.req.ev;
    // A generated id (122 random bits) is in no stored or in-flight event.
    const bool generated = ev.id.empty();
    if (generated)
      ev.id = model::make_uuid();
    else if (answer_duplicate(self, cmd))
      return;
    if (cmd.req.expected_version && *cmd.req.expected_version != st.version) {
      error e{errc::version_conflict,
              "expected version " + std::to_string(*cmd.req.expected_version)
                + ", session is at " + std::to_string(st.version)};
      e.current_version = st.version;
      answer(self, [cb = std::move(cmd.cb), e = std::move(e)] { cb(e); });
      return;
    }
    if (!ev.timestamp)
      ev.timestamp = model::now_seconds();
    auto prepared = prepare_append(*st.core, st.ref, std::move(ev), st.version + 1,
                                   std::move(cmd.req.modify));
    if (!prepared) {
      answer(self, [cb = std::move(cmd.cb), e = std::move(prepared).err()] { cb(e); });
      return;
    }
    st.version += 1;
    append_result stored{std::move(prepared->stored), st.version};
    // A caller's id is in flight until the writer answers (A6). Keyed by the
    // stored event's id: `ev` is moved from.
    append_outcome outcome;
    if (!generated) {
      outcome = std::make_shared<std::optional<result<append_result>>>();
      st.in_flight_ids.emplace(stored.ev.id, outcome);
    }
    submit(self, std::move(prepared->plan),
           [self, cb = std::move(cmd.cb), stored = std::move(stored),
            temp = std::move(prepared->temp), temp_removed = std::move(prepared->temp_removed),
            outcome](result<void> r, std::shared_ptr<late_binding> late) mutable {
             auto& st = self->state;
             if (outcome) {
               auto it = st.in_flight_ids.find(stored.ev.id);
               if (it != st.in_flight_ids.end() && it->second == outcome)
                 st.in_flight_ids.erase(it);
             }
             // Duplicates that arrived in flight hold `outcome` too (all on
             // this actor's thread); without them nobody reads it, and
             // copying the event is skipped.
             const bool awaited = outcome && outcome.use_count() > 1;
             if (!r) {
               if (awaited)
                 *outcome = result<append_result>{r.err()};
               cb(std::move(r).err());
               return;
             }
             st.core->stats.appends.fetch_add(1, std::memory_order_relaxed);
             if (late)
               stored.ev = std::move(late->ev);
             if (st.ids)
               st.ids->add(stored.ev.id, stored.version);
             // While a lease is held, only its invocation is the live one.
             bool live = st.lease.empty() || st.lease == stored.ev.invocation_id;
             if (live && stored.ev.invocation_id != st.invocation) {
               st.invocation = stored.ev.invocation_id;
               st.temp = json::object();
             }
             if (live) {
               for (auto t = temp.begin(); t != temp.end(); ++t)
                 st.temp[t.key()] = std::move(t.value());
               for (auto& k : temp_removed)
                 st.temp.erase(k);
             }
             if (awaited)
               *outcome = result<append_result>{stored};
             cb(std::move(stored));
           });
}

/// The live invocation's temp: keys when `invocation_id` names it, else null.
const json* live_temp(const session_state& st, const std::string& invocation_id) {
  return !invocation_id.empty() && invocation_id == st.invocation ? &st.temp : nullptr;
}

/// read_session plus the temp: keys of req.invocation_id when it is live.
result<std::optional<session>> read_live(session_actor_t* self, const get_request& req) {
  auto& st = self->state;
  auto r = store::read_session(*st.core->kv, req);
  if (const json* temp = live_temp(st, req.invocation_id); temp && r && *r)
    for (auto t = temp->begin(); t != temp->end(); ++t)
      (**r).state[t.key()] = t.value();
  return r;
}

void on_get(session_actor_t* self, get_cmd& cmd) {
  // Answered at its turn, so it sees every append accepted before it.
  answer(self, [self, cmd = std::move(cmd)]() mutable {
    if (cmd.text_cb) {
      auto& st = self->state;
      cmd.text_cb(store::read_session_text(*st.core->kv, cmd.req,
                                           live_temp(st, cmd.req.invocation_id)));
      return;
    }
    cmd.cb(read_live(self, cmd.req));
  });
}

void on_delete(session_actor_t* self, delete_cmd& cmd) {
    auto& st = self->state;
    if (!ensure_loaded(self, cmd.cb))
      return;
    if (!st.exists) {
      answer(self, [cb = std::move(cmd.cb)] { cb(result<void>{}); });
      return;
    }
    write_plan plan;
    plan.ws.op = store::write_set::kind::remove;
    plan.ws.app = st.ref.app_name;
    plan.ws.user = st.ref.user_id;
    plan.ws.id = st.ref.session_id;
    st.exists = false;
    st.version = 0;
    st.in_flight_ids.clear();
    st.ids.reset();
    submit(self, std::move(plan), [self, cb = std::move(cmd.cb)](result<void> r,
                                                              std::shared_ptr<late_binding>) {
      if (r) {
        self->state.invocation.clear();
        self->state.temp = json::object();
      }
      cb(std::move(r));
    });
}

/// Grants the lease to `w` (answered at its turn, so the reply sees every
/// append accepted before the grant): the session without events, with the
/// invocation's temp: keys.
void grant(session_actor_t* self, lease_waiter w) {
  auto& st = self->state;
  if (!st.exists) {
    answer(self, [cb = std::move(w.cb), id = st.ref.session_id] {
      cb(error{errc::not_found, "session '" + id + "' not found"});
    });
    return;
  }
  st.lease = w.invocation_id;
  if (st.invocation != w.invocation_id) {
    st.invocation = w.invocation_id;
    st.temp = json::object();
  }
  answer(self, [self, w = std::move(w)]() mutable {
    get_request req;
    req.ref = self->state.ref;
    req.num_recent_events = 0;
    req.invocation_id = std::move(w.invocation_id);
    auto r = read_live(self, req);
    if (!r)
      return w.cb(std::move(r).err());
    if (!*r)
      return w.cb(error{errc::not_found, "session '" + req.ref.session_id + "' not found"});
    w.cb(std::move(**r));
  });
}

/// Hands a free lease to the first waiter that can take it.
void grant_next(session_actor_t* self) {
  auto& st = self->state;
  while (st.lease.empty() && !st.waiters.empty()) {
    auto w = std::move(st.waiters.front());
    st.waiters.pop_front();
    grant(self, std::move(w));
  }
}

void on_begin_invocation(session_actor_t* self, begin_invocation_cmd& cmd) {
  auto& st = self->state;
  if (!ensure_loaded(self, cmd.cb))
    return;
  if (!st.lease.empty() && st.lease != cmd.invocation_id) {
    st.waiters.push_back({std::move(cmd.invocation_id), std::move(cmd.cb)});
    return;
  }
  grant(self, {std::move(cmd.invocation_id), std::move(cmd.cb)});
}

// Answered at its turn: appends of the ending invocation accepted before it
// are acknowledged first, so none can bring its temp: state back.
void on_end_invocation(session_actor_t* self, end_invocation_cmd& cmd) {
  answer(self, [self, cmd = std::move(cmd)] {
    auto& st = self->state;
    const bool held = !cmd.invocation_id.empty() && cmd.invocation_id == st.lease;
    if (!cmd.invocation_id.empty() && cmd.invocation_id == st.invocation) {
      st.invocation.clear();
      st.temp = json::object();
    }
    if (held)
      st.lease.clear();
    cmd.cb(result<void>{});
    if (held)
      grant_next(self);
  });
}

caf::behavior session_actor(session_actor_t* self, engine_core* core, session_ref ref) {
  auto& st = self->state;
  st.core = core;
  st.skey = store::session_key(ref.app_name, ref.user_id, ref.session_id);
  st.dir_key = session_dir_key(ref);
  st.ref = std::move(ref);
  core->stats.activations.fetch_add(1, std::memory_order_relaxed);
  core->stats.sessions_live.fetch_add(1, std::memory_order_relaxed);
  // However the actor ends, it leaves the directory (a no-op when it already
  // did), so close() never waits on an actor that is gone.
  self->attach_functor([core, key = st.dir_key, addr = self->address()] {
    core->dir.remove(key, addr);
    core->stats.sessions_live.fetch_sub(1, std::memory_order_relaxed);
  });
  self->delayed_send(self, core->opts.idle_timeout, idle_tick{});
  return {
    [self](create_cmd& c) {
      ++self->state.handled;
      enter(self, [self, c = std::move(c)]() mutable { on_create(self, c); });
    },
    [self](append_cmd& c) {
      ++self->state.handled;
      enter(self, [self, c = std::move(c)]() mutable { on_append(self, c); });
    },
    [self](get_cmd& c) {
      ++self->state.handled;
      enter(self, [self, c = std::move(c)]() mutable { on_get(self, c); });
    },
    [self](delete_cmd& c) {
      ++self->state.handled;
      enter(self, [self, c = std::move(c)]() mutable { on_delete(self, c); });
    },
    [self](begin_invocation_cmd& c) {
      ++self->state.handled;
      enter(self, [self, c = std::move(c)]() mutable { on_begin_invocation(self, c); });
    },
    [self](end_invocation_cmd& c) {
      ++self->state.handled;
      enter(self, [self, c = std::move(c)]() mutable { on_end_invocation(self, c); });
    },
    [self](shutdown_cmd&) {
      auto& st = self->state;
      ++st.handled;
      st.stopping = true;
      for (auto& w : st.waiters)
        w.cb(error{errc::unavailable, "the engine is closing"});
      st.waiters.clear();
      maybe_finish(self);
    },
    [self](idle_tick&) {
      auto& st = self->state;
      // A held lease keeps the actor (and the invocation's temp: state).
      on_idle_tick(self, !st.queue.empty() || !st.stash.empty() || !st.lease.empty()
                           || !st.waiters.empty());
    },
  };
}

} // namespace

caf::actor spawn_session_actor(engine_core& core, session_ref r) {
  return core.sys->spawn<caf::lazy_init>(session_actor, &core, std::move(r));
}

} // namespace agentstate::detail
