// SPDX-License-Identifier: Apache-2.0
// The operational commands, in the manner of mdb_stat / mdb_dump / mdb_copy:
// inspect, verify, backup (read-only, safe beside a running engine), and
// dump, export, import (JSON lines; import takes the store's lock).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <string>

#include "agentstate/json.hpp"
#include "agentstate/version.hpp"
#include "store/exchange.hpp"
#include "store/kv.hpp"
#include "store/apply.hpp"
#include "store/format.hpp"
#include "store/keys.hpp"
#include "store/listing.hpp"
#include "store/reads.hpp"
#include "store/records.hpp"
#include "store/lock.hpp"
#include "store/open.hpp"
#include "store/summary.hpp"
#include "store/verify.hpp"
#include "tools/adk_sqlite.hpp"
#include "tools/commands.hpp"
#include "tools/fault_guard.hpp"

namespace agentstate::tools {

namespace {

namespace fs = std::filesystem;

/// Parses `args` into positionals and --options (those in `with_value` take
/// the next argument). Returns false after printing the problem.
struct parsed {
  std::vector<std::string> positional;
  std::map<std::string, std::string> opts;
  bool help = false;
};

bool parse(const args& in, const std::set<std::string>& flags,
           const std::set<std::string>& with_value, parsed& out, const char* usage) {
  for (std::size_t i = 0; i < in.size(); ++i) {
    const auto& a = in[i];
    if (a == "--help" || a == "-h") {
      out.help = true;
    } else if (with_value.count(a)) {
      if (i + 1 >= in.size()) {
        std::fprintf(stderr, "%s needs a value\n\n%s", a.c_str(), usage);
        return false;
      }
      out.opts[a] = in[++i];
    } else if (flags.count(a)) {
      out.opts[a] = "1";
    } else if (a.size() > 1 && a[0] == '-') {
      std::fprintf(stderr, "unknown option '%s'\n\n%s", a.c_str(), usage);
      return false;
    } else {
      out.positional.push_back(a);
    }
  }
  return true;
}

/// Opens DIR read-only; prints the error and returns null on failure. Every
/// read-only tool reads the map under the fault guard (tools/fault_guard.hpp):
/// a fault on a damaged page ends the command with a data_corrupt message
/// and exit 1, never a signal.
std::unique_ptr<store::kv_store> open_readonly(const std::string& dir) {
  install_fault_guard();
  auto kv = store::open_lmdb_readonly(dir);
  if (!kv) {
    std::fprintf(stderr, "%s\n", to_string(kv.err()).c_str());
    return nullptr;
  }
  return std::move(*kv);
}

/// Progress on stderr, at most once a second, only after the first second.
struct progress_line {
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last = start;
  bool shown = false;
  void operator()(const char* what, std::uint64_t n) {
    auto now = std::chrono::steady_clock::now();
    if (now - start < std::chrono::seconds(1) || now - last < std::chrono::seconds(1))
      return;
    last = now;
    shown = true;
    std::fprintf(stderr, "\r%s: %llu", what, static_cast<unsigned long long>(n));
    std::fflush(stderr);
  }
  void done() {
    if (shown)
      std::fputs("\n", stderr);
  }
};

// -- inspect ---------------------------------------------------------------------

const char* inspect_usage =
  "usage: agentstate inspect DIR [--json]\n"
  "\n"
  "Prints the store's format version, counts of apps, users, sessions and\n"
  "events, map size and use, and reader slots. Read-only; safe while an engine\n"
  "runs; reads every store format (1 to 4) as it is. Each session record that\n"
  "fails its checksum is reported on stderr as data_corrupt (and counted in\n"
  "\"damaged_records\"); the counts go on. --json prints one JSON object.\n"
  "Exit 0, 1 (cannot read, or damaged records), 2 (usage).\n";

int run_inspect(const args& in) {
  parsed p;
  if (!parse(in, {"--json"}, {}, p, inspect_usage))
    return 2;
  if (p.help) {
    std::fputs(inspect_usage, stdout);
    return 0;
  }
  if (p.positional.size() != 1) {
    std::fputs(inspect_usage, stderr);
    return 2;
  }
  auto kv = open_readonly(p.positional[0]);
  if (!kv)
    return 1;
  progress_line prog;
  result<store::store_summary> summary = error{errc::internal, "not read"};
  if (auto g = guarded("inspect", [&] {
        summary = store::summarize(*kv, [&](std::uint64_t n) { prog("sessions", n); });
      });
      !g)
    summary = std::move(g).err();
  prog.done();
  if (!summary) {
    std::fprintf(stderr, "inspect: %s\n", summary.err().message.c_str());
    return 1;
  }
  {
    const auto& info = summary->info;
    json out = {
      {"store", p.positional[0]},
      {"format", summary->format},
      {"engine_version", summary->engine_version},
      {"apps", summary->apps},
      {"users", summary->users},
      {"sessions", summary->sessions},
      {"events", info.entries[static_cast<int>(store::table::events)]},
      {"session_state_rows", info.entries[static_cast<int>(store::table::session_state)]},
      {"user_state_rows", info.entries[static_cast<int>(store::table::user_state)]},
      {"app_state_rows", info.entries[static_cast<int>(store::table::app_state)]},
      {"map_size_bytes", info.map_size},
      {"used_bytes", info.used_bytes},
      {"last_txn_id", info.last_txn_id},
      {"readers_used", info.readers_used},
      {"max_readers", info.max_readers},
      {"damaged_records", summary->damaged_records},
    };
    for (auto& e : summary->damaged)
      std::fprintf(stderr, "%s\n", to_string(e).c_str());
    if (p.opts.count("--json")) {
      std::puts(out.dump().c_str());
    } else {
      std::printf("store            %s\n", p.positional[0].c_str());
      std::printf("format           %s (engine %s)\n", summary->format.c_str(),
                  summary->engine_version.c_str());
      for (auto k : {"apps", "users", "sessions", "events", "session_state_rows",
                     "user_state_rows", "app_state_rows"})
        std::printf("%-16s %llu\n", k, static_cast<unsigned long long>(out[k].get<std::uint64_t>()));
      std::printf("map              %.1f MiB used of %.1f MiB\n", info.used_bytes / 1048576.0,
                  info.map_size / 1048576.0);
      std::printf("readers          %u of %u slots\n", info.readers_used, info.max_readers);
      if (summary->damaged_records)
        std::printf("damaged_records  %llu\n",
                    static_cast<unsigned long long>(summary->damaged_records));
    }
    return summary->damaged_records ? 1 : 0;
  }
}

// -- verify ------------------------------------------------------------------------

const char* verify_usage =
  "usage: agentstate verify DIR [--json]\n"
  "\n"
  "Checks every row of the store: every checksum (format 4; each damaged row\n"
  "is named: session app/user/id and which row), versions contiguous, every\n"
  "event decodes, no event id twice in a session, every record decodes, list\n"
  "indexes and scope rows well-formed, no orphan rows. Read-only; safe while\n"
  "an engine runs (it checks one snapshot); reads every store format (1 to 4)\n"
  "as it is. Exit 0 clean, 1 faults found (or unreadable), 2 usage.\n";

int run_verify(const args& in) {
  parsed p;
  if (!parse(in, {"--json"}, {}, p, verify_usage))
    return 2;
  if (p.help) {
    std::fputs(verify_usage, stdout);
    return 0;
  }
  if (p.positional.size() != 1) {
    std::fputs(verify_usage, stderr);
    return 2;
  }
  auto kv = open_readonly(p.positional[0]);
  if (!kv)
    return 1;
  progress_line prog;
  auto txn = store::begin_read(*kv);
  if (!txn) {
    std::fprintf(stderr, "verify: %s\n", txn.err().message.c_str());
    return 1;
  }
  store::verify_report r;
  if (auto g = guarded("storage", [&] {
        r = store::verify_store(**txn, [&](std::uint64_t n) { prog("sessions", n); });
      });
      !g) {
    // The walk stopped at the fault; what it counted so far stands.
    ++r.faults;
    r.messages.push_back(to_string(g.err()) + " (run agentstate salvage)");
  }
  prog.done();
  if (p.opts.count("--json")) {
    std::puts(json{{"ok", r.ok()},
                   {"sessions", r.sessions},
                   {"events", r.events},
                   {"session_state_rows", r.session_rows},
                   {"user_state_rows", r.user_rows},
                   {"app_state_rows", r.app_rows},
                   {"faults", r.faults},
                   {"messages", r.messages}}
                .dump()
                .c_str());
  } else {
    for (auto& m : r.messages)
      std::printf("FAULT %s\n", m.c_str());
    if (r.faults > r.messages.size())
      std::printf("... and %llu more faults\n",
                  static_cast<unsigned long long>(r.faults - r.messages.size()));
    std::printf("%s: %llu sessions, %llu events, %llu state rows, %llu faults\n",
                r.ok() ? "clean" : "FAULTY", static_cast<unsigned long long>(r.sessions),
                static_cast<unsigned long long>(r.events),
                static_cast<unsigned long long>(r.session_rows + r.user_rows + r.app_rows),
                static_cast<unsigned long long>(r.faults));
  }
  return r.ok() ? 0 : 1;
}

// -- backup ------------------------------------------------------------------------

const char* backup_usage =
  "usage: agentstate backup DIR DEST [--compact]\n"
  "\n"
  "Writes a consistent copy of the store in DIR, as of one moment, into DEST\n"
  "(created; must not exist or be empty), while an engine may go on writing.\n"
  "--compact leaves out free pages. The copy opens as a normal store.\n"
  "Exit 0, 1 (failed), 2 (usage).\n";

int run_backup(const args& in) {
  parsed p;
  if (!parse(in, {"--compact"}, {}, p, backup_usage))
    return 2;
  if (p.help) {
    std::fputs(backup_usage, stdout);
    return 0;
  }
  if (p.positional.size() != 2) {
    std::fputs(backup_usage, stderr);
    return 2;
  }
  const auto& dest = p.positional[1];
  std::error_code ec;
  if (fs::exists(dest, ec) && !fs::is_empty(dest, ec)) {
    std::fprintf(stderr, "backup: '%s' exists and is not empty\n", dest.c_str());
    return 1;
  }
  fs::create_directories(dest, ec);
  if (ec) {
    std::fprintf(stderr, "backup: cannot create '%s': %s\n", dest.c_str(), ec.message().c_str());
    return 1;
  }
  auto kv = open_readonly(p.positional[0]);
  if (!kv)
    return 1;
  auto t0 = std::chrono::steady_clock::now();
  // LMDB's compacting copy reads the tree on this thread (its second thread
  // writes what this one copied), so the guard covers every read of the map.
  // After a fault the copy is abandoned; DEST keeps a partial data.mdb.
  result<void> r;
  if (auto g = guarded("backup", [&] {
        r = store::copy_to(*kv, dest, p.opts.count("--compact") > 0);
      });
      !g)
    r = std::move(g).err();
  if (!r) {
    std::fprintf(stderr, "backup: %s\n", r.err().message.c_str());
    return 1;
  }
  auto size = fs::file_size(fs::path(dest) / "data.mdb", ec);
  std::printf("%s\n", json{{"backup", dest},
                           {"bytes", ec ? 0 : size},
                           {"seconds", std::chrono::duration<double>(
                                         std::chrono::steady_clock::now() - t0)
                                         .count()}}
                        .dump()
                        .c_str());
  return 0;
}

// -- dump and export ---------------------------------------------------------------

const char* dump_usage =
  "usage: agentstate dump DIR [--app A [--user U [--session S]]]\n"
  "\n"
  "Prints the store (or one app, user or session of it) as JSON lines: a\n"
  "header, each session with its own state, its events, then user and app\n"
  "state. Read-only; safe while an engine runs. A session or scope with a\n"
  "damaged row is left out and reported on stderr (data_corrupt), the others\n"
  "printed; the exit is then 1. Exit 0, 1, 2 (usage).\n";

const char* export_usage =
  "usage: agentstate export DIR > FILE\n"
  "\n"
  "Writes the whole store as JSON lines that `agentstate import` turns back\n"
  "into the same store (export -> import -> export is byte-identical).\n"
  "Read-only; safe while an engine runs. A session or scope with a damaged\n"
  "row is left out and reported on stderr (data_corrupt), the others written;\n"
  "the exit is then 1. Exit 0, 1, 2 (usage).\n";

int export_common(const args& in, bool filters, const char* usage) {
  parsed p;
  std::set<std::string> with_value;
  if (filters)
    with_value = {"--app", "--user", "--session"};
  if (!parse(in, {}, with_value, p, usage))
    return 2;
  if (p.help) {
    std::fputs(usage, stdout);
    return 0;
  }
  if (p.positional.size() != 1) {
    std::fputs(usage, stderr);
    return 2;
  }
  store::export_filter f;
  if (p.opts.count("--app"))
    f.app = p.opts["--app"];
  if (p.opts.count("--user"))
    f.user = p.opts["--user"];
  if (p.opts.count("--session"))
    f.session = p.opts["--session"];
  if ((f.user && !f.app) || (f.session && !f.user)) {
    std::fprintf(stderr, "--user needs --app, --session needs --user\n\n%s", usage);
    return 2;
  }
  auto kv = open_readonly(p.positional[0]);
  if (!kv)
    return 1;
  auto txn = store::begin_read(*kv);
  if (!txn) {
    std::fprintf(stderr, "%s\n", txn.err().message.c_str());
    return 1;
  }
  progress_line prog;
  std::uint64_t lines = 0, damaged = 0;
  result<std::uint64_t> n = std::uint64_t{0};
  if (auto g = guarded("export", [&] {
        n = store::export_store(
          **txn, f,
          [&](const std::string& line) {
            std::fwrite(line.data(), 1, line.size(), stdout);
            std::fputc('\n', stdout);
            prog("records", ++lines);
          },
          [&](const error& e) {
            ++damaged;
            std::fprintf(stderr, "%s\n", to_string(e).c_str());
          });
      });
      !g)
    n = std::move(g).err();
  prog.done();
  if (!n) {
    std::fprintf(stderr, "%s\n", to_string(n.err()).c_str());
    return 1;
  }
  if (damaged)
    std::fprintf(stderr, "%llu sessions or scopes left out: damaged (run `agentstate verify`)\n",
                 static_cast<unsigned long long>(damaged));
  return std::fflush(stdout) == 0 && damaged == 0 ? 0 : 1;
}

int run_dump(const args& in) {
  return export_common(in, true, dump_usage);
}

int run_export(const args& in) {
  if (adk::wants_export(in))
    return adk::run_export(in);
  for (auto& a : in)
    if (a == "--help" || a == "-h") {
      std::fputs(export_usage, stdout);
      std::fputs("\n", stdout);
      std::fputs(adk::export_help, stdout);
      return 0;
    }
  return export_common(in, false, export_usage);
}

// -- import ------------------------------------------------------------------------

const char* import_usage =
  "usage: agentstate import DIR < FILE\n"
  "\n"
  "Reads JSON lines written by `agentstate export` into the store in DIR,\n"
  "which is created if missing and must hold no data. Takes the store's lock:\n"
  "no engine may have it open. Progress on stderr. Exit 0, 1 (failed: the\n"
  "message names the line), 2 (usage).\n";

int run_import(const args& in) {
  if (adk::wants_import(in))
    return adk::run_import(in);
  parsed p;
  if (!parse(in, {}, {}, p, import_usage))
    return 2;
  if (p.help) {
    std::fputs(import_usage, stdout);
    std::fputs("\n", stdout);
    std::fputs(adk::import_help, stdout);
    return 0;
  }
  if (p.positional.size() != 1) {
    std::fputs(import_usage, stderr);
    return 2;
  }
  std::error_code ec;
  fs::create_directories(p.positional[0], ec);
  auto dir = fs::canonical(p.positional[0], ec).string();
  if (ec) {
    std::fprintf(stderr, "import: cannot use '%s': %s\n", p.positional[0].c_str(),
                 ec.message().c_str());
    return 1;
  }
  store::store_lock lock;
  if (auto r = lock.acquire(dir); !r) {
    std::fprintf(stderr, "import: %s\n", r.err().message.c_str());
    return 1;
  }
  auto kv = store::open_lmdb(dir, true, std::uint64_t{64} << 30);
  if (!kv) {
    std::fprintf(stderr, "import: %s\n", kv.err().message.c_str());
    return 1;
  }
  if (auto r = store::init_meta(**kv, AGENTSTATE_VERSION_STRING); !r) {
    std::fprintf(stderr, "import: %s\n", r.err().message.c_str());
    return 1;
  }
  progress_line prog;
  std::ios::sync_with_stdio(false);
  auto n = store::import_store(**kv, std::cin, [&](std::uint64_t k) { prog("records", k); });
  prog.done();
  if (!n) {
    std::fprintf(stderr, "import: %s\n", n.err().message.c_str());
    return 1;
  }
  std::printf("%s\n", json{{"imported_records", *n}, {"store", dir}}.dump().c_str());
  return 0;
}

const bool registered =
  register_command({"inspect", "format, counts, map use and readers of a store", run_inspect})
  && register_command({"verify", "check every session and index of a store; exit 1 on faults",
                       run_verify})
  && register_command({"backup", "a consistent copy of a store, taken while it is in use",
                       run_backup})
  && register_command({"dump", "a store, app, user or session as JSON lines", run_dump})
  && register_command({"export", "a whole store as JSON lines, for import", run_export})
  && register_command({"import", "JSON lines from export into an empty store", run_import});

} // namespace

} // namespace agentstate::tools
