// SPDX-License-Identifier: Apache-2.0
// Over 600 lines: one pass over ADK's four tables (sqlite_pass), a state machine whose
// phases share its statements, the session being merged and the skip list.
// Reading ADK's SQLite session stores: the flavour of a file, and passes
// over it that yield agentstate's exchange records (tools/adk/adk_sqlite.hpp).
#include "tools/adk/adk_sqlite.hpp"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <deque>
#include <filesystem>
#include <istream>
#include <map>
#include <set>
#include <streambuf>
#include <unordered_map>

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
#include "store/records.hpp"
#include "tools/adk/checks.hpp"
#include "tools/adk/sqlite.hpp"
#include "tools/adk/times.hpp"

namespace agentstate::tools::adk {

namespace fs = std::filesystem;

namespace {

class sqlite_pass final : public source::pass {
public:
  sqlite_pass(sqlite3* db, flavor f, read_stats& st) : db_(db), f_(f), st_(st) {}
  result<bool> next(std::string& line) override;

private:
  enum class phase { header, start, sessions, events, orphans, user_states, app_states, done };
  using key3 = std::array<std::string, 3>;

  result<void> step();
  result<void> load_event();
  result<void> open_session();
  void close_session();
  void take_event();
  result<void> scope_row(bool user);
  void skip(const char* table, json where, std::string reason) {
    st_.skipped.push_back({table, std::move(where), std::move(reason)});
  }
  void emit(const json& rec) { out_.push_back(rec.dump()); }
  std::optional<double> time_of(sqlite3_stmt* s, int col, bool event_column,
                                std::string& why) const;
  std::optional<json> state_of(cell_reader& cells, sqlite3_stmt* s, int type_col, const char* table,
                               const json& where, bool drop_temp, std::string& why);
  // The text of the cell whose typeof() is column `type_col` of `s` and
  // whose rowid is the next column, read through `cells`, when it holds at
  // most `cap` bytes; else nullopt with `why` (and failure_ set when SQLite
  // fails).
  std::optional<std::string> cell_text(cell_reader& cells, sqlite3_stmt* s, int type_col,
                                       std::size_t cap, std::string& why);

  sqlite3* db_;
  flavor f_;
  read_stats& st_;
  phase ph_ = phase::header;
  stmt_ptr sessions_, events_, users_, apps_;
  // The large columns, read by rowid after their size is known.
  std::unique_ptr<cell_reader> session_states_, event_data_, user_states_, app_states_;
  // A read of one of them failed: the pass ends with it.
  std::optional<error> failure_;
  std::deque<std::string> out_;
  // The event row loaded from events_, if any.
  bool ev_loaded_ = false;
  key3 ev_key_;
  // The session being merged.
  key3 cur_key_;
  bool cur_ok_ = false;
  std::string cur_why_;
  json cur_record_;
  std::uint64_t cur_events_ = 0; // kept (cur_ok_) or seen (otherwise)
  // The rowid of each event id kept in the session: a repeat is left out.
  std::unordered_map<std::string, sqlite3_int64> cur_ids_;
};

// The state and event_data columns are selected as their typeof() and the
// row's rowid (typeof() does not read a cell): cell_reader reads them once
// their size is known.
// Session columns: 0-2 keys (blob), 3-5 typeof keys, 6 typeof state, 7 rowid,
// 8 create, 9 update.
constexpr const char* sessions_sql =
  "SELECT ifnull(CAST(app_name AS BLOB), X''), ifnull(CAST(user_id AS BLOB), X''), "
  "ifnull(CAST(id AS BLOB), X''), typeof(app_name), typeof(user_id), typeof(id), "
  "typeof(state), rowid, create_time, update_time FROM sessions ORDER BY 1, 2, 3";
// Event columns: 0-2 keys, 3-5 typeof keys, 6 id, 7 invocation_id, 8 timestamp,
// 9 typeof event_data, 10 rowid.
constexpr const char* events_sql =
  "SELECT ifnull(CAST(app_name AS BLOB), X''), ifnull(CAST(user_id AS BLOB), X''), "
  "ifnull(CAST(session_id AS BLOB), X''), typeof(app_name), typeof(user_id), "
  "typeof(session_id), id, invocation_id, timestamp, typeof(event_data), rowid FROM events "
  "ORDER BY 1, 2, 3, timestamp, rowid";
// User columns: 0 app_name, 1 user_id, 2 typeof state, 3 rowid.
constexpr const char* users_sql =
  "SELECT app_name, user_id, typeof(state), rowid FROM user_states "
  "ORDER BY ifnull(CAST(app_name AS BLOB), X''), ifnull(CAST(user_id AS BLOB), X'')";
// App columns: 0 app_name, 1 typeof state, 2 rowid.
constexpr const char* apps_sql = "SELECT app_name, typeof(state), rowid FROM app_states "
                                 "ORDER BY ifnull(CAST(app_name AS BLOB), X'')";

result<bool> sqlite_pass::next(std::string& line) {
  while (out_.empty()) {
    if (ph_ == phase::done)
      return false;
    if (auto r = step(); !r)
      return r.err();
  }
  line = std::move(out_.front());
  out_.pop_front();
  return true;
}

result<void> sqlite_pass::load_event() {
  int rc = sqlite3_step(events_.get());
  if (rc == SQLITE_DONE) {
    ev_loaded_ = false;
    return {};
  }
  if (rc != SQLITE_ROW)
    return sql_error(db_, "reading events");
  ev_loaded_ = true;
  for (int i = 0; i < 3; ++i)
    ev_key_[i] = column_bytes(events_.get(), i);
  return {};
}

std::optional<double> sqlite_pass::time_of(sqlite3_stmt* s, int col, bool event_column,
                                           std::string& why) const {
  int t = sqlite3_column_type(s, col);
  const char* name = sqlite3_column_name(s, col);
  switch (f_) {
    case flavor::python_database:
      if (t == SQLITE_TEXT) {
        auto text = column_text(s, col);
        if (auto v = parse_datetime(text, event_column))
          return v;
        why = std::string(name) + " '" + text.substr(0, 40) + "' is not a datetime";
        return std::nullopt;
      }
      why = std::string(name) + " is " + type_name(t) + "; this flavour keeps datetime text";
      return std::nullopt;
    case flavor::python_sqlite:
      if (t == SQLITE_FLOAT || t == SQLITE_INTEGER)
        return sqlite3_column_double(s, col);
      why = std::string(name) + " is " + type_name(t) + "; this flavour keeps epoch seconds";
      return std::nullopt;
    case flavor::js:
      if (t == SQLITE_FLOAT || t == SQLITE_INTEGER) {
        if (t == SQLITE_INTEGER)
          return static_cast<double>(sqlite3_column_int64(s, col)) / 1000.0;
        return sqlite3_column_double(s, col) / 1000.0;
      }
      why = std::string(name) + " is " + type_name(t) + "; this flavour keeps epoch milliseconds";
      return std::nullopt;
  }
  return std::nullopt;
}

std::optional<std::string> sqlite_pass::cell_text(cell_reader& cells, sqlite3_stmt* s, int type_col,
                                                  std::size_t cap, std::string& why) {
  std::string text;
  std::size_t size = 0;
  auto got = cells.read(sqlite3_column_int64(s, type_col + 1), cap, text, size);
  if (!got) {
    failure_ = got.err();
    why = got.err().message;
    return std::nullopt;
  }
  if (!*got) {
    why = cells.column() + " holds " + std::to_string(size) + " bytes; more than "
      + std::to_string(cap) + " is refused unread";
    return std::nullopt;
  }
  return text;
}

// The JSON object whose typeof() is column `type_col` (null counts as {}
// where ADK-Python allows it), its temp: keys dropped when `drop_temp`, keys
// and values beyond the limits skipped (and listed under `table`/`where` +
// key). nullopt, with `why`, when the column does not hold a JSON object.
std::optional<json> sqlite_pass::state_of(cell_reader& cells, sqlite3_stmt* s, int type_col,
                                          const char* table, const json& where, bool drop_temp,
                                          std::string& why) {
  int t = storage_class(column_text(s, type_col));
  if (t == SQLITE_NULL)
    return json::object();
  if (t != SQLITE_TEXT) {
    why = std::string("state is ") + type_name(t) + ", not JSON text";
    return std::nullopt;
  }
  auto text = cell_text(cells, s, type_col, max_state_column_bytes, why);
  if (!text)
    return std::nullopt;
  auto parsed = parse_json(*text, store::stored_json_depth);
  if (!parsed) {
    why = "state is not JSON: " + parsed.err().message;
    return std::nullopt;
  }
  if (parsed->is_null())
    return json::object();
  if (!parsed->is_object()) {
    why = "state is not a JSON object";
    return std::nullopt;
  }
  json out = json::object();
  for (auto it = parsed->begin(); it != parsed->end(); ++it) {
    if (drop_temp && is_temp_key(it.key())) {
      ++st_.temp_keys_dropped;
      continue;
    }
    auto p = key_problem(it.key());
    if (!p)
      p = value_problem(it.value());
    if (p) {
      json w = where;
      w["key"] = it.key();
      skip(table, std::move(w), *p);
      continue;
    }
    out[it.key()] = std::move(it.value());
  }
  return out;
}

result<void> sqlite_pass::open_session() {
  sqlite3_stmt* s = sessions_.get();
  for (int i = 0; i < 3; ++i)
    cur_key_[i] = column_bytes(s, i);
  cur_events_ = 0;
  cur_ids_.clear();
  cur_ok_ = true;
  cur_why_.clear();
  json where = {{"app_name", cur_key_[0]}, {"user_id", cur_key_[1]}, {"id", cur_key_[2]}};
  const char* names[3] = {"app_name", "user_id", "id"};
  for (int i = 0; i < 3 && cur_ok_; ++i) {
    std::string type = column_text(s, 3 + i);
    if (type != "text") {
      cur_ok_ = false;
      cur_why_ = std::string(names[i]) + " is " + type + ", not text";
    } else if (auto p = name_problem(cur_key_[i], names[i])) {
      cur_ok_ = false;
      cur_why_ = *p;
    }
  }
  std::optional<double> created, updated;
  if (cur_ok_) {
    created = time_of(s, 8, false, cur_why_);
    if (created)
      updated = time_of(s, 9, false, cur_why_);
    cur_ok_ = created && updated;
  }
  if (!cur_ok_)
    return {};
  auto state = state_of(*session_states_, s, 6, "sessions", where, true, cur_why_);
  if (failure_)
    return *failure_;
  if (!state) {
    cur_ok_ = false;
    return {};
  }
  cur_record_ = {{"type", "session"},         {"app_name", cur_key_[0]},
                 {"user_id", cur_key_[1]},    {"id", cur_key_[2]},
                 {"created", *created},       {"last_update_time", *updated},
                 {"state", std::move(*state)}};
  return {};
}

void sqlite_pass::close_session() {
  json where = {{"app_name", cur_key_[0]}, {"user_id", cur_key_[1]}, {"id", cur_key_[2]}};
  if (cur_ok_) {
    cur_record_["version"] = cur_events_;
    emit(cur_record_);
    ++st_.sessions;
    return;
  }
  if (cur_events_ > 0)
    cur_why_ += " (its " + std::to_string(cur_events_)
      + (cur_events_ == 1 ? " event is" : " events are") + " left out with it)";
  skip("sessions", std::move(where), cur_why_);
}

// Converts the loaded event row of the current (good) session.
void sqlite_pass::take_event() {
  sqlite3_stmt* s = events_.get();
  json where = {{"app_name", cur_key_[0]},
                {"user_id", cur_key_[1]},
                {"session_id", cur_key_[2]},
                {"id", column_text(s, 6)}};
  auto bad = [&](std::string why) { skip("events", std::move(where), std::move(why)); };
  const char* keys[3] = {"app_name", "user_id", "session_id"};
  for (int i = 0; i < 3; ++i)
    if (std::string type = column_text(s, 3 + i); type != "text")
      return bad(std::string(keys[i]) + " is " + type + ", not text");
  if (sqlite3_column_type(s, 6) != SQLITE_TEXT)
    return bad(std::string("id is ") + type_name(sqlite3_column_type(s, 6)) + ", not text");
  int inv_type = sqlite3_column_type(s, 7);
  if (inv_type != SQLITE_TEXT && inv_type != SQLITE_NULL)
    return bad(std::string("invocation_id is ") + type_name(inv_type) + ", not text");
  int data_type = storage_class(column_text(s, 9));
  json e = json::object();
  std::string data_text;
  if (data_type == SQLITE_TEXT) {
    std::string why;
    auto text = cell_text(*event_data_, s, 9, max_event_data_bytes, why);
    if (!text)
      return failure_ ? void() : bad(why);
    data_text = std::move(*text);
    auto parsed = parse_json(data_text, store::stored_json_depth);
    if (!parsed)
      return bad("event_data is not JSON: " + parsed.err().message);
    if (!parsed->is_object() && !parsed->is_null())
      return bad("event_data is not a JSON object");
    if (parsed->is_object())
      e = std::move(*parsed);
  } else if (data_type != SQLITE_NULL) {
    return bad(std::string("event_data is ") + type_name(data_type) + ", not JSON text");
  }
  // id and invocation_id: what the flavour serves.
  const bool columns_win = f_ == flavor::python_database;
  if (columns_win || !e.contains("id") || e["id"].is_null())
    e["id"] = column_text(s, 6);
  if (columns_win || !e.contains("invocation_id") || e["invocation_id"].is_null())
    e["invocation_id"] = inv_type == SQLITE_NULL ? std::string() : column_text(s, 7);
  // timestamp: event_data's, in seconds; else the column.
  auto ts = e.find("timestamp");
  if (ts != e.end() && ts->is_number()) {
    if (f_ == flavor::js) {
      // Milliseconds -> seconds from the number's text, not its double: see
      // millis_text.
      std::optional<double> secs;
      if (auto raw = top_level_member(data_text, "timestamp"))
        secs = seconds_from_millis_text(*raw);
      *ts = secs ? *secs : ts->get<double>() / 1000.0;
    }
  } else {
    std::string why;
    auto t = time_of(s, 8, true, why);
    if (!t)
      return bad(why);
    e["timestamp"] = *t;
  }
  // temp: keys never reach the store.
  if (auto a = e.find("actions"); a != e.end() && a->is_object()) {
    if (auto d = a->find("state_delta"); d != a->end() && d->is_object()) {
      for (auto it = d->begin(); it != d->end();) {
        if (is_temp_key(it.key())) {
          ++st_.temp_keys_dropped;
          it = d->erase(it);
        } else {
          ++it;
        }
      }
    }
  }
  if (auto p = event_problem(e))
    return bad(*p);
  // A session's events have distinct ids (ADK's primary key; the engine's
  // rule): a repeat is left out, the first kept.
  const auto rowid = sqlite3_column_int64(s, 10);
  if (auto [at, added] = cur_ids_.emplace(e["id"].get<std::string>(), rowid); !added)
    return bad("event id '" + store::printable(at->first) + "' appears twice in the session: row "
               + std::to_string(rowid) + " repeats row " + std::to_string(at->second)
               + " (rowid), which is kept");
  ++cur_events_;
  ++st_.events;
  emit(json{{"type", "event"},
            {"app_name", cur_key_[0]},
            {"user_id", cur_key_[1]},
            {"session_id", cur_key_[2]},
            {"version", cur_events_},
            {"event", std::move(e)}});
}

result<void> sqlite_pass::scope_row(bool user) {
  sqlite3_stmt* s = (user ? users_ : apps_).get();
  int rc = sqlite3_step(s);
  if (rc == SQLITE_DONE) {
    ph_ = user ? phase::app_states : phase::done;
    return {};
  }
  if (rc != SQLITE_ROW)
    return sql_error(db_, user ? "reading user_states" : "reading app_states");
  const char* table = user ? "user_states" : "app_states";
  json where = {{"app_name", column_bytes(s, 0)}};
  if (user)
    where["user_id"] = column_bytes(s, 1);
  const char* names[2] = {"app_name", "user_id"};
  for (int i = 0; i < (user ? 2 : 1); ++i) {
    if (sqlite3_column_type(s, i) != SQLITE_TEXT) {
      skip(table, where,
           std::string(names[i]) + " is " + type_name(sqlite3_column_type(s, i)) + ", not text");
      return {};
    }
    if (auto p = name_problem(column_bytes(s, i), names[i])) {
      skip(table, where, *p);
      return {};
    }
  }
  std::string why;
  auto state =
    state_of(*(user ? user_states_ : app_states_), s, user ? 2 : 1, table, where, false, why);
  if (failure_)
    return *failure_;
  if (!state) {
    skip(table, where, why);
    return {};
  }
  (user ? st_.user_states : st_.app_states)++;
  (user ? st_.user_state_keys : st_.app_state_keys) += state->size();
  if (state->empty())
    return {};
  json rec = {{"type", user ? "user_state" : "app_state"}, {"app_name", where["app_name"]}};
  if (user)
    rec["user_id"] = where["user_id"];
  rec["state"] = std::move(*state);
  emit(rec);
  return {};
}

result<void> sqlite_pass::step() {
  switch (ph_) {
    case phase::header:
      emit(json{{"type", "header"}, {"format", store::export_format_version}});
      ph_ = phase::start;
      return {};
    case phase::start: {
      for (auto [ptr, sql] : {std::pair{&sessions_, sessions_sql}, std::pair{&events_, events_sql},
                              std::pair{&users_, users_sql}, std::pair{&apps_, apps_sql}}) {
        auto s = prepare(db_, sql);
        if (!s)
          return s.err();
        *ptr = std::move(*s);
      }
      session_states_ = std::make_unique<cell_reader>(db_, "sessions", "state");
      event_data_ = std::make_unique<cell_reader>(db_, "events", "event_data");
      user_states_ = std::make_unique<cell_reader>(db_, "user_states", "state");
      app_states_ = std::make_unique<cell_reader>(db_, "app_states", "state");
      if (auto r = load_event(); !r)
        return r;
      ph_ = phase::sessions;
      return {};
    }
    case phase::sessions: {
      int rc = sqlite3_step(sessions_.get());
      if (rc == SQLITE_DONE) {
        ph_ = phase::orphans;
        return {};
      }
      if (rc != SQLITE_ROW)
        return sql_error(db_, "reading sessions");
      if (auto r = open_session(); !r)
        return r;
      ph_ = phase::events;
      return {};
    }
    case phase::events:
    case phase::orphans: {
      // Events sorting before the current session (or after the last one)
      // have no session row: ADK never serves them.
      while (ev_loaded_ && (ph_ == phase::orphans || ev_key_ < cur_key_)) {
        key3 k = ev_key_;
        std::uint64_t n = 0;
        while (ev_loaded_ && ev_key_ == k) {
          ++n;
          if (auto r = load_event(); !r)
            return r;
        }
        skip("events", json{{"app_name", k[0]}, {"user_id", k[1]}, {"session_id", k[2]}},
             std::to_string(n) + " event" + (n == 1 ? "" : "s")
               + " of a session that has no row in sessions");
      }
      if (ph_ == phase::orphans) {
        ph_ = phase::user_states;
        return {};
      }
      if (ev_loaded_ && ev_key_ == cur_key_) {
        if (cur_ok_)
          take_event();
        if (failure_)
          return *failure_;
        if (!cur_ok_)
          ++cur_events_;
        return load_event();
      }
      close_session();
      ph_ = phase::sessions;
      return {};
    }
    case phase::user_states: return scope_row(true);
    case phase::app_states: return scope_row(false);
    case phase::done: return {};
  }
  return {};
}

class sqlite_source final : public source {
public:
  sqlite_source(db_ptr db, flavor f, std::string version)
    : db_(std::move(db)), f_(f), version_(std::move(version)) {}
  ~sqlite_source() override {
    if (db_)
      sqlite3_exec(db_.get(), "ROLLBACK", nullptr, nullptr, nullptr);
  }
  flavor kind() const noexcept override { return f_; }
  const std::string& schema_version() const noexcept override { return version_; }
  std::unique_ptr<pass> start(read_stats& stats) override {
    return std::make_unique<sqlite_pass>(db_.get(), f_, stats);
  }

private:
  db_ptr db_;
  flavor f_;
  std::string version_;
};

const char* file_kind(mode_t m) {
  if (S_ISFIFO(m))
    return "a FIFO";
  if (S_ISSOCK(m))
    return "a socket";
  if (S_ISCHR(m))
    return "a character device";
  if (S_ISBLK(m))
    return "a block device";
  if (S_ISDIR(m))
    return "a directory";
  return "a special file";
}

error refuse(const std::string& path, const std::string& why) {
  return error{errc::invalid_argument, "'" + path + "' " + why};
}

} // namespace

// -- source::open ----------------------------------------------------------------------

result<std::unique_ptr<source>> source::open(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec))
    return error{errc::not_found, "'" + path + "': no such file"};
  if (fs::is_directory(path, ec))
    return refuse(path, "is a directory, not an SQLite file");
  // SQLite opens the file (and a journal or WAL beside it) with a plain
  // open(), which blocks on a FIFO until a writer comes: only regular files
  // reach it.
  for (const char* suffix : {"", "-journal", "-wal", "-shm"}) {
    struct stat st;
    auto name = path + suffix;
    if (::stat(name.c_str(), &st) != 0) {
      if (*suffix == '\0')
        return error{errc::io_error, "cannot read '" + path + "': " + std::strerror(errno)};
      continue;
    }
    if (!S_ISREG(st.st_mode))
      return refuse(name,
                    std::string("is ") + file_kind(st.st_mode)
                      + ", not a regular file: an ADK store is an SQLite file");
  }
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READONLY, nullptr);
  db_ptr db(raw);
  if (rc != SQLITE_OK)
    return error{errc::io_error,
                 "cannot open '" + path + "': " + (raw ? sqlite3_errmsg(raw) : "out of memory")};
  sqlite3_extended_result_codes(db.get(), 1);
  // The snapshot every pass reads: taken by the first read below, held
  // until the source is destroyed.
  if (auto r = exec(db.get(), "BEGIN"); !r)
    return r.err();
  std::set<std::string> tables;
  {
    sqlite3_stmt* s = nullptr;
    rc = sqlite3_prepare_v2(db.get(), "SELECT name FROM sqlite_master WHERE type = 'table'", -1, &s,
                            nullptr);
    stmt_ptr guard(s);
    if (rc == SQLITE_OK)
      while ((rc = sqlite3_step(s)) == SQLITE_ROW)
        tables.insert(column_text(s, 0));
    if ((rc & 0xff) == SQLITE_NOTADB)
      return refuse(path, "is not an SQLite database");
    if (rc != SQLITE_DONE)
      return sql_error(db.get(), "reading '" + path + "'");
  }
  {
    auto s = prepare(db.get(), "PRAGMA encoding");
    if (!s)
      return s.err();
    if (sqlite3_step(s->get()) == SQLITE_ROW && column_text(s->get(), 0) != "UTF-8")
      return refuse(path, "is a " + column_text(s->get(), 0) + " database; ADK's stores are UTF-8");
  }
  const char* needed[4] = {"sessions", "events", "app_states", "user_states"};
  int present = 0;
  for (auto* t : needed)
    present += static_cast<int>(tables.count(t));
  if (present == 0)
    return refuse(path,
                  "is not an ADK session store: it has none of the tables sessions, "
                  "events, app_states, user_states");
  for (auto* t : needed)
    if (!tables.count(t))
      return refuse(path, std::string("is not an ADK session store: it has no table ") + t);
  auto ev_cols = columns_of(db.get(), "events");
  if (!ev_cols)
    return ev_cols.err();
  const std::string v0 =
    "uses ADK-Python's v0 session schema (events.actions holds pickled Python objects), "
    "which agentstate does not read: upgrade it to schema v1 with ADK-Python first "
    "(`adk migrate session`), then import the result";
  if (find_column(*ev_cols, "actions") && !find_column(*ev_cols, "event_data"))
    return refuse(path, v0);
  std::string version;
  if (tables.count("adk_internal_metadata")) {
    auto s = prepare(db.get(),
                     "SELECT value FROM adk_internal_metadata WHERE \"key\" = "
                     "'schema_version'");
    if (!s)
      return refuse(path, "has an adk_internal_metadata table without a key/value shape");
    rc = sqlite3_step(s->get());
    if (rc == SQLITE_DONE)
      return refuse(path, "has no schema_version in adk_internal_metadata");
    if (rc != SQLITE_ROW)
      return sql_error(db.get(), "reading adk_internal_metadata");
    version = column_text(s->get(), 0);
    if (version == "0")
      return refuse(path, v0);
    if (version != "1")
      return refuse(path,
                    "has ADK session schema_version '" + version.substr(0, 40)
                      + "'; agentstate reads version 1");
  }
  // The columns every flavour has.
  const std::map<std::string, std::vector<const char*>> wanted = {
    {"sessions", {"app_name", "user_id", "id", "state", "create_time", "update_time"}},
    {"events",
     {"id", "app_name", "user_id", "session_id", "invocation_id", "timestamp", "event_data"}},
    {"app_states", {"app_name", "state", "update_time"}},
    {"user_states", {"app_name", "user_id", "state", "update_time"}}};
  std::map<std::string, std::vector<column_info>> cols;
  for (auto& [t, names] : wanted) {
    auto c = columns_of(db.get(), t);
    if (!c)
      return c.err();
    for (auto* n : names)
      if (!find_column(*c, n))
        return refuse(path, "is not an ADK session store: table " + t + " has no column " + n);
    cols[t] = std::move(*c);
  }
  const auto& state_type = find_column(cols["sessions"], "state")->type;
  const auto& time_type = find_column(cols["sessions"], "update_time")->type;
  flavor f;
  if (!version.empty())
    f = iequals(state_type, "json") ? flavor::js : flavor::python_database;
  else if (iequals(time_type, "REAL"))
    f = flavor::python_sqlite;
  else if (iequals(time_type, "DATETIME"))
    f = flavor::python_database; // v1 tables whose metadata row ADK has yet to write
  else
    return refuse(path,
                  "is not a session store agentstate recognises: no "
                  "adk_internal_metadata, and sessions.update_time is declared '"
                    + time_type + "' (ADK-Python's SqliteSessionService declares REAL)");
  return std::unique_ptr<source>(new sqlite_source(std::move(db), f, version));
}

} // namespace agentstate::tools::adk
