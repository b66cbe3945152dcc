// SPDX-License-Identifier: Apache-2.0
#include "store/verify.hpp"

#include <unordered_map>

#include "agentstate/json.hpp"
#include "model/shard.hpp"
#include "store/apply.hpp"
#include "store/change_log.hpp"
#include "store/format.hpp"
#include "store/keys.hpp"
#include "store/listing.hpp"
#include "store/purge.hpp"
#include "store/reads.hpp"
#include "store/records.hpp"
#include "store/replica.hpp"
#include "store/scope_delete.hpp"
#include "store/tree_counts.hpp"

namespace agentstate::store {

namespace {

struct checker {
  verify_report& r;
  void fault(std::string msg) {
    ++r.faults;
    if (r.messages.size() < 100)
      r.messages.push_back(std::move(msg));
  }
};

// A key with its NULs shown as '/', as valid UTF-8.
std::string shown(std::string_view k) {
  std::string out;
  for (char c : k)
    out += c == '\0' ? '/' : c;
  return printable(out);
}

// Counts the rows of `t`; with `sealed_index`, also checks each entry's
// checksum (the list indexes).
std::uint64_t count_rows(kv_read& txn, table t, checker* sealed_index = nullptr) {
  std::uint64_t n = 0;
  const bool legacy = txn.legacy_values();
  txn.scan(t, {}, {}, [&](std::string_view k, std::string_view v) {
    ++n;
    if (sealed_index && !open_row(t, k, v, legacy))
      sealed_index->fault(damaged(t, k).message);
    return true;
  });
  return n;
}

// Whether the state scope `scope` of table `t` is being deleted (its
// session marked for purge, its user or app under a fence): its rows go in
// steps, so its tally need not match them.
bool scope_purging(kv_read& txn, table t, std::string_view scope) {
  auto p = split_key(scope, 3);
  switch (t) {
    case table::session_state:
      return is_doomed(txn, scope) || (p.size() == 3 && fenced(txn, p[0], p[1]));
    case table::user_state: return p.size() == 2 && fenced(txn, p[0], p[1]);
    default: return app_fenced(txn, scope);
  }
}

// Checks every row of state table `t` (keys of `parts` parts): its seal, its
// key's form, its value's JSON; and (format 8) each scope's rows against its
// tally row. `count` counts the state rows (not the tallies).
void check_value_rows(kv_read& txn, table t, std::size_t parts, checker& c, std::uint64_t& count) {
  const bool legacy = txn.legacy_values();
  const bool tallied = txn.state_tallies();
  std::string scope; // the scope being read ("" before the first)
  bool open = false, known = true;
  state_tally stored, found;
  auto close = [&] {
    if (open && known && stored != found && !scope_purging(txn, t, scope))
      c.fault(tally_mismatch(t, scope, stored, found).message);
    open = false;
  };
  auto begin = [&](std::string_view k) {
    close();
    scope = std::string(k);
    open = known = true;
    stored = found = {};
  };
  txn.scan(t, {}, {}, [&](std::string_view k, std::string_view v) {
    if (tallied && is_tally_key(t, k)) {
      begin(k);
      if (auto x = decode_tally(k, v)) {
        stored = *x;
      } else {
        c.fault(damaged(t, k).message);
        known = false;
      }
      return true;
    }
    if (tallied) {
      auto sc = scope_of_row(t, k);
      if (!open || sc != scope)
        begin(sc);
      tally_in(found, v);
    }
    ++count;
    auto body = open_row(t, k, v, legacy);
    if (!body) {
      c.fault(damaged(t, k).message);
      return true;
    }
    auto p = split_key(k, parts);
    if (p.size() != parts || p[0].empty() || (parts == 3 && p[1].empty()))
      c.fault(std::string(table_name(t)) + ": malformed key '" + shown(k) + "'");
    if (!parse_json(*body, stored_json_depth))
      c.fault(std::string(table_name(t)) + ": value of '" + shown(k) + "' is not valid JSON");
    return true;
  });
  close();
}

// The change log: every row decodes, the sequence has no gap (retention
// trims only from the front).
void check_changes(kv_read& txn, checker& c, std::uint64_t& rows) {
  std::uint64_t prev = 0;
  txn.scan(table::changes, {}, {}, [&](std::string_view k, std::string_view v) {
    ++rows;
    auto row = decode_change(k, v);
    if (!row) {
      c.fault(row.err().message);
      return true;
    }
    if (prev != 0 && row->seq != prev + 1)
      c.fault("changes: the sequence jumps from " + std::to_string(prev) + " to "
              + std::to_string(row->seq));
    prev = row->seq;
    return true;
  });
}

} // namespace

verify_report check_row_counts(kv_read& txn, bool seals) {
  verify_report r;
  checker c{r};
  try {
    const bool legacy = txn.legacy_values();
    for (auto& tree : recorded_counts(txn)) {
      std::uint64_t reached = 0;
      std::string names;
      for (auto t : tree.tables) {
        names += names.empty() ? "" : ", ";
        names += table_name(t);
        txn.scan(t, {}, {}, [&](std::string_view k, std::string_view v) {
          ++reached;
          if (seals && t != table::meta && !open_row(t, k, v, legacy))
            c.fault(damaged(t, k).message);
          return true;
        });
      }
      if (reached != tree.rows)
        c.fault("the B-tree of " + names + " is damaged: the store records "
                + std::to_string(tree.rows) + " rows, a walk reaches " + std::to_string(reached)
                + " ("
                + std::to_string(reached < tree.rows ? tree.rows - reached : reached - tree.rows)
                + (reached < tree.rows ? " missing)" : " extra)"));
    }
  } catch (const kv_failure& f) {
    c.fault(std::string("storage: ") + f.message);
  }
  return r;
}

verify_report verify_store(kv_read& txn, const std::function<void(std::uint64_t)>& progress) {
  verify_report r;
  checker c{r};
  try {
    auto fmt = txn.get(table::meta, "format");
    if (!fmt)
      c.fault("meta: no format version");
    else if (!known_format(*fmt))
      c.fault("meta: format " + std::string(*fmt) + ", expected "
              + std::to_string(oldest_format_version) + " to " + std::to_string(format_version));
    // The replica positions (store/replica.hpp): each row decodes.
    txn.scan(table::meta, replica_key_prefix, {}, [&](std::string_view k, std::string_view v) {
      if (auto p = decode_replica_row(k, v); !p)
        c.fault(p.err().message);
      return true;
    });
    const bool legacy = txn.legacy_values();
    // Formats before 5 have no creation-order indexes.
    const bool created_index = fmt && known_format(*fmt) >= 5;
    auto indexed = [created_index](table t) {
      return created_index || (t != table::by_created && t != table::by_user_created);
    };
    std::uint64_t expiring = 0;
    // Format 9: each app's and user's session count against its sessions
    // (records in key order: a scope's are contiguous), and then the count
    // rows against the scopes seen.
    const bool counted = txn.session_counts();
    std::string scope_keys[2]; // the app, and app ‖ 0 ‖ user, being counted
    std::uint64_t in_scope[2] = {0, 0}, scopes_seen = 0;
    auto close_scope = [&](int i) {
      if (in_scope[i] == 0)
        return;
      ++scopes_seen;
      auto& key = scope_keys[i];
      auto raw = txn.get(table::session_counts, key);
      auto n = raw ? decode_session_count(key, *raw) : std::optional<std::uint64_t>(0);
      if (!n)
        c.fault(damaged(table::session_counts, key).message);
      else if (*n != in_scope[i])
        c.fault(count_mismatch(key, *n, in_scope[i]).message);
      in_scope[i] = 0;
    };
    auto count_scope = [&](std::string_view skey) {
      auto p = split_key(skey, 3);
      if (!counted || p.size() != 3)
        return;
      std::string keys[2] = {std::string(p[0]), user_scope_key(p[0], p[1])};
      for (int i = 1; i >= 0; --i)
        if (keys[i] != scope_keys[i]) {
          close_scope(i);
          scope_keys[i] = std::move(keys[i]);
        }
      ++in_scope[0];
      ++in_scope[1];
    };
    // Format 11: one intact shard index entry per session (a damaged record
    // too: its key names its app and user), and then no entry without one.
    const bool sharded = txn.shard_index();
    std::uint64_t index_expected = 0;
    auto check_index = [&](std::string_view skey, const std::string& name) {
      auto p = split_key(skey, 3);
      if (!sharded || p.size() != 3)
        return;
      ++index_expected;
      auto key = shard_index_key(p[0], p[1], skey);
      auto raw = txn.get(table::shard_index, key);
      if (!raw)
        c.fault("session " + name + ": missing from the shard index");
      else if (!open_row(table::shard_index, key, *raw, legacy))
        c.fault(damaged(table::shard_index, key).message);
    };
    txn.scan(table::sessions, {}, {}, [&](std::string_view skey_view, std::string_view raw) {
      std::string skey(skey_view);
      std::string name = shown(skey);
      ++r.sessions;
      count_scope(skey);
      check_index(skey, name);
      if (progress && r.sessions % 10000 == 0)
        progress(r.sessions);
      auto rec = decode_record(skey, raw, legacy);
      if (!rec) {
        // The session's other rows are still checked, each damaged one named.
        c.fault(damaged(table::sessions, skey).message);
        txn.scan(table::events, skey + '\0', {}, [&](std::string_view k, std::string_view row) {
          ++r.events;
          if (!open_row(table::events, k, row, legacy))
            c.fault(damaged(table::events, k).message);
          return true;
        });
        return true;
      }
      auto parts = split_key(skey, 3);
      if (parts.size() != 3 || parts[0].empty() || parts[1].empty() || parts[2].empty()) {
        c.fault("sessions: malformed key '" + name + "'");
        return true;
      }
      std::string prefix = skey + '\0';
      if (fenced(txn, parts[0], parts[1])) {
        // Its user or app is being deleted (X2/X3): its events go first, so
        // they need not start at 1 or reach the record's version.
        txn.scan(table::events, prefix, {}, [&](std::string_view, std::string_view) {
          ++r.events;
          return true;
        });
        expiring += rec->expires != 0;
        return true;
      }
      std::uint64_t expect = 1;
      std::unordered_map<std::string, std::uint64_t> ids; // A6: one event per id
      txn.scan(table::events, prefix, {}, [&](std::string_view k, std::string_view row) {
        ++r.events;
        auto version = read_be64(k.substr(prefix.size()));
        if (k.size() != prefix.size() + 8 || version != expect) {
          c.fault("session " + name + ": event version " + std::to_string(version) + " where "
                  + std::to_string(expect) + " was expected");
          expect = version + 1;
          return true;
        }
        ++expect;
        auto body = open_row(table::events, k, row, legacy);
        if (!body) {
          c.fault(damaged(table::events, k).message);
          return true;
        }
        auto ev = decode_event_body(*body);
        if (!ev) {
          c.fault("session " + name + " v" + std::to_string(version) + ": " + ev.err().message);
          return true;
        }
        if (!ev->timestamp || *ev->timestamp != event_body_timestamp(*body))
          c.fault("session " + name + " v" + std::to_string(version)
                  + ": row timestamp differs from the event's");
        auto [at, added] = ids.emplace(ev->id, version);
        if (!added)
          c.fault("session " + name + " v" + std::to_string(version) + ": event id '"
                  + printable(ev->id) + "' repeats v" + std::to_string(at->second));
        return true;
      });
      if (expect - 1 != rec->version)
        c.fault("session " + name + ": record says version " + std::to_string(rec->version)
                + ", events end at " + std::to_string(expect - 1));
      for (auto& [t, key] :
           list_entries(parts[0], parts[1], parts[2], rec->last_update_time, rec->created))
        if (indexed(t) && !txn.get(t, key))
          c.fault("session " + name + ": missing from the " + table_name(t) + " index");
      if (rec->expires != 0) {
        ++expiring;
        std::string k;
        set_expiry_key(k, rec->expires, skey);
        if (!txn.get(table::expiry, k))
          c.fault("session " + name + ": missing from the expiry index");
      } else if (rec->refresh != 0) {
        c.fault("session " + name + ": record has a refresh but no expiry");
      }
      return true;
    });
    close_scope(1);
    close_scope(0);
    if (counted) {
      std::uint64_t rows = 0;
      txn.scan(table::session_counts, {}, {}, [&](std::string_view, std::string_view) {
        ++rows;
        return true;
      });
      if (rows != scopes_seen) // name the rows whose scope holds no session
        txn.scan(table::session_counts, {}, {}, [&](std::string_view k, std::string_view) {
          std::string prefix(k);
          prefix.push_back('\0');
          if (first_keys(txn, table::sessions, prefix, 1).empty())
            c.fault(row_name(table::session_counts, k) + " counts sessions that do not exist");
          return true;
        });
    }
    if (sharded) {
      std::uint64_t rows = 0;
      txn.scan(table::shard_index, {}, {}, [&](std::string_view, std::string_view) {
        ++rows;
        return true;
      });
      if (rows != index_expected) // name the entries of no session, or under a wrong hash
        txn.scan(table::shard_index, {}, {}, [&](std::string_view k, std::string_view v) {
          if (k.size() < 8 || !open_row(table::shard_index, k, v, legacy)) {
            c.fault(damaged(table::shard_index, k).message);
            return true;
          }
          auto skey = k.substr(8);
          auto p = split_key(skey, 3);
          if (!txn.get(table::sessions, skey))
            c.fault(row_name(table::shard_index, k) + " names a missing session");
          else if (p.size() != 3 || read_be64(k) != model::user_hash(p[0], p[1]))
            c.fault(row_name(table::shard_index, k) + " is not under its session's hash");
          return true;
        });
    }
    // The expiry index (format 7): one intact entry per session that expires.
    std::uint64_t expiry_entries = 0;
    txn.scan(table::expiry, {}, {}, [&](std::string_view k, std::string_view v) {
      ++expiry_entries;
      if (!open_row(table::expiry, k, v, legacy) || k.size() < 8) {
        c.fault(damaged(table::expiry, k).message);
        return true;
      }
      auto skey = k.substr(8);
      auto raw = txn.get(table::sessions, skey);
      auto rec = raw ? decode_record(skey, *raw, legacy) : std::nullopt;
      if (raw && rec && bits_of(rec->expires) != bits_of(read_ordered_double(k)))
        c.fault(row_name(table::expiry, k) + " differs from the session's expiry");
      else if (!raw)
        c.fault(row_name(table::expiry, k) + " names a missing session");
      return true;
    });
    if (expiry_entries != expiring)
      c.fault("expiry: " + std::to_string(expiry_entries) + " entries for "
              + std::to_string(expiring) + " sessions that expire");
    // Deleted sessions still being purged (format 7): a mark each, no record;
    // their rows are neither counted nor faults.
    std::uint64_t purging_events = 0;
    txn.scan(table::doomed, {}, {}, [&](std::string_view k, std::string_view v) {
      ++r.purging;
      if (!open_row(table::doomed, k, v, legacy))
        c.fault(damaged(table::doomed, k).message);
      if (txn.get(table::sessions, k))
        c.fault(row_name(table::doomed, k) + " names a session that exists");
      txn.scan(table::events, std::string(k) + '\0', {}, [&](std::string_view, std::string_view) {
        ++purging_events;
        return true;
      });
      return true;
    });
    // Users and apps being deleted (format 7): a fence each.
    txn.scan(table::fences, {}, {}, [&](std::string_view k, std::string_view v) {
      ++r.purging;
      if (!open_row(table::fences, k, v, legacy))
        c.fault(damaged(table::fences, k).message);
      return true;
    });
    // App writes applied as the app's home (format 9): each outcome an
    // intact JSON object.
    txn.scan(table::app_writes, {}, {}, [&](std::string_view k, std::string_view v) {
      auto body = open_row(table::app_writes, k, v, legacy);
      if (!body) {
        c.fault(damaged(table::app_writes, k).message);
        return true;
      }
      auto o = parse_stored(*body);
      if (!o || !o->is_object())
        c.fault(row_name(table::app_writes, k) + " is not a JSON object");
      return true;
    });
    // Appends waiting for their app: part (format 10): an intact row at its
    // session's next version, or under a delete (its actor drops it); a
    // create's (version 0) before its session exists.
    txn.scan(table::outbox, {}, {}, [&](std::string_view k, std::string_view v) {
      auto body = open_row(table::outbox, k, v, legacy);
      if (!body || k.size() < 9 || k[k.size() - 9] != '\0') {
        c.fault(damaged(table::outbox, k).message);
        return true;
      }
      auto skey = k.substr(0, k.size() - 9);
      auto raw = txn.get(table::sessions, skey);
      auto rec = raw ? decode_record(skey, *raw, legacy) : std::nullopt;
      auto p = split_key(skey, 3);
      if (rec && rec->version + 1 != read_be64(k.substr(k.size() - 8)))
        c.fault(row_name(table::outbox, k) + " is not at its session's next version");
      else if (!raw && read_be64(k.substr(k.size() - 8)) != 0
               && !(p.size() == 3 && fenced(txn, p[0], p[1])))
        c.fault(row_name(table::outbox, k) + " names a missing session");
      return true;
    });
    // Rows of missing sessions: every table's total must match the sums.
    auto total_events = count_rows(txn, table::events);
    if (total_events != r.events + purging_events)
      c.fault("events: " + std::to_string(total_events - r.events - purging_events)
              + " rows belong to no session");
    for (auto t : {table::by_update, table::by_user, table::by_created, table::by_user_created}) {
      if (!indexed(t))
        continue;
      auto n = count_rows(txn, t, &c);
      if (n != r.sessions)
        c.fault(std::string(table_name(t)) + ": " + std::to_string(n) + " entries for "
                + std::to_string(r.sessions) + " sessions");
    }
    check_value_rows(txn, table::session_state, 4, c, r.session_rows);
    txn.scan(table::session_state, {}, {}, [&](std::string_view k, std::string_view) {
      auto p = split_key(k, 4);
      if (p.size() >= 3 && !txn.get(table::sessions, session_key(p[0], p[1], p[2]))
          && !txn.get(table::doomed, session_key(p[0], p[1], p[2])))
        c.fault("session_state: row '" + shown(k) + "' of a missing session");
      return true;
    });
    check_value_rows(txn, table::user_state, 3, c, r.user_rows);
    check_value_rows(txn, table::app_state, 2, c, r.app_rows);
    if (fmt && known_format(*fmt) >= 6)
      check_changes(txn, c, r.changes);
    // Origins (format 7): each an intact JSON object of an existing session.
    txn.scan(table::origins, {}, {}, [&](std::string_view k, std::string_view v) {
      auto body = open_row(table::origins, k, v, legacy);
      if (!body) {
        c.fault(damaged(table::origins, k).message);
        return true;
      }
      auto o = parse_stored(*body);
      if (!o || !o->is_object())
        c.fault(row_name(table::origins, k) + " is not a JSON object");
      if (!txn.get(table::sessions, k))
        c.fault("origins: row '" + shown(std::string(k)) + "' of a missing session");
      return true;
    });
  } catch (const kv_failure& f) {
    c.fault(std::string("storage: ") + f.message);
  }
  // Rows no walk reaches (a B-tree page that lost entries or a subtree).
  auto counted = check_row_counts(txn, false);
  r.faults += counted.faults;
  for (auto& m : counted.messages)
    if (r.messages.size() < 100)
      r.messages.push_back(std::move(m));
  return r;
}

} // namespace agentstate::store
