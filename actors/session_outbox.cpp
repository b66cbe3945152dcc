// SPDX-License-Identifier: Apache-2.0
// A session actor's appends whose app: part lives at another node
// (options::app_home; docs/cluster.md): the outbox row first, then the app:
// part applied at the app's home, then the event with the home's values,
// the outbox row deleted in its commit (store/outbox.hpp). While one is out,
// the session's later commands wait in `stash`.
#include <algorithm>
#include <exception>

#include <caf/all.hpp>

#include "actors/prepare.hpp"
#include "actors/session_actor.hpp"
#include "agentstate/scope.hpp"
#include "model/ids.hpp"
#include "store/outbox.hpp"

namespace agentstate::detail {

namespace {

bool is_app(const std::string& key) {
  return scope_of(key) == scope::app;
}

write_plan outbox_plan(const session_state& st, store::write_set::kind op, std::uint64_t version,
                       std::string body = {}) {
  write_plan plan;
  plan.ws.op = op;
  plan.ws.app = st.ref.app_name;
  plan.ws.user = st.ref.user_id;
  plan.ws.id = st.ref.session_id;
  plan.ws.version = version;
  plan.ws.outcome = std::move(body);
  return plan;
}

// The ids of `app`'s committed app writes, for the next send to forget.
std::vector<std::string> take_forgets(engine_core& core, const std::string& app) {
  std::lock_guard<std::mutex> lk(core.forget_mtx);
  auto it = core.forget.find(app);
  if (it == core.forget.end())
    return {};
  std::vector<std::string> out;
  auto& ids = it->second;
  const std::size_t n = std::min<std::size_t>(ids.size(), 1024);
  out.assign(std::make_move_iterator(ids.end() - static_cast<std::ptrdiff_t>(n)),
             std::make_move_iterator(ids.end()));
  ids.resize(ids.size() - n);
  if (ids.empty())
    core.forget.erase(it);
  return out;
}

void give_forgets(engine_core& core, const std::string& app, std::vector<std::string> ids) {
  if (ids.empty())
    return;
  std::lock_guard<std::mutex> lk(core.forget_mtx);
  auto& v = core.forget[app];
  v.insert(v.end(), std::make_move_iterator(ids.begin()), std::make_move_iterator(ids.end()));
}

void send_app_part(session_actor_t self, const std::shared_ptr<remote_append>& r) {
  auto& st = self->state;
  app_write_request req;
  req.app_name = st.ref.app_name;
  req.write_id = r->write_id;
  const auto& delta = r->create ? r->create->state : r->ev.actions.state_delta;
  for (auto it = delta.begin(); it != delta.end(); ++it)
    if (is_app(it.key()))
      req.state_delta[it.key()] = it.value();
  for (auto& k : r->ev.actions.state_remove)
    if (is_app(k))
      req.state_remove.push_back(k);
  for (auto& m : r->modify)
    if (is_app(m.key))
      req.modify.push_back(m);
  r->forget = take_forgets(*st.core, st.ref.app_name);
  req.forget = r->forget;
  auto me = caf::actor_cast<session_actor_hdl>(self);
  auto reply = [me, id = r->write_id](result<app_write_result> out) {
    caf::anon_send(me,
                   app_sent{std::make_shared<result<app_write_result>>(std::move(out)), false, id});
  };
  try {
    st.core->opts.app_home.send(std::move(req), reply);
  } catch (const std::exception& e) {
    reply(error{errc::unavailable, std::string("sending the app: part failed: ") + e.what()});
  } catch (...) {
    reply(error{errc::unavailable, "sending the app: part failed"});
  }
}

// Ends `r` with `e`: the caller and A6's waiters hear it; with `drop`, its
// outbox row is deleted first (later commands wait for that commit).
void fail_remote(session_actor_t self, const std::shared_ptr<remote_append>& r, error e,
                 bool drop) {
  auto& st = self->state;
  if (st.remote != r)
    return;
  st.remote.reset();
  st.remote_overdue = false;
  if (r->create) {
    st.version = 0;
    st.exists = false;
    auto answer_cb = [cb = r->create_cb](const error& e) {
      if (cb)
        cb(e);
    };
    if (!drop) {
      answer_cb(e);
      return;
    }
    st.hold = true;
    submit(self, outbox_plan(st, store::write_set::kind::outbox_drop, 0),
           [answer_cb, e = std::move(e)](result<void>, std::shared_ptr<late_binding>,
                                         std::uint64_t) { answer_cb(e); });
    return;
  }
  st.version = r->version - 1;
  if (r->outcome) {
    auto it = st.in_flight_ids.find(r->ev.id);
    if (it != st.in_flight_ids.end() && it->second == r->outcome)
      st.in_flight_ids.erase(it);
    *r->outcome = result<append_result>{e};
  }
  if (!drop) {
    if (r->cb)
      r->cb(std::move(e));
    return;
  }
  st.hold = true;
  submit(
    self, outbox_plan(st, store::write_set::kind::outbox_drop, r->version),
    [cb = r->cb, e = std::move(e)](result<void>, std::shared_ptr<late_binding>, std::uint64_t) {
      if (cb)
        cb(e);
    });
}

void answer_overdue(session_actor_t self, const std::shared_ptr<remote_append>& r, const error& e);

// The commit of `r` was refused because the session's shard is moving away
// (engine::fence_range): its caller hears it is in doubt, the commands
// waiting behind it are refused, and the append is left in its outbox row,
// which moves with the shard, for the session's next actor to finish (at
// the shard's next owner, or here when the move is undone:
// session_state::moved_out).
void leave_for_next_owner(session_actor_t self, const std::shared_ptr<remote_append>& r,
                          const error& why) {
  auto& st = self->state;
  if (!st.remote_overdue)
    answer_overdue(self, r,
                   error{errc::unavailable,
                         why.message
                           + "; the write is in doubt: it is finished where the shard "
                             "goes"
                           + (r->create ? "" : "; retry it with the same event id")});
  if (r->outcome) {
    auto it = st.in_flight_ids.find(r->ev.id);
    if (it != st.in_flight_ids.end() && it->second == r->outcome)
      st.in_flight_ids.erase(it);
    *r->outcome = result<append_result>{
      error{errc::unavailable, "the session's shard is moving to another node; retry"}};
  }
  st.remote.reset();
  st.remote_overdue = false;
  st.hold = false;
  st.loaded = false;
  st.moved_out = true;
}

// Commits `plan`, the remote write with the home's values (its outbox row
// deleted in the same commit): `done` answers once it has committed. A
// failure puts `r` back in flight: `final` errors (the write cannot be
// made) fail it and drop the row; any other (a storage failure) commits it
// again after `retry`, the home answering the same outcome again.
void commit_remote(session_actor_t self, const std::shared_ptr<remote_append>& r, write_plan plan,
                   write_done done, bool (*final)(errc)) {
  auto& st = self->state;
  st.remote.reset();
  st.remote_overdue = false;
  st.hold = true; // later commands wait until it has committed
  submit(
    self, std::move(plan),
    [self, r, final, done = std::move(done)](result<void> res, std::shared_ptr<late_binding> late,
                                             std::uint64_t seq) mutable {
      auto& st = self->state;
      if (res) {
        give_forgets(*st.core, st.ref.app_name, {r->write_id});
        done(std::move(res), std::move(late), seq);
        return;
      }
      st.remote = r;
      st.version = r->version;
      if (r->create) {
        st.exists = false;
        st.expires = 0;
        st.refresh = 0;
      }
      if (res.code() == errc::unavailable
          && range_fenced(*st.core, st.ref.app_name, st.ref.user_id)) {
        leave_for_next_owner(self, r, res.err());
        return;
      }
      if (final(res.code())) {
        fail_remote(self, r, std::move(res).err(), true);
        return;
      }
      self->delayed_send(self, st.core->opts.app_home.retry, app_sent{nullptr, true, r->write_id});
    });
}

// Commits the create with the home's outcome `out`.
void finish_remote_create(session_actor_t self, const std::shared_ptr<remote_append>& r,
                          app_write_result& out) {
  auto& st = self->state;
  create_request req = *r->create;
  for (auto it = req.state.begin(); it != req.state.end();)
    it = is_app(it.key()) ? req.state.erase(it) : std::next(it);
  for (auto it = out.values.begin(); it != out.values.end(); ++it)
    req.state[it.key()] = it.value();
  auto plan = prepare_create(*st.core, req);
  if (!plan) {
    fail_remote(self, r, std::move(plan).err(), true);
    return;
  }
  auto& ws = plan->ws;
  ws.app_elsewhere = true;
  json own = json::object();
  for (auto& w : ws.session_writes)
    own[w.key] = w.value;
  const double created = ws.time, expires = ws.expires;
  st.exists = true;
  st.version = 0;
  st.expires = ws.expires;
  st.refresh = ws.refresh;
  auto done = create_done(self, r->create_cb, std::move(own), created, expires, out.values);
  // Not final: a delete of the user or app in progress (unavailable).
  commit_remote(self, r, std::move(*plan), std::move(done), [](errc c) {
    return c == errc::already_exists || c == errc::not_found || c == errc::invalid_argument;
  });
}

// Commits the event with the home's outcome `out`.
void finish_remote(session_actor_t self, const std::shared_ptr<remote_append>& r,
                   app_write_result& out) {
  auto& st = self->state;
  if (r->create) {
    finish_remote_create(self, r, out);
    return;
  }
  event ev = r->ev;
  auto& delta = ev.actions.state_delta;
  for (auto it = delta.begin(); it != delta.end();)
    it = is_app(it.key()) ? delta.erase(it) : std::next(it);
  for (auto it = out.values.begin(); it != out.values.end(); ++it)
    delta[it.key()] = it.value();
  auto& removes = ev.actions.state_remove;
  removes.erase(std::remove_if(removes.begin(), removes.end(), is_app), removes.end());
  removes.insert(removes.end(), out.removed.begin(), out.removed.end());
  std::vector<state_modify> modify;
  for (auto& m : r->modify)
    if (!is_app(m.key))
      modify.push_back(m);
  auto prepared = prepare_append(*st.core, st.ref, std::move(ev), r->version, std::move(modify));
  if (!prepared) {
    fail_remote(self, r, std::move(prepared).err(), true);
    return;
  }
  auto& ws = prepared->plan.ws;
  ws.app_elsewhere = true;
  if (st.refresh != 0) { // T2
    st.expires = wall_now(*st.core) + st.refresh;
    ws.expires = st.expires;
  }
  append_result stored{std::move(prepared->stored), r->version, {}, std::move(prepared->text)};
  auto done = append_done(self, r->cb, std::move(stored), std::move(prepared->temp),
                          std::move(prepared->temp_removed), r->outcome);
  // Final: the session is gone, and so is its append.
  commit_remote(self, r, std::move(prepared->plan), std::move(done),
                [](errc c) { return c == errc::not_found; });
}

} // namespace

bool app_part_elsewhere(const session_state& st, const append_request& req) {
  const auto& home = st.core->opts.app_home;
  if (!home.here || !home.send)
    return false;
  const auto& delta = req.ev.actions.state_delta;
  bool any =
    std::any_of(req.ev.actions.state_remove.begin(), req.ev.actions.state_remove.end(), is_app)
    || std::any_of(req.modify.begin(), req.modify.end(),
                   [](const state_modify& m) { return is_app(m.key); });
  for (auto it = delta.begin(); !any && it != delta.end(); ++it)
    any = is_app(it.key());
  return any && !home.here(st.ref.app_name);
}

bool app_part_elsewhere(const session_state& st, const store::write_set& ws) {
  const auto& home = st.core->opts.app_home;
  return home.here && home.send && !ws.app_writes.empty() && !home.here(st.ref.app_name);
}

namespace {

json create_body(const std::string& write_id, const create_request& req) {
  json c{{"state", req.state}};
  if (req.ttl_s)
    c["ttl_s"] = *req.ttl_s;
  if (req.refresh_ttl)
    c["refresh_ttl"] = *req.refresh_ttl;
  return json{{"write_id", write_id}, {"create", std::move(c)}};
}

// The create an outbox row's body holds, for session `ref`; nullopt when the
// body is not one.
std::optional<create_request> create_of(const json& body, const session_ref& ref) {
  auto c = body.find("create");
  if (c == body.end() || !c->is_object())
    return std::nullopt;
  create_request req;
  req.app_name = ref.app_name;
  req.user_id = ref.user_id;
  req.session_id = ref.session_id;
  auto state = c->find("state");
  if (state == c->end() || !state->is_object())
    return std::nullopt;
  req.state = *state;
  if (auto t = c->find("ttl_s"); t != c->end()) {
    if (!t->is_number())
      return std::nullopt;
    req.ttl_s = t->get<double>();
  }
  if (auto t = c->find("refresh_ttl"); t != c->end()) {
    if (!t->is_boolean())
      return std::nullopt;
    req.refresh_ttl = t->get<bool>();
  }
  return req;
}

} // namespace

void start_remote_create(session_actor_t self, create_cmd& cmd) {
  auto& st = self->state;
  auto r = std::make_shared<remote_append>();
  r->version = 0;
  r->write_id = model::make_uuid();
  r->create = std::move(cmd.req);
  r->create_cb = std::move(cmd.cb);
  auto body = create_body(r->write_id, *r->create);
  st.version = 0;
  st.remote = r;
  submit(self, outbox_plan(st, store::write_set::kind::outbox_put, 0, body.dump()),
         [self, r](result<void> res, std::shared_ptr<late_binding>, std::uint64_t) {
           if (!res) {
             fail_remote(self, r, std::move(res).err(), false);
             return;
           }
           send_app_part(self, r);
         });
}

void start_remote_append(session_actor_t self, append_cmd& cmd, bool generated) {
  auto& st = self->state;
  auto& ev = cmd.req.ev;
  for (auto& m : cmd.req.modify)
    if (m.spec.is_null()) {
      answer(self, [cb = std::move(cmd.cb), key = m.key] {
        cb(error{errc::invalid_argument,
                 "modify of '" + key
                   + "': an append that writes app: keys on a cluster node takes only the "
                     "protocol's modify operations"});
      });
      return;
    }
  // Every check the event's own commit makes, before anything is stored.
  {
    event copy = ev;
    auto modify = cmd.req.modify;
    auto checked =
      prepare_append(*st.core, st.ref, std::move(copy), st.version + 1, std::move(modify));
    if (!checked) {
      answer(self, [cb = std::move(cmd.cb), e = std::move(checked).err()] { cb(e); });
      return;
    }
  }
  auto r = std::make_shared<remote_append>();
  r->version = st.version + 1;
  r->write_id = model::make_uuid();
  r->ev = std::move(ev);
  r->modify = std::move(cmd.req.modify);
  r->cb = std::move(cmd.cb);
  if (!generated) {
    r->outcome = std::make_shared<std::optional<result<append_result>>>();
    st.in_flight_ids.emplace(r->ev.id, r->outcome);
  }
  json specs = json::array();
  for (auto& m : r->modify)
    specs.push_back(m.spec);
  json body{{"write_id", r->write_id}, {"event", to_json(r->ev)}, {"modify", std::move(specs)}};
  st.version = r->version;
  st.remote = r;
  submit(self, outbox_plan(st, store::write_set::kind::outbox_put, r->version, body.dump()),
         [self, r](result<void> res, std::shared_ptr<late_binding>, std::uint64_t) {
           if (!res) {
             fail_remote(self, r, std::move(res).err(), false);
             return;
           }
           send_app_part(self, r);
         });
}

void resume_remote_append(session_actor_t self) {
  auto& st = self->state;
  const auto& home = st.core->opts.app_home;
  if (!home.here || !home.send)
    return;
  std::optional<store::outbox_row> row;
  try {
    auto txn = st.core->kv->begin_read();
    auto got = store::read_outbox(*txn, st.skey);
    if (!got || !*got)
      return;
    row = std::move(**got);
  } catch (...) {
    return; // unreadable: the first command's load says why
  }
  if (!load(self))
    return;
  auto body = json::parse(row->body, nullptr, false);
  if (row->version == 0) {
    auto req = body.is_object() && body.contains("write_id") && body["write_id"].is_string()
      ? create_of(body, st.ref)
      : std::nullopt;
    if (!req || st.exists) {
      // Nothing left to finish (the row does not decode, or a session of
      // this id exists): the row goes; commands wait for it.
      st.hold = true;
      submit(self, outbox_plan(st, store::write_set::kind::outbox_drop, 0),
             [](result<void>, std::shared_ptr<late_binding>, std::uint64_t) {});
      return;
    }
    auto r = std::make_shared<remote_append>();
    r->version = 0;
    r->write_id = body["write_id"].get<std::string>();
    r->create = std::move(*req);
    st.version = 0;
    st.remote = r;
    send_app_part(self, r);
    return;
  }
  std::optional<event> ev;
  std::vector<state_modify> modify;
  bool ok = body.is_object() && body.contains("write_id") && body["write_id"].is_string()
    && body.contains("event") && body.contains("modify") && body["modify"].is_array();
  if (ok) {
    auto e = event_from_json(body["event"]);
    ok = e.ok();
    if (ok)
      ev = std::move(e).value();
    for (auto& spec : body["modify"]) {
      auto m = state_modify_from_json(spec);
      ok = ok && m.ok();
      if (m)
        modify.push_back(std::move(m).value());
    }
  }
  if (!ok || !st.exists || row->version != st.version + 1) {
    // Nothing left to finish: the row goes (its session is gone, or the
    // row does not decode: verify names such a row); commands wait for it.
    st.hold = true;
    submit(self, outbox_plan(st, store::write_set::kind::outbox_drop, row->version),
           [](result<void>, std::shared_ptr<late_binding>, std::uint64_t) {});
    return;
  }
  auto r = std::make_shared<remote_append>();
  r->version = row->version;
  r->write_id = body["write_id"].get<std::string>();
  r->ev = std::move(*ev);
  r->modify = std::move(modify);
  r->outcome = std::make_shared<std::optional<result<append_result>>>();
  st.in_flight_ids.emplace(r->ev.id, r->outcome);
  st.version = r->version;
  st.remote = r;
  send_app_part(self, r);
}

namespace {

// The caller hears `e`, that the write is in doubt (its home has been
// unreachable for answer_after, or its shard is moving away), and the
// session's waiting commands (and every command until it is finished) are
// answered unavailable unread.
void answer_overdue(session_actor_t self, const std::shared_ptr<remote_append>& r, const error& e) {
  auto& st = self->state;
  st.remote_overdue = true;
  if (auto cb = std::exchange(r->cb, nullptr))
    cb(e);
  if (auto cb = std::exchange(r->create_cb, nullptr))
    cb(e);
  auto waiting = std::move(st.stash);
  st.stash.clear();
  for (auto& f : waiting)
    f(); // each refuses its command (command(): refusing)
}

} // namespace

void on_app_sent(session_actor_t self, app_sent& msg) {
  auto& st = self->state;
  auto r = st.remote;
  if (!r || msg.write_id != r->write_id)
    return;
  if (msg.retry) {
    send_app_part(self, r);
    return;
  }
  auto& out = *msg.outcome;
  if (!out) {
    give_forgets(*st.core, st.ref.app_name, std::move(r->forget));
    r->forget.clear();
    if (out.code() == errc::unavailable) {
      const auto& home = st.core->opts.app_home;
      if (!st.remote_overdue && std::chrono::steady_clock::now() - r->started >= home.answer_after)
        answer_overdue(
          self, r,
          error{errc::unavailable,
                "the app's home cannot be reached (" + out.err().message
                  + "); the write is in doubt: it is finished when the home answers; retry it"
                  + (r->create ? "" : " with the same event id")});
      self->delayed_send(self, home.retry, app_sent{nullptr, true, r->write_id});
      return;
    }
    fail_remote(self, r, std::move(out).err(), true);
    return;
  }
  finish_remote(self, r, out.value());
}

} // namespace agentstate::detail
