#include "actors/validate.hpp"

#include <algorithm>
#include <exception>

#include "agentstate/scope.hpp"
#include "model/event_text.hpp"
#include "model/ids.hpp"
#include "model/json_text.hpp"
#include "store/format.hpp"
#include "store/reads.hpp"
#include "store/records.hpp"

namespace agentstate::detail {

namespace {

result<void> check_string(std::string_view value, const char* what, std::size_t max) {
  if (value.size() > max)
    return error{errc::too_large, std::string("'") + what + "' is "
                                    + std::to_string(value.size()) + " bytes; the limit is "
                                    + std::to_string(max)};
  if (value.find('\0') != std::string_view::npos)
    return error{errc::invalid_argument, std::string("'") + what + "' contains a NUL byte"};
  if (!model::valid_utf8(value))
    return error{errc::invalid_argument, std::string("'") + what + "' is not valid UTF-8"};
  return {};
}

result<void> check_key(const std::string& key) {
  if (is_derived(key))
    return error{errc::invalid_argument, "state key '" + key
                                           + "' is derived: derived: keys are computed by the "
                                             "engine, not written by clients"};
  if (key.size() > max_state_key_bytes)
    return error{errc::too_large, "state key '" + key.substr(0, 40) + "...' is "
                                    + std::to_string(key.size())
                                    + " bytes; the limit is "
                                    + std::to_string(max_state_key_bytes)};
  return check_string(key, "state key", max_state_key_bytes);
}

// The nesting limit applies to each value a client supplies (a state value,
// content, any other member's value), not to the objects that carry them.
result<void> check_depth(const limits& lim, const json& x, const std::string& what) {
  if (json_depth(x, lim.max_json_depth) > lim.max_json_depth)
    return error{errc::too_large, what + " nests deeper than "
                                    + std::to_string(lim.max_json_depth) + " levels"};
  return {};
}

result<void> check_member_depths(const limits& lim, const json& obj, const char* what) {
  for (auto it = obj.begin(); it != obj.end(); ++it)
    if (json_depth(it.value(), lim.max_json_depth) > lim.max_json_depth) // label only then
      return check_depth(lim, it.value(), std::string(what) + " '" + it.key() + "'");
  return {};
}

// Encodes one state value; the text is what the store keeps.
result<store::state_write> encode_value(const limits& lim, std::string key,
                                        const json& value) {
  auto text = dump_json(value);
  if (!text)
    return error{errc::invalid_argument,
                 "state value of '" + key + "': " + text.err().message};
  if (text->size() > lim.max_value_bytes)
    return error{errc::too_large, "state value of '" + key + "' is "
                                    + std::to_string(text->size())
                                    + " bytes; the limit is "
                                    + std::to_string(lim.max_value_bytes)};
  return store::state_write{std::move(key), value, std::move(*text)};
}

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

result<void> check_modify(const limits& lim, const state_modify& m) {
  if (auto r = check_key(m.key); !r)
    return r;
  if (scope_of(m.key) == scope::temp)
    return error{errc::invalid_argument, "modify of '" + m.key
                                           + "': temp: and turn: keys belong to the invocation; "
                                             "set them instead"};
  if (!m.fn)
    return error{errc::invalid_argument, "modify of '" + m.key + "' has no function"};
  if (m.expected)
    if (auto r = check_depth(lim, *m.expected, "modify expected value of '" + m.key + "'"); !r)
      return r;
  return check_depth(lim, m.fallback, "modify fallback of '" + m.key + "'");
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

// Runs a host function (a modify or a derived key) and checks its result
// like a client value. Exceptions become invalid_argument.
template <class Fn>
result<json> run_host_fn(const limits& lim, const std::string& what, Fn&& fn) {
  json v;
  try {
    v = fn();
  } catch (const std::exception& e) {
    return error{errc::invalid_argument, what + " threw: " + e.what()};
  } catch (...) {
    return error{errc::invalid_argument, what + " threw a non-standard exception"};
  }
  if (auto r = check_depth(lim, v, what + "'s result"); !r)
    return std::move(r).err();
  return v;
}

// Adds the row of a value the writer resolved (prefixed key) to ws.
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
    default:
      ws.session_writes.push_back(std::move(*w));
      break;
  }
  return {};
}

// Encodes `ev` as stored into ws.event_row (at ws.time), within
// max_event_bytes (of its text).
result<void> encode_event(const limits& lim, const event& ev, store::write_set& ws) {
  auto text = model::encode_event_text(ev);
  if (!text)
    return std::move(text).err();
  if (text->size() > lim.max_event_bytes)
    return error{errc::too_large, "event is " + std::to_string(text->size())
                                    + " bytes as stored; the limit is "
                                    + std::to_string(lim.max_event_bytes)};
  ws.event_row = store::encode_event_row(ws.time, *text);
  return {};
}

} // namespace

result<void> check_derived(const std::vector<derived_key>& defs) {
  std::set<std::string> names;
  for (auto& d : defs) {
    std::string key = std::string(derived_prefix) + d.name;
    if (d.name.empty())
      return error{errc::invalid_argument, "a derived key has an empty name"};
    if (auto r = check_string(key, "derived key name", max_state_key_bytes); !r)
      return r;
    if (!names.insert(d.name).second)
      return error{errc::invalid_argument, "derived key '" + d.name + "' is registered twice"};
    if (!d.fn)
      return error{errc::invalid_argument, "derived key '" + d.name + "' has no function"};
    if (d.inputs.empty())
      return error{errc::invalid_argument, "derived key '" + d.name + "' has no inputs"};
    for (auto& in : d.inputs) {
      if (auto r = check_string(in, "derived key input", max_state_key_bytes); !r)
        return r;
      if (in.empty() || scope_of(in) == scope::temp || is_derived(in))
        return error{errc::invalid_argument,
                     "derived key '" + d.name + "': input '" + in
                       + "' must be a stored key (not empty, temp:, turn: or derived:)"};
    }
  }
  return {};
}

result<void> resolve_late(store::kv_read& txn, const engine_core& core, write_plan& plan) {
  const auto& lim = core.opts.limit;
  auto& ws = plan.ws;
  auto& late = *plan.late;
  const bool append = ws.op == store::write_set::kind::append;
  const json& delta = late.ev.actions.state_delta;
  const auto& removes = late.ev.actions.state_remove;
  // The value `key` has once this write set's own rows and earlier resolved
  // values are applied.
  auto current = [&](const std::string& key) -> result<std::optional<json>> {
    if (auto it = late.added.find(key); it != late.added.end())
      return std::optional<json>{*it};
    if (append) {
      if (auto it = delta.find(key); it != delta.end())
        return std::optional<json>{*it};
      if (std::binary_search(removes.begin(), removes.end(), key))
        return std::optional<json>{};
    } else {
      const auto* rows = &ws.session_writes;
      auto s = scope_of(key);
      if (s == scope::user)
        rows = &ws.user_writes;
      else if (s == scope::app)
        rows = &ws.app_writes;
      auto name = s == scope::session ? std::string_view(key) : unprefixed(key);
      for (auto& w : *rows)
        if (w.key == name)
          return std::optional<json>{w.value};
    }
    return store::read_state_value(txn, ws.app, ws.user, ws.id, key);
  };
  std::set<std::string> changed;
  for (auto& m : late.modify) {
    auto cur = current(m.key);
    if (!cur)
      return std::move(cur).err();
    if (m.expected && (!*cur || **cur != *m.expected))
      return error{errc::condition_failed,
                   "compare_and_set of '" + m.key + "': the key "
                     + (*cur ? "holds another value" : "is missing") + "; nothing was stored"};
    const json& in = *cur ? **cur : m.fallback;
    auto v = run_host_fn(lim, "modify of '" + m.key + "'", [&] { return m.fn(in); });
    if (!v)
      return std::move(v).err();
    late.added[m.key] = std::move(*v);
    changed.insert(m.key);
  }
  if (late.derive) {
    if (append) {
      for (auto it = delta.begin(); it != delta.end(); ++it)
        changed.insert(it.key());
      changed.insert(removes.begin(), removes.end());
    } else {
      for (auto& w : ws.session_writes)
        changed.insert(w.key);
      for (auto& w : ws.user_writes)
        changed.insert(std::string(user_prefix) + w.key);
      for (auto& w : ws.app_writes)
        changed.insert(std::string(app_prefix) + w.key);
    }
    for (auto& d : core.opts.derived) {
      bool hit = false;
      for (auto& in : d.inputs)
        hit = hit || changed.count(in) > 0;
      if (!hit)
        continue;
      json inputs = json::object();
      for (auto& in : d.inputs) {
        auto cur = current(in);
        if (!cur)
          return std::move(cur).err();
        if (*cur)
          inputs[in] = std::move(**cur);
      }
      auto v = run_host_fn(lim, "derived key '" + d.name + "'", [&] { return d.fn(inputs); });
      if (!v)
        return std::move(v).err();
      late.added[std::string(derived_prefix) + d.name] = std::move(*v);
    }
  }
  for (auto it = late.added.begin(); it != late.added.end(); ++it)
    if (auto r = add_resolved_row(lim, ws, it.key(), it.value()); !r)
      return r;
  if (!append)
    return {};
  auto& ev = late.ev;
  for (auto it = late.added.begin(); it != late.added.end(); ++it) {
    ev.actions.state_delta[it.key()] = it.value();
    auto& rm = ev.actions.state_remove;
    if (auto p = std::lower_bound(rm.begin(), rm.end(), it.key());
        p != rm.end() && *p == it.key())
      rm.erase(p);
  }
  return encode_event(lim, ev, ws);
}

result<void> check_name(std::string_view value, const char* what) {
  if (value.empty())
    return error{errc::invalid_argument, std::string("'") + what + "' must not be empty"};
  return check_string(value, what, max_name_bytes);
}

result<void> check_ref(const session_ref& r) {
  if (auto x = check_name(r.app_name, "app_name"); !x)
    return x;
  if (auto x = check_name(r.user_id, "user_id"); !x)
    return x;
  return check_name(r.session_id, "session_id");
}

namespace {

// Members ADK-JS spells in camelCase where the protocol interprets the
// snake_case name. Stored as unknown members they would carry no state, so
// an event holding one is refused, naming the member to use.
constexpr std::pair<const char*, const char*> camel_event_members[] = {
  {"invocationId", "invocation_id"},
};
constexpr std::pair<const char*, const char*> camel_action_members[] = {
  {"stateDelta", "state_delta"},
  {"artifactDelta", "artifact_delta"},
  {"stateRemove", "state_remove"},
};

template <std::size_t N>
result<void> check_not_camel(const json& members, const std::pair<const char*, const char*> (&names)[N],
                             const char* where) {
  if (!members.is_object())
    return {};
  for (auto& [camel, snake] : names)
    if (members.contains(camel))
      return error{errc::invalid_argument, std::string("event member '") + where + camel
                                             + "' is ADK-JS camelCase: the protocol's name is '"
                                             + where + snake + "'"};
  return {};
}

} // namespace

result<void> validate_event(const limits& lim, const event& ev) {
  if (auto r = check_not_camel(ev.extra, camel_event_members, ""); !r)
    return r;
  if (auto r = check_not_camel(ev.actions.extra, camel_action_members, "actions."); !r)
    return r;
  if (auto r = check_string(ev.id, "event.id", max_event_id_bytes); !r)
    return r;
  if (auto r = check_string(ev.invocation_id, "event.invocation_id", max_event_id_bytes); !r)
    return r;
  if (ev.timestamp && !std::isfinite(*ev.timestamp))
    return error{errc::invalid_argument, "'event.timestamp' must be finite"};
  if (!ev.actions.state_delta.is_object())
    return error{errc::invalid_argument, "'actions.state_delta' must be an object"};
  if (!ev.actions.artifact_delta.is_object())
    return error{errc::invalid_argument, "'actions.artifact_delta' must be an object"};
  for (auto it = ev.actions.state_delta.begin(); it != ev.actions.state_delta.end(); ++it)
    if (auto r = check_key(it.key()); !r)
      return r;
  for (auto& k : ev.actions.state_remove) {
    if (auto r = check_key(k); !r)
      return r;
    if (ev.actions.state_delta.contains(k))
      return error{errc::invalid_argument, "state key '" + k
                                             + "' is both set and removed by one event"};
  }
  if (auto r = check_member_depths(lim, ev.actions.state_delta, "state value"); !r)
    return r;
  if (auto r = check_member_depths(lim, ev.actions.artifact_delta, "artifact_delta value"); !r)
    return r;
  if (auto r = check_member_depths(lim, ev.actions.extra, "actions member"); !r)
    return r;
  if (auto r = check_member_depths(lim, ev.extra, "event member"); !r)
    return r;
  if (ev.content)
    return check_depth(lim, *ev.content, "event.content");
  return {};
}

result<write_plan> prepare_create(const engine_core& core, const create_request& req) {
  const auto& lim = core.opts.limit;
  if (!req.state.is_object())
    return error{errc::invalid_argument, "'state' must be an object"};
  for (auto it = req.state.begin(); it != req.state.end(); ++it)
    if (auto r = check_key(it.key()); !r)
      return std::move(r).err();
  if (auto r = check_member_depths(lim, req.state, "state value"); !r)
    return std::move(r).err();
  write_plan plan;
  auto& ws = plan.ws;
  ws.op = store::write_set::kind::create;
  ws.app = req.app_name;
  ws.user = req.user_id;
  ws.id = req.session_id;
  ws.time = model::now_seconds();
  auto parts = partition_delta(req.state);
  if (auto r = encode_rows(lim, parts, ws); !r)
    return std::move(r).err();
  if (ws.bytes() > lim.max_state_bytes)
    return error{errc::too_large, "initial state is about " + std::to_string(ws.bytes())
                                    + " bytes; the limit is "
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

result<prepared_append> prepare_append(const engine_core& core, const session_ref& r,
                                       event&& ev, std::uint64_t version,
                                       std::vector<state_modify>&& modify) {
  const auto& lim = core.opts.limit;
  prepared_append out;
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
      case scope::session:
        ws.session_writes.push_back({*it, json(), {}, true});
        break;
    }
    ++it;
  }
  for (auto it = delta.begin(); it != delta.end(); ++it) {
    const std::string& key = it.key();
    auto text = dump_json(it.value());
    if (!text)
      return error{errc::invalid_argument, "state value of '" + key + "': " + text.err().message};
    if (text->size() > lim.max_value_bytes)
      return error{errc::too_large, "state value of '" + key + "' is "
                                      + std::to_string(text->size()) + " bytes; the limit is "
                                      + std::to_string(lim.max_value_bytes)};
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
  ws.op = store::write_set::kind::append;
  ws.app = r.app_name;
  ws.user = r.user_id;
  ws.id = r.session_id;
  ws.version = version;
  ws.time = *ev.timestamp;
  if (!modify.empty() || touches_derived(core, delta, removes)
      || (!core.derived_inputs.empty() && std::any_of(modify.begin(), modify.end(),
                                                      [&](const state_modify& m) {
                                                        return core.derived_inputs.count(m.key) > 0;
                                                      }))) {
    // The writer finishes this one (resolve_late) and encodes the event.
    for (auto& m : modify)
      if (auto c = check_modify(lim, m); !c)
        return std::move(c).err();
    auto& late = out.plan.late = std::make_shared<late_binding>();
    late->ev = std::move(ev);
    late->modify = std::move(modify);
    late->derive = !core.derived_inputs.empty();
    out.stored = late->ev; // provisional: the writer's result replaces it
    return out;
  }
  out.stored = std::move(ev);
  if (auto r = encode_event(lim, out.stored, ws); !r)
    return std::move(r).err();
  return out;
}

} // namespace agentstate::detail
