// SPDX-License-Identifier: Apache-2.0
#include "store/format.hpp"

#include <optional>
#include <string>

#include <utility>
#include <vector>

#include "agentstate/json.hpp"
#include "model/ids.hpp"
#include "store/apply.hpp"
#include "store/change_log.hpp"
#include "store/errors.hpp"
#include "store/keys.hpp"
#include "store/purge.hpp"
#include "store/records.hpp"

namespace agentstate::store {

namespace {

// The format 4 value of row `k` of `t`, whose format 1-3 value is `v`. A row
// that does not decode as its table's rows do gets its checksum inverted.
std::string sealed_legacy(table t, std::string_view k, std::string_view v) {
  auto body = open_row(t, k, v, true);
  bool good = body.has_value();
  if (good) {
    switch (t) {
      case table::events: good = parse_json(event_body_text(*body), stored_json_depth).ok(); break;
      case table::session_state:
      case table::user_state:
      case table::app_state: good = parse_json(*body, stored_json_depth).ok(); break;
      default: break;
    }
  }
  auto out = seal(k, good ? *body : v);
  if (!good)
    for (std::size_t i = 1; i < seal_bytes; ++i)
      out[i] = static_cast<char>(~out[i]);
  return out;
}

// 3 -> 4: rewrites every row of `t` with its value sealed, in batches (a
// cursor is not kept across puts), each at most ~8 MiB of rows in memory.
void seal_table(kv_write& w, table t) {
  std::string from;
  for (;;) {
    std::vector<std::pair<std::string, std::string>> batch;
    std::size_t bytes = 0;
    bool more = false;
    w.scan(t, {}, from, [&](std::string_view k, std::string_view v) {
      if (!from.empty() && k == from)
        return true;
      if (batch.size() >= 8192 || bytes >= (std::size_t{8} << 20)) {
        more = true;
        return false;
      }
      batch.emplace_back(std::string(k), sealed_legacy(t, k, v));
      bytes += k.size() + v.size() + 64;
      return true;
    });
    for (auto& [k, v] : batch)
      w.put(t, k, v);
    if (!more || batch.empty())
      return;
    from = std::move(batch.back().first);
  }
}

// 4 -> 5: the creation-order list entries of every session, in batches (a
// cursor is not kept across puts). A damaged record gets none.
void index_created(kv_write& w) {
  std::string from;
  for (;;) {
    std::vector<std::pair<std::string, std::optional<session_record>>> batch;
    bool more = false;
    w.scan(table::sessions, {}, from, [&](std::string_view k, std::string_view v) {
      if (!from.empty() && k == from)
        return true;
      if (batch.size() >= 8192) {
        more = true;
        return false;
      }
      batch.emplace_back(std::string(k), decode_record(k, v));
      return true;
    });
    for (auto& [k, rec] : batch) {
      auto p = split_key(k, 3);
      if (!rec || p.size() != 3)
        continue;
      for (auto& [t, key] : list_entries(p[0], p[1], p[2], rec->last_update_time, rec->created))
        if (t == table::by_created || t == table::by_user_created)
          w.put(t, key, seal(key, {}));
    }
    if (!more || batch.empty())
      return;
    from = std::move(batch.back().first);
  }
}

// 7 -> 8: the tally of every scope of state table `t` (its rows are
// contiguous in key order), put in batches of 8,192 scopes (a cursor is not
// kept across puts; each tally's key sorts before the rows left to read). A
// damaged row counts with the checksum it carries, so it still reads as
// damaged, not as a row the tally lacks. A key of a tally's form already
// there (format 7 has none) is replaced, or deleted when its scope has no
// rows.
void tally_scopes(kv_write& w, table t) {
  std::string from, scope;
  state_tally tally;
  for (;;) {
    std::vector<std::pair<std::string, state_tally>> done;
    std::vector<std::string> stale;
    bool more = false;
    w.scan(t, {}, from, [&](std::string_view k, std::string_view v) {
      if (!from.empty() && k == from)
        return true;
      if (is_tally_key(t, k)) {
        stale.emplace_back(k);
        return true;
      }
      auto sc = scope_of_row(t, k);
      if (sc != scope) {
        if (done.size() >= 8192) {
          more = true;
          return false;
        }
        if (tally.rows != 0)
          done.emplace_back(std::move(scope), tally);
        scope = std::string(sc);
        tally = {};
      }
      tally_in(tally, v);
      from = std::string(k);
      return true;
    });
    if (!more && tally.rows != 0) {
      done.emplace_back(std::move(scope), tally);
      tally = {};
    }
    delete_keys(w, t, stale);
    for (auto& [key, x] : done)
      w.put(t, key, encode_tally(key, x));
    if (!more)
      return;
  }
}

// 8 -> 9: every app's and user's session count, from a pass over the
// session records in key order (an app's and a user's records are
// contiguous), put in batches of 8,192 records (a cursor is not kept across
// puts; the counts share `rows` with the records). A damaged record counts:
// its session's list entries are there, and its key names its scope.
void count_all_sessions(kv_write& w) {
  std::string from, app, user;
  std::uint64_t in_app = 0, in_user = 0;
  for (;;) {
    std::vector<std::pair<std::string, std::uint64_t>> done;
    std::size_t seen = 0;
    bool more = false;
    w.scan(table::sessions, {}, from, [&](std::string_view k, std::string_view) {
      if (!from.empty() && k == from)
        return true;
      if (seen == 8192) {
        more = true;
        return false;
      }
      ++seen;
      from = std::string(k);
      auto p = split_key(k, 3);
      if (p.size() != 3)
        return true; // verify names a malformed key
      const std::string user_key = std::string(p[0]) + '\0' + std::string(p[1]);
      if (user_key != user) {
        if (in_user != 0)
          done.emplace_back(std::move(user), in_user);
        user = user_key;
        in_user = 0;
      }
      if (p[0] != app) {
        if (in_app != 0)
          done.emplace_back(std::move(app), in_app);
        app = std::string(p[0]);
        in_app = 0;
      }
      ++in_user;
      ++in_app;
      return true;
    });
    if (!more) {
      if (in_user != 0)
        done.emplace_back(user, in_user);
      if (in_app != 0)
        done.emplace_back(app, in_app);
    }
    for (auto& [key, n] : done)
      w.put(table::session_counts, key, encode_session_count(key, n));
    if (!more)
      return;
  }
}

// 10 -> 11: every session's shard index entry, from a pass over the
// session records in key order, put in batches of 8,192 records (a cursor is
// not kept across puts; the index shares `rows` with the records). A damaged
// record is indexed: its key names its app and user, and its other rows are
// there. A key that is not app ‖ 0 ‖ user ‖ 0 ‖ id gets none (verify names it).
void index_all_sessions(kv_write& w) {
  std::string from;
  for (;;) {
    std::vector<std::string> batch;
    bool more = false;
    w.scan(table::sessions, {}, from, [&](std::string_view k, std::string_view) {
      if (!from.empty() && k == from)
        return true;
      if (batch.size() == 8192) {
        more = true;
        return false;
      }
      batch.emplace_back(k);
      return true;
    });
    for (auto& skey : batch) {
      auto p = split_key(skey, 3);
      if (p.size() == 3)
        index_session(w, p[0], p[1], skey, true);
    }
    if (!more || batch.empty())
      return;
    from = std::move(batch.back());
  }
}

} // namespace

std::uint32_t known_format(std::string_view text) {
  for (auto v = oldest_format_version; v <= format_version; ++v)
    if (text == std::to_string(v))
      return v;
  return 0;
}

result<void> init_meta(kv_store& kv, std::string_view engine_version, double now) {
  try {
    {
      auto r = kv.begin_read();
      if (auto fmt = r->get(table::meta, "format")) {
        auto from = known_format(*fmt);
        if (from == format_version)
          return {};
        if (from == 0)
          return error{errc::internal,
                       "store format " + std::string(*fmt)
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
        // 3 -> 4: every value but meta's sealed.
        if (from <= 3)
          for (std::size_t i = 0; i < table_count; ++i)
            if (static_cast<table>(i) != table::meta && static_cast<table>(i) != table::changes)
              seal_table(*w, static_cast<table>(i));
        // 4 -> 5: the creation-order indexes.
        if (from <= 4)
          index_created(*w);
        // 5 -> 6: an epoch, and the change log starts empty.
        if (from <= 5) {
          clear_log(*w);
          w->put(table::meta, "epoch", new_epoch());
        }
        // 6 -> 7: nothing to rewrite. Sessions created before have no
        // origin row: their as-of reads are marked inexact.
        // 7 -> 8: every state scope's tally.
        if (from <= 7)
          for (auto t : {table::session_state, table::user_state, table::app_state})
            tally_scopes(*w, t);
        // 8 -> 9: every app's and user's session count.
        if (from <= 8)
          count_all_sessions(*w);
        // 9 -> 10: nothing to rewrite (`app_writes` starts empty).
        // 10 -> 11: every session's shard index entry.
        if (from <= 10)
          index_all_sessions(*w);
        w->put(table::meta, "format", std::to_string(format_version));
        w->commit();
        return {};
      }
    }
    auto w = kv.begin_write();
    w->put(table::meta, "format", std::to_string(format_version));
    w->put(table::meta, "created", std::to_string(now));
    w->put(table::meta, "engine_version", engine_version);
    w->put(table::meta, "epoch", new_epoch());
    w->commit();
    return {};
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

result<void> init_meta(kv_store& kv, std::string_view engine_version) {
  return init_meta(kv, engine_version, model::now_seconds());
}

} // namespace agentstate::store
