// SPDX-License-Identifier: Apache-2.0
// The session actor's invocation lease (begins granted one at a time, first
// come first served) and the live invocation's temp: state
// (actors/session_actor.hpp).
#include "actors/session_actor.hpp"

#include "store/reads.hpp"

namespace agentstate::detail {

const json* live_temp(const session_state& st, const std::string& invocation_id) {
  return !invocation_id.empty() && invocation_id == st.invocation ? &st.temp : nullptr;
}

result<std::optional<session>> read_live(session_actor_t self, const get_request& req,
                                         std::size_t max_bytes) {
  auto& st = self->state;
  auto r = store::read_session(*st.core->kv, req, max_bytes, wall_now(*st.core), st.core->epoch);
  if (const json* temp = live_temp(st, req.invocation_id); temp && r && *r)
    for (auto t = temp->begin(); t != temp->end(); ++t)
      (**r).state[t.key()] = t.value();
  return r;
}

namespace {

/// Grants the lease to `w` (answered at its turn, so the reply sees every
/// append accepted before the grant): the session without events, with the
/// invocation's temp: keys.
void grant(session_actor_t self, lease_waiter w) {
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
  if (w.then) {
    w.then();
    return;
  }
  answer(self, [self, w = std::move(w)]() mutable {
    get_request req;
    req.ref = self->state.ref;
    req.num_recent_events = 0;
    req.invocation_id = std::move(w.invocation_id);
    auto r = read_live(self, req, SIZE_MAX); // no events: nothing to bound
    if (!r)
      return w.cb(std::move(r).err());
    if (!*r)
      return w.cb(error{errc::not_found, "session '" + req.ref.session_id + "' not found"});
    w.cb(std::move(**r));
  });
}

/// Hands a free lease to the first waiter that can take it.
void grant_next(session_actor_t self) {
  auto& st = self->state;
  while (st.lease.empty() && !st.waiters.empty()) {
    auto w = std::move(st.waiters.front());
    st.waiters.pop_front();
    grant(self, std::move(w));
  }
}

} // namespace

void on_begin_invocation(session_actor_t self, begin_invocation_cmd& cmd) {
  auto& st = self->state;
  if (!ensure_loaded(self, cmd.cb))
    return;
  if (!st.lease.empty() && st.lease != cmd.invocation_id) {
    st.waiters.push_back({std::move(cmd.invocation_id), std::move(cmd.cb), {}});
    return;
  }
  grant(self, {std::move(cmd.invocation_id), std::move(cmd.cb), {}});
}

void take_lease(session_actor_t self, std::string invocation_id, std::function<void()> then,
                callback<session> cb) {
  auto& st = self->state;
  lease_waiter w{std::move(invocation_id), std::move(cb), std::move(then)};
  if (!st.lease.empty() && st.lease != w.invocation_id) {
    st.waiters.push_back(std::move(w));
    return;
  }
  grant(self, std::move(w));
}

void release_lease(session_actor_t self, const std::string& invocation_id) {
  auto& st = self->state;
  if (invocation_id.empty())
    return;
  if (invocation_id == st.invocation) {
    st.invocation.clear();
    st.temp = json::object();
  }
  if (invocation_id == st.lease) {
    st.lease.clear();
    grant_next(self);
  }
}

// Answered at its turn: appends of the ending invocation accepted before it
// are acknowledged first, so none can bring its temp: state back.
void on_end_invocation(session_actor_t self, end_invocation_cmd& cmd) {
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

} // namespace agentstate::detail
