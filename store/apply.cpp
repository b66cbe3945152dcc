// SPDX-License-Identifier: Apache-2.0
#include "store/apply.hpp"

#include <vector>

#include "store/app_writes.hpp"
#include "store/errors.hpp"
#include "store/outbox.hpp"
#include "store/expiry.hpp"
#include "store/history.hpp"
#include "store/purge.hpp"
#include "store/scope_delete.hpp"
#include "store/keys.hpp"
#include "store/records.hpp"

namespace agentstate::store {

namespace {

void delete_prefix(kv_write& txn, table t, const std::string& prefix) {
  std::vector<std::string> keys;
  txn.scan(t, prefix, {}, [&](std::string_view k, std::string_view) {
    keys.emplace_back(k);
    return true;
  });
  for (auto& k : keys)
    txn.del(t, k);
}

// Scratch space for one write set's row keys and sealed values: each buffer
// is reused row after row.
struct scratch {
  std::string k, v;
};

// The tallies of the scopes a write set writes (store format 8), read
// before its first write so a damaged one fails the write set untouched.
struct tallies {
  state_tally session, user, app;
};

void put_row(kv_write& txn, table t, std::string_view parent, const state_write& w, scratch& s,
             state_tally& tally) {
  set_sub_key(s.k, parent, w.key);
  put_state_row(txn, t, s.k, w.erase ? nullptr : &w.text, s.v, tally);
}

result<tallies> read_tallies(kv_read& txn, const write_set& ws, const std::string& skey,
                             bool fresh_session) {
  tallies out;
  if (!fresh_session && !ws.session_writes.empty()) {
    auto t = read_tally(txn, table::session_state, skey);
    if (!t)
      return std::move(t).err();
    out.session = *t;
  }
  if (!ws.user_writes.empty()) {
    auto t = read_tally(txn, table::user_state, user_scope_key(ws.app, ws.user));
    if (!t)
      return std::move(t).err();
    out.user = *t;
  }
  if (!ws.app_writes.empty() && !ws.app_elsewhere) {
    auto t = read_tally(txn, table::app_state, ws.app);
    if (!t)
      return std::move(t).err();
    out.app = *t;
  }
  return out;
}

void put_rows(kv_write& txn, const write_set& ws, const std::string& skey, scratch& s, tallies& n) {
  if (!ws.session_writes.empty()) {
    for (auto& w : ws.session_writes)
      put_row(txn, table::session_state, skey, w, s, n.session);
    put_tally(txn, table::session_state, skey, n.session);
  }
  if (!ws.user_writes.empty()) {
    auto ukey = user_scope_key(ws.app, ws.user);
    for (auto& w : ws.user_writes)
      put_row(txn, table::user_state, ukey, w, s, n.user);
    put_tally(txn, table::user_state, ukey, n.user);
  }
  if (!ws.app_writes.empty() && !ws.app_elsewhere) {
    for (auto& w : ws.app_writes)
      put_row(txn, table::app_state, ws.app, w, s, n.app);
    put_tally(txn, table::app_state, ws.app, n.app);
  }
}

// A list index entry: its value seals the key (an empty body).
void put_index(kv_write& txn, table t, scratch& s) {
  seal_into(s.v, s.k, {});
  txn.put(t, s.k, s.v);
}

} // namespace

result<state_tally> read_tally(kv_read& txn, table t, std::string_view key) {
  auto raw = txn.get(t, key);
  if (!raw)
    return state_tally{};
  auto x = decode_tally(key, *raw);
  if (!x)
    return damaged(t, key);
  return *x;
}

void put_tally(kv_write& txn, table t, std::string_view key, const state_tally& x) {
  if (x.rows == 0 && x.sum == 0)
    txn.del(t, key);
  else
    txn.put(t, key, encode_tally(key, x));
}

void put_state_row(kv_write& txn, table t, std::string_view key, const std::string* text,
                   std::string& buf, state_tally& tally) {
  if (auto old = txn.get(t, key)) {
    tally_out(tally, *old);
    if (!text) {
      txn.del(t, key);
      return;
    }
  } else if (!text) {
    return;
  }
  seal_into(buf, key, *text);
  txn.put(t, key, buf);
  tally_in(tally, buf);
}

void count_sessions(kv_write& txn, std::string_view app, std::string_view user, int delta) {
  std::string key(app);
  for (int scope = 0; scope < 2; ++scope) {
    if (scope == 1) {
      key.push_back('\0');
      key.append(user);
    }
    std::uint64_t n = 0;
    if (auto raw = txn.get(table::session_counts, key)) {
      auto c = decode_session_count(key, *raw);
      if (!c)
        continue; // damaged: left for its readers to report
      n = *c;
    }
    if (delta < 0 && n == 0)
      continue;
    n = delta < 0 ? n - 1 : n + 1;
    if (n == 0)
      txn.del(table::session_counts, key);
    else
      txn.put(table::session_counts, key, encode_session_count(key, n));
  }
}

void index_session(kv_write& txn, std::string_view app, std::string_view user,
                   std::string_view skey, bool add) {
  auto k = shard_index_key(app, user, skey);
  if (add)
    txn.put(table::shard_index, k, seal(k, {}));
  else
    txn.del(table::shard_index, k);
}

result<std::uint64_t> read_session_count(kv_read& txn, std::string_view key) {
  auto raw = txn.get(table::session_counts, key);
  if (!raw)
    return std::uint64_t{0};
  auto c = decode_session_count(key, *raw);
  if (!c)
    return damaged(table::session_counts, key);
  return *c;
}

std::array<std::pair<table, std::string>, 4> list_entries(std::string_view app,
                                                          std::string_view user,
                                                          std::string_view id, double updated,
                                                          double created) {
  std::array<std::pair<table, std::string>, 4> out{{{table::by_update, {}},
                                                    {table::by_user, {}},
                                                    {table::by_created, {}},
                                                    {table::by_user_created, {}}}};
  set_by_update_key(out[0].second, app, user, id, updated);
  set_by_user_key(out[1].second, app, user, id, updated);
  set_by_update_key(out[2].second, app, user, id, created);
  set_by_user_key(out[3].second, app, user, id, created);
  return out;
}

void put_list_entries(kv_write& txn, std::string_view app, std::string_view user,
                      std::string_view id, double updated, double created) {
  scratch s;
  for (auto& [t, key] : list_entries(app, user, id, updated, created)) {
    s.k = std::move(key);
    put_index(txn, t, s);
  }
}

std::size_t write_set::bytes() const {
  std::size_t n = 64 + app.size() + user.size() + id.size() + event_row.size();
  if (origin_body)
    n += origin_body->size();
  for (auto& row : fork_events)
    n += row.size() + 32;
  n += outcome.size();
  for (auto& f : forget)
    n += f.size() + 16;
  for (auto* v : {&session_writes, &user_writes, &app_writes})
    for (auto& w : *v)
      n += w.key.size() + w.text.size() + 64;
  return n;
}

result<bool> apply(kv_write& txn, const write_set& ws, change_log* log) {
  if (ws.op == write_set::kind::outbox_put || ws.op == write_set::kind::outbox_drop) {
    auto skey = session_key(ws.app, ws.user, ws.id);
    if (ws.op == write_set::kind::outbox_drop) {
      drop_outbox(txn, skey, ws.version);
      return false;
    }
    auto raw = txn.get(table::sessions, skey);
    if (ws.version == 0) { // a create's
      if (raw)
        return error{errc::already_exists, "session '" + ws.id + "' already exists"};
      if (fenced(txn, ws.app, ws.user))
        return error{errc::unavailable,
                     "user '" + ws.user + "' of app '" + ws.app
                       + "' is being deleted; retry once the delete has finished"};
      put_outbox(txn, skey, 0, ws.outcome);
      return false;
    }
    if (!raw || fenced(txn, ws.app, ws.user))
      return error{errc::not_found, "session '" + ws.id + "' not found"};
    auto rec = decode_record(skey, *raw);
    if (!rec)
      return damaged(table::sessions, skey);
    if (rec->version + 1 != ws.version)
      return error{errc::unavailable,
                   "an earlier append to session '" + ws.id
                     + "' failed; retry with the same event id"};
    put_outbox(txn, skey, ws.version, ws.outcome);
    return false; // no change row
  }
  if (ws.op == write_set::kind::app_write) {
    if (app_fenced(txn, ws.app))
      return error{errc::unavailable,
                   "app '" + ws.app + "' is being deleted; retry once the delete has finished"};
    tallies n;
    if (!ws.app_writes.empty()) {
      auto t = read_tally(txn, table::app_state, ws.app);
      if (!t)
        return std::move(t).err();
      n.app = *t;
    }
    scratch s;
    put_rows(txn, ws, {}, s, n);
    put_app_write(txn, ws.app, ws.id, ws.outcome);
    for (auto& id : ws.forget)
      if (id != ws.id)
        forget_app_write(txn, ws.app, id);
    return false; // no change row
  }
  if (ws.op == write_set::kind::remove_user || ws.op == write_set::kind::remove_app) {
    // X2/X3: one fence; the rows under it go in bounded steps.
    put_fence(txn, fence_key(ws.app, ws.op == write_set::kind::remove_user ? &ws.user : nullptr));
    if (log)
      log_change(txn, ws, 0, *log);
    return true;
  }
  auto skey = session_key(ws.app, ws.user, ws.id);
  std::optional<session_record> rec;
  if (auto raw = txn.get(table::sessions, skey)) {
    rec = decode_record(skey, *raw);
    if (!rec)
      return damaged(table::sessions, skey);
  }
  scratch s;
  auto& k = s.k; // every other key, in turn
  k.reserve(2 * skey.size() + 48);
  if (ws.op != write_set::kind::remove && fenced(txn, ws.app, ws.user)) {
    if (ws.op == write_set::kind::append)
      return error{errc::not_found,
                   "session '" + ws.id + "' not found (its user or app was deleted)"};
    return error{errc::unavailable,
                 "user '" + ws.user + "' of app '" + ws.app
                   + "' is being deleted; retry once the delete has finished"};
  }
  switch (ws.op) {
    case write_set::kind::create: {
      if (rec)
        return error{errc::already_exists, "session '" + ws.id + "' already exists"};
      auto n = read_tallies(txn, ws, skey, true);
      if (!n)
        return std::move(n).err();
      if (is_doomed(txn, skey)) // a large delete of the same id still being purged
        purge_now(txn, skey);
      session_record r{ws.fork_events.size(), ws.time, ws.time, ws.expires, ws.refresh};
      put_expiry(txn, skey, r.expires);
      put_rows(txn, ws, skey, s, *n);
      for (std::size_t i = 0; i < ws.fork_events.size(); ++i) {
        set_event_key(k, skey, i + 1);
        txn.put(table::events, k, ws.fork_events[i]);
      }
      if (!ws.no_origin) {
        seal_into(s.v, skey, ws.origin_body ? *ws.origin_body : origin_body(ws.session_writes));
        txn.put(table::origins, skey, s.v);
      }
      put_list_entries(txn, ws.app, ws.user, ws.id, ws.time, ws.time);
      count_sessions(txn, ws.app, ws.user, 1);
      index_session(txn, ws.app, ws.user, skey, true);
      txn.put(table::sessions, skey, encode_record(skey, r));
      if (ws.app_elsewhere)
        drop_outbox(txn, skey, 0);
      if (log)
        log_change(txn, ws, r.version, *log);
      return true;
    }
    case write_set::kind::append: {
      if (!rec)
        return error{errc::not_found, "session '" + ws.id + "' not found"};
      if (rec->version + 1 != ws.version)
        return error{errc::unavailable,
                     "an earlier append to session '" + ws.id
                       + "' failed; retry with the same event id"};
      auto n = read_tallies(txn, ws, skey, false);
      if (!n)
        return std::move(n).err();
      set_event_key(k, skey, ws.version);
      txn.put(table::events, k, ws.event_row);
      put_rows(txn, ws, skey, s, *n);
      if (rec->last_update_time != ws.time || bits_of(rec->last_update_time) != bits_of(ws.time)) {
        set_by_update_key(k, ws.app, ws.user, ws.id, rec->last_update_time);
        txn.del(table::by_update, k);
        set_by_user_key(k, ws.app, ws.user, ws.id, rec->last_update_time);
        txn.del(table::by_user, k);
        set_by_update_key(k, ws.app, ws.user, ws.id, ws.time);
        put_index(txn, table::by_update, s);
        set_by_user_key(k, ws.app, ws.user, ws.id, ws.time);
        put_index(txn, table::by_user, s);
      }
      rec->version = ws.version;
      rec->last_update_time = ws.time;
      if (ws.expires != 0 && ws.expires != rec->expires) {
        del_expiry(txn, skey, rec->expires);
        rec->expires = ws.expires;
        put_expiry(txn, skey, rec->expires);
      }
      txn.put(table::sessions, skey, encode_record(skey, *rec));
      if (ws.app_elsewhere)
        drop_outbox(txn, skey, ws.version);
      if (log)
        log_change(txn, ws, ws.version, *log);
      return true;
    }
    case write_set::kind::remove: {
      if (ws.only_if) {
        const auto& g = *ws.only_if;
        const bool same = rec && rec->version == g.version
          && bits_of(rec->created) == bits_of(g.created)
          && bits_of(rec->last_update_time) == bits_of(g.last_update_time);
        auto out = read_outbox(txn, skey);
        if (!out)
          return std::move(out).err();
        if (!same || *out)
          return error{errc::condition_failed,
                       "session '" + ws.id + "' was written after it was read; it stays"};
      }
      if (!rec)
        return false;
      if (rec->version > inline_delete_events) {
        mark_doomed(txn, skey); // its rows go in bounded steps (store/purge.hpp)
      } else {
        auto prefix = skey + '\0';
        delete_prefix(txn, table::session_state, prefix);
        txn.del(table::session_state, skey); // its tally
        delete_prefix(txn, table::events, prefix);
      }
      for (auto& [t, key] :
           list_entries(ws.app, ws.user, ws.id, rec->last_update_time, rec->created))
        txn.del(t, key);
      count_sessions(txn, ws.app, ws.user, -1);
      index_session(txn, ws.app, ws.user, skey, false);
      del_expiry(txn, skey, rec->expires);
      txn.del(table::sessions, skey);
      txn.del(table::origins, skey);
      if (log)
        log_change(txn, ws, rec->version, *log);
      return true;
    }
    default: break;
  }
  return error{errc::internal, "unknown write kind"};
}

} // namespace agentstate::store
