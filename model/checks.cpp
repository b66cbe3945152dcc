// SPDX-License-Identifier: Apache-2.0
#include "model/checks.hpp"

#include <set>
#include <utility>

#include "agentstate/scope.hpp"
#include "model/json_text.hpp"
#include "model/text.hpp"

namespace agentstate::model {

result<void> check_string(std::string_view value, const char* what, std::size_t max) {
  if (value.size() > max)
    return error{errc::too_large,
                 std::string("'") + what + "' is " + std::to_string(value.size())
                   + " bytes; the limit is " + std::to_string(max)};
  if (value.find('\0') != std::string_view::npos)
    return error{errc::invalid_argument, std::string("'") + what + "' contains a NUL byte"};
  if (!valid_utf8(value))
    return error{errc::invalid_argument, std::string("'") + what + "' is not valid UTF-8"};
  return {};
}

result<void> check_name(std::string_view value, const char* what) {
  if (value.empty())
    return error{errc::invalid_argument, std::string("'") + what + "' must not be empty"};
  return check_string(value, what, max_name_bytes);
}

result<void> normalize_ref(session_ref& r) {
  if (auto t = trim(r.session_id); t.size() != r.session_id.size())
    r.session_id = std::string(t);
  if (auto x = check_name(r.app_name, "app_name"); !x)
    return x;
  if (auto x = check_name(r.user_id, "user_id"); !x)
    return x;
  return check_name(r.session_id, "session_id");
}

result<void> check_key(const std::string& key) {
  if (is_derived(key))
    return error{errc::invalid_argument,
                 "state key '" + key
                   + "' is derived: derived: keys are computed by the "
                     "engine, not written by clients"};
  if (key.size() > max_state_key_bytes)
    return error{errc::too_large,
                 "state key '" + key.substr(0, 40) + "...' is " + std::to_string(key.size())
                   + " bytes; the limit is " + std::to_string(max_state_key_bytes)};
  return check_string(key, "state key", max_state_key_bytes);
}

result<void> check_depth(const limits& lim, const json& x, const std::string& what) {
  if (json_depth(x, lim.max_json_depth) > lim.max_json_depth)
    return error{errc::too_large,
                 what + " nests deeper than " + std::to_string(lim.max_json_depth) + " levels"};
  return {};
}

result<void> check_member_depths(const limits& lim, const json& obj, const char* what) {
  for (auto it = obj.begin(); it != obj.end(); ++it)
    if (json_depth(it.value(), lim.max_json_depth) > lim.max_json_depth) // label only then
      return check_depth(lim, it.value(), std::string(what) + " '" + it.key() + "'");
  return {};
}

result<void> check_modify(const limits& lim, const state_modify& m) {
  if (auto r = check_key(m.key); !r)
    return r;
  if (scope_of(m.key) == scope::temp)
    return error{errc::invalid_argument,
                 "modify of '" + m.key
                   + "': temp: and turn: keys belong to the invocation; "
                     "set them instead"};
  if (!m.fn)
    return error{errc::invalid_argument, "modify of '" + m.key + "' has no function"};
  if (m.expected)
    if (auto r = check_depth(lim, *m.expected, "modify expected value of '" + m.key + "'"); !r)
      return r;
  return check_depth(lim, m.fallback, "modify fallback of '" + m.key + "'");
}

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

result<void> check_initial_state(const limits& lim, const json& state) {
  if (!state.is_object())
    return error{errc::invalid_argument, "'state' must be an object"};
  for (auto it = state.begin(); it != state.end(); ++it)
    if (auto r = check_key(it.key()); !r)
      return r;
  return check_member_depths(lim, state, "state value");
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
result<void> check_not_camel(const json& members,
                             const std::pair<const char*, const char*> (&names)[N],
                             const char* where) {
  if (!members.is_object())
    return {};
  for (auto& [camel, snake] : names)
    if (members.contains(camel))
      return error{errc::invalid_argument,
                   std::string("event member '") + where + camel
                     + "' is ADK-JS camelCase: the protocol's name is '" + where + snake + "'"};
  return {};
}

} // namespace

result<void> check_event_ids(const event& ev) {
  if (auto r = check_string(ev.id, "event.id", max_event_id_bytes); !r)
    return r;
  if (auto r = check_string(ev.invocation_id, "event.invocation_id", max_event_id_bytes); !r)
    return r;
  return check_string(ev.author, "event.author", max_event_id_bytes);
}

result<void> check_invocation_id(std::string_view value, const char* what) {
  return check_string(value, what, max_event_id_bytes);
}

result<void> validate_event(const limits& lim, const event& ev) {
  if (auto r = check_not_camel(ev.extra, camel_event_members, ""); !r)
    return r;
  if (auto r = check_not_camel(ev.actions.extra, camel_action_members, "actions."); !r)
    return r;
  if (auto r = check_event_ids(ev); !r)
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
      return error{errc::invalid_argument,
                   "state key '" + k + "' is both set and removed by one event"};
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

} // namespace agentstate::model
