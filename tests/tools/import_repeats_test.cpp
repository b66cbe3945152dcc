// SPDX-License-Identifier: Apache-2.0
// `agentstate import` and `agentstate salvage` against the rows a hostile
// probe (#44) fed them: an event id twice in one session, a repeated
// version, a session's events split across the file, ids holding a NUL, and
// a salvage DEST inside its DIR. The real binary on real LMDB stores.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "store/keys.hpp"
#include "store/kv.hpp"
#include "store/records.hpp"
#include "support/test_support.hpp"

using namespace agentstate;
namespace fs = std::filesystem;

namespace {

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

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  REQUIRE(out.good());
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

std::string header() {
  return R"({"format":1,"type":"header"})"
         "\n";
}

std::string session_line(const std::string& id, std::uint64_t version) {
  return json{{"type", "session"},  {"app_name", "app"},      {"user_id", "u"},
              {"id", id},           {"created", 1.0},         {"last_update_time", 2.0},
              {"version", version}, {"state", json::object()}}
           .dump()
    + "\n";
}

std::string event_line(const std::string& session, std::uint64_t version, const json& event) {
  return json{{"type", "event"},       {"app_name", "app"},  {"user_id", "u"},
              {"session_id", session}, {"version", version}, {"event", event}}
           .dump()
    + "\n";
}

json an_event(const std::string& id, double ts = 10.0) {
  return json{{"id", id},
              {"invocation_id", "inv"},
              {"author", "agent"},
              {"timestamp", ts},
              {"actions", {{"state_delta", json::object()}, {"artifact_delta", json::object()}}}};
}

// What `export DIR` prints: the store's records, header first.
std::string exported(const std::string& dir) {
  auto r = run("export " + dir);
  REQUIRE(r.rc == 0);
  return r.out;
}

// A store whose session app/u/s holds events e1, e2, e3, then v3's row
// rewritten to hold e1's event (with its own timestamp): the damage an
// import that let a repeated id through would leave.
void make_store_with_repeated_id(const std::string& dir) {
  {
    options o;
    o.dir = dir;
    o.mode = durability::nosync;
    auto eng = engine::open(o);
    REQUIRE(eng.ok());
    MUST((*eng)->create_session(test::create_req("app", "u", "s")));
    MUST((*eng)->create_session(test::create_req("app", "u", "clean")));
    for (int i = 1; i <= 3; ++i) {
      MUST((*eng)->append_event(
        test::append_req(test::sref("app", "u", "s"),
                         test::make_event(json{{"n", i}}, "e" + std::to_string(i), 100.0 + i))));
      MUST((*eng)->append_event(
        test::append_req(test::sref("app", "u", "clean"),
                         test::make_event(json{{"n", i}}, "c" + std::to_string(i), 100.0 + i))));
    }
  }
  // e1's event as stored, moved to v3 with v3's timestamp.
  auto text = run("export " + dir).out;
  json e1;
  std::istringstream lines(text);
  for (std::string l; std::getline(lines, l);) {
    auto rec = json::parse(l);
    if (rec["type"] == "event" && rec["session_id"] == "s" && rec["version"] == 1)
      e1 = rec["event"];
  }
  REQUIRE(e1.is_object());
  e1["timestamp"] = 103.0;
  auto kv = store::open_lmdb_kv(dir, false, std::uint64_t{1} << 30);
  auto w = kv->begin_write();
  std::string k3 = store::session_key("app", "u", "s") + '\0';
  store::append_be64(k3, 3);
  w->put(store::table::events, k3, store::encode_event_row(k3, 103.0, e1.dump()));
  w->commit();
}

} // namespace

TEST_CASE("import refuses duplicate event ids in one session (#44), naming the session, the id "
          "and both lines; nothing is committed") {
  test::temp_dir tmp;
  auto file = tmp.str() + "/in.jsonl", dir = tmp.str() + "/store";
  write_file(file,
             header() + session_line("s", 3) + event_line("s", 1, an_event("e1"))
               + event_line("s", 2, an_event("e2")) + event_line("s", 3, an_event("e1")));
  auto r = run("import " + dir + " < " + file);
  CHECK(r.rc == 1);
  INFO("stderr: ", r.err);
  CHECK(r.err.find("line 5") != std::string::npos);
  CHECK(r.err.find("session 'app/u/s' event v3") != std::string::npos);
  CHECK(r.err.find("event id 'e1' appears twice (lines 3 and 5)") != std::string::npos);
  // Under 10,000 records: no commit, the store holds nothing and verifies.
  CHECK(exported(dir) == header());
  CHECK(run("verify " + dir).rc == 0);
}

TEST_CASE("import refuses a repeated event version, and a session whose events are split "
          "by another session's (#44)") {
  test::temp_dir tmp;
  auto file = tmp.str() + "/in.jsonl";
  write_file(file,
             header() + session_line("s", 2) + event_line("s", 1, an_event("e1"))
               + event_line("s", 1, an_event("e2")));
  auto r = run("import " + tmp.str() + "/a < " + file);
  CHECK(r.rc == 1);
  CHECK(r.err.find("event version 1 appears twice (lines 3 and 4)") != std::string::npos);

  // s's e1, then t's event, then s's e1 again: the repeat is found although
  // another session's lines came between.
  write_file(file,
             header() + session_line("s", 2) + event_line("s", 1, an_event("e1"))
               + session_line("t", 1) + event_line("t", 1, an_event("e1"))
               + event_line("s", 2, an_event("e1")));
  r = run("import " + tmp.str() + "/b < " + file);
  CHECK(r.rc == 1);
  INFO("stderr: ", r.err);
  CHECK(r.err.find("line 6: session 'app/u/s' event v2: the session's events are not on "
                   "consecutive lines")
        != std::string::npos);
  CHECK(exported(tmp.str() + "/b") == header());
}

TEST_CASE("import refuses a NUL invocation_id, event id or author with invalid_argument (#44)") {
  test::temp_dir tmp;
  auto file = tmp.str() + "/in.jsonl";
  int n = 0;
  for (auto member : {"invocation_id", "author", "id"}) {
    CAPTURE(member);
    auto ev = an_event("e1");
    ev[member] = std::string("a\0b", 3);
    write_file(file, header() + session_line("s", 1) + event_line("s", 1, ev));
    auto dir = tmp.str() + "/s" + std::to_string(n++);
    auto r = run("import " + dir + " < " + file);
    CHECK(r.rc == 1);
    INFO("stderr: ", r.err);
    CHECK(r.err.find(std::string("'event.") + member + "' contains a NUL byte")
          != std::string::npos);
    CHECK(exported(dir) == header());
  }
  // Over 128 bytes: too long, whichever of the three.
  auto ev = an_event("e1");
  ev["author"] = std::string(129, 'a');
  write_file(file, header() + session_line("s", 1) + event_line("s", 1, ev));
  auto r = run("import " + tmp.str() + "/long < " + file);
  CHECK(r.rc == 1);
  CHECK(r.err.find("'event.author' is 129 bytes; the limit is 128") != std::string::npos);
}

TEST_CASE("export of a store holding a repeated event id does not import (#44)") {
  test::temp_dir tmp;
  auto src = tmp.str() + "/src";
  make_store_with_repeated_id(src);
  auto v = run("verify " + src);
  CHECK(v.rc == 1);
  CHECK(v.out.find("event id 'e1' repeats v1") != std::string::npos);
  write_file(tmp.str() + "/x.jsonl", exported(src));
  auto r = run("import " + tmp.str() + "/copy < " + tmp.str() + "/x.jsonl");
  CHECK(r.rc == 1);
  INFO("stderr: ", r.err);
  CHECK(r.err.find("event id 'e1' appears twice") != std::string::npos);
}

TEST_CASE("salvage does not copy a duplicate event id: it keeps the first, renumbers the rest "
          "and reports the event dropped (#44)") {
  test::temp_dir tmp;
  auto src = tmp.str() + "/src", dest = tmp.str() + "/dest";
  make_store_with_repeated_id(src);
  auto r = run("salvage " + src + " " + dest + " --json");
  INFO("stdout: ", r.out, " stderr: ", r.err);
  CHECK(r.rc == 3);
  auto sum = json::parse(r.out);
  CHECK(sum["sessions_copied"] == 2);
  CHECK(sum["lost"] == json::array());
  REQUIRE(sum["dropped"].size() == 1);
  CHECK(sum["dropped"][0]["session_id"] == "s");
  CHECK(sum["dropped"][0]["version"] == 3);
  CHECK(sum["dropped"][0]["event_id"] == "e1");
  CHECK(sum["dropped"][0]["message"].get<std::string>().find("repeats v1") != std::string::npos);
  CHECK(run("verify " + dest).rc == 0);
  options o;
  o.dir = dest;
  auto eng = engine::open(o);
  REQUIRE(eng.ok());
  auto s = test::get_existing(**eng, test::sref("app", "u", "s"));
  CHECK(test::event_ids(s.events) == std::vector<std::string>{"e1", "e2"});
  CHECK(s.version == 2);
  auto clean = test::get_existing(**eng, test::sref("app", "u", "clean"));
  CHECK(test::event_ids(clean.events) == std::vector<std::string>{"c1", "c2", "c3"});

  // The text form names it in a DROPPED line.
  auto t = run("salvage " + src + " " + tmp.str() + "/dest2");
  CHECK(t.rc == 3);
  CHECK(t.out.find("DROPPED app/u/s v3: event id 'e1' repeats v1") != std::string::npos);
}

TEST_CASE("salvage refuses a destination inside its source (#44), resolved: ./, .. and "
          "symbolic links") {
  test::temp_dir tmp;
  auto src = tmp.str() + "/src";
  {
    options o;
    o.dir = src;
    o.mode = durability::nosync;
    auto eng = engine::open(o);
    REQUIRE(eng.ok());
    MUST((*eng)->create_session(test::create_req("app", "u", "s")));
  }
  fs::create_directory(tmp.str() + "/elsewhere");
  fs::create_directory_symlink(src, tmp.str() + "/link");
  auto before = std::distance(fs::directory_iterator(src), fs::directory_iterator());
  for (auto dest : {src + "/x", src + "/./x", tmp.str() + "/elsewhere/../src/x",
                    tmp.str() + "/link/x", tmp.str() + "/link", src + "/"}) {
    CAPTURE(dest);
    auto r = run("salvage " + src + " " + dest);
    CHECK(r.rc == 1);
    INFO("stderr: ", r.err);
    CHECK(r.err.find("the new store must be written outside the store it copies")
          != std::string::npos);
    CHECK(std::distance(fs::directory_iterator(src), fs::directory_iterator()) == before);
  }
  // Beside the source is fine.
  CHECK(run("salvage " + src + " " + tmp.str() + "/srcx").rc == 0);
}

TEST_CASE("backup and salvage share one DEST check: not empty, or not a directory") {
  test::temp_dir tmp;
  auto src = tmp.str() + "/src";
  {
    options o;
    o.dir = src;
    o.mode = durability::nosync;
    auto eng = engine::open(o);
    REQUIRE(eng.ok());
    MUST((*eng)->create_session(test::create_req("app", "u", "s")));
  }
  auto full = tmp.str() + "/full", file = tmp.str() + "/file";
  fs::create_directory(full);
  write_file(full + "/x", "x");
  write_file(file, "");
  for (auto command : {"backup", "salvage"}) {
    CAPTURE(command);
    auto r = run(std::string(command) + " " + src + " " + full);
    CHECK(r.rc == 1);
    CHECK(r.err
          == "agentstate " + std::string(command) + ": '" + full + "' exists and is not empty\n");
    r = run(std::string(command) + " " + src + " " + file);
    CHECK(r.rc == 1);
    CHECK(r.err
          == "agentstate " + std::string(command) + ": '" + file
            + "' exists and is not a directory\n");
    CHECK(run(std::string(command) + " " + src + " " + tmp.str() + "/new-" + command).rc == 0);
  }
}
