// SPDX-License-Identifier: Apache-2.0
// The operational commands, in the manner of mdb_stat / mdb_dump / mdb_copy:
// inspect, verify, backup (read-only, safe beside a running engine), and
// dump, export (JSON lines; their reader, import, is tools/import_target.cpp).
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

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
#include "tools/adk/adk_sqlite.hpp"
#include "tools/cli.hpp"
#include "tools/commands.hpp"
#include "tools/fault_guard.hpp"

namespace agentstate::tools {

namespace {

namespace fs = std::filesystem;

// -- inspect ---------------------------------------------------------------------

/// DIR and --json: what inspect and verify take.
struct store_and_json {
  std::string dir;
  bool json = false;
};

int run_inspect(const store_and_json& p);
int run_verify(const store_and_json& p);

void declare_store_and_json(command_line& cl, store_and_json& o) {
  add_store_dir(cl, o.dir);
  add_json_flag(cl, o.json);
}

runner define_inspect(command_line& cl) {
  auto o = std::make_shared<store_and_json>();
  cl.environment.push_back(progress_environment());
  cl.usage = "agentstate inspect DIR [--json]";
  cl.description = R"(Prints the store's format version, counts of apps, users, sessions and
events, map size and use, and reader slots. Read-only; safe while an engine
runs; reads every store format (1 to 11) as it is. State rows are counted
without the scopes' tally rows ("state_tallies"); "session_counts" and
"shard_index" count those tables' rows. A record that fails its checksum is
reported on stderr as data_corrupt ("damaged_records"); counts go on.)";
  cl.exit_status(exit_ok, "the store was read and holds no damaged record");
  cl.exit_status(exit_failed,
                 "the store cannot be read, or it holds damaged records (each "
                 "named on stderr)");
  declare_store_and_json(cl, *o);
  return [o] { return run_inspect(*o); };
}

int run_inspect(const store_and_json& p) {
  auto kv = open_readonly(p.dir, "inspect");
  if (!kv)
    return exit_failed;
  progress_line prog;
  result<store::store_summary> summary = error{errc::internal, "not read"};
  if (auto g = guarded(
        "inspect",
        [&] { summary = store::summarize(*kv, [&](std::uint64_t n) { prog("sessions", n); }); });
      !g)
    summary = std::move(g).err();
  prog.done();
  if (!summary) {
    say("inspect", "%s", summary.err().message.c_str());
    return exit_failed;
  }
  {
    const auto& info = summary->info;
    json out = {
      {"store", p.dir},
      {"format", summary->format},
      {"engine_version", summary->engine_version},
      {"apps", summary->apps},
      {"users", summary->users},
      {"sessions", summary->sessions},
      {"events", info.entries[static_cast<int>(store::table::events)]},
      {"session_state_rows", summary->session_state_rows},
      {"user_state_rows", summary->user_state_rows},
      {"app_state_rows", summary->app_state_rows},
      {"state_tallies", summary->state_tallies},
      {"session_counts", summary->session_counts},
      {"shard_index", summary->shard_index},
      {"map_size_bytes", info.map_size},
      {"used_bytes", info.used_bytes},
      {"last_txn_id", info.last_txn_id},
      {"readers_used", info.readers_used},
      {"max_readers", info.max_readers},
      {"damaged_records", summary->damaged_records},
    };
    for (auto& e : summary->damaged)
      say("inspect", "%s", to_string(e).c_str());
    if (p.json) {
      std::puts(out.dump().c_str());
    } else {
      std::printf("store            %s\n", p.dir.c_str());
      std::printf("format           %s (engine %s)\n", summary->format.c_str(),
                  summary->engine_version.c_str());
      for (auto k : {"apps", "users", "sessions", "events", "session_state_rows", "user_state_rows",
                     "app_state_rows", "state_tallies", "session_counts", "shard_index"})
        std::printf("%-16s %llu\n", k,
                    static_cast<unsigned long long>(out[k].get<std::uint64_t>()));
      std::printf("map              %.1f MiB used of %.1f MiB\n", info.used_bytes / 1048576.0,
                  info.map_size / 1048576.0);
      std::printf("readers          %u of %u slots\n", info.readers_used, info.max_readers);
      if (summary->damaged_records)
        std::printf("damaged_records  %llu\n",
                    static_cast<unsigned long long>(summary->damaged_records));
    }
    return summary->damaged_records ? exit_failed : exit_ok;
  }
}

// -- verify ------------------------------------------------------------------------

runner define_verify(command_line& cl) {
  auto o = std::make_shared<store_and_json>();
  cl.environment.push_back(progress_environment());
  cl.usage = "agentstate verify DIR [--json]";
  cl.description = R"(Checks every row of the store: every checksum (format 4; each damaged row
is named: session app/user/id and which row), versions contiguous, every
event decodes, no event id twice in a session, every record decodes, list
indexes and scope rows well-formed, no orphan rows, the change log's rows
decode and its sequence has no gap. Read-only; safe while an engine runs
(it checks one snapshot); reads every store format (1 to 7) as it is.)";
  cl.exit_status(exit_ok, "the store is clean");
  cl.exit_status(exit_failed, "faults found (listed on stdout), or the store cannot be read");
  declare_store_and_json(cl, *o);
  return [o] { return run_verify(*o); };
}

int run_verify(const store_and_json& p) {
  auto kv = open_readonly(p.dir, "verify");
  if (!kv)
    return exit_failed;
  progress_line prog;
  auto txn = store::begin_read(*kv);
  if (!txn) {
    say("verify", "%s", txn.err().message.c_str());
    return exit_failed;
  }
  store::verify_report r;
  if (auto g = guarded(
        "storage",
        [&] { r = store::verify_store(**txn, [&](std::uint64_t n) { prog("sessions", n); }); });
      !g) {
    // The walk stopped at the fault; what it counted so far stands.
    ++r.faults;
    r.messages.push_back(to_string(g.err()) + " (run agentstate salvage)");
  }
  prog.done();
  if (p.json) {
    std::puts(json{{"ok", r.ok()},
                   {"sessions", r.sessions},
                   {"events", r.events},
                   {"session_state_rows", r.session_rows},
                   {"user_state_rows", r.user_rows},
                   {"app_state_rows", r.app_rows},
                   {"changes", r.changes},
                   {"purging", r.purging},
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
    if (r.purging)
      std::printf("%llu deleted sessions, users or apps still have rows being purged (the engine "
                  "finishes them when it next runs on the store)\n",
                  static_cast<unsigned long long>(r.purging));
  }
  return r.ok() ? exit_ok : exit_failed;
}

// check_row_counts over the snapshot `txn`, each fault said on stderr as
// `command`'s data_corrupt; whether there was none.
bool reached_every_row(store::kv_read& txn, const char* command) {
  store::verify_report r;
  if (auto g = guarded("storage", [&] { r = store::check_row_counts(txn, true); }); !g) {
    ++r.faults;
    r.messages.push_back(g.err().message);
  }
  for (auto& m : r.messages)
    say(command, "data_corrupt: %s", m.c_str());
  return r.ok();
}

// -- backup ------------------------------------------------------------------------

/// Bytes a file holds on disk: its size, or the blocks it has for a sparse
/// file (a store with a writable map has one as large as its map). 0 when it
/// cannot be read.
std::uint64_t held_bytes(const struct stat& st) {
  auto blocks = static_cast<std::uint64_t>(st.st_blocks) * 512;
  auto size = static_cast<std::uint64_t>(st.st_size);
  return blocks < size ? blocks : size;
}

/// Progress of a copy that LMDB writes in one call: a thread reads how far
/// the copy is (`written`, bytes) every 250 ms and shows it in MiB against
/// `total` on a progress_line. Starts no thread when stderr is not a
/// terminal. Destruction stops and joins the thread and ends the line.
class copy_progress {
public:
  copy_progress(std::function<std::uint64_t()> written, std::uint64_t total) {
    if (!progress_wanted())
      return;
    th_ = std::thread([this, written = std::move(written), total] {
      progress_line prog;
      std::unique_lock<std::mutex> lock(mtx_);
      while (!cv_.wait_for(lock, std::chrono::milliseconds(250), [this] { return stop_; }))
        prog("backup MiB", written() >> 20, total >> 20);
      prog.done();
    });
  }
  ~copy_progress() {
    if (!th_.joinable())
      return;
    {
      std::lock_guard<std::mutex> guard(mtx_);
      stop_ = true;
    }
    cv_.notify_all();
    th_.join();
  }
  copy_progress(const copy_progress&) = delete;
  copy_progress& operator=(const copy_progress&) = delete;

private:
  std::mutex mtx_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread th_;
};

struct backup_options {
  std::string dir, dest;
  bool compact = false, json = false;
};

int run_backup(const backup_options& p);

runner define_backup(command_line& cl) {
  auto o = std::make_shared<backup_options>();
  cl.environment.push_back(progress_environment());
  cl.usage = "agentstate backup DIR DEST [--compact] [--json]\n"
             "agentstate backup DIR - [--compact] > FILE";
  cl.description = R"(Writes a consistent copy of the store in DIR, as of one moment, into DEST
(created; must not exist or be empty), while an engine may go on writing.
The copy opens as a normal store. With DEST '-', the copy's data.mdb goes
to standard output instead (not a terminal), as mdb_copy writes it: put it
as data.mdb into an empty directory to open it. Progress on stderr when it
is a terminal.)";
  cl.exit_status(exit_ok, "the copy is complete");
  cl.exit_status(exit_failed,
                 "the copy failed, or the store is damaged (the copy holds the "
                 "damage); DEST keeps what was written");
  add_store_dir(cl, o->dir);
  cl.app.add_option("DEST", o->dest, "the directory to create, or - for standard output")
    ->required();
  cl.app.add_flag("--compact", o->compact, "leave out free pages");
  add_json_flag(cl, o->json,
                "backup (DEST), source, bytes, seconds,\n"
                "compact (not with DEST -)");
  return [o] { return run_backup(*o); };
}

int run_backup(const backup_options& p) {
  const bool to_stdout = p.dest == "-";
  if (to_stdout && p.json)
    return usage_error("backup",
                       "--json needs a DEST directory: with DEST - standard output "
                       "carries the copy");
  if (to_stdout && ::isatty(STDOUT_FILENO) == 1)
    return usage_error("backup",
                       "standard output is a terminal; redirect it to a file or pipe "
                       "(agentstate backup DIR - > FILE)");
  const auto& dest = p.dest;
  std::error_code ec;
  if (!to_stdout) {
    if (!dest_is_free("backup", dest))
      return exit_failed;
    fs::create_directories(dest, ec);
    if (ec) {
      say("backup", "cannot create '%s': %s", dest.c_str(), ec.message().c_str());
      return exit_failed;
    }
  }
  auto kv = open_readonly(p.dir, "backup");
  if (!kv)
    return exit_failed;
  auto t0 = std::chrono::steady_clock::now();
  std::uint64_t total = 0;
  if (struct stat st; ::stat((fs::path(p.dir) / "data.mdb").c_str(), &st) == 0)
    total = held_bytes(st);
  std::function<std::uint64_t()> written;
  if (to_stdout) {
    // Only a file on standard output tells how far the copy is.
    if (struct stat st; ::fstat(STDOUT_FILENO, &st) == 0 && S_ISREG(st.st_mode)) {
      auto start = static_cast<std::uint64_t>(st.st_size);
      written = [start] {
        struct stat now;
        return ::fstat(STDOUT_FILENO, &now) == 0
          ? held_bytes(now) - std::min(held_bytes(now), start)
          : 0;
      };
    }
  } else {
    written = [path = (fs::path(dest) / "data.mdb").string()] {
      struct stat now;
      return ::stat(path.c_str(), &now) == 0 ? held_bytes(now) : 0;
    };
  }
  // LMDB's compacting copy reads the tree on this thread (its second thread
  // writes what this one copied), so the guard covers every read of the map.
  // After a fault the copy is abandoned; DEST keeps a partial data.mdb (with
  // DEST -, the output ends early and the exit is 1).
  result<void> r;
  {
    std::optional<copy_progress> prog;
    if (written)
      prog.emplace(written, total);
    if (auto g = guarded("backup",
                         [&] {
                           r = to_stdout ? store::copy_to_fd(*kv, STDOUT_FILENO, p.compact)
                                         : store::copy_to(*kv, dest, p.compact);
                         });
        !g)
      r = std::move(g).err();
  }
  if (!r) {
    say("backup", "%s", r.err().message.c_str());
    return exit_failed;
  }
  // A copy of a store whose rows are not all reachable carries the damage
  // (the copy is of the pages, or, compacted, of what the walk reached).
  {
    auto txn = store::begin_read(*kv);
    if (!txn) {
      say("backup", "%s", txn.err().message.c_str());
      return exit_failed;
    }
    if (!reached_every_row(**txn, "backup")) {
      say("backup",
          "the store is damaged; the copy holds the damage (run `agentstate verify`, "
          "then `agentstate salvage`)");
      return exit_failed;
    }
  }
  if (to_stdout)
    return exit_ok;
  auto size = fs::file_size(fs::path(dest) / "data.mdb", ec);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (p.json)
    std::printf("%s\n",
                json{{"backup", dest},
                     {"source", p.dir},
                     {"bytes", ec ? 0 : size},
                     {"seconds", seconds},
                     {"compact", p.compact}}
                  .dump()
                  .c_str());
  else
    std::printf("backup of %s in %s: %.1f MiB in %.2f s%s\n", p.dir.c_str(), dest.c_str(),
                (ec ? 0 : size) / 1048576.0, seconds, p.compact ? " (compacted)" : "");
  return std::fflush(stdout) == 0 ? exit_ok : exit_failed;
}

// -- dump and export ---------------------------------------------------------------

struct export_options {
  std::string dir;
  scope_filter scope; ///< dump's --app, --user, --session (none given for export)
  adk::export_args adk; ///< export --to-adk-sqlite
  bool to_adk = false, has_flavor = false;
};

int export_common(const export_options& p, const char* command);

runner define_dump(command_line& cl) {
  auto o = std::make_shared<export_options>();
  cl.usage = "agentstate dump DIR [--app NAME [--user ID [--session ID]]]";
  cl.description = R"(Prints the store (or one app, user or session of it) as JSON lines: a
header, each session with its own state, its events, then user and app
state. Read-only; safe while an engine runs. A session or scope with a
damaged row is left out and reported on stderr (data_corrupt), the others
printed; the exit is then 1.)";
  cl.exit_status(exit_ok, "every session and scope asked for was printed");
  cl.exit_status(exit_failed,
                 "the store cannot be read, or a damaged session or scope was left "
                 "out (named on stderr)");
  add_store_dir(cl, o->dir);
  add_scope_filter(cl, o->scope, "only this");
  return [o] { return export_common(*o, "dump"); };
}

runner define_export(command_line& cl) {
  auto o = std::make_shared<export_options>();
  cl.environment.push_back(progress_environment());
  cl.usage = "agentstate export DIR > FILE\n"
             "agentstate export --to-adk-sqlite FILE DIR [--adk-flavor FLAVOR]";
  cl.description = R"(Writes the whole store as JSON lines that `agentstate import` turns back
into the same store (export -> import -> export is byte-identical).
Read-only; safe while an engine runs. A session or scope with a damaged
row is left out and reported on stderr (data_corrupt), the others written;
the exit is then 1. Progress on stderr when it is a terminal.)";
  cl.footer = std::string(adk::export_help);
  cl.exit_status(exit_ok, "the whole store was written");
  cl.exit_status(exit_failed,
                 "the store cannot be read, a damaged session or scope was left out "
                 "(named on stderr), or FILE cannot be written (nothing written)");
  add_store_dir(cl, o->dir);
  auto* to = cl.app
               .add_option("--to-adk-sqlite", o->adk.file,
                           "write a new SQLite file in ADK's session schema instead")
               ->type_name("FILE");
  auto* flavor = cl.app
                   .add_option("--adk-flavor", o->adk.flavor,
                               "with --to-adk-sqlite: adk-js (default), adk-python-database or\n"
                               "adk-python-sqlite")
                   ->type_name("FLAVOR");
  return [o, to, flavor] {
    o->to_adk = to->count() > 0;
    o->has_flavor = flavor->count() > 0;
    if (o->has_flavor && !o->to_adk)
      return usage_error("export", "--adk-flavor needs --to-adk-sqlite");
    if (o->to_adk) {
      o->adk.dir = o->dir;
      if (o->has_flavor && o->adk.flavor.empty())
        return usage_error("export", "--adk-flavor needs a value");
      return adk::run_export(o->adk);
    }
    return export_common(*o, "export");
  };
}

int export_common(const export_options& p, const char* command) {
  if (auto problem = p.scope.problem(); !problem.empty())
    return usage_error(command, problem);
  store::export_filter f;
  if (p.scope.has_app())
    f.app = p.scope.app;
  if (p.scope.has_user())
    f.user = p.scope.user;
  if (p.scope.has_session())
    f.session = p.scope.session;
  auto kv = open_readonly(p.dir, command);
  if (!kv)
    return exit_failed;
  auto txn = store::begin_read(*kv);
  if (!txn) {
    say(command, "%s", txn.err().message.c_str());
    return exit_failed;
  }
  progress_line prog;
  std::uint64_t lines = 0, damaged = 0;
  result<std::uint64_t> n = std::uint64_t{0};
  if (auto g = guarded("export",
                       [&] {
                         n = store::export_store(
                           **txn, f,
                           [&](const std::string& line) {
                             std::fwrite(line.data(), 1, line.size(), stdout);
                             std::fputc('\n', stdout);
                             prog("records", ++lines);
                           },
                           [&](const error& e) {
                             ++damaged;
                             say(command, "%s", to_string(e).c_str());
                           });
                       });
      !g)
    n = std::move(g).err();
  prog.done();
  if (!n) {
    say(command, "%s", to_string(n.err()).c_str());
    return exit_failed;
  }
  // The whole store: every row the store holds must have been reachable,
  // or what was written is part of it (a row LMDB lost has no checksum to
  // fail). A scoped dump reads only its scope's rows, each checked.
  if (!f.app && !reached_every_row(**txn, command))
    ++damaged;
  if (damaged)
    say(command, "%llu sessions or scopes left out: damaged (run `agentstate verify`)",
        static_cast<unsigned long long>(damaged));
  return std::fflush(stdout) == 0 && damaged == 0 ? exit_ok : exit_failed;
}

const bool store_tools_registered =
  register_command({"inspect", "format, counts, map use and readers of a store", define_inspect})
  && register_command(
    {"verify", "check every session and index of a store; exit 1 on faults", define_verify})
  && register_command(
    {"backup", "a consistent copy of a store, taken while it is in use", define_backup})
  && register_command({"dump", "a store, app, user or session as JSON lines", define_dump})
  && register_command({"export", "a whole store as JSON lines, for import", define_export});

} // namespace

} // namespace agentstate::tools
