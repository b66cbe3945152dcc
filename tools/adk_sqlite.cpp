// SPDX-License-Identifier: Apache-2.0
// ADK's SQLite session stores in and out of agentstate: tools/adk_sqlite.hpp
// says what is read and written and how each field maps.
#include "tools/adk_sqlite.hpp"
#include "tools/import_target.hpp"

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
#include "tools/cli.hpp"

namespace agentstate::tools::adk {

namespace fs = std::filesystem;

const char* flavor_name(flavor f) noexcept {
  switch (f) {
    case flavor::python_database:
      return "adk-python-database";
    case flavor::python_sqlite:
      return "adk-python-sqlite";
    case flavor::js:
      return "adk-js";
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

// -- SQLite handles --------------------------------------------------------------

struct db_closer {
  void operator()(sqlite3* d) const noexcept { sqlite3_close_v2(d); }
};
struct stmt_closer {
  void operator()(sqlite3_stmt* s) const noexcept { sqlite3_finalize(s); }
};
using db_ptr = std::unique_ptr<sqlite3, db_closer>;
using stmt_ptr = std::unique_ptr<sqlite3_stmt, stmt_closer>;

error sql_error(sqlite3* db, const std::string& what) {
  int rc = sqlite3_extended_errcode(db);
  errc code = (rc & 0xff) == SQLITE_IOERR || (rc & 0xff) == SQLITE_FULL
                  || (rc & 0xff) == SQLITE_CANTOPEN || (rc & 0xff) == SQLITE_BUSY
                  || (rc & 0xff) == SQLITE_LOCKED || (rc & 0xff) == SQLITE_READONLY
                ? errc::io_error
                : errc::internal;
  return error{code, what + ": " + sqlite3_errmsg(db)};
}

result<stmt_ptr> prepare(sqlite3* db, const std::string& sql) {
  sqlite3_stmt* s = nullptr;
  if (sqlite3_prepare_v2(db, sql.c_str(), static_cast<int>(sql.size()), &s, nullptr)
      != SQLITE_OK)
    return sql_error(db, "SQLite refused '" + sql.substr(0, 60) + "'");
  return stmt_ptr(s);
}

result<void> exec(sqlite3* db, const std::string& sql) {
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK)
    return sql_error(db, "SQLite failed on '" + sql.substr(0, 60) + "'");
  return {};
}

std::string column_bytes(sqlite3_stmt* s, int i) {
  const void* p = sqlite3_column_blob(s, i);
  int n = sqlite3_column_bytes(s, i);
  return p ? std::string(static_cast<const char*>(p), static_cast<std::size_t>(n))
           : std::string();
}

std::string column_text(sqlite3_stmt* s, int i) {
  const unsigned char* p = sqlite3_column_text(s, i);
  int n = sqlite3_column_bytes(s, i);
  return p ? std::string(reinterpret_cast<const char*>(p), static_cast<std::size_t>(n))
           : std::string();
}

const char* type_name(int t) {
  switch (t) {
    case SQLITE_INTEGER:
      return "an integer";
    case SQLITE_FLOAT:
      return "a real";
    case SQLITE_TEXT:
      return "text";
    case SQLITE_BLOB:
      return "a blob";
    default:
      return "null";
  }
}

// -- limits --------------------------------------------------------------------------
// The engine's own checks (actors/validate.cpp), restated on the exchange
// records: import_store trusts its input.

const limits default_limits{};

std::optional<std::string> string_problem(std::string_view v, const char* what,
                                          std::size_t max) {
  if (v.size() > max)
    return std::string(what) + " is " + std::to_string(v.size()) + " bytes; the limit is "
           + std::to_string(max);
  if (v.find('\0') != std::string_view::npos)
    return std::string(what) + " contains a NUL byte";
  if (!model::valid_utf8(v))
    return std::string(what) + " is not valid UTF-8";
  return std::nullopt;
}

std::optional<std::string> name_problem(std::string_view v, const char* what) {
  if (v.empty())
    return std::string(what) + " is empty";
  return string_problem(v, what, max_name_bytes);
}

std::optional<std::string> key_problem(const std::string& key) {
  return string_problem(key, "the state key", max_state_key_bytes);
}

std::optional<std::string> depth_problem(const json& v, const std::string& what) {
  if (json_depth(v, default_limits.max_json_depth) > default_limits.max_json_depth)
    return what + " nests deeper than " + std::to_string(default_limits.max_json_depth)
           + " levels";
  return std::nullopt;
}

std::optional<std::string> value_problem(const json& v) {
  if (auto p = depth_problem(v, "the value"))
    return p;
  auto text = dump_json(v);
  if (!text)
    return "the value: " + text.err().message;
  if (text->size() > default_limits.max_value_bytes)
    return "the value is " + std::to_string(text->size()) + " bytes as JSON; the limit is "
           + std::to_string(default_limits.max_value_bytes);
  return std::nullopt;
}

std::optional<std::string> members_depth_problem(const json& obj, const std::string& what) {
  if (!obj.is_object())
    return std::nullopt;
  for (auto it = obj.begin(); it != obj.end(); ++it)
    if (auto p = depth_problem(it.value(), what + " '" + it.key() + "'"))
      return p;
  return std::nullopt;
}

// The checks of validate_event, and the stored size, of the event JSON `e`
// as import_store will store it.
std::optional<std::string> event_problem(const json& e) {
  auto ev = event_from_json(e);
  if (!ev)
    return ev.err().message;
  if (ev->id.empty())
    return "the event has no id";
  if (auto p = string_problem(ev->id, "the event id", max_event_id_bytes))
    return p;
  if (auto p = string_problem(ev->invocation_id, "invocation_id", max_event_id_bytes))
    return p;
  if (!ev->timestamp)
    return "the event has no timestamp";
  for (auto it = ev->actions.state_delta.begin(); it != ev->actions.state_delta.end(); ++it)
    if (auto p = string_problem(it.key(), "a state_delta key", max_state_key_bytes))
      return p;
  for (auto& k : ev->actions.state_remove)
    if (auto p = string_problem(k, "a state_remove key", max_state_key_bytes))
      return p;
  if (auto p = members_depth_problem(ev->actions.state_delta, "state value"))
    return p;
  if (auto p = members_depth_problem(ev->actions.artifact_delta, "artifact_delta value"))
    return p;
  if (auto p = members_depth_problem(ev->actions.extra, "actions member"))
    return p;
  if (auto p = members_depth_problem(ev->extra, "event member"))
    return p;
  if (ev->content)
    if (auto p = depth_problem(*ev->content, "content"))
      return p;
  auto text = dump_json(e);
  if (!text)
    return text.err().message;
  if (text->size() > default_limits.max_event_bytes)
    return "the event is " + std::to_string(text->size())
           + " bytes as stored JSON; the limit is "
           + std::to_string(default_limits.max_event_bytes);
  return std::nullopt;
}

bool is_temp_key(const std::string& k) {
  return k.compare(0, 5, "temp:") == 0;
}

// -- times ---------------------------------------------------------------------------

std::int64_t days_from_civil(std::int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<std::int64_t>(doe) - 719468;
}

// Parses "YYYY-MM-DD HH:MM:SS[.f{1,9}]" (or with 'T'), as UTC or local time.
std::optional<double> parse_datetime(const std::string& s, bool local) {
  int Y, M, D, h, m, sec, n = 0;
  if (std::sscanf(s.c_str(), "%4d-%2d-%2d%*1[ T]%2d:%2d:%2d%n", &Y, &M, &D, &h, &m, &sec, &n)
        != 6
      || n != 19 || M < 1 || M > 12 || D < 1 || D > 31 || h > 23 || m > 59 || sec > 60)
    return std::nullopt;
  std::int64_t frac_ns = 0;
  std::size_t i = 19;
  if (i < s.size() && s[i] == '.') {
    std::size_t digits = 0;
    std::int64_t scale = 100000000;
    for (++i; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i, ++digits) {
      frac_ns += (s[i] - '0') * scale;
      scale /= 10;
    }
    if (digits == 0 || digits > 9)
      return std::nullopt;
  }
  if (i != s.size())
    return std::nullopt;
  std::int64_t secs;
  if (local) {
    std::tm tm{};
    tm.tm_year = Y - 1900;
    tm.tm_mon = M - 1;
    tm.tm_mday = D;
    tm.tm_hour = h;
    tm.tm_min = m;
    tm.tm_sec = sec;
    tm.tm_isdst = -1;
    secs = static_cast<std::int64_t>(std::mktime(&tm));
  } else {
    secs = days_from_civil(Y, static_cast<unsigned>(M), static_cast<unsigned>(D)) * 86400
           + h * 3600 + m * 60 + sec;
  }
  // One rounding: the nearest double to secs + frac.
  if (frac_ns % 1000 == 0)
    return static_cast<double>(secs * 1000000 + frac_ns / 1000) / 1e6;
  return static_cast<double>(secs) + static_cast<double>(frac_ns) / 1e9;
}

// "YYYY-MM-DD HH:MM:SS.ffffff" of `t` (rounded to the microsecond), as UTC
// or local time: what SQLAlchemy writes for a naive datetime.
std::string format_datetime(double t, bool local) {
  auto total = static_cast<std::int64_t>(std::llround(t * 1e6));
  std::int64_t secs = total / 1000000, us = total % 1000000;
  if (us < 0) {
    us += 1000000;
    secs -= 1;
  }
  std::time_t tt = static_cast<std::time_t>(secs);
  std::tm tm{};
  if (local)
    localtime_r(&tt, &tm);
  else
    gmtime_r(&tt, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02d %02d:%02d:%02d.%06lld", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<long long>(us));
  return buf;
}

// Epoch seconds -> milliseconds as ADK-JS keeps them: an integer when that
// integer divided by 1000 gives `t` back exactly (everything ADK-JS wrote
// does), else the real number of milliseconds.
json to_millis(double t) {
  double ms = t * 1000.0;
  double r = std::nearbyint(ms);
  if (std::isfinite(r) && std::fabs(r) < 9e15 && r / 1000.0 == t)
    return static_cast<std::int64_t>(r);
  return ms;
}

// The JSON number text of `t` seconds in milliseconds, exactly: the decimal
// of `t` (which reads back as `t`) with its exponent raised by 3. A double
// of milliseconds cannot hold every double of seconds (at today's times
// ~1 in 40 would come back one unit in the last place off); this text can,
// and ADK-JS reads it as the nearest double of milliseconds.
std::string millis_text(double t) {
  json ms = to_millis(t);
  if (ms.is_number_integer())
    return ms.dump();
  std::string d = json(t).dump();
  auto e = d.find_first_of("eE");
  if (e == std::string::npos)
    return d + "e3";
  return d.substr(0, e) + "e" + std::to_string(std::stol(d.substr(e + 1)) + 3);
}

// The inverse of millis_text for any JSON number text of milliseconds:
// the nearest double to (that decimal) / 1000, rounded once.
std::optional<double> seconds_from_millis_text(std::string_view text) {
  auto e = text.find_first_of("eE");
  std::string mantissa(text.substr(0, e));
  long exp = 0;
  if (e != std::string_view::npos) {
    std::string x(text.substr(e + 1));
    char* end = nullptr;
    exp = std::strtol(x.c_str(), &end, 10);
    if (x.empty() || *end != '\0')
      return std::nullopt;
  }
  std::string shifted = mantissa + "e" + std::to_string(exp - 3);
  char* end = nullptr;
  double v = std::strtod(shifted.c_str(), &end);
  if (end != shifted.c_str() + shifted.size() || !std::isfinite(v))
    return std::nullopt;
  return v;
}

// The raw text of the last top-level member `key` of the JSON object
// `text`, which must be valid JSON (it is parsed before). nullopt when the
// object has no such member spelled without escapes.
std::optional<std::string_view> top_level_member(std::string_view text, std::string_view key) {
  std::size_t i = 0;
  auto ws = [&] {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n'
                               || text[i] == '\r'))
      ++i;
  };
  auto skip_string = [&] { // at the opening quote; leaves i after the closing one
    for (++i; i < text.size() && text[i] != '"'; ++i)
      if (text[i] == '\\')
        ++i;
    ++i;
  };
  ws();
  if (i >= text.size() || text[i] != '{')
    return std::nullopt;
  ++i;
  std::optional<std::string_view> found;
  for (;;) {
    ws();
    if (i >= text.size() || text[i] != '"')
      return found;
    std::size_t k0 = i + 1;
    skip_string();
    std::string_view k = text.substr(k0, i - 1 - k0);
    ws();
    ++i; // ':'
    ws();
    std::size_t v0 = i;
    if (i < text.size() && text[i] == '"') {
      skip_string();
    } else if (i < text.size() && (text[i] == '{' || text[i] == '[')) {
      int depth = 0;
      for (; i < text.size(); ++i) {
        if (text[i] == '"') {
          skip_string();
          --i;
        } else if (text[i] == '{' || text[i] == '[') {
          ++depth;
        } else if (text[i] == '}' || text[i] == ']') {
          if (--depth == 0) {
            ++i;
            break;
          }
        }
      }
    } else {
      while (i < text.size() && text[i] != ',' && text[i] != '}' && text[i] != ' '
             && text[i] != '\t' && text[i] != '\n' && text[i] != '\r')
        ++i;
    }
    if (k == key)
      found = text.substr(v0, i - v0);
    ws();
    if (i >= text.size() || text[i] != ',')
      return found;
    ++i;
  }
}

// -- reading -------------------------------------------------------------------------

struct column_info {
  std::string name, type;
};

result<std::vector<column_info>> columns_of(sqlite3* db, const std::string& table) {
  auto s = prepare(db, "PRAGMA table_info(\"" + table + "\")");
  if (!s)
    return s.err();
  std::vector<column_info> out;
  int rc;
  while ((rc = sqlite3_step(s->get())) == SQLITE_ROW)
    out.push_back({column_text(s->get(), 1), column_text(s->get(), 2)});
  if (rc != SQLITE_DONE)
    return sql_error(db, "reading the columns of " + table);
  return out;
}

const column_info* find_column(const std::vector<column_info>& cols, const char* name) {
  for (auto& c : cols)
    if (c.name == name)
      return &c;
  return nullptr;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size())
    return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i]))
        != std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

// One pass: a merge of the sessions (ordered by key) with the events (ordered
// by session key, then ADK's order), then user_states and app_states.
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
  std::optional<json> state_of(sqlite3_stmt* s, int col, const char* table,
                               const json& where, bool drop_temp, std::string& why);

  sqlite3* db_;
  flavor f_;
  read_stats& st_;
  phase ph_ = phase::header;
  stmt_ptr sessions_, events_, users_, apps_;
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
};

// Session columns: 0-2 keys (blob), 3-5 typeof keys, 6 state, 7 create, 8 update.
constexpr const char* sessions_sql =
  "SELECT ifnull(CAST(app_name AS BLOB), X''), ifnull(CAST(user_id AS BLOB), X''), "
  "ifnull(CAST(id AS BLOB), X''), typeof(app_name), typeof(user_id), typeof(id), "
  "state, create_time, update_time FROM sessions ORDER BY 1, 2, 3";
// Event columns: 0-2 keys, 3-5 typeof keys, 6 id, 7 invocation_id, 8 timestamp,
// 9 event_data.
constexpr const char* events_sql =
  "SELECT ifnull(CAST(app_name AS BLOB), X''), ifnull(CAST(user_id AS BLOB), X''), "
  "ifnull(CAST(session_id AS BLOB), X''), typeof(app_name), typeof(user_id), "
  "typeof(session_id), id, invocation_id, timestamp, event_data FROM events "
  "ORDER BY 1, 2, 3, timestamp, rowid";
constexpr const char* users_sql =
  "SELECT app_name, user_id, state FROM user_states "
  "ORDER BY ifnull(CAST(app_name AS BLOB), X''), ifnull(CAST(user_id AS BLOB), X'')";
constexpr const char* apps_sql =
  "SELECT app_name, state FROM app_states ORDER BY ifnull(CAST(app_name AS BLOB), X'')";

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
      why = std::string(name) + " is " + type_name(t)
            + "; this flavour keeps epoch milliseconds";
      return std::nullopt;
  }
  return std::nullopt;
}

// The JSON object in column `col` (null counts as {} where ADK-Python allows
// it), its temp: keys dropped when `drop_temp`, keys and values beyond the
// limits skipped (and listed under `table`/`where` + key). nullopt, with
// `why`, when the column does not hold a JSON object.
std::optional<json> sqlite_pass::state_of(sqlite3_stmt* s, int col, const char* table,
                                          const json& where, bool drop_temp,
                                          std::string& why) {
  int t = sqlite3_column_type(s, col);
  if (t == SQLITE_NULL)
    return json::object();
  if (t != SQLITE_TEXT) {
    why = std::string("state is ") + type_name(t) + ", not JSON text";
    return std::nullopt;
  }
  auto parsed = parse_json(column_text(s, col), store::stored_json_depth);
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
    created = time_of(s, 7, false, cur_why_);
    if (created)
      updated = time_of(s, 8, false, cur_why_);
    cur_ok_ = created && updated;
  }
  if (!cur_ok_)
    return {};
  auto state = state_of(s, 6, "sessions", where, true, cur_why_);
  if (!state) {
    cur_ok_ = false;
    return {};
  }
  cur_record_ = {{"type", "session"},        {"app_name", cur_key_[0]},
                 {"user_id", cur_key_[1]},   {"id", cur_key_[2]},
                 {"created", *created},      {"last_update_time", *updated},
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
  int data_type = sqlite3_column_type(s, 9);
  json e = json::object();
  std::string data_text;
  if (data_type == SQLITE_TEXT) {
    data_text = column_text(s, 9);
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
  auto state = state_of(s, user ? 2 : 1, table, where, false, why);
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
        else
          ++cur_events_;
        return load_event();
      }
      close_session();
      ph_ = phase::sessions;
      return {};
    }
    case phase::user_states:
      return scope_row(true);
    case phase::app_states:
      return scope_row(false);
    case phase::done:
      return {};
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

error refuse(const std::string& path, const std::string& why) {
  return error{errc::invalid_argument, "'" + path + "' " + why};
}

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
    return exec(db_, "INSERT INTO adk_internal_metadata (\"key\", value) "
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
      case flavor::python_database:
        bind_text(s, i, format_datetime(t, event_column));
        return;
      case flavor::python_sqlite:
        sqlite3_bind_double(s, i, t);
        return;
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
  double now_ = std::chrono::duration<double>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count();
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

// -- the commands ----------------------------------------------------------------------

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

// -- source::open ----------------------------------------------------------------------

result<std::unique_ptr<source>> source::open(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec))
    return error{errc::not_found, "'" + path + "': no such file"};
  if (fs::is_directory(path, ec))
    return refuse(path, "is a directory, not an SQLite file");
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READONLY, nullptr);
  db_ptr db(raw);
  if (rc != SQLITE_OK)
    return error{errc::io_error, "cannot open '" + path + "': "
                                   + (raw ? sqlite3_errmsg(raw) : "out of memory")};
  sqlite3_extended_result_codes(db.get(), 1);
  // The snapshot every pass reads: taken by the first read below, held
  // until the source is destroyed.
  if (auto r = exec(db.get(), "BEGIN"); !r)
    return r.err();
  std::set<std::string> tables;
  {
    sqlite3_stmt* s = nullptr;
    rc = sqlite3_prepare_v2(db.get(), "SELECT name FROM sqlite_master WHERE type = 'table'", -1,
                            &s, nullptr);
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
      return refuse(path, "is a " + column_text(s->get(), 0)
                            + " database; ADK's stores are UTF-8");
  }
  const char* needed[4] = {"sessions", "events", "app_states", "user_states"};
  int present = 0;
  for (auto* t : needed)
    present += static_cast<int>(tables.count(t));
  if (present == 0)
    return refuse(path, "is not an ADK session store: it has none of the tables sessions, "
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
    auto s = prepare(db.get(), "SELECT value FROM adk_internal_metadata WHERE \"key\" = "
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
      return refuse(path, "has ADK session schema_version '" + version.substr(0, 40)
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
        return refuse(path, "is not an ADK session store: table " + t + " has no column "
                              + n);
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
    return refuse(path, "is not a session store agentstate recognises: no "
                        "adk_internal_metadata, and sessions.update_time is declared '"
                          + time_type + "' (ADK-Python's SqliteSessionService declares REAL)");
  return std::unique_ptr<source>(new sqlite_source(std::move(db), f, version));
}

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
  std::string tmp = (dir / ("." + target.filename().string() + ".partial-"
                            + std::to_string(::getpid())))
                      .string();
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
  int rc = sqlite3_open_v2(tmp.c_str(), &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                           nullptr);
  db_ptr db(raw);
  if (rc != SQLITE_OK)
    return error{errc::io_error, "cannot create '" + tmp + "': "
                                   + (raw ? sqlite3_errmsg(raw) : "out of memory")};
  sqlite3_extended_result_codes(db.get(), 1);
  // A private file until the rename: no journal, no syncs; one fsync at the end.
  for (auto* sql : {"PRAGMA journal_mode = OFF", "PRAGMA synchronous = OFF", "BEGIN"})
    if (auto r = exec(db.get(), sql); !r)
      return r.err();
  const char* ddl = f == flavor::python_database ? python_database_ddl
                    : f == flavor::python_sqlite ? python_sqlite_ddl
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
  "UTF-8, no NUL; event ids and invocation ids <= 128 bytes; state keys <= 200\n"
  "bytes; values and events <= 1 MiB as JSON; nesting <= 64 levels), and rows\n"
  "that do not read (not JSON, wrong types, events without a session row), are\n"
  "listed on stderr and in the summary. The import then fails with nothing\n"
  "written, unless --skip-oversized: the listed rows are left out (a session\n"
  "takes its events with it; a state key goes alone) and the rest is imported.\n"
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
    std::fprintf(stderr, "import: %s\n", src.err().message.c_str());
    return 1;
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
        std::fprintf(stderr, "import: %s\n", more.err().message.c_str());
        return 1;
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
    std::fprintf(stderr, "import: %s %s %s: %s\n", skip_ok ? "skipping" : "cannot take",
                 r.table.c_str(), summary_text(r.where).c_str(), r.reason.c_str());
  if (!check.skipped.empty() && !skip_ok) {
    fill(check);
    summary["imported"] = false;
    std::printf("%s\n", summary_text(summary).c_str());
    std::fprintf(stderr,
                 "import: %zu row%s beyond agentstate's limits or unreadable; nothing "
                 "written (--skip-oversized leaves them out)\n",
                 check.skipped.size(), check.skipped.size() == 1 ? "" : "s");
    return 1;
  }
  // Pass 2: the same records, into the store.
  auto target = open_import_target(a.dir);
  if (!target)
    return 1;
  const std::string& dir = target->dir;
  auto* kv = &target->kv;
  read_stats done;
  auto p = s.start(done);
  pass_buf buf(*p);
  std::istream in(&buf);
  auto n = store::import_store(**kv, in, [&](std::uint64_t k) { prog("imported records", k, records_checked); });
  prog.done();
  if (buf.failure) {
    std::fprintf(stderr, "import: %s\n", buf.failure->message.c_str());
    return 1;
  }
  if (!n) {
    std::fprintf(stderr, "import: %s\n", n.err().message.c_str());
    return 1;
  }
  summary["records"] = *n;
  fill(done);
  summary["imported"] = true;
  summary["store"] = dir;
  std::printf("%s\n", summary_text(summary).c_str());
  return 0;
}

int run_export(const export_args& a) {
  flavor f = flavor::js;
  if (!a.flavor.empty()) {
    auto p = parse_flavor(a.flavor);
    if (!p)
      return usage_error("export", "unknown --adk-flavor '" + a.flavor
                                     + "' (adk-js, adk-python-database, adk-python-sqlite)");
    f = *p;
  }
  const std::string& file = a.file;
  auto kv = store::open_lmdb_readonly(a.dir);
  if (!kv) {
    std::fprintf(stderr, "export: %s\n", kv.err().message.c_str());
    return 1;
  }
  progress_line prog;
  auto txn = store::begin_read(**kv);
  if (!txn) {
    std::fprintf(stderr, "export: %s\n", txn.err().message.c_str());
    return 1;
  }
  {
    auto r = write_file(**txn, file, f, [&](std::uint64_t n) { prog("exported records", n); });
    prog.done();
    if (!r) {
      std::fprintf(stderr, "export: %s\n", r.err().message.c_str());
      return 1;
    }
    std::printf("%s\n", summary_text(json{{"file", file},
                                          {"flavor", flavor_name(f)},
                                          {"sessions", r->sessions},
                                          {"events", r->events},
                                          {"user_states", r->user_states},
                                          {"app_states", r->app_states}})
                          .c_str());
    return 0;
  }
}

} // namespace agentstate::tools::adk
