// JSON codec of the public types (PROTOCOL.md "Objects").
#include "agentstate/types.hpp"

#include <cmath>
#include <cstdint>
#include <stdexcept>

namespace agentstate {

namespace {

error bad(const std::string& what) {
  return error{errc::invalid_argument, what};
}

// Reads an optional string member; null counts as absent.
bool read_string(const json& obj, const char* name, std::string& out,
                 std::optional<error>& err) {
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

namespace modify_ops {

state_modify increment(std::string key, json by) {
  state_modify m;
  m.key = std::move(key);
  m.fallback = 0;
  m.fn = [by = std::move(by)](const json& cur) -> json {
    if (!cur.is_number())
      throw std::invalid_argument(std::string("increment needs a number; the key holds ")
                                  + (cur.is_object() || cur.is_array() ? "an " : "a ")
                                  + cur.type_name());
    if (cur.is_number_integer() && by.is_number_integer()) {
      // Unsigned values beyond int64 count as doubles.
      if ((!cur.is_number_unsigned() || cur.get<std::uint64_t>() <= INT64_MAX)
          && (!by.is_number_unsigned() || by.get<std::uint64_t>() <= INT64_MAX)) {
        std::int64_t sum;
        if (__builtin_add_overflow(cur.get<std::int64_t>(), by.get<std::int64_t>(), &sum))
          throw std::invalid_argument("increment overflows a 64-bit integer");
        return sum;
      }
    }
    return cur.get<double>() + by.get<double>();
  };
  return m;
}

state_modify append(std::string key, json value) {
  state_modify m;
  m.key = std::move(key);
  m.fallback = json::array();
  m.fn = [value = std::move(value)](const json& cur) -> json {
    if (!cur.is_array())
      throw std::invalid_argument(std::string("append needs an array; the key holds ")
                                  + (cur.is_object() ? "an " : "a ") + cur.type_name());
    json out = cur;
    out.push_back(value);
    return out;
  };
  return m;
}

state_modify merge(std::string key, json value) {
  state_modify m;
  m.key = std::move(key);
  m.fallback = json::object();
  m.fn = [value = std::move(value)](const json& cur) -> json {
    if (!cur.is_object())
      throw std::invalid_argument(std::string("merge needs an object; the key holds ")
                                  + (cur.is_array() ? "an " : "a ") + cur.type_name());
    json out = cur;
    for (auto it = value.begin(); it != value.end(); ++it)
      out[it.key()] = it.value();
    return out;
  };
  return m;
}

state_modify set_if_absent(std::string key, json value) {
  state_modify m;
  m.key = std::move(key);
  m.fallback = std::move(value);
  m.fn = [](const json& cur) { return cur; };
  return m;
}

state_modify compare_and_set(std::string key, json expected, json value) {
  state_modify m;
  m.key = std::move(key);
  m.expected = std::move(expected);
  m.fn = [value = std::move(value)](const json&) { return value; };
  return m;
}

} // namespace modify_ops

result<state_modify> state_modify_from_json(const json& x) {
  if (!x.is_object())
    return bad("a modify operation must be an object {\"key\", \"op\", ...}");
  auto key = x.find("key");
  if (key == x.end() || !key->is_string())
    return bad("a modify operation needs 'key' (a string)");
  auto op = x.find("op");
  if (op == x.end() || !op->is_string())
    return bad("modify of '" + key->get<std::string>() + "' needs 'op' (a string)");
  const auto& name = op->get_ref<const std::string&>();
  auto member = [&](const char* m) -> const json* {
    auto it = x.find(m);
    return it == x.end() ? nullptr : &*it;
  };
  auto missing = [&](const char* m) {
    return bad("modify of '" + key->get<std::string>() + "': '" + name + "' needs '" + m + "'");
  };
  std::string k = key->get<std::string>();
  if (name == "increment") {
    auto by = member("by");
    if (!by || !by->is_number())
      return bad("modify of '" + k + "': 'increment' needs 'by' (a number)");
    return modify_ops::increment(std::move(k), *by);
  }
  if (name == "append" || name == "set_if_absent" || name == "merge") {
    auto v = member("value");
    if (!v)
      return missing("value");
    if (name == "append")
      return modify_ops::append(std::move(k), *v);
    if (name == "set_if_absent")
      return modify_ops::set_if_absent(std::move(k), *v);
    if (!v->is_object())
      return bad("modify of '" + k + "': 'merge' needs 'value' (an object)");
    return modify_ops::merge(std::move(k), *v);
  }
  if (name == "compare_and_set") {
    auto e = member("expected");
    auto v = member("value");
    if (!e)
      return missing("expected");
    if (!v)
      return missing("value");
    return modify_ops::compare_and_set(std::move(k), *e, *v);
  }
  return bad("modify of '" + k + "': unknown op '" + name
             + "' (increment, append, merge, set_if_absent, compare_and_set)");
}

json to_json(const session_meta& x) {
  return json{{"app_name", x.app_name},
              {"user_id", x.user_id},
              {"id", x.id},
              {"state", x.state},
              {"last_update_time", x.last_update_time},
              {"version", x.version}};
}

json to_json(const session& x) {
  json out = to_json(static_cast<const session_meta&>(x));
  json evs = json::array();
  for (const auto& e : x.events)
    evs.push_back(to_json(e));
  out["events"] = std::move(evs);
  return out;
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

} // namespace agentstate
