// SPDX-License-Identifier: Apache-2.0
// The session actor's commands that read and write the session: create,
// append (A1-A7), get, delete, prune's guarded delete
// (actors/session_actor.hpp).
#include "actors/session_actor.hpp"

#include <cstring>
#include <memory>
#include <optional>

#include <caf/all.hpp>

#include "actors/prepare.hpp"
#include "model/checks.hpp"
#include "agentstate/scope.hpp"
#include "model/ids.hpp"
#include "store/reads.hpp"

namespace agentstate::detail {

bool has_expired(const session_state& st) {
  return st.exists && st.expires != 0 && st.expires <= wall_now(*st.core);
}

namespace {

// Queues the delete of this session (what delete_session writes), guarded
// by `only_if` when set; `done` gets the writer's verdict.
void submit_delete(session_actor_t self, std::function<void(result<void>)> done,
                   std::optional<store::write_set::record_guard> only_if = std::nullopt) {
  auto& st = self->state;
  write_plan plan;
  plan.ws.op = store::write_set::kind::remove;
  plan.ws.app = st.ref.app_name;
  plan.ws.user = st.ref.user_id;
  plan.ws.id = st.ref.session_id;
  plan.ws.only_if = only_if;
  st.exists = false;
  st.version = 0;
  st.expires = 0;
  st.refresh = 0;
  st.in_flight_ids.clear();
  st.ids.reset();
  submit(
    self, std::move(plan),
    [self, done = std::move(done)](result<void> r, std::shared_ptr<late_binding>, std::uint64_t) {
      if (r) {
        self->state.invocation.clear();
        self->state.temp = json::object();
      }
      done(std::move(r));
    });
}

bool same_time(double a, double b) {
  std::uint64_t x = 0, y = 0;
  std::memcpy(&x, &a, sizeof x);
  std::memcpy(&y, &b, sizeof y);
  return x == y;
}

// engine::prune's delete (prune_delete_cmd). Judged once no write of this
// session is in flight and a failed one has been resolved (later commands
// wait in the stash meanwhile): the record the store holds then is the
// session as of every command before this one, so the delete is queued only
// if it is the record prune read, and every command after it sees the
// session deleted. The writer checks the guard again in the delete's
// transaction (with the outbox), so no cached state depends on this read
// alone.
void delete_if_unchanged(session_actor_t self, std::shared_ptr<prune_delete_cmd> c) {
  auto& st = self->state;
  if (!st.queue.empty() || st.stale) {
    st.hold = true;
    st.stash.push_front([self, c] { delete_if_unchanged(self, c); });
    return;
  }
  if (st.loaded && st.fence_epoch != st.core->fence_epoch.load())
    st.ids.reset(); // as ensure_loaded: the events may have changed under it
  auto rec = load_record(self);
  if (!rec) {
    answer(self, [cb = std::move(c->cb), e = std::move(rec).err()] { cb(e); });
    return;
  }
  const auto& g = c->only_if;
  const auto& r = *rec;
  if (!r) {
    answer(self, [cb = std::move(c->cb), id = st.ref.session_id] {
      cb(error{errc::condition_failed, "session '" + id + "' is gone"});
    });
    return;
  }
  if (r->version != g.version || !same_time(r->created, g.created)
      || !same_time(r->last_update_time, g.last_update_time)) {
    answer(self, [cb = std::move(c->cb), id = st.ref.session_id] {
      cb(error{errc::condition_failed,
               "session '" + id + "' was written after it was read; it stays"});
    });
    return;
  }
  submit_delete(self, std::move(c->cb), g);
}

} // namespace

bool ensure_absent(session_actor_t self, callback<session>& cb) {
  auto& st = self->state;
  if (!ensure_loaded(self, cb))
    return false;
  if (has_expired(st)) // T4: replaced; a failed delete fails the write after it
    submit_delete(self, [](result<void>) {});
  if (st.exists) {
    answer(self, [cb = std::move(cb), id = st.ref.session_id] {
      cb(error{errc::already_exists, "session '" + id + "' already exists"});
    });
    return false;
  }
  return true;
}

write_done create_done(session_actor_t self, callback<session> cb, json own, double created,
                       double expires, json home_values) {
  return [self, cb = std::move(cb), own = std::move(own), created, expires,
          home_values = std::move(home_values)](result<void> r, std::shared_ptr<late_binding> late,
                                                std::uint64_t seq) mutable {
    if (!r) {
      if (cb)
        cb(std::move(r).err());
      return;
    }
    if (!cb)
      return;
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
    if (expires != 0)
      s.expires_at = expires;
    s.cursor = store::format_cursor(st.core->epoch, seq);
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
    if (home_values.is_object())
      for (auto it = home_values.begin(); it != home_values.end(); ++it)
        s.state[it.key()] = it.value();
    cb(std::move(s));
  };
}

void on_create(session_actor_t self, create_cmd& cmd) {
  auto& st = self->state;
  if (!ensure_absent(self, cmd.cb))
    return;
  auto plan = prepare_create(*st.core, cmd.req);
  if (!plan) {
    answer(self, [cb = std::move(cmd.cb), e = std::move(plan).err()] { cb(e); });
    return;
  }
  if (app_part_elsewhere(st, plan->ws)) {
    start_remote_create(self, cmd);
    return;
  }
  st.exists = true;
  st.version = 0;
  st.expires = plan->ws.expires;
  st.refresh = plan->ws.refresh;
  json own = json::object();
  for (auto& w : plan->ws.session_writes)
    own[w.key] = w.value;
  double created = plan->ws.time, expires = plan->ws.expires;
  submit(self, std::move(*plan),
         create_done(self, std::move(cmd.cb), std::move(own), created, expires));
}

write_done append_done(session_actor_t self, callback<append_result> cb, append_result stored,
                       json temp, std::vector<std::string> temp_removed, append_outcome outcome) {
  return [self, cb = std::move(cb), stored = std::move(stored), temp = std::move(temp),
          temp_removed = std::move(temp_removed),
          outcome](result<void> r, std::shared_ptr<late_binding> late, std::uint64_t seq) mutable {
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
      if (cb)
        cb(std::move(r).err());
      return;
    }
    st.core->stats.appends.fetch_add(1, std::memory_order_relaxed);
    if (late)
      stored.ev = std::move(late->ev);
    stored.cursor = store::format_cursor(st.core->epoch, seq);
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
    if (cb)
      cb(std::move(stored));
  };
}

void on_append(session_actor_t self, append_cmd& cmd) {
  auto& st0 = self->state;
  auto checked = model::validate_event(st0.core->opts.limits, cmd.req.ev);
  if (!checked) {
    answer(self, [cb = std::move(cmd.cb), e = std::move(checked).err()] { cb(e); });
    return;
  }
  if (cmd.req.ev.partial.value_or(false)) {
    // A1: returned unchanged with the session's version; not stored, no
    // state or time change.
    if (!ensure_loaded(self, cmd.cb))
      return;
    answer(self,
           [cb = std::move(cmd.cb), ev = std::move(cmd.req.ev), version = st0.version]() mutable {
             cb(append_result{std::move(ev), version, {}, {}});
           });
    return;
  }
  auto& st = self->state;
  if (!ensure_loaded(self, cmd.cb))
    return;
  if (!st.exists || has_expired(st)) {
    answer(self, [cb = std::move(cmd.cb), id = st.ref.session_id, gone = st.exists] {
      cb(error{errc::not_found, "session '" + id + (gone ? "' has expired" : "' not found")});
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
            "expected version " + std::to_string(*cmd.req.expected_version) + ", session is at "
              + std::to_string(st.version)};
    e.current_version = st.version;
    answer(self, [cb = std::move(cmd.cb), e = std::move(e)] { cb(e); });
    return;
  }
  if (!ev.timestamp)
    ev.timestamp = wall_now(*st.core);
  if (app_part_elsewhere(st, cmd.req)) {
    start_remote_append(self, cmd, generated);
    return;
  }
  auto prepared =
    prepare_append(*st.core, st.ref, std::move(ev), st.version + 1, std::move(cmd.req.modify));
  if (!prepared) {
    answer(self, [cb = std::move(cmd.cb), e = std::move(prepared).err()] { cb(e); });
    return;
  }
  st.version += 1;
  if (st.refresh != 0) { // T2: from the moment it is accepted
    st.expires = wall_now(*st.core) + st.refresh;
    prepared->plan.ws.expires = st.expires;
  }
  append_result stored{std::move(prepared->stored), st.version, {}, std::move(prepared->text)};
  // A caller's id is in flight until the writer answers (A6). Keyed by the
  // stored event's id: `ev` is moved from.
  append_outcome outcome;
  if (!generated) {
    outcome = std::make_shared<std::optional<result<append_result>>>();
    st.in_flight_ids.emplace(stored.ev.id, outcome);
  }
  submit(self, std::move(prepared->plan),
         append_done(self, std::move(cmd.cb), std::move(stored), std::move(prepared->temp),
                     std::move(prepared->temp_removed), std::move(outcome)));
}

void on_get(session_actor_t self, get_cmd& cmd) {
  // Answered at its turn, so it sees every append accepted before it; while
  // it waits, later commands wait too (`hold`), so it sees none after it.
  if (!self->state.queue.empty())
    self->state.hold = true;
  answer(self, [self, cmd = std::move(cmd)]() mutable {
    if (cmd.text_cb) {
      auto& st = self->state;
      cmd.text_cb(store::read_session_text(
        *st.core->kv, cmd.req, live_temp(st, cmd.req.invocation_id),
        st.core->opts.limits.max_response_bytes, wall_now(*st.core), st.core->epoch));
      return;
    }
    cmd.cb(read_live(self, cmd.req, self->state.core->opts.limits.max_response_bytes));
  });
}

void on_delete(session_actor_t self, delete_cmd& cmd) {
  auto& st = self->state;
  if (!ensure_loaded(self, cmd.cb))
    return;
  // The reaper's delete (T3) leaves a session an accepted append refreshed.
  if (!st.exists || (cmd.only_expired && !has_expired(st))) {
    answer(self, [cb = std::move(cmd.cb)] { cb(result<void>{}); });
    return;
  }
  submit_delete(self, std::move(cmd.cb));
}

void on_prune_delete(session_actor_t self, prune_delete_cmd& cmd) {
  delete_if_unchanged(self, std::make_shared<prune_delete_cmd>(std::move(cmd)));
}

} // namespace agentstate::detail
