// SPDX-License-Identifier: Apache-2.0
// The session actor's commands over the session's past: rewind (H2),
// rewind_plan (H3) and fork (H4) (actors/session_actor.hpp).
#include "actors/session_actor.hpp"

#include <chrono>

#include <caf/all.hpp>

#include "agentstate/json.hpp"
#include "model/ids.hpp"
#include "store/change_log.hpp"
#include "store/history.hpp"
#include "store/keys.hpp"
#include "store/reads.hpp"
#include "store/records.hpp"

namespace agentstate::detail {

namespace {

error missing(const std::string& id) {
  return error{errc::not_found, "session '" + id + "' not found"};
}

/// The rewind's effect at the head the store holds now. REQUIRES: no write
/// of this session in flight (the store's record is the head).
result<rewind_changes> effect_now(session_state& st, const rewind_request& req) {
  auto txn = store::begin_read(*st.core->kv);
  if (!txn)
    return std::move(txn).err();
  auto rec = store::read_live_record(**txn, st.skey, wall_now(*st.core));
  if (!rec)
    return std::move(rec).err();
  if (!*rec)
    return missing(st.ref.session_id);
  return store::plan_rewind(**txn, st.skey, (**rec).version, req);
}

/// Runs under the lease `inv`: once no write is in flight and a failed one
/// has been resolved (the record re-read: later commands wait in the stash
/// meanwhile), computes the rewind and appends it.
void rewind_at_head(session_actor_t self, std::shared_ptr<rewind_cmd> c, std::string inv) {
  auto& st = self->state;
  if (!st.queue.empty() || st.stale) {
    st.hold = true;
    st.stash.push_front([self, c, inv] { rewind_at_head(self, c, inv); });
    return;
  }
  auto fail = [self, c, inv](error e) {
    release_lease(self, inv);
    c->cb(std::move(e));
  };
  if (!st.loaded)
    if (auto r = load(self); !r)
      return fail(std::move(r).err());
  if (!st.exists)
    return fail(missing(st.ref.session_id));
  auto effect = effect_now(st, c->req);
  if (!effect)
    return fail(std::move(effect).err());
  append_request a;
  a.ref = st.ref;
  a.ev.id = c->req.event_id;
  a.ev.invocation_id = inv;
  a.ev.author = "user";
  a.ev.actions.state_delta = std::move(effect->state_delta);
  a.ev.actions.state_remove = std::move(effect->state_remove);
  if (!c->req.before_invocation_id.empty())
    a.ev.actions.extra["rewind_before_invocation_id"] = c->req.before_invocation_id;
  else
    a.ev.actions.extra["rewind_before_version"] = c->req.before_version;
  // Nothing runs between here and the append's acceptance: the session's
  // version is the head the effect was computed at.
  a.expected_version = c->req.expected_version.value_or(st.version);
  append_cmd cmd{std::move(a), [self, c, inv](result<append_result> r) {
                   release_lease(self, inv);
                   c->cb(std::move(r));
                 }};
  on_append(self, cmd);
}

} // namespace

void on_rewind(session_actor_t self, rewind_cmd& cmd) {
  auto& st = self->state;
  auto c = std::make_shared<rewind_cmd>(std::move(cmd));
  auto fail = [c](error e) {
    if (c->dry_run)
      c->plan_cb(std::move(e));
    else
      c->cb(std::move(e));
  };
  if (!st.loaded)
    if (auto r = load(self); !r) {
      answer(self, [fail, e = std::move(r).err()] { fail(e); });
      return;
    }
  if (!st.exists) {
    answer(self, [fail, id = st.ref.session_id] { fail(missing(id)); });
    return;
  }
  if (c->dry_run) {
    // Answered at its turn, seeing every append accepted before it and none
    // after it (as a get is).
    if (!st.queue.empty())
      st.hold = true;
    answer(self, [self, c, fail] {
      auto effect = effect_now(self->state, c->req);
      if (!effect)
        return fail(std::move(effect).err());
      c->plan_cb(std::move(*effect));
    });
    return;
  }
  // ADK's rewind event runs as an invocation of its own ("e-" and a UUID).
  auto inv = "e-" + model::make_uuid();
  take_lease(
    self, inv, [self, c, inv] { rewind_at_head(self, c, inv); },
    [c](result<session> r) {
      if (!r)
        c->cb(std::move(r).err());
    });
}

void on_fork(session_actor_t self, fork_cmd& cmd) {
  auto& st = self->state;
  if (!ensure_absent(self, cmd.cb))
    return;
  // The source is read from one snapshot: its events 1..N are committed
  // there, whatever it does meanwhile.
  auto build = [&]() -> result<write_plan> {
    const auto& src = cmd.req.ref;
    auto skey = store::session_key(src.app_name, src.user_id, src.session_id);
    auto txn = store::begin_read(*st.core->kv);
    if (!txn)
      return std::move(txn).err();
    auto rec = store::read_live_record(**txn, skey, wall_now(*st.core));
    if (!rec)
      return std::move(rec).err();
    if (!*rec)
      return missing(src.session_id);
    const auto n = cmd.req.at_version;
    if (n > (**rec).version) {
      error e{errc::invalid_argument,
              "at_version " + std::to_string(n) + " is past the session's version "
                + std::to_string((**rec).version)};
      e.current_version = (**rec).version;
      return e;
    }
    auto past = store::state_at(**txn, skey, (**rec).version, n);
    if (!past)
      return std::move(past).err();
    auto origin = store::read_origin(**txn, skey);
    if (!origin)
      return std::move(origin).err();
    write_plan plan;
    auto& ws = plan.ws;
    ws.op = store::write_set::kind::create;
    ws.app = st.ref.app_name;
    ws.user = st.ref.user_id;
    ws.id = st.ref.session_id;
    ws.time = wall_now(*st.core);
    // A fork is a new session: the engine's default lifetime (T1, T2).
    if (auto ttl = std::chrono::duration<double>(st.core->opts.default_session_ttl).count();
        ttl > 0) {
      ws.expires = ws.time + ttl;
      ws.refresh = st.core->opts.refresh_ttl_on_append ? ttl : 0;
    }
    for (auto it = past->state.begin(); it != past->state.end(); ++it) {
      auto text = dump_json(it.value());
      if (!text)
        return std::move(text).err();
      ws.session_writes.push_back({it.key(), it.value(), std::move(*text), false});
    }
    if (*origin)
      ws.origin_body = std::move(**origin);
    else
      ws.no_origin = true;
    // Each event row re-sealed under its key in the new session.
    auto nkey = store::session_key(ws.app, ws.user, ws.id);
    ws.fork_events.reserve(n);
    auto copied = store::scan_event_bodies(
      **txn, skey, n, [&](std::uint64_t v, std::string_view body) -> result<bool> {
        ws.fork_events.push_back(store::encode_event_row(store::event_key(nkey, v),
                                                         store::event_body_timestamp(body),
                                                         store::event_body_text(body)));
        return true;
      });
    if (!copied)
      return std::move(copied).err();
    if (ws.fork_events.size() != n)
      return store::damaged(store::table::events,
                            store::event_key(skey, ws.fork_events.size() + 1));
    return plan;
  };
  auto plan = build();
  if (!plan) {
    answer(self, [cb = std::move(cmd.cb), e = std::move(plan).err()] { cb(e); });
    return;
  }
  st.exists = true;
  st.version = cmd.req.at_version;
  st.expires = plan->ws.expires;
  st.refresh = plan->ws.refresh;
  st.ids.reset();
  submit(self, std::move(*plan),
         [self, cb = std::move(cmd.cb)](result<void> r, std::shared_ptr<late_binding>,
                                        std::uint64_t seq) mutable {
           if (!r)
             return cb(std::move(r).err());
           auto& st = self->state;
           get_request req;
           req.ref = st.ref;
           req.num_recent_events = 0;
           auto s = store::read_session(*st.core->kv, req, SIZE_MAX, wall_now(*st.core));
           if (!s)
             return cb(std::move(s).err());
           if (!*s)
             return cb(missing(st.ref.session_id));
           (**s).cursor = store::format_cursor(st.core->epoch, seq);
           cb(std::move(**s));
         });
}

} // namespace agentstate::detail
