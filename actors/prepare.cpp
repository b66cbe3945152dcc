// SPDX-License-Identifier: Apache-2.0
#include "actors/prepare.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "agentstate/scope.hpp"
#include "model/checks.hpp"
#include "model/event_text.hpp"
#include "model/ids.hpp"
#include "store/keys.hpp"
#include "store/records.hpp"

namespace agentstate::detail {

namespace {

// Fills ws's rows from a delta already split by scope.
result<void> encode_rows(const limits& lim, const scoped_delta& d, store::write_set& ws) {
  auto fill = [&](const json& part, std::vector<store::state_write>& out) -> result<void> {
    for (auto it = part.begin(); it != part.end(); ++it) {
      auto w = encode_value(lim, it.key(), it.value());
      if (!w)
        return std::move(w).err();
      out.push_back(std::move(*w));
    }
    return {};
  };
  if (auto r = fill(d.session, ws.session_writes); !r)
    return r;
  if (auto r = fill(d.user, ws.user_writes); !r)
    return r;
  return fill(d.app, ws.app_writes);
}

bool touches_derived(const engine_core& core, const json& delta,
                     const std::vector<std::string>& removes) {
  if (core.derived_inputs.empty())
    return false;
  for (auto it = delta.begin(); it != delta.end(); ++it)
    if (core.derived_inputs.count(it.key()))
      return true;
  for (auto& k : removes)
    if (core.derived_inputs.count(k))
      return true;
  return false;
}

// The stored text of one state value; invalid_argument when it cannot be
// dumped (invalid UTF-8), too_large beyond limits::max_value_bytes.
result<std::string> value_text(const limits& lim, const std::string& key, const json& value) {
  auto text = dump_json(value);
  if (!text)
    return error{errc::invalid_argument, "state value of '" + key + "': " + text.err().message};
  if (text->size() > lim.max_value_bytes)
    return error{errc::too_large,
                 "state value of '" + key + "' is " + std::to_string(text->size())
                   + " bytes; the limit is " + std::to_string(lim.max_value_bytes)};
  return std::move(*text);
}

} // namespace

result<store::state_write> encode_value(const limits& lim, std::string key, const json& value) {
  auto text = value_text(lim, key, value);
  if (!text)
    return std::move(text).err();
  return store::state_write{std::move(key), value, std::move(*text)};
}

result<void> add_resolved_row(const limits& lim, store::write_set& ws, const std::string& key,
                              const json& value) {
  auto w = encode_value(lim, key, value);
  if (!w)
    return std::move(w).err();
  switch (scope_of(key)) {
    case scope::user:
      w->key = std::string(unprefixed(key));
      ws.user_writes.push_back(std::move(*w));
      break;
    case scope::app:
      w->key = std::string(unprefixed(key));
      ws.app_writes.push_back(std::move(*w));
      break;
    default: ws.session_writes.push_back(std::move(*w)); break;
  }
  return {};
}

result<std::string> encode_event(const limits& lim, const event& ev, store::write_set& ws) {
  auto text = model::encode_event_text(ev);
  if (!text)
    return std::move(text).err();
  if (text->size() > lim.max_event_bytes)
    return error{errc::too_large,
                 "event is " + std::to_string(text->size()) + " bytes as stored; the limit is "
                   + std::to_string(lim.max_event_bytes)};
  ws.event_row = store::encode_event_row(
    store::event_key(store::session_key(ws.app, ws.user, ws.id), ws.version), ws.time, *text);
  return text;
}

namespace {

/// invalid_argument when the engine refuses `app:` writes
/// (options::app_scope_writes) and the plan or its modify ops hold one.
result<void> check_app_writes(const engine_core& core, const store::write_set& ws,
                              const std::vector<state_modify>& modify) {
  if (core.opts.app_scope_writes)
    return {};
  bool any = !ws.app_writes.empty()
    || std::any_of(modify.begin(), modify.end(),
                   [](const state_modify& m) { return scope_of(m.key) == scope::app; });
  if (!any)
    return {};
  return error{errc::invalid_argument,
               "this engine does not take writes of app: keys (a cluster node: app: state is "
               "not yet kept across shards)"};
}

} // namespace

result<write_plan> prepare_create(const engine_core& core, const create_request& req) {
  const auto& lim = core.opts.limits;
  if (auto r = model::check_initial_state(lim, req.state); !r)
    return std::move(r).err();
  write_plan plan;
  auto& ws = plan.ws;
  ws.op = store::write_set::kind::create;
  ws.app = req.app_name;
  ws.user = req.user_id;
  ws.id = req.session_id;
  ws.time = wall_now(core);
  // T1/T2: the expiry and the refresh the record keeps.
  double ttl =
    req.ttl_s ? *req.ttl_s : std::chrono::duration<double>(core.opts.default_session_ttl).count();
  if (!std::isfinite(ttl) || ttl < 0 || ttl > max_ttl_s)
    return error{errc::invalid_argument,
                 "'ttl_s' must be a number of seconds from 0 (never expires) to "
                   + std::to_string(static_cast<std::uint64_t>(max_ttl_s))};
  const bool refresh = req.refresh_ttl.value_or(core.opts.refresh_ttl_on_append);
  if (req.refresh_ttl.value_or(false) && ttl == 0)
    return error{errc::invalid_argument, "'refresh_ttl' needs a 'ttl_s' above 0"};
  if (ttl > 0) {
    ws.expires = ws.time + ttl;
    ws.refresh = refresh ? ttl : 0;
  }
  auto parts = partition_delta(req.state);
  if (auto r = encode_rows(lim, parts, ws); !r)
    return std::move(r).err();
  if (auto r = check_app_writes(core, ws, {}); !r)
    return std::move(r).err();
  if (ws.bytes() > lim.max_state_bytes)
    return error{errc::too_large,
                 "initial state is about " + std::to_string(ws.bytes()) + " bytes; the limit is "
                   + std::to_string(lim.max_state_bytes)};
  json no_delta = json::object();
  std::vector<std::string> keys;
  for (auto it = req.state.begin(); it != req.state.end(); ++it)
    keys.push_back(it.key());
  if (touches_derived(core, no_delta, keys)) {
    plan.late = std::make_shared<late_binding>();
    plan.late->derive = true;
  }
  return plan;
}

result<prepared_append> prepare_append(const engine_core& core, const session_ref& r, event&& in,
                                       std::uint64_t version, std::vector<state_modify>&& modify) {
  const auto& lim = core.opts.limits;
  // The event is taken apart in place: no default event is built and
  // replaced (its four JSON objects are four heap blocks).
  prepared_append out{{}, std::move(in), json(), {}, {}};
  event& ev = out.stored;
  auto& ws = out.plan.ws;
  // temp: keys leave the delta here (A3); the rest is encoded row by row.
  json& delta = ev.actions.state_delta;
  std::size_t rows[4] = {}; // by scope, so each row vector allocates once
  for (auto it = delta.begin(); it != delta.end();) {
    auto sc = scope_of(it.key());
    if (sc == scope::temp) {
      out.temp[it.key()] = std::move(it.value());
      it = delta.erase(it);
    } else {
      ++rows[static_cast<std::size_t>(sc)];
      ++it;
    }
  }
  ws.session_writes.reserve(rows[static_cast<std::size_t>(scope::session)]);
  ws.user_writes.reserve(rows[static_cast<std::size_t>(scope::user)]);
  ws.app_writes.reserve(rows[static_cast<std::size_t>(scope::app)]);
  // Removes: temp: ones are the invocation's; the rest become erased rows.
  auto& removes = ev.actions.state_remove;
  std::sort(removes.begin(), removes.end());
  removes.erase(std::unique(removes.begin(), removes.end()), removes.end());
  for (auto it = removes.begin(); it != removes.end();) {
    switch (scope_of(*it)) {
      case scope::temp:
        out.temp_removed.push_back(std::move(*it));
        it = removes.erase(it);
        continue;
      case scope::user:
        ws.user_writes.push_back({std::string(unprefixed(*it)), json(), {}, true});
        break;
      case scope::app:
        ws.app_writes.push_back({std::string(unprefixed(*it)), json(), {}, true});
        break;
      case scope::session: ws.session_writes.push_back({*it, json(), {}, true}); break;
    }
    ++it;
  }
  for (auto it = delta.begin(); it != delta.end(); ++it) {
    const std::string& key = it.key();
    auto text = value_text(lim, key, it.value());
    if (!text)
      return std::move(text).err();
    switch (scope_of(key)) {
      case scope::user:
        ws.user_writes.push_back({std::string(unprefixed(key)), it.value(), std::move(*text)});
        break;
      case scope::app:
        ws.app_writes.push_back({std::string(unprefixed(key)), it.value(), std::move(*text)});
        break;
      default: // session rows need no value: nothing is notified of them
        ws.session_writes.push_back({key, json(), std::move(*text)});
        break;
    }
  }
  if (auto c = check_app_writes(core, ws, modify); !c)
    return std::move(c).err();
  ws.op = store::write_set::kind::append;
  ws.app = r.app_name;
  ws.user = r.user_id;
  ws.id = r.session_id;
  ws.version = version;
  ws.time = *ev.timestamp;
  if (!modify.empty() || touches_derived(core, delta, removes)
      || (!core.derived_inputs.empty()
          && std::any_of(modify.begin(), modify.end(), [&](const state_modify& m) {
               return core.derived_inputs.count(m.key) > 0;
             }))) {
    // The writer finishes this one (resolve_late) and encodes the event.
    for (auto& m : modify)
      if (auto c = model::check_modify(lim, m); !c)
        return std::move(c).err();
    auto& late = out.plan.late = std::make_shared<late_binding>();
    late->ev = ev; // out.stored stays, provisional: the writer's result replaces it
    late->modify = std::move(modify);
    late->derive = !core.derived_inputs.empty();
    return out;
  }
  auto text = encode_event(lim, ev, ws);
  if (!text)
    return std::move(text).err();
  out.text = std::move(*text);
  return out;
}

} // namespace agentstate::detail
