// SPDX-License-Identifier: Apache-2.0
#include "store/history.hpp"

#include <algorithm>
#include <functional>
#include <set>
#include <unordered_map>

#include "agentstate/scope.hpp"
#include "store/errors.hpp"
#include "store/keys.hpp"
#include "store/reads.hpp"
#include "store/records.hpp"

namespace agentstate::store {

namespace {

// Calls fn(version, event JSON) for events 1..upto of session `skey`, oldest
// first, each checked and parsed, while fn answers true.
result<void> for_each_event(kv_read& txn, std::string_view skey, std::uint64_t upto,
                            const std::function<result<bool>(std::uint64_t, json&)>& fn) {
  return scan_event_bodies(txn, skey, upto,
                           [&](std::uint64_t v, std::string_view body) -> result<bool> {
                             auto ev = parse_stored(event_body_text(body));
                             if (!ev)
                               return std::move(ev).err();
                             return fn(v, *ev);
                           });
}

const json* field_of(const json& x, const char* name) {
  if (!x.is_object())
    return nullptr;
  auto it = x.find(name);
  return it == x.end() ? nullptr : &*it;
}

// Applies an event's session-scope sets and removes to `state`, and records
// the keys it touches in `touched` (when given).
void replay(const json& ev, json& state, std::set<std::string>* touched) {
  const json* actions = field_of(ev, "actions");
  if (!actions)
    return;
  if (const json* delta = field_of(*actions, "state_delta"); delta && delta->is_object())
    for (auto it = delta->begin(); it != delta->end(); ++it) {
      if (scope_of(it.key()) != scope::session || it.key().rfind(turn_prefix, 0) == 0)
        continue;
      state[it.key()] = it.value();
      if (touched)
        touched->insert(it.key());
    }
  if (const json* rm = field_of(*actions, "state_remove"); rm && rm->is_array())
    for (auto& k : *rm) {
      if (!k.is_string())
        continue;
      auto& key = k.get_ref<const std::string&>();
      if (scope_of(key) != scope::session || key.rfind(turn_prefix, 0) == 0)
        continue;
      state.erase(key);
      if (touched)
        touched->insert(key);
    }
}

rewind_mark mark_of(const json& ev) {
  rewind_mark m;
  const json* actions = field_of(ev, "actions");
  if (!actions)
    return m;
  if (const json* inv = field_of(*actions, "rewind_before_invocation_id"); inv && inv->is_string())
    m.before_invocation_id = inv->get<std::string>();
  if (const json* v = field_of(*actions, "rewind_before_version"); v && v->is_number_unsigned())
    m.before_version = v->get<std::uint64_t>();
  return m;
}

} // namespace

std::string origin_body(const std::vector<state_write>& rows) {
  std::string out = "{";
  bool first = true;
  for (auto& w : rows) {
    if (w.erase)
      continue;
    if (!first)
      out += ',';
    first = false;
    out += json(w.key).dump();
    out += ':';
    out += w.text;
  }
  out += '}';
  return out;
}

result<std::optional<std::string>> read_origin(kv_read& txn, std::string_view skey) {
  try {
    auto raw = txn.get(table::origins, skey);
    if (!raw)
      return std::optional<std::string>{};
    auto body = open_row(table::origins, skey, *raw, txn.legacy_values());
    if (!body)
      return damaged(table::origins, skey);
    return std::optional<std::string>{std::string(*body)};
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

namespace {

// What replay_until found: the own state before the point, and the version
// of the event the point is before (0: the point is after event `upto`).
struct replayed {
  past_state past;
  std::uint64_t stopped_at = 0;
};

// The own state of session `skey` (record version `head`) just before the
// first event of 1..upto that `stop` accepts, or after event `upto` when
// none does, in one pass over the events. Without an origin row the pass
// goes on to the head, to find the keys no event touched.
result<replayed> replay_until(kv_read& txn, std::string_view skey, std::uint64_t head,
                              std::uint64_t upto,
                              const std::function<bool(std::uint64_t, const json&)>& stop) {
  replayed out;
  auto& state = out.past.state;
  auto origin = read_origin(txn, skey);
  if (!origin)
    return std::move(origin).err();
  if (*origin) {
    auto o = parse_stored(**origin);
    if (!o)
      return std::move(o).err();
    if (!o->is_object())
      return damaged(table::origins, skey);
    state = std::move(*o);
  }
  const bool exact = origin->has_value();
  out.past.exact = exact;
  std::set<std::string> touched;
  json scratch = json::object();
  auto r =
    for_each_event(txn, skey, exact ? upto : head, [&](std::uint64_t v, json& ev) -> result<bool> {
      if (!out.stopped_at && v <= upto && stop(v, ev)) {
        out.stopped_at = v;
        if (exact)
          return false;
      }
      const bool before = !out.stopped_at && v <= upto;
      if (exact)
        replay(ev, state, nullptr);
      else
        replay(ev, before ? state : scratch, &touched);
      return true;
    });
  if (!r)
    return std::move(r).err();
  if (!exact) {
    // No origin row: a key no event ever touched was there from creation.
    auto now = read_rows(txn, table::session_state, std::string(skey) + '\0');
    if (!now)
      return std::move(now).err();
    for (auto it = now->begin(); it != now->end(); ++it)
      if (!touched.count(it.key()))
        state[it.key()] = std::move(it.value());
  }
  return out;
}

} // namespace

result<past_state> state_at(kv_read& txn, std::string_view skey, std::uint64_t head,
                            std::uint64_t version) {
  try {
    auto r =
      replay_until(txn, skey, head, version, [](std::uint64_t, const json&) { return false; });
    if (!r)
      return std::move(r).err();
    return std::move(r->past);
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

std::vector<event_fate> rewind_fates(const std::vector<std::string>& invocation_ids,
                                     const std::vector<rewind_mark>& marks) {
  const std::size_t n = invocation_ids.size();
  std::vector<event_fate> fate(n, event_fate::kept);
  std::unordered_map<std::string_view, std::size_t> first;
  for (std::size_t i = 0; i < n; ++i)
    first.emplace(invocation_ids[i], i);
  // ADK's backward scan: a marker at i jumps back to the first event of the
  // invocation it names (when that is before i); what it jumps over is out.
  std::size_t i = n;
  while (i-- > 0) {
    const auto& m = marks[i];
    if (!m.is_rewind())
      continue;
    fate[i] = event_fate::marker;
    std::size_t to = i;
    if (!m.before_invocation_id.empty()) {
      auto it = first.find(m.before_invocation_id);
      if (it != first.end() && it->second < i)
        to = it->second;
    } else if (m.before_version - 1 < i) {
      to = static_cast<std::size_t>(m.before_version - 1);
    }
    for (std::size_t j = to; j < i; ++j)
      fate[j] = event_fate::annulled;
    i = to;
  }
  return fate;
}

result<log_outline> read_outline(kv_read& txn, std::string_view skey, std::uint64_t upto) {
  try {
    log_outline out;
    auto r = for_each_event(txn, skey, upto, [&](std::uint64_t, json& ev) -> result<bool> {
      const json* inv = field_of(ev, "invocation_id");
      out.invocation_ids.push_back(inv && inv->is_string() ? inv->get<std::string>()
                                                           : std::string());
      out.marks.push_back(mark_of(ev));
      return true;
    });
    if (!r)
      return std::move(r).err();
    return out;
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

std::vector<invocation_info> invocation_spans(const log_outline& outline) {
  auto fate = rewind_fates(outline.invocation_ids, outline.marks);
  std::vector<invocation_info> out;
  std::unordered_map<std::string_view, std::size_t> at;
  for (std::size_t i = 0; i < fate.size(); ++i) {
    const auto& id = outline.invocation_ids[i];
    auto [it, fresh] = at.emplace(id, out.size());
    if (fresh) {
      invocation_info s;
      s.invocation_id = id;
      s.first_version = i + 1;
      s.annulled = true;
      out.push_back(std::move(s));
    }
    auto& s = out[it->second];
    s.last_version = i + 1;
    ++s.events;
    if (fate[i] != event_fate::annulled)
      s.annulled = false;
    if (outline.marks[i].is_rewind())
      s.rewind = true;
  }
  return out;
}

result<rewind_changes> plan_rewind(kv_read& txn, std::string_view skey, std::uint64_t head,
                                   const rewind_request& target) {
  try {
    const bool by_id = !target.before_invocation_id.empty();
    if (by_id == (target.before_version != 0))
      return error{errc::invalid_argument,
                   "a rewind names exactly one of before_invocation_id and before_version"};
    rewind_changes out;
    if (!by_id && target.before_version > head)
      return error{errc::invalid_argument,
                   "before_version " + std::to_string(target.before_version)
                     + " is past the session's version " + std::to_string(head)};
    // One pass: the point is found (before an invocation's first event) as
    // the state before it is replayed.
    auto at_point = [&](std::uint64_t v, const json& ev) {
      if (!by_id)
        return v == target.before_version;
      const json* inv = field_of(ev, "invocation_id");
      return inv && inv->is_string()
        && inv->get_ref<const std::string&>() == target.before_invocation_id;
    };
    auto found = replay_until(txn, skey, head, by_id ? head : target.before_version, at_point);
    if (!found)
      return std::move(found).err();
    if (!found->stopped_at && !by_id) // events are contiguous up to the record's version
      return damaged(table::events, event_key(skey, target.before_version));
    if (!found->stopped_at)
      return error{errc::invalid_argument,
                   "invocation '" + printable(target.before_invocation_id)
                     + "' has no event in this session"};
    out.before_version = found->stopped_at;
    auto* past = &found->past;
    out.exact = past->exact;
    auto now = read_rows(txn, table::session_state, std::string(skey) + '\0');
    if (!now)
      return std::move(now).err();
    auto derived = [](const std::string& k) { return k.rfind(derived_prefix, 0) == 0; };
    for (auto it = past->state.begin(); it != past->state.end(); ++it) {
      if (derived(it.key()))
        continue;
      auto cur = now->find(it.key());
      if (cur == now->end() || *cur != it.value())
        out.state_delta[it.key()] = it.value();
    }
    for (auto it = now->begin(); it != now->end(); ++it)
      if (!derived(it.key()) && !past->state.contains(it.key()))
        out.state_remove.push_back(it.key());
    std::sort(out.state_remove.begin(), out.state_remove.end());
    return out;
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

} // namespace agentstate::store
