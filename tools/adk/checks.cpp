// SPDX-License-Identifier: Apache-2.0
#include "tools/adk/checks.hpp"

#include "agentstate/types.hpp"
#include "model/checks.hpp"
#include "model/json_text.hpp"

namespace agentstate::tools::adk {

std::optional<std::string> string_problem(std::string_view v, const char* what, std::size_t max) {
  if (v.size() > max)
    return std::string(what) + " is " + std::to_string(v.size()) + " bytes; the limit is "
      + std::to_string(max);
  if (v.find('\0') != std::string_view::npos)
    return std::string(what) + " contains a NUL byte";
  if (!model::valid_utf8(v))
    return std::string(what) + " is not valid UTF-8";
  return std::nullopt;
}

std::optional<std::string> name_problem(std::string_view v, const char* what) {
  if (v.empty())
    return std::string(what) + " is empty";
  return string_problem(v, what, max_name_bytes);
}

std::optional<std::string> key_problem(const std::string& key) {
  return string_problem(key, "the state key", max_state_key_bytes);
}

std::optional<std::string> depth_problem(const json& v, const std::string& what) {
  if (json_depth(v, default_limits.max_json_depth) > default_limits.max_json_depth)
    return what + " nests deeper than " + std::to_string(default_limits.max_json_depth) + " levels";
  return std::nullopt;
}

std::optional<std::string> value_problem(const json& v) {
  if (auto p = depth_problem(v, "the value"))
    return p;
  auto text = dump_json(v);
  if (!text)
    return "the value: " + text.err().message;
  if (text->size() > default_limits.max_value_bytes)
    return "the value is " + std::to_string(text->size()) + " bytes as JSON; the limit is "
      + std::to_string(default_limits.max_value_bytes);
  return std::nullopt;
}

std::optional<std::string> members_depth_problem(const json& obj, const std::string& what) {
  if (!obj.is_object())
    return std::nullopt;
  for (auto it = obj.begin(); it != obj.end(); ++it)
    if (auto p = depth_problem(it.value(), what + " '" + it.key() + "'"))
      return p;
  return std::nullopt;
}

// The checks of validate_event, and the stored size, of the event JSON `e`
// as import_store will store it.
std::optional<std::string> event_problem(const json& e) {
  auto ev = event_from_json(e);
  if (!ev)
    return ev.err().message;
  if (ev->id.empty())
    return "the event has no id";
  if (auto p = string_problem(ev->id, "the event id", max_event_id_bytes))
    return p;
  if (auto r = model::check_event_ids(*ev); !r) // the engine's one rule for ids
    return r.err().message;
  if (!ev->timestamp)
    return "the event has no timestamp";
  for (auto it = ev->actions.state_delta.begin(); it != ev->actions.state_delta.end(); ++it)
    if (auto p = string_problem(it.key(), "a state_delta key", max_state_key_bytes))
      return p;
  for (auto& k : ev->actions.state_remove)
    if (auto p = string_problem(k, "a state_remove key", max_state_key_bytes))
      return p;
  if (auto p = members_depth_problem(ev->actions.state_delta, "state value"))
    return p;
  if (auto p = members_depth_problem(ev->actions.artifact_delta, "artifact_delta value"))
    return p;
  if (auto p = members_depth_problem(ev->actions.extra, "actions member"))
    return p;
  if (auto p = members_depth_problem(ev->extra, "event member"))
    return p;
  if (ev->content)
    if (auto p = depth_problem(*ev->content, "content"))
      return p;
  auto text = dump_json(e);
  if (!text)
    return text.err().message;
  if (text->size() > default_limits.max_event_bytes)
    return "the event is " + std::to_string(text->size()) + " bytes as stored JSON; the limit is "
      + std::to_string(default_limits.max_event_bytes);
  return std::nullopt;
}

bool is_temp_key(const std::string& k) {
  return k.compare(0, 5, "temp:") == 0;
}

} // namespace agentstate::tools::adk
