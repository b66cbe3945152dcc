// SPDX-License-Identifier: Apache-2.0
// Over 600 lines: the reader, the writer and the wire form of one chunk format, which share
// its span and range rules.
#include "store/shard_copy.hpp"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>

#include "store/apply.hpp"
#include "store/crc32c.hpp"
#include "store/errors.hpp"
#include "store/expiry.hpp"
#include "store/keys.hpp"
#include "store/purge.hpp"
#include "store/records.hpp"
#include "store/scope_delete.hpp"

namespace agentstate::store {

namespace {

constexpr std::string_view chunk_magic = "ASSC";
constexpr std::uint8_t chunk_version = 1;

// The first shard index key of `r`.
std::string index_start(const model::hash_range& r) {
  std::string k;
  append_be64(k, r.lo);
  return k;
}

// Whether index key `k` lies past the end of `r`.
bool past_range(const model::hash_range& r, std::string_view k) {
  return r.hi != 0 && read_be64(k) >= r.hi;
}

// Whether `span` is an exact span (one key).
bool exact(const shard_span& span) {
  return !span.to_end && !span.after.empty() && span.after == span.last;
}

// Whether `key` (in its phase's order) lies in `span`.
bool in_span(const shard_span& span, std::string_view key) {
  if (exact(span))
    return key == span.last;
  return (span.after.empty() || key > span.after) && (span.to_end || key <= span.last);
}

// The first key of `t` at or after `from`, if any.
std::optional<std::string> first_from(kv_read& txn, table t, std::string_view from) {
  std::optional<std::string> out;
  txn.scan(t, {}, from, [&](std::string_view k, std::string_view) {
    out = std::string(k);
    return false;
  });
  return out;
}

// The user scope (app ‖ 0 ‖ user) at or after `from` in user_state.
std::optional<std::string> next_user_scope(kv_read& txn, std::string_view from) {
  auto k = first_from(txn, table::user_state, from);
  if (k)
    k = std::string(scope_of_row(table::user_state, *k));
  return k;
}

// The app at or after `from` in app_state or app_writes.
std::optional<std::string> next_app(kv_read& txn, std::string_view from) {
  std::optional<std::string> out;
  for (auto t : {table::app_state, table::app_writes})
    if (auto k = first_from(txn, t, from)) {
      std::string app = k->substr(0, k->find('\0'));
      if (!out || app < *out)
        out = std::move(app);
    }
  return out;
}

// The key after which the next scope of `scope`'s table starts: every row
// of the scope is `scope` or `scope ‖ 0 ‖ ...`, and names hold no NUL.
std::string after_scope(std::string_view scope) {
  return std::string(scope) + '\x01';
}

// Where a scan of `span`'s scopes (user scopes, apps) starts: its first key
// or later ("" : the phase's start).
std::string scopes_from(const shard_span& span) {
  if (exact(span))
    return span.last;
  return span.after.empty() ? std::string() : after_scope(span.after);
}

// The user of a user scope key, or nothing when the key is malformed.
bool user_of(std::string_view scope, std::string_view& app, std::string_view& user) {
  auto p = split_key(scope, 2);
  if (p.size() != 2 || p[0].empty() || p[1].empty() || p[1].find('\0') != std::string_view::npos)
    return false;
  app = p[0];
  user = p[1];
  return true;
}

error bad_chunk(const std::string& what) {
  return error{errc::invalid_argument, "shard chunk: " + what};
}

// Deletes every row of session `skey` of the target, and its derived
// entries, as a delete of it would (without a change row).
void drop_session(kv_write& txn, std::string_view app, std::string_view user, std::string_view id,
                  const std::string& skey, const session_record& rec) {
  for (auto& [t, key] : list_entries(app, user, id, rec.last_update_time, rec.created))
    txn.del(t, key);
  count_sessions(txn, app, user, -1);
  index_session(txn, app, user, skey, false);
  del_expiry(txn, skey, rec.expires);
  txn.del(table::sessions, skey);
  txn.del(table::origins, skey);
  delete_keys(txn, table::outbox, first_keys(txn, table::outbox, skey + '\0', SIZE_MAX));
  while (delete_session_rows(txn, skey, 4096) == 4096) {
  }
}

// The target's sessions in `span` of `range` go, with their rows.
result<void> clear_sessions(kv_write& txn, const model::hash_range& range, const shard_span& span) {
  std::vector<std::string> keys;
  const bool one = exact(span);
  const std::string start = std::max(span.after, index_start(range));
  txn.scan(table::shard_index, {}, start, [&](std::string_view k, std::string_view) {
    if (k == span.after && !one)
      return true;
    if (past_range(range, k) || !(span.to_end || k <= span.last))
      return false;
    keys.emplace_back(k);
    return true;
  });
  for (auto& k : keys) {
    const std::string skey = k.substr(std::min<std::size_t>(8, k.size()));
    auto p = split_key(skey, 3);
    auto raw = txn.get(table::sessions, skey);
    if (!raw || p.size() != 3) {
      txn.del(table::shard_index, k); // an entry of no session
      continue;
    }
    auto rec = decode_record(skey, *raw);
    if (!rec)
      return damaged(table::sessions, skey);
    drop_session(txn, p[0], p[1], p[2], skey, *rec);
  }
  return {};
}

// The target's user scopes in `span` whose hash is in `range` go.
void clear_users(kv_write& txn, const model::hash_range& range, const shard_span& span) {
  std::vector<std::string> keys;
  std::string at = scopes_from(span);
  while (auto scope = next_user_scope(txn, at)) {
    if (!span.to_end && *scope > span.last)
      break;
    std::string_view app, user;
    if (user_of(*scope, app, user) && range.contains(model::user_hash(app, user))) {
      if (txn.get(table::user_state, *scope))
        keys.push_back(*scope);
      auto rows = first_keys(txn, table::user_state, *scope + '\0', SIZE_MAX);
      keys.insert(keys.end(), rows.begin(), rows.end());
    }
    at = after_scope(*scope);
  }
  delete_keys(txn, table::user_state, keys);
}

// The target's app scopes and kept app writes in `span` whose app's hash is
// in `range` go.
void clear_apps(kv_write& txn, const model::hash_range& range, const shard_span& span) {
  std::vector<std::string> state, writes;
  std::string at = scopes_from(span);
  while (auto app = next_app(txn, at)) {
    if (!span.to_end && *app > span.last)
      break;
    if (range.contains(model::app_hash(*app))) {
      if (txn.get(table::app_state, *app))
        state.push_back(*app);
      auto rows = first_keys(txn, table::app_state, *app + '\0', SIZE_MAX);
      state.insert(state.end(), rows.begin(), rows.end());
      rows = first_keys(txn, table::app_writes, *app + '\0', SIZE_MAX);
      writes.insert(writes.end(), rows.begin(), rows.end());
    }
    at = after_scope(*app);
  }
  delete_keys(txn, table::app_state, state);
  delete_keys(txn, table::app_writes, writes);
}

result<void> write_sessions(kv_write& txn, const model::hash_range& range, const shard_span& span) {
  std::string skey; // the session whose rows follow ("" before the first record)
  for (auto& row : span.rows) {
    if (row.t == table::sessions) {
      auto p = split_key(row.key, 3);
      if (p.size() != 3 || p[0].empty() || p[1].empty() || p[2].empty()
          || p[2].find('\0') != std::string_view::npos)
        return bad_chunk("malformed session key '" + printable(row.key) + "'");
      const auto h = model::user_hash(p[0], p[1]);
      std::string ik;
      set_shard_index_key(ik, h, row.key);
      if (!range.contains(h) || !in_span(span, ik))
        return bad_chunk(row_name(table::sessions, row.key) + " is outside the chunk's range");
      auto rec = decode_record(row.key, row.value);
      if (!rec)
        return damaged(table::sessions, row.key);
      if (fenced(txn, p[0], p[1]))
        return error{errc::unavailable,
                     "user '" + printable(p[1]) + "' of app '" + printable(p[0])
                       + "' is being deleted here; retry once the delete "
                         "has finished"};
      if (txn.get(table::sessions, row.key))
        return bad_chunk(row_name(table::sessions, row.key) + " appears twice");
      if (is_doomed(txn, row.key)) // a large delete of the same id still being purged
        purge_now(txn, row.key);
      txn.put(table::sessions, row.key, row.value);
      put_list_entries(txn, p[0], p[1], p[2], rec->last_update_time, rec->created);
      count_sessions(txn, p[0], p[1], 1);
      index_session(txn, p[0], p[1], row.key, true);
      put_expiry(txn, row.key, rec->expires);
      skey = row.key;
      continue;
    }
    if (row.t != table::session_state && row.t != table::events && row.t != table::origins
        && row.t != table::outbox)
      return bad_chunk(std::string("a sessions span carries no ") + table_name(row.t) + " row");
    if (skey.empty())
      return bad_chunk(row_name(row.t, row.key) + " comes before its session's record");
    const bool whole = row.key == skey; // an origin, or a state tally
    const bool under = row.key.size() > skey.size() && row.key.compare(0, skey.size(), skey) == 0
      && row.key[skey.size()] == '\0';
    if (!(row.t == table::origins ? whole : (under || (whole && row.t == table::session_state))))
      return bad_chunk(row_name(row.t, row.key) + " is not a row of session '" + printable(skey)
                       + "'");
    if (!open_row(row.t, row.key, row.value, false))
      return damaged(row.t, row.key);
    txn.put(row.t, row.key, row.value);
  }
  return {};
}

result<void> write_users(kv_write& txn, const model::hash_range& range, const shard_span& span) {
  for (auto& row : span.rows) {
    if (row.t != table::user_state)
      return bad_chunk(std::string("a users span carries no ") + table_name(row.t) + " row");
    auto scope = scope_of_row(table::user_state, row.key);
    std::string_view app, user;
    if (!user_of(scope, app, user))
      return bad_chunk("malformed user state key '" + printable(row.key) + "'");
    if (!range.contains(model::user_hash(app, user)) || !in_span(span, scope))
      return bad_chunk(row_name(table::user_state, row.key) + " is outside the chunk's range");
    if (fenced(txn, app, user))
      return error{errc::unavailable,
                   "user '" + printable(user) + "' of app '" + printable(app)
                     + "' is being deleted here; retry once the delete has "
                       "finished"};
    if (!open_row(row.t, row.key, row.value, false))
      return damaged(row.t, row.key);
    txn.put(row.t, row.key, row.value);
  }
  return {};
}

result<void> write_apps(kv_write& txn, const model::hash_range& range, const shard_span& span) {
  for (auto& row : span.rows) {
    if (row.t != table::app_state && row.t != table::app_writes)
      return bad_chunk(std::string("an apps span carries no ") + table_name(row.t) + " row");
    const auto nul = row.key.find('\0');
    const std::string_view app = std::string_view(row.key).substr(0, nul);
    if (app.empty() || (row.t == table::app_writes && nul == std::string::npos))
      return bad_chunk("malformed " + std::string(table_name(row.t)) + " key '" + printable(row.key)
                       + "'");
    if (!range.contains(model::app_hash(app)) || !in_span(span, app))
      return bad_chunk(row_name(row.t, row.key) + " is outside the chunk's range");
    if (app_fenced(txn, app))
      return error{errc::unavailable,
                   "app '" + printable(app)
                     + "' is being deleted here; retry once the delete has "
                       "finished"};
    if (!open_row(row.t, row.key, row.value, false))
      return damaged(row.t, row.key);
    txn.put(row.t, row.key, row.value);
  }
  return {};
}

// Serialisation.

void put_u32(std::string& out, std::uint32_t x) {
  for (int i = 3; i >= 0; --i)
    out.push_back(static_cast<char>((x >> (8 * i)) & 0xff));
}

void put_str32(std::string& out, std::string_view s) {
  put_u32(out, static_cast<std::uint32_t>(s.size()));
  out.append(s);
}

// Reads encode_chunk's fields; every read checks what is left.
struct parser {
  std::string_view in;
  bool ok = true;

  bool need(std::size_t n) {
    if (!ok || in.size() < n)
      ok = false;
    return ok;
  }
  std::uint8_t u8() {
    if (!need(1))
      return 0;
    auto x = static_cast<std::uint8_t>(in[0]);
    in.remove_prefix(1);
    return x;
  }
  std::uint32_t u32() {
    if (!need(4))
      return 0;
    std::uint32_t x = 0;
    for (int i = 0; i < 4; ++i)
      x = (x << 8) | static_cast<unsigned char>(in[static_cast<std::size_t>(i)]);
    in.remove_prefix(4);
    return x;
  }
  std::uint64_t u64() {
    if (!need(8))
      return 0;
    auto x = read_be64(in);
    in.remove_prefix(8);
    return x;
  }
  std::string str() {
    auto n = u32();
    if (!need(n))
      return {};
    std::string s(in.substr(0, n));
    in.remove_prefix(n);
    return s;
  }
};

// The tables a chunk carries rows of.
bool carried(table t) {
  switch (t) {
    case table::sessions:
    case table::session_state:
    case table::events:
    case table::origins:
    case table::outbox:
    case table::user_state:
    case table::app_state:
    case table::app_writes: return true;
    default: return false;
  }
}

} // namespace

// What a chunk has taken so far, against its limits.
struct shard_reader::budget {
  const shard_limits& limits;
  std::size_t items = 0, bytes = 0;
  // Whether the chunk takes no more sessions or scopes (it always takes one).
  bool full() const {
    return items > 0 && (items >= limits.max_items || bytes >= limits.max_bytes);
  }
};

shard_reader::shard_reader(kv_read& txn, model::hash_range range) : txn_(txn), range_(range) {}

shard_reader::shard_reader(std::unique_ptr<kv_read> own, model::hash_range range)
  : own_(std::move(own)), txn_(*own_), range_(range) {}

shard_reader::~shard_reader() = default;

result<std::unique_ptr<shard_reader>> shard_reader::open(kv_store& kv, model::hash_range range) {
  try {
    return std::unique_ptr<shard_reader>(new shard_reader(kv.begin_read(), range));
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

namespace {

// Appends row k → v of table t to `span`, if it opens (else data_corrupt).
result<void> take_row(shard_span& span, std::size_t& bytes, table t, std::string_view k,
                      std::string_view v) {
  if (!open_row(t, k, v, false))
    return damaged(t, k);
  span.rows.push_back({t, std::string(k), std::string(v)});
  bytes += k.size() + v.size() + 9;
  return {};
}

} // namespace

result<void> shard_reader::take_session(shard_span& span, budget& b, std::string_view skey) {
  auto raw = txn_.get(table::sessions, skey);
  if (!raw)
    return error{errc::data_corrupt,
                 "the shard index names a missing session '" + printable(skey) + "'"};
  if (auto r = take_row(span, b.bytes, table::sessions, skey, *raw); !r)
    return r;
  if (auto tally = txn_.get(table::session_state, skey))
    if (auto r = take_row(span, b.bytes, table::session_state, skey, *tally); !r)
      return r;
  const std::string prefix = std::string(skey) + '\0';
  std::optional<error> failed;
  for (auto t : {table::session_state, table::events, table::outbox}) {
    txn_.scan(t, prefix, {}, [&](std::string_view rk, std::string_view rv) {
      auto r = take_row(span, b.bytes, t, rk, rv);
      if (!r)
        failed = r.err();
      return r.ok();
    });
    if (failed)
      return *failed;
  }
  if (auto origin = txn_.get(table::origins, skey))
    return take_row(span, b.bytes, table::origins, skey, *origin);
  return {};
}

result<void> shard_reader::take_user(shard_span& span, budget& b, std::string_view scope) {
  if (auto tally = txn_.get(table::user_state, scope))
    if (auto r = take_row(span, b.bytes, table::user_state, scope, *tally); !r)
      return r;
  std::optional<error> failed;
  txn_.scan(table::user_state, std::string(scope) + '\0', {},
            [&](std::string_view k, std::string_view v) {
              auto r = take_row(span, b.bytes, table::user_state, k, v);
              if (!r)
                failed = r.err();
              return r.ok();
            });
  if (failed)
    return *failed;
  return {};
}

result<bool> shard_reader::fill_sessions(shard_span& span, budget& b) {
  bool ended = true;
  std::optional<error> failed;
  txn_.scan(table::shard_index, {}, span.after.empty() ? index_start(range_) : span.after,
            [&](std::string_view k, std::string_view v) {
              if (!span.after.empty() && k == span.after)
                return true;
              if (k.size() < 8) {
                failed = damaged(table::shard_index, k);
                return false;
              }
              if (past_range(range_, k))
                return false;
              if (b.full()) {
                ended = false;
                return false;
              }
              if (!open_row(table::shard_index, k, v, false)) {
                failed = damaged(table::shard_index, k);
                return false;
              }
              const std::string skey(k.substr(8));
              auto p = split_key(skey, 3);
              if (p.size() != 3 || read_be64(k) != model::user_hash(p[0], p[1])) {
                failed =
                  error{errc::data_corrupt,
                        row_name(table::shard_index, k) + " is not under its session's hash"};
                return false;
              }
              span.last = std::string(k);
              ++b.items;
              if (fenced(txn_, p[0], p[1]))
                return true; // being deleted: gone for every reader
              if (auto r = take_session(span, b, skey); !r) {
                failed = r.err();
                return false;
              }
              return true;
            });
  if (failed)
    return *failed;
  return ended;
}

result<bool> shard_reader::fill_users(shard_span& span, budget& b) {
  std::string at = span.after.empty() ? std::string() : after_scope(span.after);
  while (auto scope = next_user_scope(txn_, at)) {
    if (b.full())
      return false;
    span.last = *scope;
    ++b.items;
    at = after_scope(*scope);
    std::string_view app, user;
    if (!user_of(*scope, app, user) || !range_.contains(model::user_hash(app, user))
        || fenced(txn_, app, user))
      continue; // another shard's, malformed (verify names it), or being deleted
    if (auto r = take_user(span, b, *scope); !r)
      return std::move(r).err();
  }
  return true;
}

result<bool> shard_reader::fill_apps(shard_span& span, budget& b) {
  std::optional<error> failed;
  std::string at = span.after.empty() ? std::string() : after_scope(span.after);
  while (auto app = next_app(txn_, at)) {
    if (b.full())
      return false;
    span.last = *app;
    ++b.items;
    at = after_scope(*app);
    if (!range_.contains(model::app_hash(*app)) || app_fenced(txn_, *app))
      continue;
    for (auto t : {table::app_state, table::app_writes}) {
      auto take = [&](std::string_view k, std::string_view v) {
        if (!open_row(t, k, v, false)) {
          failed = damaged(t, k);
          return false;
        }
        span.rows.push_back({t, std::string(k), std::string(v)});
        b.bytes += k.size() + v.size() + 9;
        return true;
      };
      if (t == table::app_state)
        if (auto tally = txn_.get(t, *app))
          if (!take(*app, *tally))
            return *failed;
      txn_.scan(t, *app + '\0', {}, take);
      if (failed)
        return *failed;
    }
  }
  return true;
}

std::optional<error> shard_reader::unreadable(const shard_position& from) {
  if (from.phase >= shard_phase::done)
    return error{errc::invalid_argument, "the shard copy is done: there is no next chunk"};
  try {
    if (!txn_.shard_index())
      return error{errc::invalid_argument,
                   "the store keeps no shard index (a format before 11, opened read-only)"};
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
  return std::nullopt;
}

result<shard_chunk> shard_reader::next(const shard_position& from, const shard_limits& limits) {
  if (auto why = unreadable(from))
    return *why;
  try {
    shard_chunk chunk;
    chunk.range = range_;
    budget b{limits};
    shard_position at = from;
    if (auto r = fill_phases(chunk, at, b); !r)
      return std::move(r).err();
    chunk.next = at;
    return chunk;
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

result<void> shard_reader::fill_phases(shard_chunk& chunk, shard_position& at, budget& b) {
  while (at.phase != shard_phase::done) {
    shard_span span;
    span.phase = at.phase;
    span.after = at.after;
    auto ended = at.phase == shard_phase::sessions ? fill_sessions(span, b)
      : at.phase == shard_phase::users             ? fill_users(span, b)
                                                   : fill_apps(span, b);
    if (!ended)
      return std::move(ended).err();
    span.to_end = *ended;
    const std::string last = span.last;
    chunk.spans.push_back(std::move(span));
    if (!*ended) {
      at.after = last;
      break;
    }
    at = {static_cast<shard_phase>(static_cast<std::uint8_t>(at.phase) + 1), {}};
    if (b.full())
      break;
  }
  return {};
}

result<shard_chunk> shard_reader::next_touched(const shard_touched& t, const shard_position& from,
                                               const shard_limits& limits) {
  if (auto why = unreadable(from))
    return *why;
  try {
    shard_chunk chunk;
    chunk.range = range_;
    budget b{limits};
    shard_position at = from;
    while (at.phase == shard_phase::sessions || at.phase == shard_phase::users) {
      const bool sessions = at.phase == shard_phase::sessions;
      const auto& keys = sessions ? t.sessions : t.users;
      auto it =
        at.after.empty() ? keys.begin() : std::upper_bound(keys.begin(), keys.end(), at.after);
      for (; it != keys.end(); ++it) {
        const std::string& k = *it;
        std::string_view app, user, skey;
        if (sessions) {
          if (k.size() < 8 || read_be64(k) < range_.lo || past_range(range_, k))
            continue;
          skey = std::string_view(k).substr(8);
          auto p = split_key(skey, 3);
          if (p.size() != 3 || read_be64(k) != model::user_hash(p[0], p[1]))
            continue; // not a shard index key: nothing of the range
          app = p[0];
          user = p[1];
        } else if (!user_of(k, app, user) || !range_.contains(model::user_hash(app, user))) {
          continue;
        }
        if (b.full()) {
          chunk.next = at;
          return chunk;
        }
        ++b.items;
        shard_span span;
        span.phase = at.phase;
        span.after = span.last = k;
        if (!fenced(txn_, app, user)) { // under a delete: gone, as next() reads it
          if (sessions && txn_.get(table::shard_index, k)) {
            if (auto r = take_session(span, b, skey); !r)
              return std::move(r).err();
          } else if (!sessions) {
            if (auto r = take_user(span, b, k); !r)
              return std::move(r).err();
          }
        }
        chunk.spans.push_back(std::move(span));
        at.after = k;
      }
      at = {sessions ? shard_phase::users : shard_phase::apps, {}};
    }
    if (!b.full()) // the apps phase, whole, as next() reads it
      if (auto r = fill_phases(chunk, at, b); !r)
        return std::move(r).err();
    chunk.next = at;
    return chunk;
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

result<shard_digest> shard_reader::digest() {
  shard_digest d;
  shard_limits limits;
  limits.max_items = 4096;
  shard_position at;
  std::string head;
  while (at.phase != shard_phase::done) {
    auto c = next(at, limits);
    if (!c)
      return std::move(c).err();
    for (auto& span : c->spans)
      for (auto& row : span.rows) {
        ++d.rows;
        d.sessions += span.phase == shard_phase::sessions && row.t == table::sessions;
        d.bytes += row.key.size() + row.value.size();
        head.assign(1, static_cast<char>(row.t));
        put_u32(head, static_cast<std::uint32_t>(row.key.size()));
        put_u32(head, static_cast<std::uint32_t>(row.value.size()));
        d.crc = crc32c_extend(d.crc, head);
        d.crc = crc32c_extend(d.crc, row.key);
        d.crc = crc32c_extend(d.crc, row.value);
      }
    at = c->next;
  }
  return d;
}

result<void> shard_writer::apply(kv_write& txn, const shard_chunk& chunk) {
  const shard_span* before = nullptr;
  for (auto& span : chunk.spans) {
    if (span.phase >= shard_phase::done)
      return bad_chunk("a span of no phase");
    if (!span.to_end && (span.last.empty() || span.last < span.after))
      return bad_chunk("a span that ends before it starts");
    // Within a phase, a span starts after the one before ends: an exact
    // span's key is past it, another's `after` is at or past it.
    if (before
        && (span.phase < before->phase
            || (span.phase == before->phase
                && (before->to_end
                    || (exact(span) ? span.last <= before->last : span.after < before->last)))))
      return bad_chunk("spans out of order, or overlapping");
    before = &span;
    switch (span.phase) {
      case shard_phase::sessions: {
        if (auto r = clear_sessions(txn, chunk.range, span); !r)
          return r;
        if (auto r = write_sessions(txn, chunk.range, span); !r)
          return r;
        break;
      }
      case shard_phase::users: {
        clear_users(txn, chunk.range, span);
        if (auto r = write_users(txn, chunk.range, span); !r)
          return r;
        break;
      }
      default: {
        clear_apps(txn, chunk.range, span);
        if (auto r = write_apps(txn, chunk.range, span); !r)
          return r;
        break;
      }
    }
  }
  return {};
}

namespace {

// `write(txn)` in a write transaction of `kv`, committed only when it
// succeeds (else it aborts: the store is as it was).
template <class Write>
auto in_write(kv_store& kv, Write write) -> decltype(write(std::declval<kv_write&>())) {
  try {
    auto w = kv.begin_write();
    auto r = write(*w);
    if (r)
      w->commit();
    return r;
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

} // namespace

result<void> shard_writer::apply(kv_store& kv, const shard_chunk& chunk) {
  return in_write(kv, [&](kv_write& txn) { return apply(txn, chunk); });
}

namespace {

// The rows the target holds of session `skey`, as a copy carries them.
std::vector<shard_row> held_session(kv_read& txn, const std::string& skey) {
  std::vector<shard_row> out;
  auto keep = [&out](table t, std::string_view k, std::string_view v) {
    out.push_back({t, std::string(k), std::string(v)});
    return true;
  };
  if (auto raw = txn.get(table::sessions, skey))
    keep(table::sessions, skey, *raw);
  else
    return out;
  if (auto tally = txn.get(table::session_state, skey))
    keep(table::session_state, skey, *tally);
  const std::string prefix = skey + '\0';
  for (auto t : {table::session_state, table::events, table::outbox})
    txn.scan(t, prefix, {}, [&](std::string_view k, std::string_view v) { return keep(t, k, v); });
  if (auto origin = txn.get(table::origins, skey))
    keep(table::origins, skey, *origin);
  return out;
}

// The rows the target holds of scope `scope` in tables `ts` (its tally
// under the scope's own key in the first).
std::vector<shard_row> held_scope(kv_read& txn, const std::string& scope,
                                  std::initializer_list<table> ts) {
  std::vector<shard_row> out;
  bool first = true;
  for (auto t : ts) {
    if (first)
      if (auto tally = txn.get(t, scope))
        out.push_back({t, scope, std::string(*tally)});
    first = false;
    txn.scan(t, scope + '\0', {}, [&](std::string_view k, std::string_view v) {
      out.push_back({t, std::string(k), std::string(v)});
      return true;
    });
  }
  return out;
}

bool same_rows(const std::vector<shard_row>& a, std::vector<shard_row>::const_iterator b,
               std::vector<shard_row>::const_iterator e) {
  if (static_cast<std::size_t>(e - b) != a.size())
    return false;
  for (const auto& r : a) {
    if (r.t != b->t || r.key != b->key || r.value != b->value)
      return false;
    ++b;
  }
  return true;
}

// The key a group of rows belongs to in `phase`: a session's key (its
// record's), a user scope, an app.
std::string group_of(shard_phase phase, const shard_row& r) {
  if (phase == shard_phase::users)
    return std::string(scope_of_row(table::user_state, r.key));
  if (phase == shard_phase::apps)
    return r.key.substr(0, r.key.find('\0'));
  return r.key;
}

} // namespace

result<shard_writer::merged> shard_writer::merge(kv_write& txn, const shard_chunk& chunk) {
  merged out;
  for (auto& span : chunk.spans) {
    if (span.phase >= shard_phase::done)
      return bad_chunk("a span of no phase");
    const auto& rows = span.rows;
    for (auto it = rows.begin(); it != rows.end();) {
      // One group: a session (its record, then its rows), a user scope or an app.
      if (span.phase == shard_phase::sessions && it->t != table::sessions)
        return bad_chunk(row_name(it->t, it->key) + " comes before its session's record");
      const std::string key = group_of(span.phase, *it);
      auto end = std::next(it);
      while (end != rows.end()
             && (span.phase == shard_phase::sessions ? end->t != table::sessions
                                                     : group_of(span.phase, *end) == key))
        ++end;
      shard_span one;
      one.phase = span.phase;
      one.rows.assign(it, end);
      std::vector<shard_row> held;
      std::string what;
      if (span.phase == shard_phase::sessions) {
        auto p = split_key(key, 3);
        if (p.size() != 3)
          return bad_chunk("malformed session key '" + printable(key) + "'");
        set_shard_index_key(one.last, model::user_hash(p[0], p[1]), key);
        held = held_session(txn, key);
        what = "session '" + printable(p[2]) + "' of user '" + printable(p[1]) + "' of app '"
          + printable(p[0]) + "'";
      } else if (span.phase == shard_phase::users) {
        one.last = key;
        held = held_scope(txn, key, {table::user_state});
        std::string_view app, user;
        user_of(key, app, user);
        what = "the user: state of user '" + printable(user) + "' of app '" + printable(app) + "'";
      } else {
        one.last = key;
        held = held_scope(txn, key, {table::app_state, table::app_writes});
        what = "the app: state of app '" + printable(key) + "'";
      }
      one.after = one.last; // an exact span: the group alone
      if (held.empty()) {
        auto r = span.phase == shard_phase::sessions ? write_sessions(txn, chunk.range, one)
          : span.phase == shard_phase::users         ? write_users(txn, chunk.range, one)
                                                     : write_apps(txn, chunk.range, one);
        if (!r)
          return std::move(r).err();
        ++out.added;
        out.sessions += span.phase == shard_phase::sessions;
      } else if (same_rows(held, it, end)) {
        ++out.present;
      } else {
        return error{errc::already_exists, what + " is here already, with other contents"};
      }
      it = end;
    }
  }
  return out;
}

result<shard_writer::merged> shard_writer::merge(kv_store& kv, const shard_chunk& chunk) {
  return in_write(kv, [&](kv_write& txn) { return merge(txn, chunk); });
}

std::string encode_chunk(const shard_chunk& chunk) {
  std::string out(chunk_magic);
  out.push_back(static_cast<char>(chunk_version));
  append_be64(out, chunk.range.lo);
  append_be64(out, chunk.range.hi);
  out.push_back(static_cast<char>(chunk.next.phase));
  put_str32(out, chunk.next.after);
  put_u32(out, static_cast<std::uint32_t>(chunk.spans.size()));
  for (auto& s : chunk.spans) {
    out.push_back(static_cast<char>(s.phase));
    put_str32(out, s.after);
    put_str32(out, s.last);
    out.push_back(s.to_end ? 1 : 0);
    put_u32(out, static_cast<std::uint32_t>(s.rows.size()));
    for (auto& r : s.rows) {
      out.push_back(static_cast<char>(r.t));
      put_str32(out, r.key);
      put_str32(out, r.value);
    }
  }
  put_u32(out, crc32c_extend(0, out));
  return out;
}

result<shard_chunk> decode_chunk(std::string_view bytes) {
  // The magic, the version, the range, the next phase and three lengths; then the checksum.
  constexpr std::size_t least = 4 + 1 + 16 + 1 + 4 + 4 + 4;
  if (bytes.size() < least || bytes.substr(0, 4) != chunk_magic)
    return error{errc::data_corrupt,
                 "shard chunk: truncated, or not a shard chunk (" + std::to_string(bytes.size())
                   + " bytes)"};
  const auto body = bytes.substr(0, bytes.size() - 4);
  parser crc{bytes.substr(bytes.size() - 4)};
  if (crc.u32() != crc32c_extend(0, body))
    return error{errc::data_corrupt,
                 "shard chunk: its checksum fails (damaged or truncated in transit)"};
  parser p{body.substr(4)};
  if (auto v = p.u8(); v != chunk_version)
    return bad_chunk("version " + std::to_string(v) + " is not " + std::to_string(chunk_version));
  shard_chunk c;
  c.range.lo = p.u64();
  c.range.hi = p.u64();
  auto phase = p.u8();
  if (phase > static_cast<std::uint8_t>(shard_phase::done))
    return bad_chunk("unknown phase " + std::to_string(phase));
  c.next.phase = static_cast<shard_phase>(phase);
  c.next.after = p.str();
  auto spans = p.u32();
  // Each span takes at least 14 bytes.
  if (spans > p.in.size() / 14)
    return bad_chunk(std::to_string(spans) + " spans in " + std::to_string(p.in.size()) + " bytes");
  for (std::uint32_t i = 0; i < spans && p.ok; ++i) {
    shard_span s;
    phase = p.u8();
    if (phase >= static_cast<std::uint8_t>(shard_phase::done))
      return bad_chunk("a span of unknown phase " + std::to_string(phase));
    s.phase = static_cast<shard_phase>(phase);
    s.after = p.str();
    s.last = p.str();
    auto to_end = p.u8();
    if (to_end > 1)
      return bad_chunk("a span's end flag is " + std::to_string(to_end));
    s.to_end = to_end == 1;
    auto rows = p.u32();
    for (std::uint32_t j = 0; j < rows && p.ok; ++j) {
      shard_row r;
      auto t = p.u8();
      if (t >= table_count || !carried(static_cast<table>(t)))
        return bad_chunk("a row of table " + std::to_string(t) + ", which a chunk does not carry");
      r.t = static_cast<table>(t);
      r.key = p.str();
      r.value = p.str();
      if (p.ok)
        s.rows.push_back(std::move(r));
    }
    if (p.ok)
      c.spans.push_back(std::move(s));
  }
  if (!p.ok)
    return bad_chunk("a length runs past the end of the chunk");
  if (!p.in.empty())
    return bad_chunk(std::to_string(p.in.size()) + " bytes after the last span");
  return c;
}

result<shard_copy_stats> copy_shard(kv_store& from, kv_store& to, model::hash_range range,
                                    const shard_limits& limits) {
  auto reader = shard_reader::open(from, range);
  if (!reader)
    return std::move(reader).err();
  shard_copy_stats stats;
  shard_position at;
  while (at.phase != shard_phase::done) {
    auto chunk = (*reader)->next(at, limits);
    if (!chunk)
      return std::move(chunk).err();
    auto bytes = encode_chunk(*chunk);
    auto shipped = decode_chunk(bytes);
    if (!shipped)
      return std::move(shipped).err();
    if (auto r = shard_writer::apply(to, *shipped); !r)
      return std::move(r).err();
    ++stats.chunks;
    stats.bytes += bytes.size();
    for (auto& s : shipped->spans) {
      stats.rows += s.rows.size();
      for (auto& r : s.rows)
        stats.sessions += r.t == table::sessions;
    }
    at = shipped->next;
  }
  return stats;
}

} // namespace agentstate::store
