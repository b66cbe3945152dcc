// SPDX-License-Identifier: Apache-2.0
// Writing ADK's SQLite session stores from a store (tools/adk/adk_sqlite.hpp):
// each flavour's own schema, then its rows.
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

namespace agentstate::tools::adk {

namespace fs = std::filesystem;

namespace {

// -- writing -------------------------------------------------------------------------

// The DDL each flavour's own service creates (table and column names and
// types as ADK declares them), so that service opens the file as its own.
constexpr const char* python_database_ddl =
  "CREATE TABLE adk_internal_metadata (\n\t\"key\" VARCHAR(128) NOT NULL, \n\tvalue "
  "VARCHAR(256) NOT NULL, \n\tPRIMARY KEY (\"key\")\n);\n"
  "CREATE TABLE app_states (\n\tapp_name VARCHAR(128) NOT NULL, \n\tstate TEXT NOT NULL, "
  "\n\tupdate_time DATETIME NOT NULL, \n\tPRIMARY KEY (app_name)\n);\n"
  "CREATE TABLE sessions (\n\tapp_name VARCHAR(128) NOT NULL, \n\tuser_id VARCHAR(128) NOT "
  "NULL, \n\tid VARCHAR(128) NOT NULL, \n\tstate TEXT NOT NULL, \n\tcreate_time DATETIME NOT "
  "NULL, \n\tupdate_time DATETIME NOT NULL, \n\tPRIMARY KEY (app_name, user_id, id)\n);\n"
  "CREATE TABLE user_states (\n\tapp_name VARCHAR(128) NOT NULL, \n\tuser_id VARCHAR(128) "
  "NOT NULL, \n\tstate TEXT NOT NULL, \n\tupdate_time DATETIME NOT NULL, \n\tPRIMARY KEY "
  "(app_name, user_id)\n);\n"
  "CREATE TABLE events (\n\tid VARCHAR(128) NOT NULL, \n\tapp_name VARCHAR(128) NOT NULL, "
  "\n\tuser_id VARCHAR(128) NOT NULL, \n\tsession_id VARCHAR(128) NOT NULL, \n\tinvocation_id "
  "VARCHAR(256) NOT NULL, \n\ttimestamp DATETIME NOT NULL, \n\tevent_data TEXT, \n\tPRIMARY "
  "KEY (id, app_name, user_id, session_id), \n\tFOREIGN KEY(app_name, user_id, session_id) "
  "REFERENCES sessions (app_name, user_id, id) ON DELETE CASCADE\n);\n"
  "CREATE INDEX idx_events_app_user_session_ts ON events (app_name, user_id, session_id, "
  "timestamp DESC);\n";

constexpr const char* python_sqlite_ddl =
  "CREATE TABLE IF NOT EXISTS app_states (\n    app_name TEXT PRIMARY KEY,\n    state TEXT "
  "NOT NULL,\n    update_time REAL NOT NULL\n);\n"
  "CREATE TABLE IF NOT EXISTS user_states (\n    app_name TEXT NOT NULL,\n    user_id TEXT NOT "
  "NULL,\n    state TEXT NOT NULL,\n    update_time REAL NOT NULL,\n    PRIMARY KEY (app_name, "
  "user_id)\n);\n"
  "CREATE TABLE IF NOT EXISTS sessions (\n    app_name TEXT NOT NULL,\n    user_id TEXT NOT "
  "NULL,\n    id TEXT NOT NULL,\n    state TEXT NOT NULL,\n    create_time REAL NOT NULL,\n    "
  "update_time REAL NOT NULL,\n    PRIMARY KEY (app_name, user_id, id)\n);\n"
  "CREATE TABLE IF NOT EXISTS events (\n    id TEXT NOT NULL,\n    app_name TEXT NOT NULL,\n  "
  "  user_id TEXT NOT NULL,\n    session_id TEXT NOT NULL,\n    invocation_id TEXT NOT NULL,\n "
  "   timestamp REAL NOT NULL,\n    event_data TEXT NOT NULL,\n    PRIMARY KEY (app_name, "
  "user_id, session_id, id),\n    FOREIGN KEY (app_name, user_id, session_id) REFERENCES "
  "sessions(app_name, user_id, id) ON DELETE CASCADE\n);\n";

constexpr const char* js_ddl =
  "create table `app_states` (`app_name` text not null, `state` json not null, `update_time` "
  "datetime not null, primary key (`app_name`));\n"
  "create table `events` (`id` text not null, `app_name` text not null, `user_id` text not "
  "null, `session_id` text not null, `invocation_id` text not null, `timestamp` datetime not "
  "null, `event_data` json not null, primary key (`id`, `app_name`, `user_id`, "
  "`session_id`));\n"
  "create table `adk_internal_metadata` (`key` text not null, `value` text not null, primary "
  "key (`key`));\n"
  "create table `sessions` (`id` text not null, `app_name` text not null, `user_id` text not "
  "null, `state` json not null, `create_time` datetime not null, `update_time` datetime not "
  "null, primary key (`id`, `app_name`, `user_id`));\n"
  "create table `user_states` (`app_name` text not null, `user_id` text not null, `state` "
  "json not null, `update_time` datetime not null, primary key (`app_name`, `user_id`));\n";

class writer {
public:
  writer(sqlite3* db, flavor f) : db_(db), f_(f) {}

  result<void> prepare_all() {
    const char* sql[4] = {
      "INSERT INTO sessions (app_name, user_id, id, state, create_time, update_time) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
      "INSERT INTO events (id, app_name, user_id, session_id, invocation_id, timestamp, "
      "event_data) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
      "INSERT INTO user_states (app_name, user_id, state, update_time) VALUES (?1, ?2, ?3, ?4)",
      "INSERT INTO app_states (app_name, state, update_time) VALUES (?1, ?2, ?3)"};
    stmt_ptr* out[4] = {&sessions_, &events_, &users_, &apps_};
    for (int i = 0; i < 4; ++i) {
      auto s = prepare(db_, sql[i]);
      if (!s)
        return s.err();
      *out[i] = std::move(*s);
    }
    return {};
  }

  // One exchange record (a line of export_store).
  result<void> record(const json& rec) {
    const auto type = rec.value("type", std::string());
    if (type == "header")
      return {};
    if (type == "session") {
      const auto& app = rec.at("app_name").get_ref<const std::string&>();
      const auto& user = rec.at("user_id").get_ref<const std::string&>();
      double updated = rec.at("last_update_time").get<double>();
      auto& a = app_time_[app];
      a = std::max(a, updated);
      auto& u = user_time_[{app, user}];
      u = std::max(u, updated);
      sqlite3_stmt* s = sessions_.get();
      bind_text(s, 1, app);
      bind_text(s, 2, user);
      bind_text(s, 3, rec.at("id").get_ref<const std::string&>());
      bind_text(s, 4, rec.at("state").dump());
      bind_time(s, 5, rec.at("created").get<double>(), false);
      bind_time(s, 6, updated, false);
      ++stats.sessions;
      return run(s, "writing a session");
    }
    if (type == "event") {
      json e = rec.at("event");
      double ts = e.at("timestamp").get<double>();
      std::string data;
      if (f_ == flavor::js) {
        // Milliseconds, written as text so that no digit is lost.
        e.erase("timestamp");
        data = e.dump();
        data = "{\"timestamp\":" + millis_text(ts) + (data == "{}" ? "" : ",") + data.substr(1);
      } else {
        data = e.dump();
      }
      sqlite3_stmt* s = events_.get();
      bind_text(s, 1, e.at("id").get_ref<const std::string&>());
      bind_text(s, 2, rec.at("app_name").get_ref<const std::string&>());
      bind_text(s, 3, rec.at("user_id").get_ref<const std::string&>());
      bind_text(s, 4, rec.at("session_id").get_ref<const std::string&>());
      auto inv = e.find("invocation_id");
      bind_text(s, 5, inv != e.end() && inv->is_string() ? inv->get<std::string>() : "");
      bind_time(s, 6, ts, true);
      bind_text(s, 7, data);
      ++stats.events;
      return run(s, "writing an event");
    }
    if (type == "user_state") {
      std::pair<std::string, std::string> k{rec.at("app_name").get<std::string>(),
                                            rec.at("user_id").get<std::string>()};
      users_written_.insert(k);
      return user_row(k.first, k.second, rec.at("state"));
    }
    if (type == "app_state") {
      auto app = rec.at("app_name").get<std::string>();
      apps_written_.insert(app);
      return app_row(app, rec.at("state"));
    }
    return error{errc::internal, "unknown exchange record '" + type + "'"};
  }

  // Empty state rows for the scopes that have sessions but no state, and
  // the metadata row.
  result<void> finish() {
    for (auto& [k, t] : user_time_)
      if (!users_written_.count(k))
        if (auto r = user_row(k.first, k.second, json::object()); !r)
          return r;
    for (auto& [app, t] : app_time_)
      if (!apps_written_.count(app))
        if (auto r = app_row(app, json::object()); !r)
          return r;
    if (f_ == flavor::python_sqlite)
      return {};
    return exec(db_,
                "INSERT INTO adk_internal_metadata (\"key\", value) "
                "VALUES ('schema_version', '1')");
  }

  write_stats stats;

private:
  result<void> user_row(const std::string& app, const std::string& user, const json& state) {
    auto it = user_time_.find({app, user});
    sqlite3_stmt* s = users_.get();
    bind_text(s, 1, app);
    bind_text(s, 2, user);
    bind_text(s, 3, state.dump());
    bind_time(s, 4, it != user_time_.end() ? it->second : now_, false);
    ++stats.user_states;
    return run(s, "writing a user_states row");
  }
  result<void> app_row(const std::string& app, const json& state) {
    auto it = app_time_.find(app);
    sqlite3_stmt* s = apps_.get();
    bind_text(s, 1, app);
    bind_text(s, 2, state.dump());
    bind_time(s, 3, it != app_time_.end() ? it->second : now_, false);
    ++stats.app_states;
    return run(s, "writing an app_states row");
  }
  static void bind_text(sqlite3_stmt* s, int i, const std::string& v) {
    sqlite3_bind_text(s, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  }
  // `event_column`: ADK-Python keeps events.timestamp in local time.
  void bind_time(sqlite3_stmt* s, int i, double t, bool event_column) {
    switch (f_) {
      case flavor::python_database: bind_text(s, i, format_datetime(t, event_column)); return;
      case flavor::python_sqlite: sqlite3_bind_double(s, i, t); return;
      case flavor::js: {
        json ms = to_millis(t);
        if (ms.is_number_integer())
          sqlite3_bind_int64(s, i, ms.get<std::int64_t>());
        else
          sqlite3_bind_double(s, i, ms.get<double>());
        return;
      }
    }
  }
  result<void> run(sqlite3_stmt* s, const char* what) {
    int rc = sqlite3_step(s);
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    if (rc != SQLITE_DONE)
      return sql_error(db_, what);
    return {};
  }

  sqlite3* db_;
  flavor f_;
  double now_ =
    std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  stmt_ptr sessions_, events_, users_, apps_;
  std::map<std::string, double> app_time_;
  std::map<std::pair<std::string, std::string>, double> user_time_;
  std::set<std::string> apps_written_;
  std::set<std::pair<std::string, std::string>> users_written_;
};

result<void> sync_path(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0)
    return error{errc::io_error, "cannot open '" + path + "': " + std::strerror(errno)};
  int rc = ::fsync(fd);
  int saved = errno;
  ::close(fd);
  if (rc != 0)
    return error{errc::io_error, "fsync of '" + path + "': " + std::strerror(saved)};
  return {};
}

} // namespace

// -- write_file ------------------------------------------------------------------------

result<write_stats> write_file(store::kv_read& txn, const std::string& path, flavor f,
                               const std::function<void(std::uint64_t)>& progress) {
  std::error_code ec;
  if (fs::exists(path, ec) || fs::is_symlink(path, ec))
    return error{errc::already_exists, "'" + path + "' exists; export writes a new file"};
  auto target = fs::absolute(path, ec);
  if (ec)
    return error{errc::io_error, "'" + path + "': " + ec.message()};
  auto dir = target.parent_path();
  std::string tmp =
    (dir / ("." + target.filename().string() + ".partial-" + std::to_string(::getpid()))).string();
  fs::remove(tmp, ec);
  struct cleanup {
    std::string path;
    bool keep = false;
    ~cleanup() {
      if (!keep) {
        std::error_code e;
        fs::remove(path, e);
      }
    }
  } guard{tmp};
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(tmp.c_str(), &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  db_ptr db(raw);
  if (rc != SQLITE_OK)
    return error{errc::io_error,
                 "cannot create '" + tmp + "': " + (raw ? sqlite3_errmsg(raw) : "out of memory")};
  sqlite3_extended_result_codes(db.get(), 1);
  // A private file until the rename: no journal, no syncs; one fsync at the end.
  for (auto* sql : {"PRAGMA journal_mode = OFF", "PRAGMA synchronous = OFF", "BEGIN"})
    if (auto r = exec(db.get(), sql); !r)
      return r.err();
  const char* ddl = f == flavor::python_database ? python_database_ddl
    : f == flavor::python_sqlite                 ? python_sqlite_ddl
                                                 : js_ddl;
  if (auto r = exec(db.get(), ddl); !r)
    return r.err();
  writer w(db.get(), f);
  if (auto r = w.prepare_all(); !r)
    return r.err();
  std::optional<error> failed;
  std::uint64_t records = 0;
  auto n = store::export_store(txn, {}, [&](const std::string& line) {
    if (failed)
      return;
    try {
      auto r = w.record(json::parse(line));
      if (!r)
        failed = r.err();
    } catch (const json::exception& e) {
      failed = error{errc::internal, std::string("an exchange record: ") + e.what()};
    }
    if (progress && (++records & 1023) == 0)
      progress(records);
  });
  if (!n)
    return n.err();
  if (failed)
    return *failed;
  if (auto r = w.finish(); !r)
    return r.err();
  if (auto r = exec(db.get(), "COMMIT"); !r)
    return r.err();
  // Statements first (writer), then the handle: close_v2 would defer.
  auto stats = w.stats;
  db.reset();
  if (auto r = sync_path(tmp, false); !r)
    return r.err();
  if (fs::exists(path, ec))
    return error{errc::already_exists, "'" + path + "' appeared meanwhile; nothing replaced"};
  fs::rename(tmp, target, ec);
  if (ec)
    return error{errc::io_error, "cannot rename to '" + path + "': " + ec.message()};
  guard.keep = true;
  if (auto r = sync_path(dir.string(), true); !r)
    return r.err();
  return stats;
}

} // namespace agentstate::tools::adk
