#include "actors/validate.hpp"

#include "agentstate/scope.hpp"

namespace agentstate::detail {

namespace {

// Strict UTF-8 (no overlongs, no surrogates, max U+10FFFF).
bool valid_utf8(std::string_view s) {
  std::size_t i = 0, n = s.size();
  while (i < n) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len;
    std::uint32_t cp;
    if ((c & 0xe0) == 0xc0) {
      len = 2;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > n)
      return false;
    for (std::size_t k = 1; k < len; ++k) {
      auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xc0) != 0x80)
        return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000)
        || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
      return false;
    i += len;
  }
  return true;
}

result<void> check_string(std::string_view value, const char* what, std::size_t max) {
  if (value.size() > max)
    return error{errc::too_large, std::string("'") + what + "' is "
                                    + std::to_string(value.size()) + " bytes; the limit is "
                                    + std::to_string(max)};
  if (value.find('\0') != std::string_view::npos)
    return error{errc::invalid_argument, std::string("'") + what + "' contains a NUL byte"};
  if (!valid_utf8(value))
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
    if (auto r = check_depth(lim, it.value(), std::string(what) + " '" + it.key() + "'"); !r)
      return r;
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

} // namespace

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

result<void> validate_event(const limits& lim, const event& ev) {
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

result<store::write_set> prepare_create(const engine_core& core,
                                        const create_request& req) {
  const auto& lim = core.opts.limit;
  if (!req.state.is_object())
    return error{errc::invalid_argument, "'state' must be an object"};
  for (auto it = req.state.begin(); it != req.state.end(); ++it)
    if (auto r = check_key(it.key()); !r)
      return std::move(r).err();
  if (auto r = check_member_depths(lim, req.state, "state value"); !r)
    return std::move(r).err();
  store::write_set ws;
  ws.op = store::write_set::kind::create;
  ws.app = req.app_name;
  ws.user = req.user_id;
  ws.id = req.session_id;
  ws.time = now_seconds();
  auto parts = partition_delta(req.state);
  if (auto r = encode_rows(lim, parts, ws); !r)
    return std::move(r).err();
  if (ws.bytes() > lim.max_state_bytes)
    return error{errc::too_large, "initial state is about " + std::to_string(ws.bytes())
                                    + " bytes; the limit is "
                                    + std::to_string(lim.max_state_bytes)};
  return ws;
}

result<prepared_append> prepare_append(const engine_core& core, const session_ref& r,
                                       event&& ev, std::uint64_t version) {
  const auto& lim = core.opts.limit;
  prepared_append out;
  auto& ws = out.ws;
  // temp: keys leave the delta here (A3); the rest is encoded row by row.
  json& delta = ev.actions.state_delta;
  for (auto it = delta.begin(); it != delta.end();) {
    if (scope_of(it.key()) == scope::temp) {
      out.temp[it.key()] = std::move(it.value());
      it = delta.erase(it);
    } else {
      ++it;
    }
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
  out.stored = std::move(ev);
  auto text = dump_json(to_json(out.stored));
  if (!text)
    return error{errc::invalid_argument, "event: " + text.err().message};
  if (text->size() > lim.max_event_bytes)
    return error{errc::too_large, "event is " + std::to_string(text->size())
                                    + " bytes as stored; the limit is "
                                    + std::to_string(lim.max_event_bytes)};
  ws.op = store::write_set::kind::append;
  ws.app = r.app_name;
  ws.user = r.user_id;
  ws.id = r.session_id;
  ws.version = version;
  ws.time = *out.stored.timestamp;
  ws.event_id = out.stored.id;
  ws.event_text = std::move(*text);
  return out;
}

} // namespace agentstate::detail
