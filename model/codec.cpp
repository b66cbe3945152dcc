// SPDX-License-Identifier: Apache-2.0
// JSON codec of the public types (docs/protocol.md "Objects").
#include "agentstate/types.hpp"
#include "agentstate/watch.hpp"

#include <cmath>

namespace agentstate {

namespace {

error bad(const std::string& what) {
  return error{errc::invalid_argument, what};
}

// Reads an optional string member; null counts as absent.
bool read_string(const json& obj, const char* name, std::string& out, std::optional<error>& err) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null())
    return false;
  if (!it->is_string()) {
    err = bad(std::string("'") + name + "' must be a string");
    return false;
  }
  out = it->get<std::string>();
  return true;
}

} // namespace

json to_json(const event& x) {
  json out = json::object();
  out["id"] = x.id;
  out["invocation_id"] = x.invocation_id;
  out["author"] = x.author;
  if (x.timestamp)
    out["timestamp"] = *x.timestamp;
  if (x.partial)
    out["partial"] = *x.partial;
  if (x.content)
    out["content"] = *x.content;
  json actions = x.actions.extra.is_object() ? x.actions.extra : json::object();
  actions["state_delta"] = x.actions.state_delta;
  if (!x.actions.state_remove.empty())
    actions["state_remove"] = x.actions.state_remove;
  actions["artifact_delta"] = x.actions.artifact_delta;
  out["actions"] = std::move(actions);
  if (x.extra.is_object())
    for (auto it = x.extra.begin(); it != x.extra.end(); ++it)
      if (!out.contains(it.key()))
        out[it.key()] = it.value();
  return out;
}

result<event> event_from_json(const json& x) {
  return event_from_json(json(x));
}

result<event> event_from_json(json&& x) {
  if (!x.is_object())
    return bad("event must be a JSON object");
  event ev;
  std::optional<error> err;
  read_string(x, "id", ev.id, err);
  read_string(x, "invocation_id", ev.invocation_id, err);
  read_string(x, "author", ev.author, err);
  if (err)
    return std::move(*err);
  for (auto it = x.begin(); it != x.end(); ++it) {
    const std::string& k = it.key();
    json& v = it.value();
    if (k == "id" || k == "invocation_id" || k == "author") {
      continue;
    } else if (k == "timestamp") {
      if (v.is_null())
        continue;
      if (!v.is_number())
        return bad("'timestamp' must be a number (epoch seconds)");
      double t = v.get<double>();
      if (!std::isfinite(t))
        return bad("'timestamp' must be finite");
      ev.timestamp = t;
    } else if (k == "partial") {
      if (v.is_null())
        continue;
      if (!v.is_boolean())
        return bad("'partial' must be a boolean");
      ev.partial = v.get<bool>();
    } else if (k == "content") {
      ev.content = std::move(v);
    } else if (k == "actions") {
      if (v.is_null())
        continue;
      if (!v.is_object())
        return bad("'actions' must be an object");
      for (auto a = v.begin(); a != v.end(); ++a) {
        if (a.key() == "state_delta") {
          if (a->is_null())
            continue;
          if (!a->is_object())
            return bad("'actions.state_delta' must be an object");
          ev.actions.state_delta = std::move(a.value());
        } else if (a.key() == "state_remove") {
          if (a->is_null())
            continue;
          if (!a->is_array())
            return bad("'actions.state_remove' must be an array of state keys");
          ev.actions.state_remove.reserve(a->size());
          for (auto& k : *a) {
            if (!k.is_string())
              return bad("'actions.state_remove' must hold only strings");
            ev.actions.state_remove.push_back(std::move(k.get_ref<std::string&>()));
          }
        } else if (a.key() == "artifact_delta") {
          if (a->is_null())
            continue;
          if (!a->is_object())
            return bad("'actions.artifact_delta' must be an object");
          ev.actions.artifact_delta = std::move(a.value());
        } else {
          ev.actions.extra[a.key()] = std::move(a.value());
        }
      }
    } else {
      ev.extra[k] = std::move(v);
    }
  }
  return ev;
}

json to_json(const session_meta& x) {
  json out{{"app_name", x.app_name},
           {"user_id", x.user_id},
           {"id", x.id},
           {"state", x.state},
           {"last_update_time", x.last_update_time},
           {"version", x.version}};
  if (x.expires_at)
    out["expires_at"] = *x.expires_at;
  return out;
}

json to_json(const session& x) {
  json out = to_json(static_cast<const session_meta&>(x));
  json evs = json::array();
  for (const auto& e : x.events)
    evs.push_back(to_json(e));
  out["events"] = std::move(evs);
  if (!x.cursor.empty())
    out["cursor"] = x.cursor;
  if (x.as_of)
    out["as_of"] =
      json{{"version", x.as_of->version}, {"shared_state", "current"}, {"exact", x.as_of->exact}};
  return out;
}

json to_json(const rewind_changes& x) {
  return json{{"state_delta", x.state_delta},
              {"state_remove", x.state_remove},
              {"before_version", x.before_version},
              {"exact", x.exact}};
}

json to_json(const invocation_info& x) {
  return json{{"invocation_id", x.invocation_id}, {"first_version", x.first_version},
              {"last_version", x.last_version},   {"events", x.events},
              {"annulled", x.annulled},           {"rewind", x.rewind}};
}

result<session> session_from_json(const json& x) {
  if (!x.is_object())
    return bad("session must be a JSON object");
  session s;
  std::optional<error> err;
  read_string(x, "app_name", s.app_name, err);
  read_string(x, "user_id", s.user_id, err);
  read_string(x, "id", s.id, err);
  if (err)
    return std::move(*err);
  if (auto it = x.find("state"); it != x.end()) {
    if (!it->is_object())
      return bad("'state' must be an object");
    s.state = *it;
  }
  if (auto it = x.find("last_update_time"); it != x.end()) {
    if (!it->is_number())
      return bad("'last_update_time' must be a number");
    s.last_update_time = it->get<double>();
  }
  if (auto it = x.find("version"); it != x.end()) {
    if (!it->is_number_unsigned())
      return bad("'version' must be a non-negative integer");
    s.version = it->get<std::uint64_t>();
  }
  if (auto it = x.find("expires_at"); it != x.end() && !it->is_null()) {
    if (!it->is_number())
      return bad("'expires_at' must be a number");
    s.expires_at = it->get<double>();
  }
  if (auto it = x.find("events"); it != x.end()) {
    if (!it->is_array())
      return bad("'events' must be an array");
    for (const auto& e : *it) {
      auto ev = event_from_json(e);
      if (!ev)
        return std::move(ev).err();
      s.events.push_back(std::move(*ev));
    }
  }
  return s;
}

const char* to_string(change_kind k) noexcept {
  switch (k) {
    case change_kind::create: return "create";
    case change_kind::append: return "append";
    case change_kind::remove: return "delete";
    case change_kind::remove_user: return "delete_user";
    case change_kind::remove_app: return "delete_app";
  }
  return "?";
}

const char* to_string(watch_end_reason r) noexcept {
  switch (r) {
    case watch_end_reason::cancelled: return "cancelled";
    case watch_end_reason::closing: return "closing";
    case watch_end_reason::cursor_expired: return "cursor_expired";
    case watch_end_reason::failed: return "failed";
  }
  return "?";
}

json to_json(const change& x) {
  json out{{"cursor", x.cursor},           {"kind", to_string(x.kind)},
           {"app_name", x.app_name},       {"user_id", x.user_id},
           {"session_id", x.session_id},   {"version", x.version},
           {"state_delta", x.state_delta}, {"state_remove", x.state_remove}};
  if (x.ev)
    out["event"] = to_json(*x.ev);
  return out;
}

json to_json(const change_page& x) {
  json changes = json::array();
  for (auto& c : x.changes)
    changes.push_back(to_json(c));
  return json{{"changes", std::move(changes)}, {"cursor", x.cursor}, {"at_head", x.at_head}};
}

} // namespace agentstate
