// SPDX-License-Identifier: Apache-2.0
// `agentstate salvage DIR DEST`: copies every session of a damaged store that
// reads clean into a new store, and lists what it could not copy. Each read
// runs under tools/fault_guard.hpp, so a fault on a damaged page costs the
// session it belongs to, not the walk.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "agentstate/json.hpp"
#include "store/exchange.hpp"
#include "store/format.hpp"
#include "store/keys.hpp"
#include "store/kv.hpp"
#include "store/lock.hpp"
#include "store/open.hpp"
#include "store/reads.hpp"
#include "tools/cli.hpp"
#include "tools/commands.hpp"
#include "tools/fault_guard.hpp"

namespace agentstate::tools {

namespace {

namespace fs = std::filesystem;

struct salvage_options {
  std::string dir, dest;
  bool json = false;
};

int run_salvage(const salvage_options& o);

runner define_salvage(command_line& cl) {
  auto o = std::make_shared<salvage_options>();
  cl.environment.push_back(progress_environment());
  cl.usage = "agentstate salvage DIR DEST [--json]";
  cl.description = R"(Copies every session of the store in DIR that reads clean - its record,
state and every event decode, and no read of it faults - into a new store
in DEST (created; must not exist or be empty, and must not be inside DIR),
with the user and app state that reads clean, and lists every session it
could not copy with the reason. An event whose id an earlier event of its
session has is left out (the first is kept, the later events renumbered)
and listed as dropped. For a store that verify reports damaged, or that
the engine refuses with data_corrupt (a truncated data.mdb is read as far
as it goes). Reads DIR without its lock: run it on a store no engine
writes. DEST is written through `import` (one transaction per 10,000
records) and holds its lock while salvage runs. Progress on stderr when
it is a terminal.)";
  cl.exit_status(exit_ok, "every session was copied whole");
  cl.exit_status(exit_failed,
                 "nothing could be done: DIR cannot be read, DEST cannot be used "
                 "or is inside DIR");
  cl.exit_status(3,
                 "DEST was written, but some sessions were lost, events dropped or scope "
                 "state left out (each listed)");
  cl.app.add_option("DIR", o->dir, "the damaged store")->required();
  cl.app.add_option("DEST", o->dest, "the directory of the new store")->required();
  add_json_flag(cl, o->json,
                "source, dest, sessions_found,\n"
                "sessions_copied, lost [{app_name, user_id, session_id, kind,\n"
                "message}], dropped [{app_name, user_id, session_id, version,\n"
                "event_id, message}], problems [messages about the walk and the\n"
                "scope state]");
  return [o] { return run_salvage(*o); };
}

struct lost_session {
  std::string app, user, session;
  error why;
};

/// An event left out of a copied session: its id repeats an earlier event's.
struct dropped_event {
  std::string app, user, session, id;
  std::uint64_t version = 0; ///< in DIR
  std::uint64_t kept = 0; ///< the version in DIR of the event kept
};

std::vector<std::string> split3(const std::string& key) {
  std::vector<std::string> parts;
  std::size_t at = 0;
  for (int i = 0; i < 2; ++i) {
    auto nul = key.find('\0', at);
    if (nul == std::string::npos)
      break;
    parts.push_back(key.substr(at, nul - at));
    at = nul + 1;
  }
  parts.push_back(key.substr(at));
  return parts;
}

std::string printable(const std::string& key) {
  std::string out = key;
  for (auto& c : out)
    if (c == '\0')
      c = '/';
  return out;
}

// Whether `lines` (records after a header) import into an empty store: what
// export read may still be refused by import (an event without an id, a
// version gap).
result<void> imports_clean(const std::vector<std::string>& lines) {
  auto kv = store::make_memory_kv();
  if (auto r = store::init_meta(*kv, "0.1.0"); !r)
    return r;
  std::string text = json{{"type", "header"}, {"format", store::export_format_version}}.dump();
  text += '\n';
  for (auto& l : lines) {
    text += l;
    text += '\n';
  }
  std::istringstream in(text);
  auto n = store::import_store(*kv, in);
  if (!n)
    return std::move(n).err();
  return {};
}

// A session's export lines hold its record's version and events 1..version
// in order (a damaged key can renumber an event).
result<void> versions_contiguous(const std::vector<std::string>& lines) {
  std::uint64_t want = 0, next = 1;
  for (auto& l : lines) {
    auto rec = json::parse(l, nullptr, false);
    if (rec.is_discarded() || !rec.is_object() || !rec.contains("version")
        || !rec["version"].is_number_unsigned())
      return error{errc::data_corrupt, "a record without a version"};
    auto v = rec["version"].get<std::uint64_t>();
    if (rec.value("type", "") == "session")
      want = v;
    else if (v != next++)
      return error{errc::data_corrupt,
                   "event version " + std::to_string(v) + " where " + std::to_string(next - 1)
                     + " was expected"};
  }
  if (next - 1 != want)
    return error{errc::data_corrupt,
                 "record says version " + std::to_string(want) + ", events end at "
                   + std::to_string(next - 1)};
  return {};
}

// Leaves out of a session's export lines (its record, then its events,
// versions 1..n as versions_contiguous checked) every event whose id an
// earlier event has, so the copy holds each id once, as import requires;
// the later events and the record's version are renumbered to stay
// contiguous. Lines are rewritten only when an event is left out. Returns
// the events left out, with `app`, `user`, `session` set.
std::vector<dropped_event> drop_repeated_ids(std::vector<std::string>& lines,
                                             const std::vector<std::string>& key) {
  std::vector<dropped_event> dropped;
  std::map<std::string, std::uint64_t> first; // id -> version
  std::vector<bool> keep(lines.size(), true);
  for (std::size_t i = 1; i < lines.size(); ++i) {
    auto rec = json::parse(lines[i], nullptr, false);
    auto v = rec["version"].get<std::uint64_t>();
    auto ev = rec.find("event");
    if (ev == rec.end() || !ev->is_object() || !ev->contains("id") || !(*ev)["id"].is_string())
      continue; // import refuses it: the session is lost with that reason
    auto id = (*ev)["id"].get<std::string>();
    if (auto [at, added] = first.emplace(id, v); !added) {
      keep[i] = false;
      dropped.push_back({key[0], key[1], key[2], id, v, at->second});
    }
  }
  if (dropped.empty())
    return dropped;
  std::vector<std::string> out;
  std::uint64_t version = 0;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    if (!keep[i])
      continue;
    auto rec = json::parse(lines[i], nullptr, false);
    rec["version"] = ++version;
    out.push_back(rec.dump());
  }
  auto record = json::parse(lines[0], nullptr, false);
  record["version"] = version;
  out.insert(out.begin(), record.dump());
  lines = std::move(out);
  return dropped;
}

std::string dropped_message(const dropped_event& x) {
  return "event id '" + printable(x.id) + "' repeats v" + std::to_string(x.kept)
    + ", which is kept; the session's later events are renumbered";
}

// The session keys of the snapshot, walked forward and, when a fault stops
// that walk, backward from the end down to where it stopped, so one damaged
// page hides only the keys it holds. Each walk has its own transaction.
std::set<std::string> session_keys(store::kv_store& kv, std::vector<std::string>& problems) {
  std::set<std::string> keys;
  std::string last;
  bool stopped = false;
  {
    auto txn = store::begin_read(kv);
    if (!txn) {
      problems.push_back("sessions: " + txn.err().message);
      return keys;
    }
    auto r = guarded("sessions table", [&] {
      (*txn)->scan(store::table::sessions, {}, {}, [&](std::string_view k, std::string_view) {
        last.assign(k);
        keys.insert(last);
        return true;
      });
    });
    if (!r) {
      stopped = true;
      problems.push_back(r.err().message + " after session '" + printable(last)
                         + "'; walking back from the end");
    }
  }
  if (!stopped)
    return keys;
  auto txn = store::begin_read(kv);
  if (!txn)
    return keys;
  auto r = guarded("sessions table (backward)", [&] {
    (*txn)->scan_back(store::table::sessions, {}, {}, [&](std::string_view k, std::string_view) {
      if (!last.empty() && std::string_view(last) >= k)
        return false;
      keys.emplace(k);
      return true;
    });
  });
  if (!r)
    problems.push_back(r.err().message + ": sessions between the two walks are not listed");
  return keys;
}

int run_salvage(const salvage_options& o) {
  const bool as_json = o.json;
  const std::vector<std::string> pos{o.dir, o.dest};
  install_fault_guard();
  const auto& src = pos[0];
  std::error_code ec;
  // DEST inside DIR (or DIR itself), by resolved paths: "DIR/./x", a
  // symbolic link into DIR, "DIR/sub/../x" all count. Checked before
  // anything is read or created, so a refusal leaves DIR as it was. A DIR
  // that does not resolve is reported by the open below.
  if (auto src_real = fs::canonical(src, ec); !ec) {
    auto dest_real = fs::weakly_canonical(fs::absolute(pos[1], ec), ec);
    if (ec) {
      say("salvage", "cannot resolve '%s': %s", pos[1].c_str(), ec.message().c_str());
      return exit_failed;
    }
    auto [s_end, d_at] =
      std::mismatch(src_real.begin(), src_real.end(), dest_real.begin(), dest_real.end());
    if (s_end == src_real.end()) {
      say("salvage",
          "DEST '%s' (%s) is %s DIR '%s': the new store must be written "
          "outside the store it copies",
          pos[1].c_str(), dest_real.c_str(),
          d_at == dest_real.end() ? "the same directory as" : "inside", src_real.c_str());
      return exit_failed;
    }
  }
  if (!dest_is_free("salvage", pos[1]))
    return exit_failed;
  // Opening reads the main database's root page: under the guard too.
  result<std::unique_ptr<store::kv_store>> opened = error{errc::internal, "not opened"};
  if (auto g = guarded("opening " + src,
                       [&] { opened = store::open_lmdb_readonly(src, /*allow_damage=*/true); });
      !g)
    opened = std::move(g).err();
  if (!opened) {
    say("salvage", "%s", to_string(opened.err()).c_str());
    return exit_failed;
  }
  auto& kv = **opened;
  fs::create_directories(pos[1], ec);
  auto dest = fs::canonical(pos[1], ec).string();
  if (ec) {
    say("salvage", "cannot create '%s': %s", pos[1].c_str(), ec.message().c_str());
    return exit_failed;
  }

  std::vector<std::string> problems;
  auto keys = session_keys(kv, problems);
  auto tmp_path = dest + "/salvage-records.jsonl";
  std::ofstream tmp(tmp_path, std::ios::binary | std::ios::trunc);
  if (!tmp) {
    say("salvage", "cannot write %s", tmp_path.c_str());
    return exit_failed;
  }
  tmp << json{{"type", "header"}, {"format", store::export_format_version}}.dump() << '\n';

  std::vector<lost_session> lost;
  std::vector<dropped_event> dropped;
  std::uint64_t copied = 0, seen = 0;
  progress_line prog;
  for (auto& key : keys) {
    prog("sessions", ++seen, keys.size());
    auto p = split3(key);
    if (p.size() != 3) {
      lost.push_back({printable(key), "", "", error{errc::data_corrupt, "malformed session key"}});
      continue;
    }
    std::vector<std::string> lines;
    result<void> r;
    if (auto txn = store::begin_read(kv); !txn) {
      r = std::move(txn).err();
    } else {
      store::export_filter f{p[0], p[1], p[2]};
      result<std::uint64_t> n = std::uint64_t{0};
      r = guarded("session " + printable(key), [&] {
        n = store::export_store(**txn, f, [&](const std::string& l) { lines.push_back(l); });
      });
      if (r && !n)
        r = std::move(n).err();
    }
    if (r && !lines.empty())
      lines.erase(lines.begin()); // export_store's header
    if (r && lines.empty())
      r = error{errc::data_corrupt, "the session's record does not read back"};
    if (r)
      r = versions_contiguous(lines);
    std::vector<dropped_event> left_out;
    if (r)
      left_out = drop_repeated_ids(lines, p);
    if (r)
      r = imports_clean(lines);
    if (!r) {
      lost.push_back({p[0], p[1], p[2], std::move(r).err()});
      continue;
    }
    dropped.insert(dropped.end(), left_out.begin(), left_out.end());
    for (auto& l : lines)
      tmp << l << '\n';
    ++copied;
  }
  prog.done();
  {
    std::vector<std::string> lines;
    result<void> r;
    if (auto txn = store::begin_read(kv); !txn) {
      r = std::move(txn).err();
    } else {
      result<std::uint64_t> n = std::uint64_t{0};
      r = guarded("user and app state", [&] {
        n = store::export_scope_states(**txn, [&](const std::string& l) { lines.push_back(l); });
      });
      if (r && !n)
        r = std::move(n).err();
    }
    if (!r) {
      problems.push_back("user and app state not copied: " + to_string(r.err()));
    } else {
      for (auto& l : lines) {
        if (auto ok = imports_clean({l}); !ok) {
          problems.push_back("scope state not copied: " + ok.err().message);
          continue;
        }
        tmp << l << '\n';
      }
    }
  }
  tmp.close();
  if (!tmp) {
    say("salvage", "cannot write %s", tmp_path.c_str());
    return exit_failed;
  }

  // The new store, written through import.
  store::store_lock lock;
  if (auto r = lock.acquire(dest); !r) {
    say("salvage", "%s", r.err().message.c_str());
    return exit_failed;
  }
  auto out = store::open_lmdb(dest, true, std::uint64_t{64} << 30);
  if (!out) {
    say("salvage", "%s", out.err().message.c_str());
    return exit_failed;
  }
  if (auto r = store::init_meta(**out, "0.1.0"); !r) {
    say("salvage", "%s", r.err().message.c_str());
    return exit_failed;
  }
  {
    std::ifstream records(tmp_path, std::ios::binary);
    auto n = store::import_store(**out, records);
    if (!n) {
      say("salvage", "writing %s: %s", dest.c_str(), n.err().message.c_str());
      return exit_failed;
    }
  }
  fs::remove(tmp_path, ec);

  if (as_json) {
    json l = json::array();
    for (auto& x : lost)
      l.push_back({{"app_name", x.app},
                   {"user_id", x.user},
                   {"session_id", x.session},
                   {"kind", to_string(x.why.code)},
                   {"message", x.why.message}});
    json d = json::array();
    for (auto& x : dropped)
      d.push_back({{"app_name", x.app},
                   {"user_id", x.user},
                   {"session_id", x.session},
                   {"version", x.version},
                   {"event_id", x.id},
                   {"message", dropped_message(x)}});
    std::puts(json{{"source", src},
                   {"dest", dest},
                   {"sessions_found", keys.size()},
                   {"sessions_copied", copied},
                   {"lost", std::move(l)},
                   {"dropped", std::move(d)},
                   {"problems", problems}}
                .dump(-1, ' ', false, json::error_handler_t::replace)
                .c_str());
  } else {
    for (auto& x : lost)
      std::printf("LOST %s/%s/%s: %s\n", x.app.c_str(), x.user.c_str(), x.session.c_str(),
                  to_string(x.why).c_str());
    for (auto& x : dropped)
      std::printf("DROPPED %s/%s/%s v%llu: %s\n", x.app.c_str(), x.user.c_str(), x.session.c_str(),
                  static_cast<unsigned long long>(x.version), dropped_message(x).c_str());
    for (auto& m : problems)
      std::printf("PROBLEM %s\n", m.c_str());
    std::printf("salvaged %llu of %zu sessions into %s; %zu lost; %zu events dropped\n",
                static_cast<unsigned long long>(copied), keys.size(), dest.c_str(), lost.size(),
                dropped.size());
  }
  return lost.empty() && dropped.empty() && problems.empty() ? 0 : 3;
}

const bool salvage_registered = register_command(
  {"salvage", "copy every session that reads clean into a new store", define_salvage});

} // namespace

} // namespace agentstate::tools
