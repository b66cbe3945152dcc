#include "store/layout.hpp"

#include <chrono>
#include <cstring>
#include <map>

#include "agentstate/scope.hpp"
#include "model/event_text.hpp"

namespace agentstate::store {

namespace {

constexpr char record_tag = 1;
constexpr char event_tag = 1;
constexpr std::size_t record_size = 1 + 8 + 8 + 8;

void append_le64(std::string& out, std::uint64_t x) {
  for (int i = 0; i < 8; ++i)
    out.push_back(static_cast<char>((x >> (8 * i)) & 0xff));
}

std::uint64_t read_le64(const char* p) {
  std::uint64_t x = 0;
  for (int i = 7; i >= 0; --i)
    x = (x << 8) | static_cast<unsigned char>(p[i]);
  return x;
}

std::uint64_t bits_of(double x) {
  std::uint64_t u;
  std::memcpy(&u, &x, 8);
  return u;
}

double double_of(std::uint64_t u) {
  double x;
  std::memcpy(&x, &u, 8);
  return x;
}

// Key builders. Each set_* form replaces `k`'s contents, so one buffer
// serves every key a write set touches (apply() builds ~10 per append); the
// returning forms are for one-off keys.

void set_sub_key(std::string& k, std::string_view parent, std::string_view child) {
  k.assign(parent);
  k.push_back('\0');
  k.append(child);
}

std::string sub_key(std::string_view parent, std::string_view child) {
  std::string k;
  k.reserve(parent.size() + 1 + child.size());
  set_sub_key(k, parent, child);
  return k;
}

void set_event_key(std::string& k, std::string_view skey, std::uint64_t version) {
  k.assign(skey);
  k.push_back('\0');
  append_be64(k, version);
}

std::string event_key(std::string_view skey, std::uint64_t version) {
  std::string k;
  k.reserve(skey.size() + 9);
  set_event_key(k, skey, version);
  return k;
}

void set_by_update_key(std::string& k, std::string_view app, std::string_view user,
                       std::string_view id, double t) {
  k.assign(app);
  k.push_back('\0');
  append_ordered_double(k, t);
  k.append(id);
  k.push_back('\0');
  k.append(user);
}

void set_by_user_key(std::string& k, std::string_view app, std::string_view user,
                     std::string_view id, double t) {
  k.assign(app);
  k.push_back('\0');
  k.append(user);
  k.push_back('\0');
  append_ordered_double(k, t);
  k.append(id);
}

error corrupt(std::string what) {
  return error{errc::internal, "corrupt store: " + std::move(what)};
}

error from_failure(const kv_failure& f) {
  return error{f.code, f.message};
}

} // namespace

result<json> parse_stored(std::string_view text) {
  json fast;
  if (model::parse_stored_text(text, fast))
    return fast;
  // Stored JSON was depth-checked when it was written, so the plain parser
  // (no per-value callback: about twice as fast) is safe here.
  auto v = json::parse(text.begin(), text.end(), nullptr, false);
  if (v.is_discarded())
    return error{errc::internal, "corrupt store: a stored JSON text does not parse"};
  return v;
}

namespace {

// Parses a stored state value; corrupt rows surface as internal errors.
result<json> decode_value(std::string_view text) {
  return parse_stored(text);
}

// Collects a scope's rows under `prefix` into an object keyed by the rest of
// the row key.
result<json> read_rows(kv_read& txn, table t, const std::string& prefix) {
  json out = json::object();
  std::optional<error> err;
  txn.scan(t, prefix, {}, [&](std::string_view k, std::string_view v) {
    auto val = decode_value(v);
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
}

void delete_prefix(kv_write& txn, table t, const std::string& prefix) {
  std::vector<std::string> keys;
  txn.scan(t, prefix, {}, [&](std::string_view k, std::string_view) {
    keys.emplace_back(k);
    return true;
  });
  for (auto& k : keys)
    txn.del(t, k);
}

// `k` is scratch space for the row keys.
void put_row(kv_write& txn, table t, std::string_view parent, const state_write& w,
             std::string& k) {
  set_sub_key(k, parent, w.key);
  if (w.erase)
    txn.del(t, k);
  else
    txn.put(t, k, w.text);
}

void put_rows(kv_write& txn, const write_set& ws, const std::string& skey, std::string& k) {
  for (auto& w : ws.session_writes)
    put_row(txn, table::session_state, skey, w, k);
  if (!ws.user_writes.empty()) {
    auto ukey = user_scope_key(ws.app, ws.user);
    for (auto& w : ws.user_writes)
      put_row(txn, table::user_state, ukey, w, k);
  }
  for (auto& w : ws.app_writes)
    put_row(txn, table::app_state, ws.app, w, k);
}

std::string to_hex(std::string_view x) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(x.size() * 2);
  for (unsigned char c : x) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

std::optional<std::string> from_hex(std::string_view x) {
  if (x.size() % 2 != 0)
    return std::nullopt;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  std::string out;
  out.reserve(x.size() / 2);
  for (std::size_t i = 0; i < x.size(); i += 2) {
    int hi = nibble(x[i]), lo = nibble(x[i + 1]);
    if (hi < 0 || lo < 0)
      return std::nullopt;
    out.push_back(static_cast<char>(hi * 16 + lo));
  }
  return out;
}

} // namespace

// -- keys ----------------------------------------------------------------------

std::string session_key(std::string_view app, std::string_view user,
                        std::string_view id) {
  std::string k;
  k.reserve(app.size() + user.size() + id.size() + 2);
  k.append(app);
  k.push_back('\0');
  k.append(user);
  k.push_back('\0');
  k.append(id);
  return k;
}

std::string user_scope_key(std::string_view app, std::string_view user) {
  return sub_key(app, user);
}

void append_be64(std::string& out, std::uint64_t x) {
  for (int i = 7; i >= 0; --i)
    out.push_back(static_cast<char>((x >> (8 * i)) & 0xff));
}

std::uint64_t read_be64(std::string_view x) {
  std::uint64_t u = 0;
  for (std::size_t i = 0; i < 8 && i < x.size(); ++i)
    u = (u << 8) | static_cast<unsigned char>(x[i]);
  return u;
}

void append_ordered_double(std::string& out, double x) {
  std::uint64_t u = bits_of(x);
  u = (u & (std::uint64_t{1} << 63)) ? ~u : (u | (std::uint64_t{1} << 63));
  append_be64(out, u);
}

double read_ordered_double(std::string_view x) {
  std::uint64_t u = read_be64(x);
  u = (u & (std::uint64_t{1} << 63)) ? (u & ~(std::uint64_t{1} << 63)) : ~u;
  return double_of(u);
}

// -- records -------------------------------------------------------------------

std::string encode_record(const session_record& x) {
  std::string out;
  out.reserve(record_size);
  out.push_back(record_tag);
  append_le64(out, x.version);
  append_le64(out, bits_of(x.last_update_time));
  append_le64(out, bits_of(x.created));
  return out;
}

std::optional<session_record> decode_record(std::string_view x) {
  if (x.size() != record_size || x[0] != record_tag)
    return std::nullopt;
  session_record r;
  r.version = read_le64(x.data() + 1);
  r.last_update_time = double_of(read_le64(x.data() + 9));
  r.created = double_of(read_le64(x.data() + 17));
  return r;
}

std::string encode_event_row(double timestamp, std::string_view json_text) {
  std::string out;
  out.reserve(9 + json_text.size());
  out.push_back(event_tag);
  append_le64(out, bits_of(timestamp));
  out.append(json_text);
  return out;
}

std::optional<double> event_row_timestamp(std::string_view row) {
  if (row.size() < 9 || row[0] != event_tag)
    return std::nullopt;
  return double_of(read_le64(row.data() + 1));
}

result<void> decode_event_row(std::string_view row, event& out) {
  if (row.size() < 9 || row[0] != event_tag)
    return corrupt("event row with unknown tag");
  if (model::decode_event_text(row.substr(9), out))
    return {};
  auto j = parse_stored(row.substr(9));
  if (!j)
    return std::move(j).err();
  auto ev = event_from_json(std::move(*j));
  if (!ev)
    return corrupt("event: " + ev.err().message);
  out = std::move(*ev);
  return {};
}

result<event> decode_event_row(std::string_view row) {
  event ev;
  if (auto r = decode_event_row(row, ev); !r)
    return std::move(r).err();
  return ev;
}

std::size_t write_set::bytes() const {
  std::size_t n = 64 + app.size() + user.size() + id.size()
                  + event_row.size();
  for (auto* v : {&session_writes, &user_writes, &app_writes})
    for (auto& w : *v)
      n += w.key.size() + w.text.size() + 64;
  return n;
}

// -- writes --------------------------------------------------------------------

result<void> apply(kv_write& txn, const write_set& ws) {
  auto skey = session_key(ws.app, ws.user, ws.id);
  std::optional<session_record> rec;
  if (auto raw = txn.get(table::sessions, skey)) {
    rec = decode_record(*raw);
    if (!rec)
      return corrupt("session record of '" + ws.id + "'");
  }
  std::string k; // every other key, in turn
  k.reserve(2 * skey.size() + 48);
  switch (ws.op) {
    case write_set::kind::create: {
      if (rec)
        return error{errc::already_exists,
                     "session '" + ws.id + "' already exists"};
      session_record r{0, ws.time, ws.time};
      put_rows(txn, ws, skey, k);
      set_by_update_key(k, ws.app, ws.user, ws.id, ws.time);
      txn.put(table::by_update, k, {});
      set_by_user_key(k, ws.app, ws.user, ws.id, ws.time);
      txn.put(table::by_user, k, {});
      txn.put(table::sessions, skey, encode_record(r));
      return {};
    }
    case write_set::kind::append: {
      if (!rec)
        return error{errc::not_found, "session '" + ws.id + "' not found"};
      if (rec->version + 1 != ws.version)
        return error{errc::unavailable,
                     "an earlier append to session '" + ws.id
                       + "' failed; retry with the same event id"};
      set_event_key(k, skey, ws.version);
      txn.put(table::events, k, ws.event_row);
      put_rows(txn, ws, skey, k);
      if (rec->last_update_time != ws.time
          || bits_of(rec->last_update_time) != bits_of(ws.time)) {
        set_by_update_key(k, ws.app, ws.user, ws.id, rec->last_update_time);
        txn.del(table::by_update, k);
        set_by_user_key(k, ws.app, ws.user, ws.id, rec->last_update_time);
        txn.del(table::by_user, k);
        set_by_update_key(k, ws.app, ws.user, ws.id, ws.time);
        txn.put(table::by_update, k, {});
        set_by_user_key(k, ws.app, ws.user, ws.id, ws.time);
        txn.put(table::by_user, k, {});
      }
      rec->version = ws.version;
      rec->last_update_time = ws.time;
      txn.put(table::sessions, skey, encode_record(*rec));
      return {};
    }
    case write_set::kind::remove: {
      if (!rec)
        return {};
      auto prefix = skey + '\0';
      delete_prefix(txn, table::session_state, prefix);
      delete_prefix(txn, table::events, prefix);
      set_by_update_key(k, ws.app, ws.user, ws.id, rec->last_update_time);
      txn.del(table::by_update, k);
      set_by_user_key(k, ws.app, ws.user, ws.id, rec->last_update_time);
      txn.del(table::by_user, k);
      txn.del(table::sessions, skey);
      return {};
    }
  }
  return error{errc::internal, "unknown write kind"};
}

// -- reads ---------------------------------------------------------------------

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

namespace {

// Events of one session per G3-G5, oldest first.
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
      out.append((*rows)[i].substr(9));
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

result<std::optional<json>> read_state_value(kv_read& txn, std::string_view app,
                                             std::string_view user, std::string_view id,
                                             std::string_view key) {
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

result<session_page> list_sessions(kv_read& txn, const list_request& req,
                                   std::size_t page_size) {
  try {
    const bool by_user = req.user_id.has_value();
    table index = by_user ? table::by_user : table::by_update;
    std::string prefix = by_user ? user_scope_key(req.app_name, *req.user_id) + '\0'
                                 : req.app_name + '\0';
    std::string from;
    if (!req.page_token.empty()) {
      auto tok = from_hex(req.page_token);
      if (!tok || tok->size() < prefix.size() + 8
          || tok->compare(0, prefix.size(), prefix) != 0)
        return error{errc::invalid_argument,
                     "'page_token' is not a token of this listing"};
      from = std::move(*tok);
    }
    struct hit {
      std::string key, user, id;
    };
    std::vector<hit> hits;
    bool more = false;
    std::uint64_t skip = req.offset;
    auto visit = [&](std::string_view k, std::string_view) {
      if (!from.empty() && k == from)
        return true;
      if (skip > 0) {
        --skip;
        return true;
      }
      if (hits.size() == page_size) {
        more = true;
        return false;
      }
      auto rest = k.substr(prefix.size() + 8);
      hit h;
      h.key = std::string(k);
      if (by_user) {
        h.user = *req.user_id;
        h.id = std::string(rest);
      } else {
        auto nul = rest.find('\0');
        h.id = std::string(rest.substr(0, nul));
        h.user = nul == std::string_view::npos ? "" : std::string(rest.substr(nul + 1));
      }
      hits.push_back(std::move(h));
      return true;
    };
    if (req.descending)
      txn.scan_back(index, prefix, from, visit);
    else
      txn.scan(index, prefix, from, visit);
    session_page page;
    if (req.include_total) {
      std::uint64_t n = 0;
      txn.scan(index, prefix, {}, [&n](std::string_view, std::string_view) {
        ++n;
        return true;
      });
      page.total = n;
    }
    auto app_state = read_rows(txn, table::app_state, req.app_name + '\0');
    if (!app_state)
      return std::move(app_state).err();
    std::map<std::string, json> users;
    for (auto& h : hits) {
      auto skey = session_key(req.app_name, h.user, h.id);
      auto rec = read_record(txn, skey);
      if (!rec)
        return std::move(rec).err();
      if (!*rec)
        return corrupt("list index names a missing session '" + h.id + "'");
      auto own = read_rows(txn, table::session_state, skey + '\0');
      if (!own)
        return std::move(own).err();
      auto u = users.find(h.user);
      if (u == users.end()) {
        auto us = read_rows(txn, table::user_state,
                            user_scope_key(req.app_name, h.user) + '\0');
        if (!us)
          return std::move(us).err();
        u = users.emplace(h.user, std::move(*us)).first;
      }
      session_meta m;
      m.app_name = req.app_name;
      m.user_id = h.user;
      m.id = h.id;
      m.state = merge_state(*own, u->second, *app_state);
      m.last_update_time = (*rec)->last_update_time;
      m.version = (*rec)->version;
      page.sessions.push_back(std::move(m));
    }
    if (more && !hits.empty())
      page.next_page_token = to_hex(hits.back().key);
    return page;
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

std::uint32_t known_format(std::string_view text) {
  for (auto v = oldest_format_version; v <= format_version; ++v)
    if (text == std::to_string(v))
      return v;
  return 0;
}

result<void> init_meta(kv_store& kv, std::string_view engine_version) {
  try {
    {
      auto r = kv.begin_read();
      if (auto fmt = r->get(table::meta, "format")) {
        auto from = known_format(*fmt);
        if (from == format_version)
          return {};
        if (from == 0)
          return error{errc::internal, "store format " + std::string(*fmt)
                                         + " is not readable by this build (format "
                                         + std::to_string(format_version) + ")"};
        r.reset();
        auto w = kv.begin_write();
        if (from == 1) // 1 -> 2: the dedup index is gone
          w->drop_table("event_ids");
        // 2 -> 3: the small tables move into the shared database (a no-op
        // for the tables that keep a database of their own).
        for (std::size_t i = 0; i < table_count; ++i)
          w->absorb_table(static_cast<table>(i));
        w->put(table::meta, "format", std::to_string(format_version));
        w->commit();
        return {};
      }
    }
    auto w = kv.begin_write();
    auto now = std::chrono::duration<double>(
                 std::chrono::system_clock::now().time_since_epoch())
                 .count();
    w->put(table::meta, "format", std::to_string(format_version));
    w->put(table::meta, "created", std::to_string(now));
    w->put(table::meta, "engine_version", engine_version);
    w->commit();
    return {};
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

} // namespace agentstate::store
