// SPDX-License-Identifier: Apache-2.0
// `agentstate import --from-adk-sqlite` and `export --to-adk-sqlite`, driven
// as a user would: the real binary, real LMDB stores in temp dirs, and the
// fixtures of tests/fixtures/adk (ADK-JS's own file, and the ADK-Python
// shapes built by make_python_fixtures.py). The test reads the SQLite files
// itself (libsqlite3) to say what the import must give and to compare rows.
#include <doctest/doctest.h>

#include <sqlite3.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "support/test_support.hpp"

extern char** environ;

using namespace agentstate;
namespace fs = std::filesystem;

namespace {

const std::string fixtures = AGENTSTATE_ADK_FIXTURES;

// The binary renders ADK-Python's local-time column in the process's zone;
// the fixtures were made in UTC.
const bool tz_pinned = [] {
  ::setenv("TZ", "UTC", 1);
  ::tzset();
  return true;
}();

struct ran {
  int rc = -1;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ran run(const std::string& args) {
  test::temp_dir io;
  auto out = io.str() + "/out", err = io.str() + "/err";
  int rc =
    std::system((std::string(AGENTSTATE_BIN) + " " + args + " > " + out + " 2> " + err).c_str());
  ran r;
  r.rc = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

std::string q(const std::string& s) {
  return "'" + s + "'";
}

// -- SQLite, read by the test --------------------------------------------------------

struct db {
  sqlite3* h = nullptr;
  explicit db(const std::string& path, bool write = false) {
    int rc = sqlite3_open_v2(path.c_str(), &h, write ? SQLITE_OPEN_READWRITE : SQLITE_OPEN_READONLY,
                             nullptr);
    INFO("open ", path, ": ", (h ? sqlite3_errmsg(h) : "?"));
    REQUIRE(rc == SQLITE_OK);
  }
  ~db() { sqlite3_close_v2(h); }
  db(const db&) = delete;
  db& operator=(const db&) = delete;

  // Every row of `sql`, each cell as JSON: null, integer, real, text, or
  // {"blob": bytes} for blobs.
  std::vector<std::vector<json>> rows(const std::string& sql) {
    sqlite3_stmt* s = nullptr;
    INFO(sql);
    REQUIRE(sqlite3_prepare_v2(h, sql.c_str(), -1, &s, nullptr) == SQLITE_OK);
    std::vector<std::vector<json>> out;
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
      std::vector<json> row;
      for (int i = 0; i < sqlite3_column_count(s); ++i) {
        switch (sqlite3_column_type(s, i)) {
          case SQLITE_INTEGER:
            row.emplace_back(static_cast<std::int64_t>(sqlite3_column_int64(s, i)));
            break;
          case SQLITE_FLOAT: row.emplace_back(sqlite3_column_double(s, i)); break;
          case SQLITE_TEXT:
            row.emplace_back(std::string(reinterpret_cast<const char*>(sqlite3_column_text(s, i)),
                                         static_cast<std::size_t>(sqlite3_column_bytes(s, i))));
            break;
          case SQLITE_BLOB:
            row.emplace_back(
              json{{"blob",
                    std::string(static_cast<const char*>(sqlite3_column_blob(s, i)),
                                static_cast<std::size_t>(sqlite3_column_bytes(s, i)))}});
            break;
          default: row.emplace_back(nullptr);
        }
      }
      out.push_back(std::move(row));
    }
    sqlite3_finalize(s);
    REQUIRE(rc == SQLITE_DONE);
    return out;
  }

  void exec(const std::string& sql) {
    char* msg = nullptr;
    int rc = sqlite3_exec(h, sql.c_str(), nullptr, nullptr, &msg);
    INFO(sql.substr(0, 200), " -> ", (msg ? msg : "ok"));
    sqlite3_free(msg);
    REQUIRE(rc == SQLITE_OK);
  }

  // Runs `sql` with `binds` (strings) as ?1..?n.
  void exec(const std::string& sql, const std::vector<std::string>& binds) {
    sqlite3_stmt* s = nullptr;
    REQUIRE(sqlite3_prepare_v2(h, sql.c_str(), -1, &s, nullptr) == SQLITE_OK);
    for (std::size_t i = 0; i < binds.size(); ++i)
      sqlite3_bind_text(s, static_cast<int>(i + 1), binds[i].data(),
                        static_cast<int>(binds[i].size()), SQLITE_TRANSIENT);
    int rc = sqlite3_step(s);
    INFO(sql.substr(0, 200), " -> ", sqlite3_errmsg(h));
    sqlite3_finalize(s);
    REQUIRE(rc == SQLITE_DONE);
  }
};

// -- what an import must give, read from the file by the test ---------------------------

enum class flavor { python_database, python_sqlite, js };

const char* flavor_name(flavor f) {
  return f == flavor::python_database ? "adk-python-database"
    : f == flavor::python_sqlite      ? "adk-python-sqlite"
                                      : "adk-js";
}

// "YYYY-MM-DD HH:MM:SS.ffffff" as epoch seconds (UTC; TZ is UTC here).
double datetime_seconds(const std::string& s) {
  std::tm tm{};
  int us = 0;
  REQUIRE(std::sscanf(s.c_str(), "%d-%d-%d %d:%d:%d.%d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                      &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &us)
          == 7);
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  auto secs = static_cast<std::int64_t>(timegm(&tm));
  return static_cast<double>(secs * 1000000 + us) / 1e6;
}

double time_of(flavor f, const json& cell) {
  switch (f) {
    case flavor::python_database: return datetime_seconds(cell.get<std::string>());
    case flavor::python_sqlite: return cell.get<double>();
    case flavor::js: return cell.get<double>() / 1000.0;
  }
  return 0;
}

json without_temp(json obj) {
  for (auto it = obj.begin(); it != obj.end();)
    it = it.key().rfind("temp:", 0) == 0 ? obj.erase(it) : std::next(it);
  return obj;
}

// The exchange records (as `agentstate export` prints them, minus the
// header) that importing `file` must give, in export's order.
std::vector<json> expected_records(const std::string& file, flavor f) {
  db d(file);
  std::vector<json> sessions_out, states_out;
  auto sessions = d.rows("SELECT app_name, user_id, id, state, create_time, update_time "
                         "FROM sessions ORDER BY app_name, user_id, id");
  for (auto& s : sessions) {
    json rec = {{"type", "session"},
                {"app_name", s[0]},
                {"user_id", s[1]},
                {"id", s[2]},
                {"created", time_of(f, s[4])},
                {"last_update_time", time_of(f, s[5])},
                {"state", without_temp(json::parse(s[3].get<std::string>()))}};
    std::vector<json> events;
    auto rows = d.rows("SELECT id, invocation_id, event_data FROM events WHERE app_name = "
                       + q(s[0]) + " AND user_id = " + q(s[1]) + " AND session_id = " + q(s[2])
                       + " ORDER BY timestamp, rowid");
    for (auto& r : rows) {
      json e = json::parse(r[2].get<std::string>());
      if (f == flavor::python_database) {
        e["id"] = r[0];
        e["invocation_id"] = r[1];
      }
      if (f == flavor::js)
        e["timestamp"] = e["timestamp"].get<double>() / 1000.0;
      e["actions"]["state_delta"] = without_temp(e["actions"]["state_delta"]);
      events.push_back({{"type", "event"},
                        {"app_name", s[0]},
                        {"user_id", s[1]},
                        {"session_id", s[2]},
                        {"version", events.size() + 1},
                        {"event", e}});
    }
    rec["version"] = events.size();
    sessions_out.push_back(rec);
    sessions_out.insert(sessions_out.end(), events.begin(), events.end());
  }
  for (auto& u : d.rows("SELECT app_name, user_id, state FROM user_states "
                        "ORDER BY app_name, user_id")) {
    json st = json::parse(u[2].get<std::string>());
    if (!st.empty())
      states_out.push_back(
        {{"type", "user_state"}, {"app_name", u[0]}, {"user_id", u[1]}, {"state", st}});
  }
  for (auto& a : d.rows("SELECT app_name, state FROM app_states ORDER BY app_name")) {
    json st = json::parse(a[1].get<std::string>());
    if (!st.empty())
      states_out.push_back({{"type", "app_state"}, {"app_name", a[0]}, {"state", st}});
  }
  sessions_out.insert(sessions_out.end(), states_out.begin(), states_out.end());
  return sessions_out;
}

std::vector<json> export_records(const std::string& dir) {
  auto r = run("export " + dir);
  REQUIRE(r.rc == 0);
  std::vector<json> out;
  std::istringstream in(r.out);
  std::string line;
  std::getline(in, line);
  CHECK(json::parse(line) == json{{"type", "header"}, {"format", 1}});
  while (std::getline(in, line))
    out.push_back(json::parse(line));
  return out;
}

json summary_of(const ran& r) {
  INFO("stdout: ", r.out, "\nstderr: ", r.err);
  REQUIRE(!r.out.empty());
  return json::parse(r.out);
}

// Imports `file` into a fresh store and checks the store against the file,
// record for record; returns the import's summary.
json import_and_check(const std::string& file, flavor f, const std::string& dir) {
  auto r = run("import --from-adk-sqlite " + file + " " + dir);
  INFO("stderr: ", r.err);
  REQUIRE(r.rc == 0);
  auto sum = summary_of(r);
  CHECK(sum["imported"] == true);
  CHECK(sum["flavor"] == flavor_name(f));
  CHECK(sum["skipped"] == json::array());
  CHECK(run("verify " + dir).rc == 0);
  auto got = export_records(dir);
  auto want = expected_records(file, f);
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("record ", i);
    CHECK(got[i] == want[i]);
  }
  return sum;
}

std::shared_ptr<engine> open_store(const std::string& dir) {
  options o;
  o.dir = dir;
  o.mode = durability::nosync;
  auto e = engine::open(o);
  INFO(test::describe(e));
  REQUIRE(e.ok());
  return std::shared_ptr<engine>(std::move(e).value());
}

// Every row of every ADK table of `file`, for comparison: JSON columns
// parsed (temp: keys dropped from session state and state_delta, as an
// import drops them), state tables' update_time left out (agentstate keeps
// no such time).
std::map<std::string, std::multiset<std::string>> adk_rows(const std::string& file) {
  db d(file);
  std::map<std::string, std::multiset<std::string>> out;
  auto put = [&](const char* table, const json& row) { out[table].insert(row.dump()); };
  for (auto& r : d.rows("SELECT app_name, user_id, id, state, create_time, update_time "
                        "FROM sessions"))
    put("sessions",
        json{r[0], r[1], r[2], without_temp(json::parse(r[3].get<std::string>())), r[4], r[5]});
  for (auto& r : d.rows("SELECT id, app_name, user_id, session_id, invocation_id, timestamp, "
                        "event_data FROM events")) {
    json e = json::parse(r[6].get<std::string>());
    e["actions"]["state_delta"] = without_temp(e["actions"]["state_delta"]);
    put("events", json{r[0], r[1], r[2], r[3], r[4], r[5], e});
  }
  for (auto& r : d.rows("SELECT app_name, user_id, state FROM user_states"))
    put("user_states", json{r[0], r[1], json::parse(r[2].get<std::string>())});
  for (auto& r : d.rows("SELECT app_name, state FROM app_states"))
    put("app_states", json{r[0], json::parse(r[1].get<std::string>())});
  bool meta = !d.rows("SELECT 1 FROM sqlite_master WHERE name = 'adk_internal_metadata'").empty();
  if (meta)
    for (auto& r : d.rows("SELECT key, value FROM adk_internal_metadata"))
      put("adk_internal_metadata", json{r[0], r[1]});
  return out;
}

} // namespace

TEST_CASE("adk import: ADK-Python DatabaseSessionService v1 file, every field") {
  test::temp_dir tmp;
  auto dir = tmp.str() + "/store";
  auto sum =
    import_and_check(fixtures + "/adk_python_database_v1.sqlite", flavor::python_database, dir);
  CHECK(sum["schema_version"] == "1");
  CHECK(sum["sessions"] == 4);
  CHECK(sum["events"] == 6);
  CHECK(sum["user_states"] == 3);
  CHECK(sum["user_state_keys"] == 1);
  CHECK(sum["app_states"] == 2);
  CHECK(sum["app_state_keys"] == 2);
  CHECK(sum["temp_keys_dropped"] == 3); // one in a session's state, two in deltas

  // What an engine on the store serves.
  auto e = open_store(dir);
  auto s = test::get_existing(*e, test::sref("weather_app", "alice", "s-paris"));
  // ADK's order: by timestamp (ev-a2 was inserted last), then insertion
  // order for the two events of one timestamp.
  CHECK(test::event_ids(s.events) == std::vector<std::string>{"ev-a1", "ev-a2", "ev-a3", "ev-a4"});
  CHECK(s.version == 4);
  CHECK(s.last_update_time == 1740823203.000125);
  CHECK(s.events[0].timestamp == 1740823201.25);
  CHECK(s.events[2].timestamp == 1740823203.000125);
  CHECK(s.events[3].timestamp == 1740823203.000125);
  for (auto& ev : s.events)
    CHECK(ev.invocation_id == "e-inv-1");
  // The state tables are the truth; temp: keys are gone.
  CHECK(
    s.state
    == json{{"city", "Paris"}, {"last_temp", 12}, {"user:home_city", "Paris"}, {"app:calls", 1}});
  CHECK(s.events[0].actions.state_delta == json{{"city", "Paris"}});
  CHECK(s.events[2].actions.state_delta
        == json{{"last_temp", 12}, {"user:home_city", "Paris"}, {"app:calls", 1}});
  CHECK(s.events[2].actions.artifact_delta == json{{"report.txt", 0}});
  CHECK(s.events[2].actions.extra["skip_summarization"] == false);
  CHECK(s.events[1].content->at("parts")[0]["function_call"]["name"] == "get_weather");
  CHECK(s.events[1].extra["usage_metadata"]["total_token_count"] == 48);
  CHECK(s.events[1].extra["branch"] == "weather_agent");
  CHECK(s.events[3].content->at("parts")[0]["text"] == "It is 12\u00b0C and clear in Paris \u2600");
  CHECK(s.events[3].extra["custom_metadata"]
        == json{{"trace", {"a", "b"}}, {"nested", {{"k", nullptr}}}});
  CHECK(s.events[3].extra["turn_complete"] == true);
  auto bob = test::get_existing(*e, test::sref("weather_app", "bob", "s-bob"));
  CHECK(bob.events[1].extra["long_running_tool_ids"] == json::array({"lr-1"}));
  CHECK(bob.events[1].actions.extra["transfer_to_agent"] == "approver");
  // Sessions without events are kept, with their times.
  auto empty = test::get_existing(*e, test::sref("weather_app", "alice", "s-empty"));
  CHECK(empty.events.empty());
  CHECK(empty.last_update_time == 1740823210.5);
  auto carol = test::get_existing(*e, test::sref("other_app", "carol", "c-1"));
  CHECK(carol.state == json{{"lang", "fr"}, {"app:mode", "beta"}});
  CHECK(test::list_all(*e, "weather_app").size() == 3);
}

TEST_CASE("adk import: ADK-Python SqliteSessionService file, every field") {
  test::temp_dir tmp;
  auto dir = tmp.str() + "/store";
  auto sum = import_and_check(fixtures + "/adk_python_sqlite.sqlite", flavor::python_sqlite, dir);
  CHECK(!sum.contains("schema_version"));
  CHECK(sum["sessions"] == 4);
  CHECK(sum["events"] == 6);
  CHECK(sum["temp_keys_dropped"] == 3);
  auto e = open_store(dir);
  auto s = test::get_existing(*e, test::sref("weather_app", "alice", "s-paris"));
  CHECK(test::event_ids(s.events) == std::vector<std::string>{"ev-a1", "ev-a2", "ev-a3", "ev-a4"});
  CHECK(s.events[1].timestamp == 1740823202.5);
  CHECK(s.last_update_time == 1740823203.000125);
  CHECK(test::user_state(*e, "weather_app", "alice") == json{{"home_city", "Paris"}});
  CHECK(test::app_state(*e, "other_app") == json{{"mode", "beta"}});
}

TEST_CASE("adk import: ADK-JS DatabaseSessionService file, every field") {
  test::temp_dir tmp;
  auto dir = tmp.str() + "/store";
  auto file = fixtures + "/adk_js.sqlite";
  auto sum = import_and_check(file, flavor::js, dir);
  CHECK(sum["schema_version"] == "1");
  CHECK(sum["sessions"] == 4);
  CHECK(sum["events"] == 8);
  CHECK(sum["temp_keys_dropped"] == 0); // ADK-JS drops them itself

  db d(file);
  auto e = open_store(dir);
  auto s = test::get_existing(*e, test::sref("travel_app", "ana", "trip-1"));
  REQUIRE(s.events.size() == 6);
  // Ids, invocation ids and millisecond timestamps, in ADK's order; events
  // 4 and 5 share a millisecond and keep their insertion order.
  auto rows = d.rows("SELECT id, invocation_id, timestamp FROM events WHERE session_id = "
                     "'trip-1' ORDER BY rowid");
  REQUIRE(rows.size() == 6);
  CHECK(rows[3][2] == rows[4][2]);
  for (std::size_t i = 0; i < 6; ++i) {
    CHECK(s.events[i].id == rows[i][0]);
    CHECK(s.events[i].invocation_id == rows[i][1]);
    CHECK(s.events[i].timestamp == rows[i][2].get<std::int64_t>() / 1000.0);
  }
  CHECK(s.events[1].content->at("parts")[0]["function_call"]["args"]
        == json{{"city", "Lisbon"}, {"maxPrice", 120}, {"tags", {"sea"}}});
  CHECK(s.events[2].actions.state_delta
        == json{{"step", "found"}, {"user:lastCity", "Lisbon"}, {"app:searches", 1}});
  CHECK(s.events[2].actions.extra["skip_summarization"] == true);
  CHECK(s.events[3].extra["custom_metadata"] == json{{"rating", 4.5}, {"sourceIds", {"a1", "b2"}}});
  CHECK(s.state["booking"] == json{{"id", "B-7"}, {"nights", 2}});
  CHECK(s.state["user:lang"] == "pt");
  CHECK(s.state["app:version"] == 3);
  auto created = d.rows("SELECT create_time, update_time FROM sessions WHERE id = 'trip-2'");
  auto trip2 = test::get_existing(*e, test::sref("travel_app", "ana", "trip-2"));
  CHECK(trip2.events.empty());
  CHECK(trip2.state["destination"] == "Porto");
  CHECK(!trip2.state.contains("temp:ignored"));
  CHECK(trip2.last_update_time == created[0][1].get<std::int64_t>() / 1000.0);
  auto ben = test::get_existing(*e, test::sref("travel_app", "ben", "ben-1"));
  CHECK(ben.events[1].extra["long_running_tool_ids"] == json::array({"lr-9"}));
  CHECK(ben.events[1].actions.extra["escalate"] == true);
  auto cy = test::get_existing(*e, test::sref("notes_app", "cy", "n-1"));
  CHECK(cy.state == json{{"app:theme", "dark"}});
}

TEST_CASE("adk import: v0, other files and missing files are refused; nothing is written") {
  test::temp_dir tmp;
  auto garbage = tmp.str() + "/garbage.sqlite";
  {
    std::ofstream out(garbage);
    out << "this is not a database, just text that is long enough to have a header.\n";
  }
  auto empty = tmp.str() + "/empty.sqlite";
  std::ofstream(empty).close();
  struct refusal {
    std::string file, says;
  };
  for (auto& c : std::vector<refusal>{
         {fixtures + "/adk_python_v0.sqlite", "v0 session schema"},
         {fixtures + "/not_adk.sqlite", "not an ADK session store"},
         {garbage, "not an SQLite database"},
         {empty, "not an ADK session store"},
         {tmp.str() + "/missing.sqlite", "no such file"},
       }) {
    CAPTURE(c.file);
    auto dir = tmp.str() + "/store";
    auto r = run("import --from-adk-sqlite " + c.file + " " + dir);
    CHECK(r.rc == 1);
    CHECK(r.err.find(c.says) != std::string::npos);
    CHECK(r.out.empty());
    CHECK(!fs::exists(dir));
  }
  // The v0 message says how to get on.
  auto r =
    run("import --from-adk-sqlite " + fixtures + "/adk_python_v0.sqlite " + tmp.str() + "/s");
  CHECK(r.err.find("adk migrate session") != std::string::npos);
  // An unknown schema version.
  auto v9 = tmp.str() + "/v9.sqlite";
  fs::copy_file(fixtures + "/adk_python_database_v1.sqlite", v9);
  db(v9, true).exec("UPDATE adk_internal_metadata SET value = '9'");
  r = run("import --from-adk-sqlite " + v9 + " " + tmp.str() + "/s");
  CHECK(r.rc == 1);
  CHECK(r.err.find("schema_version '9'") != std::string::npos);
  CHECK(!fs::exists(tmp.str() + "/s"));
  // Usage errors.
  CHECK(run("import --from-adk-sqlite").rc == 2);
  CHECK(run("import --from-adk-sqlite " + v9).rc == 2);
  CHECK(run("import --from-adk-sqlite " + v9 + " a b").rc == 2);
  CHECK(run("import --from-adk-sqlite " + v9 + " " + tmp.str() + "/s --bogus").rc == 2);
}

TEST_CASE("adk import: a store that holds data is refused") {
  test::temp_dir tmp;
  auto dir = tmp.str() + "/store";
  REQUIRE(run("import --from-adk-sqlite " + fixtures + "/adk_js.sqlite " + dir).rc == 0);
  auto before = run("export " + dir).out;
  auto r = run("import --from-adk-sqlite " + fixtures + "/adk_python_sqlite.sqlite " + dir);
  CHECK(r.rc == 1);
  CHECK(r.err.find("not empty") != std::string::npos);
  CHECK(run("export " + dir).out == before);
}

TEST_CASE("adk import: rows beyond the limits are listed; the import fails or skips them") {
  test::temp_dir tmp;
  auto file = tmp.str() + "/big.sqlite";
  fs::copy_file(fixtures + "/adk_python_sqlite.sqlite", file);
  const std::string long_id(101, 's'), long_event_id(129, 'e'), long_key(201, 'k');
  {
    db d(file, true);
    auto event_data = [](const std::string& id, const json& extra) {
      json e = {{"id", id},
                {"invocation_id", "e-x"},
                {"author", "user"},
                {"timestamp", 1740823300.5},
                {"actions", {{"state_delta", json::object()}, {"artifact_delta", json::object()}}}};
      e.update(extra);
      return e.dump();
    };
    json deep = 1;
    for (int i = 0; i < 70; ++i)
      deep = json::array({deep});
    // A session whose id is too long, with an event: both left out.
    d.exec("INSERT INTO sessions VALUES ('weather_app', 'alice', ?1, '{}', 1.0, 2.0)", {long_id});
    d.exec("INSERT INTO events VALUES ('ev-in-long', 'weather_app', 'alice', ?1, 'e-x', 1.5, ?2)",
           {long_id, event_data("ev-in-long", json::object())});
    // An event over 1 MiB, an event id over 128 bytes, event_data that is not
    // JSON, in a session that stays.
    d.exec(
      "INSERT INTO events VALUES ('ev-huge', 'weather_app', 'bob', 's-bob', 'e-x', 1740823300.5, "
      "?1)",
      {event_data("ev-huge", {{"content", {{"parts", {{{"text", std::string(1100000, 'x')}}}}}}})});
    d.exec("INSERT INTO events VALUES (?1, 'weather_app', 'bob', 's-bob', 'e-x', 1740823300.6, ?2)",
           {long_event_id, event_data(long_event_id, json::object())});
    d.exec("INSERT INTO events VALUES ('ev-broken', 'weather_app', 'bob', 's-bob', 'e-x', "
           "1740823300.7, '{\"id\": \"ev-broken\", ')");
    // A state key over 200 bytes; a user value nested 71 deep.
    d.exec("UPDATE sessions SET state = ?1 WHERE id = 's-bob'",
           {json{{"step", "approval"}, {long_key, 1}}.dump()});
    d.exec("UPDATE user_states SET state = ?1 WHERE user_id = 'bob'",
           {json{{"deep", deep}, {"ok", true}}.dump()});
    // Events of a session that has no row.
    d.exec("INSERT INTO events VALUES ('ev-orphan', 'weather_app', 'zed', 'gone', 'e-x', 1.0, ?1)",
           {event_data("ev-orphan", json::object())});
  }
  auto dir = tmp.str() + "/store";
  auto r = run("import --from-adk-sqlite " + file + " " + dir);
  CHECK(r.rc == 1);
  CHECK(!fs::exists(dir));
  auto sum = summary_of(r);
  CHECK(sum["imported"] == false);
  auto skipped = sum["skipped"];
  REQUIRE(skipped.size() == 7);
  std::map<std::string, std::string> reason_of; // table + where -> reason
  for (auto& s : skipped)
    reason_of[s["table"].get<std::string>() + " " + s["where"].dump()] = s["reason"];
  auto reason = [&](const std::string& table, const json& where) {
    auto it = reason_of.find(table + " " + where.dump());
    INFO("no skipped row ", table, " ", where.dump(), " in ", skipped.dump());
    REQUIRE(it != reason_of.end());
    return it->second;
  };
  CHECK(reason("sessions", {{"app_name", "weather_app"}, {"id", long_id}, {"user_id", "alice"}})
          .find("id is 101 bytes; the limit is 100")
        != std::string::npos);
  CHECK(reason("sessions", {{"app_name", "weather_app"}, {"id", long_id}, {"user_id", "alice"}})
          .find("its 1 event is left out with it")
        != std::string::npos);
  auto bob_ev = [](const std::string& id) {
    return json{
      {"app_name", "weather_app"}, {"id", id}, {"session_id", "s-bob"}, {"user_id", "bob"}};
  };
  CHECK(reason("events", bob_ev("ev-huge")).find("bytes as stored JSON; the limit is 1048576")
        != std::string::npos);
  CHECK(reason("events", bob_ev(std::string(129, 'e'))).find("the event id is 129 bytes")
        != std::string::npos);
  CHECK(reason("events", bob_ev("ev-broken")).find("not JSON") != std::string::npos);
  CHECK(reason("sessions",
               {{"app_name", "weather_app"},
                {"id", "s-bob"},
                {"key", std::string(201, 'k')},
                {"user_id", "bob"}})
          .find("the state key is 201 bytes")
        != std::string::npos);
  CHECK(reason("user_states", {{"app_name", "weather_app"}, {"key", "deep"}, {"user_id", "bob"}})
          .find("nests deeper than 64")
        != std::string::npos);
  CHECK(reason("events", {{"app_name", "weather_app"}, {"session_id", "gone"}, {"user_id", "zed"}})
          .find("no row in sessions")
        != std::string::npos);
  CHECK(r.err.find("nothing written") != std::string::npos);

  // --skip-oversized: the rest goes in, the listed rows stay out.
  r = run("import --from-adk-sqlite " + file + " " + dir + " --skip-oversized");
  REQUIRE(r.rc == 0);
  sum = summary_of(r);
  CHECK(sum["imported"] == true);
  CHECK(sum["skipped"].size() == 7);
  CHECK(sum["sessions"] == 4);
  CHECK(sum["events"] == 6);
  CHECK(run("verify " + dir).rc == 0);
  auto e = open_store(dir);
  auto bob = test::get_existing(*e, test::sref("weather_app", "bob", "s-bob"));
  CHECK(test::event_ids(bob.events) == std::vector<std::string>{"ev-b1", "ev-b2"});
  CHECK(bob.version == 2);
  CHECK(bob.state["step"] == "approval");
  CHECK(!bob.state.contains(std::string(201, 'k')));
  CHECK(test::user_state(*e, "weather_app", "bob") == json{{"ok", true}});
  CHECK(test::list_all(*e, "weather_app", std::string("alice")).size() == 2);
}

TEST_CASE("adk round trip: ADK -> agentstate -> ADK keeps every row of each fixture") {
  struct fixture {
    std::string file;
    flavor f;
  };
  for (auto& fx : std::vector<fixture>{{"adk_python_database_v1.sqlite", flavor::python_database},
                                       {"adk_python_sqlite.sqlite", flavor::python_sqlite},
                                       {"adk_js.sqlite", flavor::js}}) {
    CAPTURE(fx.file);
    test::temp_dir tmp;
    auto dir = tmp.str() + "/store", back = tmp.str() + "/back.sqlite";
    REQUIRE(run("import --from-adk-sqlite " + fixtures + "/" + fx.file + " " + dir).rc == 0);
    auto r =
      run("export --to-adk-sqlite " + back + " " + dir + " --adk-flavor " + flavor_name(fx.f));
    INFO(r.err);
    REQUIRE(r.rc == 0);
    auto sum = summary_of(r);
    CHECK(sum["flavor"] == flavor_name(fx.f));
    auto a = adk_rows(fixtures + "/" + fx.file), b = adk_rows(back);
    CHECK(a.size() == b.size());
    for (auto& [table, rows] : a) {
      CAPTURE(table);
      CHECK(rows.size() == b[table].size());
      CHECK(rows == b[table]);
    }
    // The same tables, columns and declared types as the flavour's own.
    auto schema = [](const std::string& f) {
      std::map<std::string, std::vector<json>> out;
      db d(f);
      for (auto& t : d.rows("SELECT name FROM sqlite_master WHERE type = 'table'"))
        for (auto& c : d.rows("PRAGMA table_info(" + t[0].get<std::string>() + ")"))
          out[t[0]].push_back(c);
      return out;
    };
    CHECK(schema(fixtures + "/" + fx.file) == schema(back));
  }
}

TEST_CASE("adk round trip: agentstate -> ADK -> agentstate gives the same store") {
  test::temp_dir tmp;
  auto src = tmp.str() + "/src";
  // Not a whole millisecond: adk-js must keep it through its text.
  const double explicit_ts = std::floor(test::now_epoch()) + 10.0005;
  {
    options o;
    o.dir = src;
    o.mode = durability::nosync;
    auto eng = engine::open(o);
    REQUIRE(eng.ok());
    auto& e = **eng;
    auto a = test::sref("app", "u1", "s1");
    MUST(e.create_session(test::create_req(a, {{"k", 1}, {"user:name", "Ann"}, {"app:v", 2}})));
    test::append_ok(e, a,
                    test::make_event({{"k", 2}, {"nested", {{"a", {1, 2, {{"b", nullptr}}}}}}}));
    // ADK serves a session's events in timestamp order: these go forward.
    auto ev =
      test::make_event({{"user:name", "Anne"}}, "ev-explicit", explicit_ts, "inv-9", "model");
    ev.content = json{{"role", "model"}, {"parts", {{{"text", "h\u00e9llo \u2603"}}}}};
    ev.extra["custom_metadata"] = {{"x", 1.5}};
    ev.actions.artifact_delta = {{"f.txt", 3}};
    test::append_ok(e, a, std::move(ev));
    auto del = test::make_event({{"app:v", 3}}, {}, explicit_ts + 1.25);
    del.actions.state_remove = {"k"};
    test::append_ok(e, a, std::move(del));
    MUST(e.create_session(test::create_req("app", "u2", "empty")));
    MUST(e.create_session(test::create_req("other", "u1", "s", {{"x", "y"}})));
  }
  auto want = export_records(src);
  // ADK's tables keep no session's state as created (agentstate's `origin`):
  // a session back from ADK has none, so its as-of reads are marked inexact.
  for (auto& r : want)
    if (r["type"] == "session") {
      CHECK(r.contains("origin"));
      r.erase("origin");
    }
  // Sessions' create/update times as the flavour keeps them: adk-js in
  // milliseconds (a real number, exact to its last bit only for whole
  // milliseconds), adk-python-database in microseconds; everything else is
  // kept exactly.
  auto at_resolution = [](std::vector<json> recs, double per_second) {
    for (auto& r : recs)
      if (r["type"] == "session")
        for (auto k : {"created", "last_update_time"})
          r[k] = std::llround(r[k].get<double>() * per_second);
    return recs;
  };
  for (auto f : {flavor::js, flavor::python_database, flavor::python_sqlite}) {
    std::string name = flavor_name(f);
    CAPTURE(name);
    auto file = tmp.str() + "/" + flavor_name(f) + ".sqlite";
    auto back = tmp.str() + "/back-" + flavor_name(f);
    auto r = run("export --to-adk-sqlite " + file + " " + src + " --adk-flavor " + flavor_name(f));
    INFO(r.err);
    REQUIRE(r.rc == 0);
    auto sum = summary_of(r);
    CHECK(sum["sessions"] == 3);
    CHECK(sum["events"] == 3);
    CHECK(sum["user_states"] == 3); // (app, u1), (app, u2), (other, u1)
    CHECK(sum["app_states"] == 2);
    r = run("import --from-adk-sqlite " + file + " " + back);
    INFO(r.err);
    REQUIRE(r.rc == 0);
    CHECK(summary_of(r)["flavor"] == flavor_name(f));
    auto got = export_records(back);
    if (f == flavor::python_sqlite) {
      CHECK(got == want);
    } else {
      double per_second = f == flavor::js ? 1e3 : 1e6;
      CHECK(at_resolution(got, per_second) == at_resolution(want, per_second));
      // Event timestamps are exact in every flavour.
      for (std::size_t i = 0; i < got.size(); ++i)
        if (got[i]["type"] == "event")
          CHECK(got[i]["event"]["timestamp"] == want[i]["event"]["timestamp"]);
    }
  }
  // State rows for every scope with sessions; their update_time is the
  // latest update of the scope's sessions.
  db d(tmp.str() + "/adk-python-sqlite.sqlite");
  auto rows = d.rows("SELECT u.state, u.update_time, max(s.update_time) FROM user_states u JOIN "
                     "sessions s USING (app_name, user_id) WHERE u.app_name = 'app' AND "
                     "u.user_id = 'u2'");
  CHECK(rows[0][0] == "{}");
  CHECK(rows[0][1] == rows[0][2]);
  // The adk-js file keeps whole milliseconds as integers and the exact
  // timestamp in event_data.
  db js(tmp.str() + "/adk-js.sqlite");
  auto ev = js.rows("SELECT timestamp, event_data FROM events WHERE id = 'ev-explicit'");
  REQUIRE(ev.size() == 1);
  REQUIRE(ev[0][0].is_number_float()); // not a whole millisecond: a real
  CHECK(ev[0][0].get<double>() == explicit_ts * 1000.0);
  CHECK(std::fabs(json::parse(ev[0][1].get<std::string>())["timestamp"].get<double>()
                  - explicit_ts * 1000.0)
        < 1e-3);
}

TEST_CASE("adk export: refuses an existing file and bad usage; --help shows the mapping") {
  test::temp_dir tmp;
  auto dir = tmp.str() + "/store";
  REQUIRE(run("import --from-adk-sqlite " + fixtures + "/adk_js.sqlite " + dir).rc == 0);
  auto file = tmp.str() + "/taken.sqlite";
  std::ofstream(file) << "keep me";
  auto r = run("export --to-adk-sqlite " + file + " " + dir);
  CHECK(r.rc == 1);
  CHECK(r.err.find("exists") != std::string::npos);
  CHECK(slurp(file) == "keep me");
  CHECK(run("export --to-adk-sqlite " + tmp.str() + "/x.sqlite " + dir + " --adk-flavor nope").rc
        == 2);
  CHECK(run("export --to-adk-sqlite " + tmp.str() + "/x.sqlite").rc == 2);
  r = run("export --to-adk-sqlite " + tmp.str() + "/x.sqlite " + tmp.str() + "/no-store");
  CHECK(r.rc == 1);
  CHECK(!fs::exists(tmp.str() + "/x.sqlite"));
  // No temporary file is left behind.
  for (auto& entry : fs::directory_iterator(tmp.path()))
    CHECK(entry.path().filename().string().find(".partial-") == std::string::npos);
  r = run("import --help");
  CHECK(r.rc == 0);
  CHECK(r.out.find("--from-adk-sqlite FILE DIR") != std::string::npos);
  CHECK(r.out.find("temp: keys") != std::string::npos);
  r = run("export --help");
  CHECK(r.rc == 0);
  CHECK(r.out.find("--to-adk-sqlite FILE DIR") != std::string::npos);
  CHECK(r.out.find("adk-python-database") != std::string::npos);
  CHECK(run("import --from-adk-sqlite x --help").rc == 0);
}

// -- hostile files (#44) ------------------------------------------------------------------
// A FIFO, an event_data cell far beyond the limits, an event id twice in one
// session, NULs in ids: what a hostile probe gave the import.

namespace {

struct spawned {
  int rc = -1;
  std::string out, err;
  long max_rss_kib = -1; ///< the child's peak resident set
};

// The tool with `args`, spawned directly (no shell) and reaped with wait4,
// so the peak resident set is the tool's own. `timeout 60` bounds a run that
// would block (exit 124): a FIFO opened for reading waits for a writer.
spawned run_spawned(std::vector<std::string> args, const std::string& io_dir) {
  auto out = io_dir + "/out", err = io_dir + "/err";
  std::vector<std::string> argv_s{"timeout", "60", AGENTSTATE_BIN};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  int rc = ::posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  REQUIRE(rc == 0);
  int status = 0;
  struct rusage ru {};
  REQUIRE(::wait4(pid, &status, 0, &ru) == pid);
  spawned r;
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  r.max_rss_kib = ru.ru_maxrss;
  return r;
}

// Runs `sql` on the SQLite file `path`.
void sql_exec(const std::string& path, const std::string& text) {
  sqlite3* h = nullptr;
  REQUIRE(sqlite3_open_v2(path.c_str(), &h, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK);
  char* msg = nullptr;
  int rc = sqlite3_exec(h, text.c_str(), nullptr, nullptr, &msg);
  INFO(text.substr(0, 200), " -> ", (msg ? msg : "ok"));
  sqlite3_free(msg);
  sqlite3_close_v2(h);
  REQUIRE(rc == SQLITE_OK);
}

// The single integer `query` gives on `path`.
std::int64_t sql_int(const std::string& path, const std::string& query) {
  sqlite3* h = nullptr;
  REQUIRE(sqlite3_open_v2(path.c_str(), &h, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  sqlite3_stmt* s = nullptr;
  REQUIRE(sqlite3_prepare_v2(h, query.c_str(), -1, &s, nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_step(s) == SQLITE_ROW);
  auto v = sqlite3_column_int64(s, 0);
  sqlite3_finalize(s);
  sqlite3_close_v2(h);
  return v;
}

json summary_of_spawned(const spawned& r) {
  auto j = json::parse(r.out, nullptr, false);
  INFO("stdout: ", r.out, " stderr: ", r.err);
  REQUIRE(j.is_object());
  return j;
}

// The ADK-Python SqliteSessionService fixture, its events table copied
// without the primary key that would stop a repeated id.
std::string unconstrained_copy(const std::string& dir) {
  auto file = dir + "/adk.sqlite";
  fs::copy_file(fixtures + "/adk_python_sqlite.sqlite", file);
  sql_exec(file,
           "CREATE TABLE events_copy AS SELECT * FROM events; DROP TABLE events; "
           "ALTER TABLE events_copy RENAME TO events;");
  return file;
}

} // namespace

TEST_CASE("adk import of a FIFO is refused at once, not hung on (#44)") {
  test::temp_dir tmp;
  auto fifo = tmp.str() + "/adk.sqlite";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  auto r = run_spawned({"import", "--from-adk-sqlite", fifo, tmp.str() + "/store"}, tmp.str());
  INFO("stderr: ", r.err);
  CHECK(r.rc == 1); // 124 when the open blocked until `timeout` ended it
  CHECK(r.err.find("is a FIFO, not a regular file") != std::string::npos);
  CHECK(!fs::exists(tmp.str() + "/store"));

  // A FIFO where SQLite looks for the file's WAL is refused the same way.
  auto file = tmp.str() + "/real.sqlite";
  fs::copy_file(fixtures + "/adk_python_sqlite.sqlite", file);
  REQUIRE(::mkfifo((file + "-wal").c_str(), 0600) == 0);
  r = run_spawned({"import", "--from-adk-sqlite", file, tmp.str() + "/store"}, tmp.str());
  CHECK(r.rc == 1);
  CHECK(r.err.find("real.sqlite-wal' is a FIFO") != std::string::npos);
}

TEST_CASE("adk import refuses an oversized event_data row by its size, without reading it (#44)") {
  test::temp_dir tmp;
  auto file = tmp.str() + "/adk.sqlite";
  fs::copy_file(fixtures + "/adk_python_sqlite.sqlite", file);
  // 80 MiB of JSON text in one cell (20 times the 4 MiB read cap), written
  // by a forked child: a spawned process's peak resident set starts from its
  // parent's at exec, so this process must never hold the cell itself.
  const std::int64_t cell = std::int64_t{80} << 20;
  pid_t maker = ::fork();
  REQUIRE(maker >= 0);
  if (maker == 0) {
    sqlite3* h = nullptr;
    bool ok = sqlite3_open_v2(file.c_str(), &h, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK;
    std::string update = "UPDATE events SET event_data = '\"' || printf('%.*c', "
      + std::to_string(cell - 2) + ", 'x') || '\"' WHERE id = 'ev-b2'";
    ok = ok && sqlite3_exec(h, update.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK;
    sqlite3_stmt* st = nullptr;
    ok = ok
      && sqlite3_prepare_v2(h, "SELECT length(event_data) FROM events WHERE id = 'ev-b2'", -1, &st,
                            nullptr)
        == SQLITE_OK
      && sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int64(st, 0) == cell;
    sqlite3_finalize(st);
    sqlite3_close_v2(h);
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  REQUIRE(::waitpid(maker, &status, 0) == maker);
  REQUIRE((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  auto r = run_spawned({"import", "--from-adk-sqlite", file, tmp.str() + "/store"}, tmp.str());
  INFO("stderr: ", r.err);
  CHECK(r.rc == 1);
  CHECK(!fs::exists(tmp.str() + "/store"));
  auto sum = summary_of_spawned(r);
  REQUIRE(sum["skipped"].size() == 1);
  CHECK(sum["skipped"][0]["where"]["id"] == "ev-b2");
  CHECK(sum["skipped"][0]["reason"].get<std::string>().find(
          "holds " + std::to_string(cell) + " bytes; more than 4194304 is refused unread")
        != std::string::npos);
  // Never read whole: the tool's peak resident set stays below the cell's
  // size (reading it through a SELECT alone would put all of it in memory).
  CHECK(r.max_rss_kib < cell / 1024);

  // --skip-oversized: the rest of the file goes in.
  r = run_spawned({"import", "--from-adk-sqlite", file, tmp.str() + "/store", "--skip-oversized"},
                  tmp.str());
  CHECK(r.rc == 0);
  CHECK(r.max_rss_kib < cell / 1024);
  CHECK(run_spawned({"verify", tmp.str() + "/store"}, tmp.str()).rc == 0);
}

TEST_CASE("adk import refuses duplicate event ids in one session, naming both rowids; "
          "--skip-oversized keeps the first (#44)") {
  test::temp_dir tmp;
  auto file = unconstrained_copy(tmp.str());
  sql_exec(file,
           "INSERT INTO events SELECT id, app_name, user_id, session_id, invocation_id, "
           "timestamp + 100, event_data FROM events WHERE id = 'ev-b1'");
  auto first = sql_int(file, "SELECT min(rowid) FROM events WHERE id = 'ev-b1'");
  auto repeat = sql_int(file, "SELECT max(rowid) FROM events WHERE id = 'ev-b1'");
  REQUIRE(first != repeat);
  auto dir = tmp.str() + "/store";
  auto r = run_spawned({"import", "--from-adk-sqlite", file, dir}, tmp.str());
  INFO("stderr: ", r.err);
  CHECK(r.rc == 1);
  CHECK(!fs::exists(dir));
  auto sum = summary_of_spawned(r);
  REQUIRE(sum["skipped"].size() == 1);
  CHECK(sum["skipped"][0]["table"] == "events");
  CHECK(
    sum["skipped"][0]["where"]
    == json{
      {"app_name", "weather_app"}, {"id", "ev-b1"}, {"session_id", "s-bob"}, {"user_id", "bob"}});
  CHECK(sum["skipped"][0]["reason"]
        == "event id 'ev-b1' appears twice in the session: row " + std::to_string(repeat)
          + " repeats row " + std::to_string(first) + " (rowid), which is kept");
  CHECK(r.err.find("nothing written") != std::string::npos);

  r = run_spawned({"import", "--from-adk-sqlite", file, dir, "--skip-oversized"}, tmp.str());
  REQUIRE(r.rc == 0);
  CHECK(run_spawned({"verify", dir}, tmp.str()).rc == 0);
  auto exported = run_spawned({"export", dir}, tmp.str());
  REQUIRE(exported.rc == 0);
  std::vector<std::string> bob_events;
  std::istringstream lines(exported.out);
  for (std::string l; std::getline(lines, l);) {
    auto rec = json::parse(l);
    if (rec["type"] == "event" && rec["session_id"] == "s-bob")
      bob_events.push_back(rec["event"]["id"]);
    if (rec["type"] == "session" && rec["id"] == "s-bob")
      CHECK(rec["version"] == 2);
  }
  CHECK(bob_events == std::vector<std::string>{"ev-b1", "ev-b2"});
}

TEST_CASE("adk import refuses a NUL invocation_id or author in event_data (#44)") {
  test::temp_dir tmp;
  auto file = tmp.str() + "/adk.sqlite";
  fs::copy_file(fixtures + "/adk_python_sqlite.sqlite", file);
  // adk-python-sqlite serves event_data's invocation_id; the NUL is the JSON
  // escape \u0000 in the text.
  sql_exec(file,
           "UPDATE events SET event_data = json_set(event_data, '$.invocation_id', "
           "json('\"a\\u0000b\"')) WHERE id = 'ev-b1'; "
           "UPDATE events SET event_data = json_set(event_data, '$.author', "
           "json('\"a\\u0000b\"')) WHERE id = 'ev-b2';");
  auto r = run_spawned({"import", "--from-adk-sqlite", file, tmp.str() + "/store"}, tmp.str());
  INFO("stderr: ", r.err);
  CHECK(r.rc == 1);
  auto sum = summary_of_spawned(r);
  REQUIRE(sum["skipped"].size() == 2);
  std::set<std::string> reasons;
  for (auto& s : sum["skipped"])
    reasons.insert(s["reason"].get<std::string>());
  CHECK(reasons
        == std::set<std::string>{"'event.invocation_id' contains a NUL byte",
                                 "'event.author' contains a NUL byte"});
}
