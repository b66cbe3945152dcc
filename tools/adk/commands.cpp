// SPDX-License-Identifier: Apache-2.0
// `import --from-adk-sqlite` and `export --to-adk-sqlite`: their help, the
// two passes of an import (check, then write), and the JSON summary.
#include "tools/adk/adk_sqlite.hpp"

#include <fcntl.h>
#include <sqlite3.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <filesystem>
#include <istream>
#include <map>
#include <set>
#include <streambuf>

#include "agentstate/options.hpp"
#include "agentstate/types.hpp"
#include "agentstate/version.hpp"
#include "model/event_text.hpp"
#include "model/json_text.hpp"
#include "store/exchange.hpp"
#include "store/format.hpp"
#include "store/lock.hpp"
#include "store/open.hpp"
#include "store/reads.hpp"
#include "tools/adk/checks.hpp"
#include "tools/adk/sqlite.hpp"
#include "tools/adk/times.hpp"
#include "tools/cli.hpp"
#include "tools/import_target.hpp"

namespace agentstate::tools::adk {

namespace fs = std::filesystem;

const char* flavor_name(flavor f) noexcept {
  switch (f) {
    case flavor::python_database: return "adk-python-database";
    case flavor::python_sqlite: return "adk-python-sqlite";
    case flavor::js: return "adk-js";
  }
  return "?";
}

std::optional<flavor> parse_flavor(std::string_view name) noexcept {
  for (auto f : {flavor::python_database, flavor::python_sqlite, flavor::js})
    if (name == flavor_name(f))
      return f;
  return std::nullopt;
}

namespace {

/// A summary line: JSON whose strings may hold bytes that are not UTF-8
/// (names read from a file), shown with U+FFFD.
std::string summary_text(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

json skipped_json(const std::vector<skipped_row>& rows) {
  json out = json::array();
  for (auto& r : rows)
    out.push_back({{"table", r.table}, {"where", r.where}, {"reason", r.reason}});
  return out;
}

/// Feeds the records of a pass to an istream, a line at a time. A read
/// error ends the stream with a line import_store refuses, so the import
/// fails instead of committing a truncated file as whole; `failure` keeps
/// the error.
class pass_buf final : public std::streambuf {
public:
  explicit pass_buf(source::pass& p) : pass_(p) {}
  std::optional<error> failure;

protected:
  int_type underflow() override {
    if (gptr() < egptr())
      return traits_type::to_int_type(*gptr());
    if (ended_)
      return traits_type::eof();
    auto more = pass_.next(line_);
    if (!more) {
      failure = more.err();
      line_ = "\"the ADK file could not be read to its end\"";
      ended_ = true;
    } else if (!*more) {
      ended_ = true;
      return traits_type::eof();
    }
    line_.push_back('\n');
    setg(line_.data(), line_.data(), line_.data() + line_.size());
    return traits_type::to_int_type(*gptr());
  }

private:
  source::pass& pass_;
  std::string line_;
  bool ended_ = false;
};

} // namespace

// -- commands --------------------------------------------------------------------------

const char* const import_help =
  "With --from-adk-sqlite FILE: reads a session store ADK keeps in SQLite into\n"
  "the store in DIR (created if missing; it must hold no data; no engine may\n"
  "have it open). Recognised by its tables, columns and metadata:\n"
  "  adk-python-database  ADK-Python DatabaseSessionService, schema v1\n"
  "                       (adk_internal_metadata schema_version 1)\n"
  "  adk-python-sqlite    ADK-Python SqliteSessionService (no metadata table,\n"
  "                       REAL epoch-second times)\n"
  "  adk-js               ADK-JS DatabaseSessionService (MikroORM; json columns,\n"
  "                       epoch-millisecond times)\n"
  "ADK-Python's v0 schema (pickled events.actions) and anything else are refused\n"
  "with nothing written.\n"
  "\n"
  "Mapping, ADK -> agentstate:\n"
  "  sessions row    session: create_time -> created, update_time ->\n"
  "                  last_update_time, state -> its own state; sessions\n"
  "                  without events are kept\n"
  "  events row      event, versions 1..n in ADK's order (the timestamp column,\n"
  "                  then insertion order): event_data member for member\n"
  "                  (snake_case; unknown members kept), with id and\n"
  "                  invocation_id from the columns (adk-python-database) or\n"
  "                  event_data (the others; the column if absent), timestamp\n"
  "                  from event_data in epoch seconds (adk-js: its milliseconds\n"
  "                  / 1000; the column if absent)\n"
  "  user_states, app_states rows\n"
  "                  user and app state: these tables are the truth for current\n"
  "                  state (events' deltas are not replayed)\n"
  "  temp: keys      dropped from session state and events' state_delta\n"
  "\n"
  "Rows beyond agentstate's limits (app, user and session names 1-100 bytes,\n"
  "UTF-8, no NUL; event ids, invocation ids and authors <= 128 bytes, UTF-8,\n"
  "no NUL; state keys <= 200 bytes; values and events <= 1 MiB as JSON;\n"
  "nesting <= 64 levels), and rows\n"
  "that do not read (not JSON, wrong types, events without a session row, an\n"
  "event whose id an earlier event of its session has: both rowids named), are\n"
  "listed on stderr and in the summary. The import then fails with nothing\n"
  "written, unless --skip-oversized: the listed rows are left out (a session\n"
  "takes its events with it; a state key goes alone; of a repeated id the\n"
  "first event stays) and the rest is imported. A cell of event_data over\n"
  "4 MiB, or of state over 64 MiB, is listed by its size without being read.\n"
  "FILE must be a regular file (a FIFO or device is refused unopened).\n"
  "\n"
  "Progress on stderr when it is a terminal. On stdout, one JSON summary:\n"
  "imported, flavor, counts of sessions, events, user/app state rows and keys,\n"
  "temp keys dropped, and the skipped rows. Exit 0, 1 (refused or failed),\n"
  "2 (usage).\n";

const char* const export_help =
  "With --to-adk-sqlite FILE: writes the store in DIR into FILE, a new SQLite\n"
  "file (it must not exist), as ADK's session schema v1, which that ADK's\n"
  "session service opens and serves as its own. --adk-flavor F: adk-js\n"
  "(default; ADK-JS DatabaseSessionService), adk-python-database (ADK-Python\n"
  "DatabaseSessionService) or adk-python-sqlite (ADK-Python\n"
  "SqliteSessionService). Read-only on DIR; safe while an engine runs (one\n"
  "snapshot). FILE appears whole or not at all.\n"
  "\n"
  "Mapping, agentstate -> ADK:\n"
  "  session         sessions row: created -> create_time, last_update_time ->\n"
  "                  update_time, its own state -> state\n"
  "  event           events row: event_data = the event's JSON as stored\n"
  "                  (adk-js: timestamp in milliseconds, written with every\n"
  "                  digit); id, invocation_id, timestamp columns from the event\n"
  "  user/app state  user_states/app_states rows; every app and (app, user)\n"
  "                  with sessions gets one ({} when it has no state); their\n"
  "                  update_time is the latest last_update_time of the scope's\n"
  "                  sessions (agentstate keeps no such time)\n"
  "  times           adk-js: epoch milliseconds; adk-python-database: UTC\n"
  "                  datetime text, events.timestamp in local time (as ADK-Python\n"
  "                  writes it); adk-python-sqlite: REAL epoch seconds\n"
  "Event times come back exactly from every flavour. Session times come back\n"
  "exactly from adk-python-sqlite, rounded to the microsecond from\n"
  "adk-python-database, and from adk-js exactly when they are whole\n"
  "milliseconds, else within one unit in the last place of the double.\n"
  "ADK serves a session's events in timestamp order, agentstate in append\n"
  "order: the same unless a client appended an earlier timestamp.\n"
  "Members only agentstate writes (actions.state_remove, clients' own members)\n"
  "are written as they are: ADK-JS passes them through, ADK-Python refuses\n"
  "event members its model does not know.\n"
  "\n"
  "On stdout, one JSON summary. Exit 0, 1 (failed; nothing written), 2 (usage).\n";

int run_import(const import_args& a) {
  const std::string& file = a.file;
  const bool skip_ok = a.skip_oversized;
  auto src = source::open(file);
  if (!src) {
    say("import", "%s", src.err().message.c_str());
    return exit_failed;
  }
  auto& s = **src;
  json summary = {{"source", file}, {"flavor", flavor_name(s.kind())}};
  if (!s.schema_version().empty())
    summary["schema_version"] = s.schema_version();
  // Pass 1: everything is read and checked before anything is written.
  progress_line prog;
  read_stats check;
  std::uint64_t records_checked = 0;
  {
    auto p = s.start(check);
    std::string line;
    std::uint64_t n = 0;
    for (;;) {
      auto more = p->next(line);
      if (!more) {
        prog.done();
        say("import", "%s", more.err().message.c_str());
        return exit_failed;
      }
      if (!*more)
        break;
      prog("checked records", ++n);
    }
    prog.done();
    records_checked = n;
  }
  auto fill = [&](const read_stats& st) {
    summary["sessions"] = st.sessions;
    summary["events"] = st.events;
    summary["user_states"] = st.user_states;
    summary["user_state_keys"] = st.user_state_keys;
    summary["app_states"] = st.app_states;
    summary["app_state_keys"] = st.app_state_keys;
    summary["temp_keys_dropped"] = st.temp_keys_dropped;
    summary["skipped"] = skipped_json(st.skipped);
  };
  for (auto& r : check.skipped)
    say("import", "%s %s %s: %s", skip_ok ? "skipping" : "cannot take", r.table.c_str(),
        summary_text(r.where).c_str(), r.reason.c_str());
  if (!check.skipped.empty() && !skip_ok) {
    fill(check);
    summary["imported"] = false;
    std::printf("%s\n", summary_text(summary).c_str());
    say("import",
        "%zu row%s beyond agentstate's limits or unreadable; nothing written "
        "(--skip-oversized leaves them out)",
        check.skipped.size(), check.skipped.size() == 1 ? "" : "s");
    return exit_failed;
  }
  // Pass 2: the same records, into the store.
  auto target = open_import_target(a.dir);
  if (!target)
    return exit_failed;
  const std::string& dir = target->dir;
  auto* kv = &target->kv;
  read_stats done;
  auto p = s.start(done);
  pass_buf buf(*p);
  std::istream in(&buf);
  auto n = store::import_store(
    **kv, in, [&](std::uint64_t k) { prog("imported records", k, records_checked); });
  prog.done();
  if (buf.failure) {
    say("import", "%s", buf.failure->message.c_str());
    return exit_failed;
  }
  if (!n) {
    say("import", "%s", n.err().message.c_str());
    return exit_failed;
  }
  summary["records"] = *n;
  fill(done);
  summary["imported"] = true;
  summary["store"] = dir;
  std::printf("%s\n", summary_text(summary).c_str());
  return exit_ok;
}

int run_export(const export_args& a) {
  flavor f = flavor::js;
  if (!a.flavor.empty()) {
    auto p = parse_flavor(a.flavor);
    if (!p)
      return usage_error("export",
                         "unknown --adk-flavor '" + a.flavor
                           + "' (adk-js, adk-python-database, adk-python-sqlite)");
    f = *p;
  }
  const std::string& file = a.file;
  auto kv = store::open_lmdb_readonly(a.dir);
  if (!kv) {
    say("export", "%s", kv.err().message.c_str());
    return exit_failed;
  }
  progress_line prog;
  auto txn = store::begin_read(**kv);
  if (!txn) {
    say("export", "%s", txn.err().message.c_str());
    return exit_failed;
  }
  {
    auto r = write_file(**txn, file, f, [&](std::uint64_t n) { prog("exported records", n); });
    prog.done();
    if (!r) {
      say("export", "%s", r.err().message.c_str());
      return exit_failed;
    }
    std::printf("%s\n",
                summary_text(json{{"file", file},
                                  {"flavor", flavor_name(f)},
                                  {"sessions", r->sessions},
                                  {"events", r->events},
                                  {"user_states", r->user_states},
                                  {"app_states", r->app_states}})
                  .c_str());
    return exit_ok;
  }
}

} // namespace agentstate::tools::adk
