// SPDX-License-Identifier: Apache-2.0
#include "store/exchange.hpp"

#include <cmath>
#include <unordered_map>
#include <utility>

#include "agentstate/json.hpp"
#include "agentstate/types.hpp"
#include "model/checks.hpp"
#include "model/ids.hpp"
#include "store/apply.hpp"
#include "store/expiry.hpp"
#include "store/scope_delete.hpp"
#include "store/format.hpp"
#include "store/history.hpp"
#include "store/keys.hpp"
#include "store/listing.hpp"
#include "store/reads.hpp"
#include "store/records.hpp"

namespace agentstate::store {

namespace {

std::vector<std::string> split_nul(std::string_view k) {
  std::vector<std::string> parts;
  for (;;) {
    auto nul = k.find('\0');
    parts.emplace_back(k.substr(0, nul));
    if (nul == std::string_view::npos)
      return parts;
    k.remove_prefix(nul + 1);
  }
}

// A row that passed its checksum (or has none: formats 1-3) but does not
// decode.
error corrupt_exchange(const std::string& what) {
  return error{errc::internal, "corrupt store (run verify): " + what};
}

// Emits one line per scope (user or app) from a state table whose keys are
// scope ‖ 0 ‖ key, grouping consecutive rows of the same scope, each scope
// preceded by its tally row (key: scope; format 8). A scope with a damaged
// row, or whose rows disagree with its tally, goes to `on_damaged` (when
// set) instead of the output.
result<void> export_scopes(kv_read& txn, table t, const std::string& prefix, bool user,
                           const std::function<void(const std::string&)>& sink,
                           const std::function<void(const error&)>& on_damaged, std::uint64_t& n) {
  std::optional<error> err;
  std::string current; // scope part of the key, with its trailing NUL
  json state;
  bool skip = false; // the current scope has a damaged row (reported)
  bool fenced_scope = false; // the current scope is being deleted (X2/X3)
  state_tally stored, found; // the current scope's tally and its rows'
  const bool legacy = txn.legacy_values();
  const bool tallied = txn.state_tallies();
  auto report = [&](error e) {
    if (!on_damaged) {
      err = std::move(e);
      return false;
    }
    on_damaged(e);
    skip = true;
    return true;
  };
  auto emit = [&] {
    if (current.empty() || skip || fenced_scope)
      return true;
    if (tallied && stored != found)
      return report(
        tally_mismatch(t, std::string_view(current).substr(0, current.size() - 1), stored, found));
    auto parts = split_nul(std::string_view(current).substr(0, current.size() - 1));
    json rec = {{"type", user ? "user_state" : "app_state"}, {"app_name", parts[0]}};
    if (user)
      rec["user_id"] = parts.size() > 1 ? parts[1] : "";
    rec["state"] = std::move(state);
    sink(rec.dump());
    ++n;
    return true;
  };
  auto begin_scope = [&](std::string_view scope) {
    if (!emit())
      return false;
    current = std::string(scope);
    state = json::object();
    stored = found = {};
    skip = false;
    // X2/X3: a scope being deleted is not exported.
    auto p = split_nul(scope.substr(0, scope.size() - 1));
    fenced_scope = user ? p.size() > 1 && fenced(txn, p[0], p[1]) : app_fenced(txn, p[0]);
    if (fenced_scope || !tallied)
      return true;
    // The tally row precedes the rows, but a scan under one user or app
    // starts after it.
    const auto key = scope.substr(0, scope.size() - 1);
    if (auto raw = txn.get(t, key)) {
      auto x = decode_tally(key, *raw);
      if (!x)
        return report(damaged(t, key));
      stored = *x;
    }
    return true;
  };
  txn.scan(t, prefix, {}, [&](std::string_view k, std::string_view v) {
    if (tallied && is_tally_key(t, k))
      return begin_scope(std::string(k) + '\0');
    // The scope part ends at the 1st (app) or 2nd (user) NUL.
    auto cut = k.find('\0');
    if (user && cut != std::string_view::npos)
      cut = k.find('\0', cut + 1);
    if (cut == std::string_view::npos) {
      err = corrupt_exchange(std::string(table_name(t)) + " key without scope");
      return false;
    }
    auto scope = k.substr(0, cut + 1);
    if (scope != current && !begin_scope(scope))
      return false;
    if (skip || fenced_scope)
      return true;
    auto body = open_row(t, k, v, legacy);
    if (!body)
      return report(damaged(t, k));
    auto val = parse_json(*body, stored_json_depth);
    if (!val) {
      err = corrupt_exchange("state row: " + val.err().message);
      return false;
    }
    tally_in(found, v);
    state[std::string(k.substr(cut + 1))] = std::move(*val);
    return true;
  });
  if (err)
    return *err;
  if (!emit())
    return *err;
  return {};
}

} // namespace

result<std::uint64_t> export_store(kv_read& txn, const export_filter& f,
                                   const std::function<void(const std::string&)>& sink,
                                   const std::function<void(const error&)>& on_damaged) {
  try {
    std::uint64_t n = 0;
    sink(json{{"type", "header"}, {"format", export_format_version}}.dump());
    ++n;
    std::string prefix;
    if (f.app)
      prefix = *f.app + '\0';
    if (f.user)
      prefix += *f.user + '\0';
    std::optional<error> err;
    const bool legacy = txn.legacy_values();
    const double now = model::now_seconds();
    // One session's lines, emitted once all of them decode.
    std::vector<std::string> lines;
    // A damaged session: reported and skipped with on_damaged, else the end.
    auto give_up = [&](error e) {
      if (e.code != errc::data_corrupt || !on_damaged) {
        err = std::move(e);
        return false;
      }
      on_damaged(e);
      return true;
    };
    auto one_session = [&](std::string_view skey, std::string_view raw) {
      if (f.session && skey != session_key(*f.app, *f.user, *f.session))
        return true;
      auto parts = split_nul(skey);
      auto rec = decode_record(skey, raw, legacy);
      if (!rec)
        return give_up(damaged(table::sessions, skey));
      if (parts.size() != 3) {
        err = corrupt_exchange("session key '" + printable(skey) + "'");
        return false;
      }
      // T1, X2/X3: deleted for every reader, not yet purged.
      if (expired(*rec, now) || fenced(txn, parts[0], parts[1]))
        return true;
      std::string sk(skey);
      auto own = read_rows(txn, table::session_state, sk + '\0');
      if (!own)
        return give_up(std::move(own).err());
      json session_line{{"type", "session"},       {"app_name", parts[0]},
                        {"user_id", parts[1]},     {"id", parts[2]},
                        {"created", rec->created}, {"last_update_time", rec->last_update_time},
                        {"version", rec->version}, {"state", std::move(*own)}};
      if (rec->expires != 0) {
        session_line["expires_at"] = rec->expires;
        if (rec->refresh != 0)
          session_line["refresh_ttl_s"] = rec->refresh;
      }
      // The state the session was created with (store format 7); absent
      // for a session created before.
      auto origin = read_origin(txn, sk);
      if (!origin)
        return give_up(std::move(origin).err());
      if (*origin) {
        auto o = parse_stored(**origin);
        if (!o || !o->is_object())
          return give_up(damaged(table::origins, sk));
        session_line["origin"] = std::move(*o);
      }
      lines.clear();
      lines.push_back(session_line.dump());
      std::optional<error> bad;
      std::uint64_t next = 1; // events run 1..version without a gap (H4)
      txn.scan(table::events, sk + '\0', {}, [&](std::string_view k, std::string_view row) {
        auto body = open_row(table::events, k, row, legacy);
        if (!body || k.size() != sk.size() + 9) {
          bad = damaged(table::events, k);
          return false;
        }
        if (auto v = read_be64(k.substr(sk.size() + 1)); v != next) {
          bad = missing_rows(
            sk, "event v" + std::to_string(next) + " (found v" + std::to_string(v) + ")");
          return false;
        }
        ++next;
        auto ev = parse_json(event_body_text(*body), stored_json_depth);
        if (!ev) {
          bad = corrupt_exchange("event: " + ev.err().message);
          return false;
        }
        lines.push_back(json{{"type", "event"},
                             {"app_name", parts[0]},
                             {"user_id", parts[1]},
                             {"session_id", parts[2]},
                             {"version", read_be64(k.substr(sk.size() + 1))},
                             {"event", std::move(*ev)}}
                          .dump());
        return true;
      });
      if (!bad && next - 1 != rec->version)
        bad = missing_rows(sk,
                           "event v" + std::to_string(next) + " of the record's "
                             + std::to_string(rec->version));
      if (bad)
        return give_up(std::move(*bad));
      for (auto& line : lines)
        sink(line);
      n += lines.size();
      return true;
    };
    if (f.session) {
      auto skey = session_key(*f.app, *f.user, *f.session);
      if (auto raw = txn.get(table::sessions, skey))
        one_session(skey, *raw);
    } else {
      txn.scan(table::sessions, prefix, {}, one_session);
    }
    if (err)
      return *err;
    if (!f.session) {
      if (auto r = export_scopes(txn, table::user_state, prefix, true, sink, on_damaged, n); !r)
        return r.err();
      if (!f.user)
        if (auto r = export_scopes(txn, table::app_state, prefix, false, sink, on_damaged, n); !r)
          return r.err();
    }
    return n;
  } catch (const kv_failure& e) {
    return error{e.code, e.message};
  }
}

result<std::uint64_t> export_scope_states(kv_read& txn,
                                          const std::function<void(const std::string&)>& sink) {
  try {
    std::uint64_t n = 0;
    if (auto r = export_scopes(txn, table::user_state, {}, true, sink, {}, n); !r)
      return r.err();
    if (auto r = export_scopes(txn, table::app_state, {}, false, sink, {}, n); !r)
      return r.err();
    return n;
  } catch (const kv_failure& e) {
    return error{e.code, e.message};
  }
}

namespace {

struct importer {
  kv_write* txn = nullptr;
  std::uint64_t line = 0;
  // The session whose events are being read, and the line of each of its
  // event ids and versions so far: a session's events are consecutive lines
  // (as export writes them), so a repeat is found with one session in memory.
  std::string events_of;
  std::unordered_map<std::string, std::uint64_t> id_lines;
  std::unordered_map<std::uint64_t, std::uint64_t> version_lines;

  error bad(const std::string& what) const {
    return error{errc::invalid_argument, "line " + std::to_string(line) + ": " + what};
  }

  result<std::string> str(const json& rec, const char* name) const {
    auto it = rec.find(name);
    if (it == rec.end() || !it->is_string() || it->get_ref<const std::string&>().empty())
      return bad(std::string("'") + name + "' must be a non-empty string");
    auto& s = it->get_ref<const std::string&>();
    if (s.find('\0') != std::string::npos)
      return bad(std::string("'") + name + "' contains a NUL byte");
    return s;
  }

  result<json> object(const json& rec, const char* name) const {
    auto it = rec.find(name);
    if (it == rec.end() || !it->is_object())
      return bad(std::string("'") + name + "' must be an object");
    return *it;
  }

  // Writes the rows of `state` under the scope `prefix` (its key and a
  // NUL) of state table `t`, and the scope's tally.
  result<void> put_rows(table t, const std::string& prefix, const json& state) {
    const std::string scope = prefix.substr(0, prefix.size() - 1);
    auto tally = read_tally(*txn, t, scope);
    if (!tally)
      return tally.err();
    std::string buf;
    for (auto it = state.begin(); it != state.end(); ++it) {
      if (it.key().find('\0') != std::string::npos || it.key().size() > 200)
        return bad("state key '" + it.key().substr(0, 40)
                   + "' has a NUL byte or exceeds 200 bytes");
      auto text = dump_json(it.value());
      if (!text)
        return bad(text.err().message);
      put_state_row(*txn, t, prefix + it.key(), &*text, buf, *tally);
    }
    put_tally(*txn, t, scope, *tally);
    return {};
  }

  // Refuses the event `id` at `version` (its row key `key`) of the session
  // `skey` when it repeats an id or a version of its session, or when its
  // session had events before the lines of another session.
  result<void> no_repeat(const std::string& skey, const std::string& key, const std::string& id,
                         std::uint64_t version) {
    const auto name = row_name(table::events, key);
    if (skey != events_of) {
      bool earlier = false;
      txn->scan(table::events, skey + '\0', {}, [&](std::string_view, std::string_view) {
        earlier = true;
        return false;
      });
      if (earlier)
        return bad(name
                   + ": the session's events are not on consecutive lines (as export "
                     "writes them)");
      events_of = skey;
      id_lines.clear();
      version_lines.clear();
    }
    if (auto [at, added] = id_lines.emplace(id, line); !added)
      return bad(name + ": event id '" + printable(id) + "' appears twice (lines "
                 + std::to_string(at->second) + " and " + std::to_string(line) + ")");
    if (auto [at, added] = version_lines.emplace(version, line); !added)
      return bad(name + ": event version " + std::to_string(version) + " appears twice (lines "
                 + std::to_string(at->second) + " and " + std::to_string(line) + ")");
    return {};
  }

  result<void> record(const json& rec) {
    if (!rec.is_object() || !rec.contains("type") || !rec["type"].is_string())
      return bad("not a record (an object with a \"type\")");
    const auto& type = rec["type"].get_ref<const std::string&>();
    if (type == "session") {
      auto app = str(rec, "app_name"), user = str(rec, "user_id"), id = str(rec, "id");
      auto state = object(rec, "state");
      for (auto* r : {&app, &user, &id})
        if (!*r)
          return r->err();
      if (!state)
        return state.err();
      if (!rec.value("created", json()).is_number()
          || !rec.value("last_update_time", json()).is_number()
          || !rec.value("version", json()).is_number_unsigned())
        return bad("session needs numeric created, last_update_time and version");
      session_record r{rec["version"].get<std::uint64_t>(), rec["last_update_time"].get<double>(),
                       rec["created"].get<double>()};
      for (auto [name, field] :
           {std::pair{"expires_at", &r.expires}, {"refresh_ttl_s", &r.refresh}})
        if (auto it = rec.find(name); it != rec.end()) {
          if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() <= 0)
            return bad(std::string("'") + name + "' must be a positive number");
          *field = it->get<double>();
        }
      if (r.refresh != 0 && r.expires == 0)
        return bad("'refresh_ttl_s' needs 'expires_at'");
      auto skey = session_key(*app, *user, *id);
      if (txn->get(table::sessions, skey))
        return bad("session '" + *id + "' appears twice");
      txn->put(table::sessions, skey, encode_record(skey, r));
      put_expiry(*txn, skey, r.expires);
      put_list_entries(*txn, *app, *user, *id, r.last_update_time, r.created);
      count_sessions(*txn, *app, *user, 1);
      index_session(*txn, *app, *user, skey, true);
      if (rec.contains("origin")) {
        auto origin = object(rec, "origin");
        if (!origin)
          return origin.err();
        auto text = dump_json(*origin);
        if (!text)
          return bad(text.err().message);
        txn->put(table::origins, skey, seal(skey, *text));
      }
      return put_rows(table::session_state, skey + '\0', *state);
    }
    if (type == "event") {
      auto app = str(rec, "app_name"), user = str(rec, "user_id"), id = str(rec, "session_id");
      for (auto* r : {&app, &user, &id})
        if (!*r)
          return r->err();
      if (!rec.value("version", json()).is_number_unsigned())
        return bad("event needs a numeric version");
      auto ev_json = object(rec, "event");
      if (!ev_json)
        return ev_json.err();
      auto ev = event_from_json(*ev_json);
      if (!ev)
        return bad(ev.err().message);
      if (ev->id.empty() || !ev->timestamp)
        return bad("a stored event has an id and a timestamp");
      if (auto r = model::check_event_ids(*ev); !r)
        return bad(r.err().message);
      auto text = dump_json(*ev_json);
      if (!text)
        return bad(text.err().message);
      auto skey = session_key(*app, *user, *id);
      std::string key = skey + '\0';
      const auto version = rec["version"].get<std::uint64_t>();
      append_be64(key, version);
      if (auto r = no_repeat(skey, key, ev->id, version); !r)
        return r;
      txn->put(table::events, key, encode_event_row(key, *ev->timestamp, *text));
      return {};
    }
    if (type == "user_state" || type == "app_state") {
      auto app = str(rec, "app_name");
      if (!app)
        return app.err();
      auto state = object(rec, "state");
      if (!state)
        return state.err();
      if (type == "app_state")
        return put_rows(table::app_state, *app + '\0', *state);
      auto user = str(rec, "user_id");
      if (!user)
        return user.err();
      return put_rows(table::user_state, user_scope_key(*app, *user) + '\0', *state);
    }
    if (type == "header")
      return bad("a second header");
    return bad("unknown record type '" + type + "'");
  }
};

bool table_has_rows(kv_read& txn, table t) {
  bool any = false;
  txn.scan(t, {}, {}, [&](std::string_view, std::string_view) {
    any = true;
    return false;
  });
  return any;
}

} // namespace

result<std::uint64_t> import_store(kv_store& kv, std::istream& in,
                                   const std::function<void(std::uint64_t)>& progress) {
  try {
    {
      auto r = kv.begin_read();
      for (auto t : {table::sessions, table::user_state, table::app_state})
        if (table_has_rows(*r, t))
          return error{errc::invalid_argument, "the target store is not empty"};
    }
    importer imp;
    std::string text;
    std::uint64_t records = 0;
    auto txn = kv.begin_write();
    imp.txn = txn.get();
    // The imported sessions are in no change log: the store starts a new
    // epoch (every earlier cursor is refused) with an empty log.
    clear_log(*txn);
    txn->put(table::meta, "epoch", new_epoch());
    while (std::getline(in, text)) {
      ++imp.line;
      if (text.empty())
        continue;
      auto rec = parse_json(text, stored_json_depth + 4);
      if (!rec)
        return imp.bad(rec.err().message);
      if (imp.line == 1) {
        if (!rec->is_object() || rec->value("type", "") != "header")
          return imp.bad("the first line must be the header record");
        if (rec->value("format", 0u) != export_format_version)
          return imp.bad("export format " + rec->value("format", json()).dump() + " is not format "
                         + std::to_string(export_format_version));
        continue;
      }
      if (auto r = imp.record(*rec); !r)
        return r.err();
      if (++records % 10000 == 0) {
        txn->commit();
        if (progress)
          progress(records);
        txn = kv.begin_write();
        imp.txn = txn.get();
      }
    }
    if (imp.line == 0)
      return error{errc::invalid_argument, "empty input: no header record"};
    txn->commit();
    if (progress)
      progress(records);
    return records;
  } catch (const kv_failure& e) {
    return error{e.code, e.message};
  }
}

} // namespace agentstate::store
