// SPDX-License-Identifier: Apache-2.0
// A6 in the session actor: an event id in flight or stored answers with that
// append's outcome (actors/session_actor.hpp); a stored one, unavailable
// while the session's range is fenced.
#include "actors/session_actor.hpp"

#include "store/reads.hpp"

namespace agentstate::detail {

namespace {

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
  if (out) {
    auto bounds = store::read_log_bounds(**txn);
    if (!bounds)
      return std::move(bounds).err();
    out->cursor = store::format_cursor(st.core->epoch, bounds->last);
  }
  return out;
}

} // namespace

bool answer_duplicate(session_actor_t self, append_cmd& cmd) {
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
  if (*found && range_fenced(*st.core, st.ref.app_name, st.ref.user_id)) {
    // Not this engine's to answer now: a replicated range whose replicas
    // may lack the stored event, or a range moving away (engine::fence_range).
    answer(self, [cb = std::move(cmd.cb)] {
      cb(error{errc::unavailable, "the shard of this session is not served here now; retry"});
    });
    return true;
  }
  if (*found) {
    st.core->stats.deduplicated.fetch_add(1, std::memory_order_relaxed);
    answer(self, [cb = std::move(cmd.cb), r = std::move(**found)]() mutable { cb(std::move(r)); });
    return true;
  }
  return false;
}

} // namespace agentstate::detail
