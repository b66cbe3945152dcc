// SPDX-License-Identifier: Apache-2.0
#include "protocol/request.hpp"

#include <string>
#include <utility>

#include "protocol/params.hpp"
#include "protocol/json_reader.hpp"

namespace agentstate::protocol::detail {

namespace {

decoded_request refused(json id, int code, std::string message, errc kind) {
  decoded_request d;
  d.id = std::move(id);
  d.refusal = make_failure(code, std::move(message), kind);
  return d;
}

// -- append_event lines, read directly ------------------------------------------------
//
// The protocol's hot request, read straight into an append_request: no DOM of
// the envelope, the params or the event, only of the values the event holds
// (state_delta, content, unknown members). It takes only lines that the
// general path (parse_request_json, the envelope checks, prepare_append,
// param_reader, event_from_json) accepts, and gives up on everything else:
// a member twice, a member those do not read, params before method, a null
// where a string is required, a modify list, an id that is a non-integer
// number. What it returns is what the general path returns for the line.

// A string member; null leaves `out` as is (read_string's "null is absent").
bool string_or_null(json_cursor& c, std::string& out) {
  return c.take_null() || c.read_string(out);
}

// event.actions: 3 containers enclose the object (the request, params,
// event), 4 its members' values.
bool read_actions(json_cursor& c, event_actions& a) {
  if (!c.may_open(3) || !c.take('{'))
    return false;
  bool delta = false, remove = false, artifacts = false;
  return read_members(c, [&](std::string_view key) {
    if (key == "state_delta" || key == "artifact_delta") {
      bool& seen = key == "state_delta" ? delta : artifacts;
      if (seen)
        return false;
      seen = true;
      if (!c.take_null()) {
        if (!c.next_is('{'))
          return false;
        if (!c.read_value(key == "state_delta" ? a.state_delta : a.artifact_delta, 4))
          return false;
      }
    } else if (key == "state_remove") {
      if (remove)
        return false;
      remove = true;
      if (!c.take_null()) {
        json keys;
        if (!c.next_is('[') || !c.read_value(keys, 4))
          return false;
        a.state_remove.reserve(keys.size());
        for (auto& k : keys) {
          if (!k.is_string())
            return false;
          a.state_remove.push_back(std::move(k.get_ref<std::string&>()));
        }
      }
    } else {
      json v;
      if (!c.read_value(v, 4)
          || !a.extra.get_ptr<json::object_t*>()->emplace(std::string(key), std::move(v)).second)
        return false;
    }
    return true;
  });
}

// params.event: 2 containers enclose the object, 3 its members' values.
bool read_event(json_cursor& c, event& ev) {
  if (!c.may_open(2) || !c.take('{'))
    return false;
  bool id = false, invocation = false, author = false, timestamp = false, partial = false,
       content = false, actions = false;
  auto once = [](bool& seen) { return !std::exchange(seen, true); };
  return read_members(c, [&](std::string_view key) {
    bool ok;
    if (key == "id") {
      ok = once(id) && string_or_null(c, ev.id);
    } else if (key == "invocation_id") {
      ok = once(invocation) && string_or_null(c, ev.invocation_id);
    } else if (key == "author") {
      ok = once(author) && string_or_null(c, ev.author);
    } else if (key == "timestamp") {
      json t;
      ok = once(timestamp) && (c.take_null() || c.read_number(t));
      if (ok && !t.is_null())
        ev.timestamp = t.get<double>(); // as event_from_json converts it
    } else if (key == "partial") {
      ok = once(partial);
      if (ok && !c.take_null()) {
        json b;
        ok = (c.next_is('t') || c.next_is('f')) && c.read_value(b, 3);
        if (ok)
          ev.partial = b.get<bool>();
      }
    } else if (key == "content") {
      json v;
      ok = once(content) && c.read_value(v, 3);
      if (ok)
        ev.content = std::move(v);
    } else if (key == "actions") {
      ok = once(actions) && (c.take_null() || read_actions(c, ev.actions));
    } else {
      json v;
      ok = c.read_value(v, 3)
        && ev.extra.get_ptr<json::object_t*>()->emplace(std::string(key), std::move(v)).second;
    }
    return ok;
  });
}

// append_event's params: 1 container encloses the object.
bool read_append_params(json_cursor& c, append_request& r) {
  if (!c.may_open(1) || !c.take('{'))
    return false;
  bool app = false, user = false, sid = false, ev = false, expected = false;
  auto once = [](bool& seen) { return !std::exchange(seen, true); };
  // A parameter missing (or none at all): the general path says which.
  return read_members(c,
                      [&](std::string_view key) {
                        bool ok;
                        if (key == "app_name")
                          ok = once(app) && c.read_string(r.ref.app_name);
                        else if (key == "user_id")
                          ok = once(user) && c.read_string(r.ref.user_id);
                        else if (key == "session_id")
                          ok = once(sid) && c.read_string(r.ref.session_id);
                        else if (key == "event")
                          ok = once(ev) && read_event(c, r.ev);
                        else if (key == "expected_version") {
                          json v;
                          ok = once(expected)
                            && (c.take_null() || (c.read_number(v) && v.is_number_unsigned()));
                          if (ok && !v.is_null())
                            r.expected_version = v.get<std::uint64_t>();
                        } else
                          ok = false;
                        return ok;
                      })
    && app && user && sid && ev;
}

// The whole line, when it is a well-formed append_event request.
bool decode_append(std::string_view line, std::size_t max_depth, decoded_request& d) {
  if (line.empty() || static_cast<unsigned char>(line.front()) == 0xef)
    return false; // a byte order mark: the general path
  json_cursor c(line, max_depth);
  if (!c.may_open(0) || !c.take('{'))
    return false;
  bool version = false, id = false, method = false, params = false;
  append_request r;
  std::string value_scratch;
  bool whole = read_members(c, [&](std::string_view key) {
    if (key == "jsonrpc") {
      std::string_view v;
      if (version || !c.read_key(v, value_scratch) || v != "2.0")
        return false;
      version = true;
    } else if (key == "id") {
      if (id || !c.read_value(d.id, 1)
          || !(d.id.is_string() || d.id.is_number_integer() || d.id.is_null()))
        return false;
      id = true;
    } else if (key == "method") {
      std::string_view v;
      if (method || !c.read_key(v, value_scratch) || v != "append_event")
        return false;
      method = true;
    } else if (key == "params") {
      if (params || !method || !read_append_params(c, r))
        return false;
      params = true;
    } else {
      return false;
    }
    return true;
  });
  if (!whole || !c.at_end() || !version || !method || !params)
    return false;
  d.notification = !id;
  // The access check's inputs, as decode_request sets them for other lines.
  d.method = "append_event";
  d.app_name = r.ref.app_name;
  d.user_id = r.ref.user_id;
  d.run = append_call(std::move(r));
  return true;
}

} // namespace

decoded_request decode_request(std::string_view line, std::size_t max_depth) {
  if (!line.empty() && line.back() == '\r')
    line.remove_suffix(1);
  {
    decoded_request d;
    if (decode_append(line, max_depth, d))
      return d;
  }
  auto parsed = parse_request_json(line, max_depth);
  if (!parsed) {
    auto kind = parsed.code() == errc::too_large ? errc::too_large : errc::invalid_argument;
    return refused(nullptr, rpc_code::parse_error, parsed.err().message, kind);
  }
  json& req = *parsed;
  if (!req.is_object())
    return refused(nullptr, rpc_code::invalid_request,
                   req.is_array()
                     ? "batches (JSON arrays) are not supported: send one "
                       "request object per line"
                     : std::string("a request must be a JSON object, not ") + req.type_name(),
                   errc::invalid_argument);
  decoded_request d;
  d.notification = true;
  if (auto it = req.find("id"); it != req.end()) {
    if (!it->is_string() && !it->is_number() && !it->is_null())
      return refused(nullptr, rpc_code::invalid_request, "'id' must be a number or a string",
                     errc::invalid_argument);
    d.id = *it;
    d.notification = false;
  }
  if (auto it = req.find("jsonrpc"); it == req.end() || *it != "2.0")
    return refused(std::move(d.id), rpc_code::invalid_request, R"('jsonrpc' must be "2.0")",
                   errc::invalid_argument);
  auto m = req.find("method");
  if (m == req.end() || !m->is_string())
    return refused(std::move(d.id), rpc_code::invalid_request, "'method' must be a string",
                   errc::invalid_argument);
  // From here on a notification's problems go unanswered.
  const auto& name = m->get_ref<const std::string&>();
  d.method = name;
  auto prepare = find_method(name);
  const bool authenticate = name == "authenticate";
  const bool watching = name == "watch" || name == "unwatch";
  const bool cluster_map = name == "cluster_map";
  const bool node_call = name == "shard_export" || name == "shard_import" || name == "shard_digest"
    || name == "shard_adopt" || name == "replicate" || name == "replica_state"
    || name == "replica_position" || name == "replica_copy";
  if (!prepare && !authenticate && !watching && !cluster_map && !node_call) {
    if (d.notification)
      return d;
    d.refusal = make_failure(rpc_code::method_not_found, "unknown method '" + name + "'",
                             errc::invalid_argument);
    return d;
  }
  json params = json::object();
  if (auto it = req.find("params"); it != req.end() && !it->is_null()) {
    if (!it->is_object()) {
      if (d.notification)
        return d;
      d.refusal =
        make_failure(rpc_code::invalid_params, "'params' must be an object (parameters by name)",
                     errc::invalid_argument);
      return d;
    }
    params = std::move(*it);
  }
  if (auto it = params.find("app_name"); it != params.end() && it->is_string())
    d.app_name = it->get<std::string>();
  if (auto it = params.find("user_id"); it != params.end() && it->is_string())
    d.user_id = it->get<std::string>();
  if (auto it = params.find("scope"); it != params.end() && it->is_string())
    d.scope = it->get<std::string>();
  if (auto it = params.find("this_node"); it != params.end() && it->is_boolean())
    d.this_node = it->get<bool>();
  if (cluster_map) {
    if (!d.notification)
      d.cluster_map = std::move(params);
    return d;
  }
  if (node_call) {
    if (!d.notification)
      d.node_call = std::move(params);
    return d;
  }
  if (authenticate) {
    param_reader reader(params);
    auto token = reader.required_string("token");
    if (reader.failure()) {
      if (!d.notification)
        d.refusal = *reader.failure();
      return d;
    }
    d.token = std::move(token);
    return d;
  }
  if (watching) {
    param_reader reader(params);
    if (name == "watch")
      d.watch = read_watch_request(reader);
    else
      d.unwatch = reader.required_string("watch_id");
    if (reader.failure()) {
      d.watch.reset();
      d.unwatch.reset();
      if (!d.notification)
        d.refusal = *reader.failure();
    }
    return d;
  }
  auto p = prepare(params);
  if (auto f = std::get_if<rpc_failure>(&p)) {
    if (d.notification)
      return d;
    // Refused, but naming a session: answered in that session's order.
    if (auto key = named_session_key(name, params))
      d.run = refusal_call(std::move(*f), std::move(*key));
    else
      d.refusal = std::move(*f);
    return d;
  }
  d.run = std::move(std::get<prepared>(p));
  return d;
}

} // namespace agentstate::protocol::detail
