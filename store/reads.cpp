// SPDX-License-Identifier: Apache-2.0
#include "store/reads.hpp"

#include <algorithm>
#include <vector>

#include "agentstate/scope.hpp"
#include "store/errors.hpp"
#include "store/keys.hpp"

namespace agentstate::store {

namespace {

// The rows of the events `req` selects (G3/G4), oldest first. The views are
// valid while `txn` lives.
result<std::vector<std::string_view>> select_event_rows(kv_read& txn, const std::string& skey,
                                                        const get_request& req) {
  std::vector<std::string_view> out;
  std::optional<error> err;
  auto prefix = skey + '\0';
  std::optional<std::uint64_t> limit;
  if (req.num_recent_events)
    limit = static_cast<std::uint64_t>(*req.num_recent_events);
  std::optional<double> after;
  if (req.after_timestamp && *req.after_timestamp != 0)
    after = *req.after_timestamp;
  if (limit && *limit == 0)
    return out;
  auto take = [&](std::string_view row) {
    auto ts = event_row_timestamp(row);
    if (!ts) {
      err = corrupt("event row with unknown tag");
      return false;
    }
    if (after && !(*ts >= *after))
      return true;
    out.push_back(row);
    return !limit || out.size() < *limit;
  };
  if (limit) {
    txn.scan_back(table::events, prefix, {},
                  [&](std::string_view, std::string_view row) { return take(row); });
    std::reverse(out.begin(), out.end());
  } else {
    txn.scan(table::events, prefix, {},
             [&](std::string_view, std::string_view row) { return take(row); });
  }
  if (err)
    return std::move(*err);
  return out;
}

result<std::vector<event>> read_events(kv_read& txn, const std::string& skey,
                                       const get_request& req) {
  auto rows = select_event_rows(txn, skey, req);
  if (!rows)
    return std::move(rows).err();
  std::vector<event> out;
  out.reserve(rows->size());
  for (auto row : *rows)
    if (auto r = decode_event_row(row, out.emplace_back()); !r)
      return std::move(r).err();
  return out;
}

// The three scopes of a session, merged (S2).
result<json> read_merged_state(kv_read& txn, const session_ref& r, const std::string& skey) {
  auto own = read_rows(txn, table::session_state, skey + '\0');
  if (!own)
    return std::move(own).err();
  auto user = read_rows(txn, table::user_state, user_scope_key(r.app_name, r.user_id) + '\0');
  if (!user)
    return std::move(user).err();
  auto app = read_rows(txn, table::app_state, r.app_name + '\0');
  if (!app)
    return std::move(app).err();
  return merge_state(*own, *user, *app);
}

/// What every session read starts with: the key, the record and the merged
/// state; nullopt when the session does not exist.
struct session_head {
  std::string skey;
  session_record rec;
  json state;
};

result<std::optional<session_head>> read_head(kv_read& txn, const session_ref& r) {
  auto skey = session_key(r.app_name, r.user_id, r.session_id);
  auto rec = read_record(txn, skey);
  if (!rec)
    return std::move(rec).err();
  if (!*rec)
    return std::optional<session_head>{};
  auto state = read_merged_state(txn, r, skey);
  if (!state)
    return std::move(state).err();
  return std::optional<session_head>{session_head{std::move(skey), **rec, std::move(*state)}};
}

} // namespace

result<std::unique_ptr<kv_read>> begin_read(kv_store& kv) {
  try {
    return kv.begin_read();
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

result<json> read_rows(kv_read& txn, table t, const std::string& prefix) {
  try {
    json out = json::object();
    std::optional<error> err;
    txn.scan(t, prefix, {}, [&](std::string_view k, std::string_view v) {
      auto val = parse_stored(v);
      if (!val) {
        err = std::move(val).err();
        return false;
      }
      out[std::string(k.substr(prefix.size()))] = std::move(*val);
      return true;
    });
    if (err)
      return std::move(*err);
    return out;
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

result<std::optional<session_record>> read_record(kv_read& txn, std::string_view skey) {
  try {
    auto raw = txn.get(table::sessions, skey);
    if (!raw)
      return std::optional<session_record>{};
    auto rec = decode_record(*raw);
    if (!rec)
      return corrupt("session record");
    return std::optional<session_record>{*rec};
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

result<std::optional<append_result>> read_event(kv_read& txn, std::string_view skey,
                                                std::uint64_t version) {
  try {
    auto row = txn.get(table::events, event_key(skey, version));
    if (!row)
      return std::optional<append_result>{};
    auto ev = decode_event_row(*row);
    if (!ev)
      return std::move(ev).err();
    return std::optional<append_result>{append_result{std::move(*ev), version}};
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

result<void> scan_event_ids(kv_read& txn, std::string_view skey,
                            const std::function<void(std::uint64_t, const std::string&)>& fn) {
  try {
    std::string prefix(skey);
    prefix += '\0';
    std::optional<error> err;
    txn.scan(table::events, prefix, {}, [&](std::string_view k, std::string_view row) {
      auto ev = decode_event_row(row);
      if (!ev || k.size() != prefix.size() + 8) {
        err = ev ? corrupt("event key of unexpected length") : std::move(ev).err();
        return false;
      }
      fn(read_be64(k.substr(prefix.size())), ev->id);
      return true;
    });
    if (err)
      return std::move(*err);
    return {};
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

result<std::optional<session>> read_session(kv_read& txn, const get_request& req) {
  try {
    auto& r = req.ref;
    auto head = read_head(txn, r);
    if (!head)
      return std::move(head).err();
    if (!*head)
      return std::optional<session>{};
    auto& [skey, rec, state] = **head;
    auto evs = read_events(txn, skey, req);
    if (!evs)
      return std::move(evs).err();
    session s;
    s.app_name = r.app_name;
    s.user_id = r.user_id;
    s.id = r.session_id;
    s.state = std::move(state);
    s.last_update_time = rec.last_update_time;
    s.version = rec.version;
    s.events = std::move(*evs);
    return std::optional<session>{std::move(s)};
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

result<std::string> read_session_text(kv_read& txn, const get_request& req, const json* extra) {
  try {
    auto& r = req.ref;
    auto head = read_head(txn, r);
    if (!head)
      return std::move(head).err();
    if (!*head)
      return std::string("null");
    auto& [skey, rec, state] = **head;
    if (extra)
      for (auto it = extra->begin(); it != extra->end(); ++it)
        state[it.key()] = it.value();
    auto rows = select_event_rows(txn, skey, req);
    if (!rows)
      return std::move(rows).err();
    auto state_text = dump_json(state);
    if (!state_text)
      return corrupt("session state: " + state_text.err().message);
    // Members in the order nlohmann's sorted objects dump them, so the text
    // equals dump_json(to_json(session)).
    std::size_t size = 128 + r.app_name.size() + r.user_id.size() + r.session_id.size()
                       + state_text->size();
    for (auto row : *rows)
      size += row.size();
    std::string out;
    out.reserve(size);
    out += "{\"app_name\":";
    out += json(r.app_name).dump();
    out += ",\"events\":[";
    for (std::size_t i = 0; i < rows->size(); ++i) {
      if (i)
        out += ',';
      out.append(event_row_text((*rows)[i]));
    }
    out += "],\"id\":";
    out += json(r.session_id).dump();
    out += ",\"last_update_time\":";
    out += json(rec.last_update_time).dump();
    out += ",\"state\":";
    out += *state_text;
    out += ",\"user_id\":";
    out += json(r.user_id).dump();
    out += ",\"version\":";
    out += std::to_string(rec.version);
    out += '}';
    return out;
  } catch (const kv_failure& f) {
    return from_failure(f);
  } catch (const json::exception& e) {
    return error{errc::internal, std::string("session text: ") + e.what()};
  }
}

result<std::string> read_session_text(kv_store& kv, const get_request& req, const json* extra) {
  try {
    auto txn = kv.begin_read();
    return read_session_text(*txn, req, extra);
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

result<std::optional<session>> read_session(kv_store& kv, const get_request& req) {
  try {
    auto txn = kv.begin_read();
    return read_session(*txn, req);
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

result<std::optional<session_record>> read_record(kv_store& kv, std::string_view skey) {
  auto txn = begin_read(kv);
  if (!txn)
    return std::move(txn).err();
  return read_record(**txn, skey);
}

result<std::optional<json>> read_state_value(kv_read& txn, std::string_view app,
                                             std::string_view user, std::string_view id,
                                             std::string_view key) try {
  std::optional<std::string_view> raw;
  switch (scope_of(key)) {
    case scope::user:
      raw = txn.get(table::user_state, sub_key(user_scope_key(app, user), unprefixed(key)));
      break;
    case scope::app:
      raw = txn.get(table::app_state, sub_key(app, unprefixed(key)));
      break;
    case scope::session:
      raw = txn.get(table::session_state, sub_key(session_key(app, user, id), key));
      break;
    case scope::temp:
      return std::optional<json>{};
  }
  if (!raw)
    return std::optional<json>{};
  auto v = parse_stored(*raw);
  if (!v)
    return std::move(v).err();
  return std::optional<json>{std::move(*v)};
} catch (const kv_failure& f) {
  return from_failure(f);
}

result<json> read_scope(kv_read& txn, std::string_view app, const std::string* user) {
  try {
    if (user)
      return read_rows(txn, table::user_state, user_scope_key(app, *user) + '\0');
    return read_rows(txn, table::app_state, std::string(app) + '\0');
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

} // namespace agentstate::store
