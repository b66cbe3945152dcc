// SPDX-License-Identifier: Apache-2.0
// Over 600 lines: every read of reads.hpp; they share one checked row selection
// (read_head, select_event_rows), which a split would have to make public.
#include "store/reads.hpp"

#include <algorithm>
#include <vector>

#include "agentstate/scope.hpp"
#include "store/change_log.hpp"
#include "store/errors.hpp"
#include "store/history.hpp"
#include "store/purge.hpp"
#include "store/scope_delete.hpp"
#include "store/keys.hpp"

namespace agentstate::store {

namespace {

// The cursor of what `txn` sees ("" without an epoch: no cursor asked).
result<std::string> snapshot_cursor(kv_read& txn, std::string_view epoch) {
  if (epoch.empty())
    return std::string();
  auto last = read_log_last(txn);
  if (!last)
    return std::move(last).err();
  return format_cursor(epoch, *last);
}

// `s` as read from `txn`, with the cursor of what `txn` sees.
result<std::optional<session>> with_cursor(kv_read& txn, session s, std::string_view epoch) {
  auto cursor = snapshot_cursor(txn, epoch);
  if (!cursor)
    return std::move(cursor).err();
  s.cursor = std::move(*cursor);
  return std::optional<session>{std::move(s)};
}

// G3/G4 of `req`: how many of the newest events (none: all), and the
// timestamp they must reach (none: no filter).
struct event_filters {
  std::optional<std::uint64_t> limit;
  std::optional<double> after;
};

event_filters filters_of(const get_request& req) {
  event_filters f;
  if (req.num_recent_events)
    f.limit = static_cast<std::uint64_t>(*req.num_recent_events);
  if (req.after_timestamp && *req.after_timestamp != 0)
    f.after = *req.after_timestamp;
  return f;
}

error too_many_bytes(const get_request& req, std::size_t max_bytes) {
  return error{errc::too_large,
               "session '" + printable(req.ref.session_id)
                 + "': the events asked for pass the response limit (" + std::to_string(max_bytes)
                 + " bytes); ask for fewer (num_recent_events, after_timestamp)"};
}

// What is missing from the event rows of one session a read visited (their
// keys, the session's prefix `prefix_size` bytes long), oldest first or,
// with `backward`, newest first, when versions 1..`head` are stored; nullopt
// when nothing is. A backward scan that was `stopped` at its limit need not
// reach version 1. REQUIRES: every key passed its checksum.
std::optional<std::string> missing_events(const std::vector<std::string_view>& keys,
                                          std::size_t prefix_size, std::uint64_t head,
                                          bool backward, bool stopped) {
  const std::size_t n = keys.size();
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t want = backward ? head - i : i + 1;
    const std::uint64_t got =
      keys[i].size() == prefix_size + 8 ? read_be64(keys[i].substr(prefix_size)) : 0;
    if (want == 0 || got != want)
      return "event v" + std::to_string(want == 0 ? got : want) + " where the record says version "
        + std::to_string(head) + " (found v" + std::to_string(got) + ")";
  }
  if (backward ? !stopped && n < head : n < head)
    return "event v" + std::to_string(backward ? head - n : n + 1) + " of the record's "
      + std::to_string(head);
  return std::nullopt;
}

// The bodies (event_body_text) of the rows of the events `req` selects
// (G3/G4), oldest first, each checked against its checksum. The views are
// valid while `txn` lives. too_large, without reading further, once the
// selected rows pass `max_bytes`. `stored`: the session's number of events
// (its version), so the row vectors are sized once.
result<std::vector<std::string_view>> select_event_rows(kv_read& txn, const std::string& skey,
                                                        const get_request& req,
                                                        std::size_t max_bytes, std::uint64_t stored,
                                                        std::uint64_t upto = UINT64_MAX) {
  std::vector<std::string_view> out;
  auto prefix = skey + '\0';
  if (upto == 0)
    return out;
  const event_filters filters = filters_of(req);
  const auto& limit = filters.limit;
  const auto& after = filters.after;
  if (limit && *limit == 0)
    return out;
  // Every row visited is collected, then all are checked together (three
  // checksums at a time), the rows skipped by `after` too: the scan decides
  // where to stop on timestamps not yet checked, and a damaged one is caught
  // below before anything is answered.
  std::vector<std::string_view> keys, rows;
  {
    // Without `after`, at most `limit` rows are visited (one more to find
    // the end); the version bounds them either way.
    std::uint64_t expect = std::min(stored, upto);
    if (limit && !after)
      expect = std::min<std::uint64_t>(expect, static_cast<std::uint64_t>(*limit) + 1);
    expect = std::min<std::uint64_t>(expect, 1 << 16); // beyond: grown as visited
    keys.reserve(expect);
    rows.reserve(expect);
  }
  std::size_t taken = 0; // rows `after` keeps
  std::size_t bytes = 0; // their size
  bool over = false;
  bool enough = false; // the scan stopped at `limit` rows kept
  const bool legacy = txn.legacy_values();
  auto take = [&](std::string_view key, std::string_view row) {
    if (upto != UINT64_MAX && key.size() == prefix.size() + 8
        && read_be64(key.substr(prefix.size())) > upto)
      return false;
    keys.push_back(key);
    rows.push_back(row);
    const std::size_t head = legacy ? 1 : seal_bytes;
    if (row.size() < head + 8)
      return false; // damaged: reported below
    if (after && !(event_body_timestamp(row.substr(head)) >= *after))
      return true;
    ++taken;
    bytes += row.size();
    if (bytes > max_bytes) {
      over = true;
      return false;
    }
    enough = limit && taken >= *limit;
    return !enough;
  };
  if (limit)
    txn.scan_back(table::events, prefix, upto == UINT64_MAX ? std::string() : event_key(skey, upto),
                  take);
  else
    txn.scan(table::events, prefix, {}, take);
  if (over)
    return too_many_bytes(req, max_bytes);
  // The bodies replace the rows in place (open_rows reads each row before
  // it writes its body).
  auto good = open_rows(table::events, rows.size(), keys.data(), rows.data(), legacy, rows.data(),
                        txn.checksums_needed());
  if (good != rows.size())
    return damaged(table::events, keys[good]);
  // The rows visited must be the run of versions the record names: from 1
  // (or, scanning back, from the last) to the version read, every one.
  // Event rows are never deleted from a live session (H4), so a gap or a
  // short run is a row lost from the store's pages, never a shorter answer.
  if (auto gap =
        missing_events(keys, prefix.size(), std::min(stored, upto), limit.has_value(), enough))
    return missing_rows(skey, *gap);
  if (after)
    rows.erase(std::remove_if(
                 rows.begin(), rows.end(),
                 [&](std::string_view body) { return !(event_body_timestamp(body) >= *after); }),
               rows.end());
  if (limit)
    std::reverse(rows.begin(), rows.end());
  return rows;
}

// The events of the bodies select_event_rows chose.
result<std::vector<event>> decode_events(const std::vector<std::string_view>& rows) {
  std::vector<event> out;
  out.reserve(rows.size());
  // The rows lie apart in memory: the next ones' first bytes are fetched
  // while this one is decoded.
  constexpr std::size_t ahead = 4;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (i + ahead < rows.size()) {
      const char* next = rows[i + ahead].data();
      __builtin_prefetch(next);
      __builtin_prefetch(next + 64);
      __builtin_prefetch(next + 128);
    }
    if (auto r = decode_event_body(rows[i], out.emplace_back()); !r)
      return std::move(r).err();
  }
  return out;
}

// A shared scope's error as the reader of session `r` sees it: a damaged
// user or app row names the session that could not be read, too.
error for_session(error e, const session_ref& r) {
  if (e.code == errc::data_corrupt)
    e.message = "session '" + printable(r.app_name) + "/" + printable(r.user_id) + "/"
      + printable(r.session_id) + "' cannot be read: " + e.message;
  return e;
}

// The three scopes of a session, merged (S2).
result<json> read_merged_state(kv_read& txn, const session_ref& r, const std::string& skey) {
  auto own = read_rows(txn, table::session_state, skey + '\0');
  if (!own)
    return std::move(own).err();
  auto user = read_rows(txn, table::user_state, user_scope_key(r.app_name, r.user_id) + '\0');
  if (!user)
    return for_session(std::move(user).err(), r);
  auto app = read_rows(txn, table::app_state, r.app_name + '\0');
  if (!app)
    return for_session(std::move(app).err(), r);
  return merge_state(*own, *user, *app);
}

// Whether session `skey` has event or state rows (its record being absent:
// a damaged record key hides the record from lookups, not its rows).
bool session_has_rows(kv_read& txn, const std::string& skey) {
  bool any = false;
  auto found = [&](std::string_view, std::string_view) {
    any = true;
    return false;
  };
  txn.scan(table::events, skey + '\0', {}, found);
  if (!any)
    txn.scan(table::session_state, skey + '\0', {}, found);
  return any;
}

// For a session `skey` whose record was not found: data_corrupt when its
// event or state rows exist and no purge mark explains them (a damaged
// record key hides the record from lookups, not its rows).
std::optional<error> record_lost(kv_read& txn, const std::string& skey) {
  if (session_has_rows(txn, skey) && !is_doomed(txn, skey))
    return error{errc::data_corrupt,
                 row_name(table::sessions, skey)
                   + " is missing while the session's rows exist (the store is damaged; "
                     "`agentstate verify` lists every damaged row)"};
  return std::nullopt;
}

/// What every session read starts with: the key, the record and the merged
/// state; nullopt when the session does not exist.
struct session_head {
  std::string skey;
  session_record rec;
  json state;
};

result<std::optional<session_head>> read_head(kv_read& txn, const session_ref& r, double now) {
  auto skey = session_key(r.app_name, r.user_id, r.session_id);
  auto rec = read_record(txn, skey);
  if (!rec)
    return std::move(rec).err();
  // T1, X2/X3: gone for readers at once, rows still stored.
  if (*rec && (((**rec).expires != 0 && expired(**rec, now)) || fenced(txn, r.app_name, r.user_id)))
    return std::optional<session_head>{};
  if (!*rec) {
    if (auto e = record_lost(txn, skey))
      return std::move(*e);
    return std::optional<session_head>{};
  }
  auto state = read_merged_state(txn, r, skey);
  if (!state)
    return std::move(state).err();
  return std::optional<session_head>{session_head{std::move(skey), **rec, std::move(*state)}};
}

/// A session's head and the bodies of the events `req` selects (valid while
/// `txn` lives); nullopt when the session does not exist.
struct session_parts {
  session_head head;
  std::vector<std::string_view> rows;
};

result<std::optional<session_parts>> read_parts(kv_read& txn, const get_request& req,
                                                std::size_t max_bytes, double now) {
  auto head = read_head(txn, req.ref, now);
  if (!head)
    return std::move(head).err();
  if (!*head)
    return std::optional<session_parts>{};
  auto rows = select_event_rows(txn, (*head)->skey, req, max_bytes, (*head)->rec.version);
  if (!rows)
    return std::move(rows).err();
  return std::optional<session_parts>{session_parts{std::move(**head), std::move(*rows)}};
}

// The bodies of the events of `versions` (ascending) that pass the
// timestamp and count filters of `req`, oldest first; too_large as
// select_event_rows. Cost: one get per version looked at.
result<std::vector<std::string_view>> select_versions(kv_read& txn, const std::string& skey,
                                                      const get_request& req,
                                                      const std::vector<std::uint64_t>& versions,
                                                      std::size_t max_bytes) {
  std::vector<std::string_view> out;
  const event_filters filters = filters_of(req);
  const auto& limit = filters.limit;
  const auto& after = filters.after;
  if (limit && *limit == 0)
    return out;
  const bool legacy = txn.legacy_values();
  std::size_t bytes = 0;
  std::string key;
  auto visit = [&](std::uint64_t v) -> result<bool> {
    set_event_key(key, skey, v);
    auto row = txn.get(table::events, key);
    if (!row)
      return damaged(table::events, key);
    auto body = open_row(table::events, key, *row, legacy);
    if (!body)
      return damaged(table::events, key);
    if (after && !(event_body_timestamp(*body) >= *after))
      return true;
    bytes += row->size();
    if (bytes > max_bytes)
      return too_many_bytes(req, max_bytes);
    out.push_back(*body);
    return !limit || out.size() < *limit;
  };
  if (limit) {
    for (auto it = versions.rbegin(); it != versions.rend(); ++it) {
      auto more = visit(*it);
      if (!more)
        return std::move(more).err();
      if (!*more)
        break;
    }
    std::reverse(out.begin(), out.end());
  } else {
    for (auto v : versions)
      if (auto more = visit(v); !more)
        return std::move(more).err();
  }
  return out;
}

// get_session with as_of_version or apply_rewinds (H1, H5).
result<std::optional<session>> read_past(kv_read& txn, const get_request& req,
                                         std::size_t max_bytes, double now,
                                         std::string_view epoch) {
  auto head = read_head(txn, req.ref, now);
  if (!head)
    return std::move(head).err();
  if (!*head)
    return std::optional<session>{};
  auto& h = **head;
  const std::uint64_t upto = req.as_of_version.value_or(h.rec.version);
  if (upto > h.rec.version) {
    error e{errc::invalid_argument,
            "as_of_version " + std::to_string(upto) + " is past the session's version "
              + std::to_string(h.rec.version)};
    e.current_version = h.rec.version;
    return e;
  }
  std::vector<std::string_view> rows;
  if (req.apply_rewinds) {
    auto outline = read_outline(txn, h.skey, upto);
    if (!outline)
      return std::move(outline).err();
    auto fates = rewind_fates(outline->invocation_ids, outline->marks);
    std::vector<std::uint64_t> kept;
    for (std::size_t i = 0; i < fates.size(); ++i)
      if (fates[i] == event_fate::kept)
        kept.push_back(i + 1);
    auto r = select_versions(txn, h.skey, req, kept, max_bytes);
    if (!r)
      return std::move(r).err();
    rows = std::move(*r);
  } else {
    auto r = select_event_rows(txn, h.skey, req, max_bytes, h.rec.version, upto);
    if (!r)
      return std::move(r).err();
    rows = std::move(*r);
  }
  auto evs = decode_events(rows);
  if (!evs)
    return std::move(evs).err();
  session s;
  s.app_name = req.ref.app_name;
  s.user_id = req.ref.user_id;
  s.id = req.ref.session_id;
  s.version = h.rec.version;
  s.last_update_time = h.rec.last_update_time;
  if (h.rec.expires != 0)
    s.expires_at = h.rec.expires;
  s.state = std::move(h.state);
  if (req.as_of_version) {
    auto past = state_at(txn, h.skey, h.rec.version, upto);
    if (!past)
      return std::move(past).err();
    // The past own keys, with the current app: and user: keys the head's
    // merged state already holds.
    for (auto it = s.state.begin(); it != s.state.end(); ++it)
      if (scope_of(it.key()) != scope::session)
        past->state[it.key()] = std::move(it.value());
    s.state = std::move(past->state);
    s.version = upto;
    s.last_update_time = h.rec.created;
    if (upto > 0) {
      auto at = read_event(txn, h.skey, upto);
      if (!at)
        return std::move(at).err();
      if (!*at || !(**at).ev.timestamp)
        return damaged(table::events, event_key(h.skey, upto));
      s.last_update_time = *(**at).ev.timestamp;
    }
    s.as_of = as_of_info{upto, past->exact};
  }
  s.events = std::move(*evs);
  return with_cursor(txn, std::move(s), epoch);
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
    const bool legacy = txn.legacy_values();
    // Adds row (k, v) to `out`; false (err set) when it is damaged.
    auto take = [&](std::string_view k, std::string_view v) {
      auto body = open_row(t, k, v, legacy);
      if (!body) {
        err = damaged(t, k);
        return false;
      }
      auto val = parse_stored(*body);
      if (!val) {
        err = std::move(val).err();
        return false;
      }
      out[std::string(k.substr(prefix.size()))] = std::move(*val);
      return true;
    };
    const bool tallied = txn.state_tallies() && !prefix.empty() && prefix.back() == '\0'
      && (t == table::session_state || t == table::user_state || t == table::app_state);
    if (!tallied) {
      txn.scan(t, prefix, {}, take);
      if (err)
        return std::move(*err);
      return out;
    }
    // The scope's tally row (its key: the prefix without its NUL) sorts
    // just before its rows, and every key after them differs from the
    // prefix at that NUL, so one scan from the tally key reads both.
    const std::string_view scope(prefix.data(), prefix.size() - 1);
    state_tally stored, found;
    txn.scan(t, scope, {}, [&](std::string_view k, std::string_view v) {
      if (k.size() == scope.size()) {
        auto tally = decode_tally(k, v);
        if (!tally) {
          err = damaged(t, k);
          return false;
        }
        stored = *tally;
        return true;
      }
      if (k[scope.size()] != '\0')
        return false; // another scope whose name this one's begins
      tally_in(found, v);
      return take(k, v);
    });
    if (err)
      return std::move(*err);
    if (stored != found)
      return tally_mismatch(t, scope, stored, found);
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
    auto rec = decode_record(skey, *raw, txn.legacy_values());
    if (!rec)
      return damaged(table::sessions, skey);
    return std::optional<session_record>{*rec};
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

result<std::optional<session_record>> read_record_unless_deleted(kv_store& kv,
                                                                 std::string_view skey) {
  try {
    auto txn = kv.begin_read();
    auto rec = read_record(*txn, skey);
    if (rec && *rec) {
      auto p = split_key(skey, 3);
      if (p.size() == 3 && fenced(*txn, p[0], p[1]))
        return std::optional<session_record>{};
    }
    if (rec && !*rec)
      if (auto e = record_lost(*txn, std::string(skey)))
        return std::move(*e);
    return rec;
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

result<std::optional<session_record>> read_live_record(kv_read& txn, std::string_view skey,
                                                       double now) {
  auto rec = read_record(txn, skey);
  try {
    if (rec && *rec) {
      auto p = split_key(skey, 3);
      if (((**rec).expires != 0 && expired(**rec, now))
          || (p.size() == 3 && fenced(txn, p[0], p[1])))
        return std::optional<session_record>{};
    }
    if (rec && !*rec)
      if (auto e = record_lost(txn, std::string(skey)))
        return std::move(*e);
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
  return rec;
}

result<std::optional<append_result>> read_event(kv_read& txn, std::string_view skey,
                                                std::uint64_t version) {
  try {
    auto key = event_key(skey, version);
    auto row = txn.get(table::events, key);
    if (!row)
      return std::optional<append_result>{};
    auto body = open_row(table::events, key, *row, txn.legacy_values());
    if (!body)
      return damaged(table::events, key);
    auto ev = decode_event_body(*body);
    if (!ev)
      return std::move(ev).err();
    return std::optional<append_result>{append_result{std::move(*ev), version, {}, {}}};
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

result<void>
scan_event_bodies(kv_read& txn, std::string_view skey, std::uint64_t upto,
                  const std::function<result<bool>(std::uint64_t, std::string_view)>& fn) {
  try {
    if (upto == 0)
      return {};
    std::string prefix(skey);
    prefix += '\0';
    std::optional<error> err;
    const bool legacy = txn.legacy_values();
    std::uint64_t next = 1; // the version the next row must hold
    bool stopped = false; // by fn
    txn.scan(table::events, prefix, {}, [&](std::string_view k, std::string_view row) {
      auto body = open_row(table::events, k, row, legacy);
      if (!body || k.size() != prefix.size() + 8) {
        err = damaged(table::events, k);
        return false;
      }
      auto v = read_be64(k.substr(prefix.size()));
      if (v > upto)
        return false;
      if (v != next) { // rows of a live session run from 1 without a gap (H4)
        err = missing_rows(
          skey, "event v" + std::to_string(next) + " (found v" + std::to_string(v) + ")");
        return false;
      }
      ++next;
      auto more = fn(v, *body);
      if (more && !*more)
        stopped = true;
      if (!more) {
        err = std::move(more).err();
        return false;
      }
      return *more;
    });
    if (err)
      return std::move(*err);
    if (!stopped && upto != UINT64_MAX && next <= upto)
      return missing_rows(
        skey, "event v" + std::to_string(next) + " of the " + std::to_string(upto) + " read");
    return {};
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

result<void> scan_event_ids(kv_read& txn, std::string_view skey,
                            const std::function<void(std::uint64_t, const std::string&)>& fn) {
  return scan_event_bodies(txn, skey, UINT64_MAX,
                           [&](std::uint64_t v, std::string_view body) -> result<bool> {
                             auto ev = decode_event_body(body);
                             if (!ev)
                               return std::move(ev).err();
                             fn(v, ev->id);
                             return true;
                           });
}

result<std::optional<session>> read_session(kv_read& txn, const get_request& req,
                                            std::size_t max_bytes, double now,
                                            std::string_view epoch) {
  try {
    if (req.as_of_version || req.apply_rewinds)
      return read_past(txn, req, max_bytes, now, epoch);
    auto parts = read_parts(txn, req, max_bytes, now);
    if (!parts)
      return std::move(parts).err();
    if (!*parts)
      return std::optional<session>{};
    auto evs = decode_events((*parts)->rows);
    if (!evs)
      return std::move(evs).err();
    auto& head = (*parts)->head;
    session s;
    s.app_name = req.ref.app_name;
    s.user_id = req.ref.user_id;
    s.id = req.ref.session_id;
    s.state = std::move(head.state);
    s.last_update_time = head.rec.last_update_time;
    s.version = head.rec.version;
    if (head.rec.expires != 0)
      s.expires_at = head.rec.expires;
    s.events = std::move(*evs);
    return with_cursor(txn, std::move(s), epoch);
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

result<std::string> read_session_text(kv_read& txn, const get_request& req, const json* extra,
                                      std::size_t max_bytes, double now, std::string_view epoch) {
  try {
    if (req.as_of_version || req.apply_rewinds) {
      auto past = read_past(txn, req, max_bytes, now, epoch);
      if (!past)
        return std::move(past).err();
      if (!*past)
        return std::string("null");
      if (extra)
        for (auto it = extra->begin(); it != extra->end(); ++it)
          (**past).state[it.key()] = it.value();
      auto text = dump_json(to_json(**past));
      if (!text)
        return corrupt("session: " + text.err().message);
      return std::move(*text);
    }
    auto& r = req.ref;
    auto parts = read_parts(txn, req, max_bytes, now);
    if (!parts)
      return std::move(parts).err();
    if (!*parts)
      return std::string("null");
    auto& rec = (*parts)->head.rec;
    auto& state = (*parts)->head.state;
    const auto* rows = &(*parts)->rows;
    if (extra)
      for (auto it = extra->begin(); it != extra->end(); ++it)
        state[it.key()] = it.value();
    auto state_text = dump_json(state);
    if (!state_text)
      return corrupt("session state: " + state_text.err().message);
    auto found = snapshot_cursor(txn, epoch);
    if (!found)
      return std::move(found).err();
    const std::string& cursor = *found;
    // Members in the order nlohmann's sorted objects dump them, so the text
    // equals dump_json(to_json(session)).
    std::size_t size =
      128 + r.app_name.size() + r.user_id.size() + r.session_id.size() + state_text->size();
    for (auto row : *rows)
      size += row.size();
    std::string out;
    out.reserve(size);
    out += "{\"app_name\":";
    out += json(r.app_name).dump();
    if (!cursor.empty()) {
      out += ",\"cursor\":\"";
      out += cursor; // hex digits and '-' only: nothing to escape
      out += '"';
    }
    out += ",\"events\":[";
    for (std::size_t i = 0; i < rows->size(); ++i) {
      if (i)
        out += ',';
      out.append(event_body_text((*rows)[i]));
    }
    out += ']';
    if (rec.expires != 0) {
      out += ",\"expires_at\":";
      out += json(rec.expires).dump();
    }
    out += ",\"id\":";
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

result<std::string> read_session_text(kv_store& kv, const get_request& req, const json* extra,
                                      std::size_t max_bytes, double now, std::string_view epoch) {
  try {
    auto txn = kv.begin_read();
    return read_session_text(*txn, req, extra, max_bytes, now, epoch);
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

result<std::optional<session>> read_session(kv_store& kv, const get_request& req,
                                            std::size_t max_bytes, double now,
                                            std::string_view epoch) {
  try {
    auto txn = kv.begin_read();
    return read_session(*txn, req, max_bytes, now, epoch);
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

result<std::optional<json>> read_state_value(kv_read& txn, std::string_view app,
                                             std::string_view user, std::string_view id,
                                             std::string_view key) try {
  if (scope_of(key) == scope::app ? app_fenced(txn, app) : fenced(txn, app, user))
    return std::optional<json>{}; // X2/X3: being deleted
  std::optional<std::string_view> raw;
  std::string k;
  table t = table::session_state;
  switch (scope_of(key)) {
    case scope::user:
      t = table::user_state;
      k = sub_key(user_scope_key(app, user), unprefixed(key));
      break;
    case scope::app:
      t = table::app_state;
      k = sub_key(app, unprefixed(key));
      break;
    case scope::session: k = sub_key(session_key(app, user, id), key); break;
    case scope::temp: return std::optional<json>{};
  }
  raw = txn.get(t, k);
  if (!raw) {
    // The row's key may have been damaged into one that still sorts between
    // its neighbours: then it is the key just before or just after `k`, and
    // its seal (over the key it was written under) fails. Intact neighbours'
    // seals hold. A row lost outright leaves nothing to find here: only a
    // read of the whole scope, against its tally, shows it.
    std::optional<error> bad;
    auto look = [&](std::string_view nk, std::string_view nv) {
      if (!open_row(t, nk, nv, txn.legacy_values()))
        bad = damaged(t, nk);
      return false;
    };
    txn.scan(t, {}, k, look);
    if (!bad)
      txn.scan_back(t, {}, k, look);
    if (bad)
      return std::move(*bad);
    return std::optional<json>{};
  }
  auto body = open_row(t, k, *raw, txn.legacy_values());
  if (!body)
    return damaged(t, k);
  auto v = parse_stored(*body);
  if (!v)
    return std::move(v).err();
  return std::optional<json>{std::move(*v)};
} catch (const kv_failure& f) {
  return from_failure(f);
}

result<json> read_scope(kv_read& txn, std::string_view app, const std::string* user) {
  try {
    if (user ? fenced(txn, app, *user) : app_fenced(txn, app))
      return json::object(); // X2/X3: being deleted
    if (user)
      return read_rows(txn, table::user_state, user_scope_key(app, *user) + '\0');
    return read_rows(txn, table::app_state, std::string(app) + '\0');
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

} // namespace agentstate::store
