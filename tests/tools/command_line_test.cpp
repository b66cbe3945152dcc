// SPDX-License-Identifier: Apache-2.0
// The tool's one command line (tools/cli.hpp), driven through the real binary
// on real stores: --help of every command, one line of bad usage with exit 2,
// --opt=value the same as --opt value, --json of backup and import, a backup
// streamed to standard output and restored, and progress lines that reach a
// terminal and never a file.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "agentstate/version.hpp"
#include "support/test_support.hpp"
#include "support/tool_run.hpp"

using namespace agentstate;
namespace fs = std::filesystem;

namespace {

using test::all_commands;
using test::describe;
using test::ran;
using test::run_tool;
using test::slurp;
using test::streams;

/// A store in `dir` with `sessions` sessions of app/u, `events` events each,
/// and one user: key.
void make_store(const std::string& dir, int sessions, int events) {
  options o;
  o.dir = dir;
  o.mode = durability::nosync;
  auto eng = engine::open(o);
  REQUIRE(eng.ok());
  for (int i = 0; i < sessions; ++i) {
    auto ref = test::sref("app", i % 2 ? "u" : "v", "s" + std::to_string(i));
    MUST((*eng)->create_session(test::create_req(ref, json{{"user:k", i}})));
    for (int e = 0; e < events; ++e)
      MUST((*eng)->append_event(test::append_req(ref, test::make_event(json{{"n", e}}))));
  }
  MUST((*eng)->close());
}

/// Export lines of one session `id` of app/u with two events.
std::string session_lines(const std::string& id) {
  std::string out =
    json{{"type", "session"}, {"app_name", "app"},       {"user_id", "u"},          {"id", id},
         {"created", 1.0},    {"last_update_time", 1.0}, {"state", json::object()}, {"version", 2}}
      .dump()
    + "\n";
  for (int v = 1; v <= 2; ++v)
    out += json{{"type", "event"},
                {"app_name", "app"},
                {"user_id", "u"},
                {"session_id", id},
                {"version", v},
                {"event",
                 {{"id", id + "-" + std::to_string(v)},
                  {"author", "a"},
                  {"invocation_id", "i"},
                  {"timestamp", 1.0},
                  {"actions", {{"state_delta", {{"n", v}}}}}}}}
             .dump()
      + "\n";
  return out;
}

const std::string export_header = json{{"type", "header"}, {"format", 1}}.dump() + "\n";

std::size_t count_of(const std::string& s, char c) {
  return static_cast<std::size_t>(std::count(s.begin(), s.end(), c));
}

} // namespace

TEST_CASE("cli: --help of the tool and of every command on stdout, exit 0; --version") {
  auto top = run_tool({"--help"});
  INFO(describe({"--help"}, top));
  CHECK(top.rc == 0);
  CHECK(top.err.empty());
  auto listed = top.out.find("\ncommands:\n");
  REQUIRE(listed != std::string::npos);
  for (auto c : all_commands)
    CHECK(top.out.find(std::string("\n  ") + c + " ", listed) != std::string::npos);
  CHECK(run_tool({"help"}).out == top.out);

  auto v = run_tool({"--version"});
  CHECK(v.rc == 0);
  CHECK(v.out == std::string("agentstate ") + AGENTSTATE_VERSION_STRING + "\n");

  for (auto c : all_commands) {
    auto r = run_tool({c, "--help"});
    INFO(describe({c, "--help"}, r));
    CHECK(r.rc == 0);
    CHECK(r.err.empty());
    CHECK(r.out.rfind(std::string("usage: agentstate ") + c, 0) == 0);
    CHECK(r.out.find("\noptions:\n") != std::string::npos);
    CHECK(r.out.find("  -h, --help") != std::string::npos);
    CHECK(run_tool({c, "-h"}).out == r.out);
    // --help wins over what else is on the line, even bad usage.
    CHECK(run_tool({c, "--no-such-option", "--help"}).rc == 0);
  }
}

TEST_CASE("cli: every --help keeps to 78 columns (option descriptions are flowed)") {
  std::vector<std::vector<std::string>> calls = {{"--help"}};
  for (auto c : all_commands)
    calls.push_back({c, "--help"});
  for (auto& call : calls) {
    auto r = run_tool(call);
    std::istringstream lines(r.out);
    std::string line;
    while (std::getline(lines, line)) {
      INFO(call.front(), " --help: ", line);
      CHECK(line.size() <= 78);
    }
  }
}

TEST_CASE("cli: bad usage is one line on stderr naming the problem and --help, exit 2") {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
    {{}, "no command given"},
    {{"no-such-command"}, "unknown command 'no-such-command'"},
    {{"--bogus"}, "unknown option '--bogus'"},
    // Regression: `agentstate nosuch --help` printed the tool's help and exited 0.
    {{"no-such-command", "--help"}, "unknown command 'no-such-command'"},
    {{"--help", "--bogus"}, "unknown option '--bogus'"},
    {{"inspect"}, "DIR is required"},
    {{"inspect", "d", "--bogus"}, "unknown option '--bogus'"},
    {{"verify", "a", "b"}, "unexpected argument 'b'"},
    {{"backup", "a"}, "DEST is required"},
    {{"backup", "a", "b", "--compact=maybe"}, "--compact"},
    {{"backup", "a", "-", "--json"}, "--json needs a DEST directory"},
    {{"dump", "d", "--user=u"}, "--user needs --app"},
    {{"dump", "d", "--app", "a", "--session", "s"}, "--session needs --user"},
    {{"dump", "d", "--app"}, "--app"},
    {{"export", "d", "--adk-flavor=adk-js"}, "--adk-flavor needs --to-adk-sqlite"},
    {{"export", "--to-adk-sqlite=x.sqlite", "d", "--adk-flavor=nope"}, "'nope'"},
    {{"import"}, "DIR is required"},
    {{"import", "d", "--skip-oversized"}, "--skip-oversized needs --from-adk-sqlite"},
    {{"demo", "--agents=0"}, "--agents takes a whole number 1..100000"},
    {{"demo", "--dir"}, "--dir"},
    {{"salvage", "a"}, "DEST is required"},
    {{"watch", "d", "--user=u"}, "--user needs --app"},
    {{"watch", "d", "--app", "a", "--session", "s", "--once"}, "--session needs --user"},
    {{"serve"}, "give exactly one of --store DIR and --memory"},
    {{"serve", "--memory", "--max-line-bytes=0"}, "--max-line-bytes takes a whole number"},
    {{"serve", "--memory", "--durability", "maybe"}, "--durability must be sync or nosync"},
    {{"serve", "--memory", "--auth-file=/x"}, "--auth-file applies to --listen"},
    {{"cluster", "status", "--cluster=c"}, "--etcd is required"},
    {{"cluster", "frob", "--etcd=http://h", "--cluster=c"},
     "ACTION is init, status, move, drain, adopt or verify"},
    {{"cluster", "status", "--etcd=ftp://h", "--cluster=c"}, "not an http:// or https:// URL"},
    {{"cluster", "init", "--etcd=http://h", "--cluster=a/b"}, "a cluster name is"},
    {{"bench"}, "--workload is required"},
    {{"bench", "--workload=a", "--scale=0"}, "--scale takes a number"},
    {{"bench", "--workload", "a", "--write-map"}, "--write-map needs --durability nosync"},
  };
  for (auto& [args, problem] : cases) {
    auto r = run_tool(args);
    INFO(describe(args, r));
    CHECK(r.rc == 2);
    CHECK(r.out.empty());
    CHECK(count_of(r.err, '\n') == 1);
    CHECK(r.err.back() == '\n');
    CHECK(r.err.find(problem) != std::string::npos);
    CHECK(r.err.find("--help' for usage") != std::string::npos);
  }
}

// inspect, verify, backup and salvage take no option with a value; every
// other command is run both ways here.
TEST_CASE("cli: --opt=value is --opt value, for every command that takes values") {
  test::temp_dir tmp;
  auto store = tmp.str() + "/store";
  make_store(store, 4, 3);

  SUBCASE("dump") {
    auto a = run_tool({"dump", store, "--app=app", "--user=u"});
    auto b = run_tool({"dump", store, "--app", "app", "--user", "u"});
    INFO(describe({"dump"}, a));
    CHECK(a.rc == 0);
    CHECK(a.out == b.out);
    CHECK(a.out.find("\"user_id\":\"u\"") != std::string::npos);
    CHECK(a.out.find("\"user_id\":\"v\"") == std::string::npos);
  }
  SUBCASE("export --to-adk-sqlite and import --from-adk-sqlite") {
    auto f1 = tmp.str() + "/a.sqlite", f2 = tmp.str() + "/b.sqlite";
    auto a = run_tool({"export", "--to-adk-sqlite=" + f1, store, "--adk-flavor=adk-python-sqlite"});
    auto b =
      run_tool({"export", "--to-adk-sqlite", f2, store, "--adk-flavor", "adk-python-sqlite"});
    INFO(describe({"export"}, a));
    REQUIRE(a.rc == 0);
    REQUIRE(b.rc == 0);
    auto ja = json::parse(a.out), jb = json::parse(b.out);
    CHECK(ja["flavor"] == "adk-python-sqlite");
    ja.erase("file");
    jb.erase("file");
    CHECK(ja == jb);
    auto i1 = run_tool({"import", "--from-adk-sqlite=" + f1, tmp.str() + "/i1"});
    auto i2 = run_tool({"import", "--from-adk-sqlite", f1, tmp.str() + "/i2"});
    INFO(describe({"import"}, i1));
    REQUIRE(i1.rc == 0);
    REQUIRE(i2.rc == 0);
    auto s1 = json::parse(i1.out), s2 = json::parse(i2.out);
    CHECK(s1["sessions"] == 4);
    s1.erase("store");
    s2.erase("store");
    CHECK(s1 == s2);
    CHECK(run_tool({"dump", tmp.str() + "/i1"}).out == run_tool({"dump", tmp.str() + "/i2"}).out);
  }
  SUBCASE("serve") {
    auto in = tmp.str() + "/requests";
    std::ofstream(in) << R"({"jsonrpc":"2.0","id":1,"method":"ping"})"
                         "\n"
                      << R"({"jsonrpc":"2.0","id":2,"method":"ping","params":{"pad":")"
                      << std::string(200, 'x') << "\"}}\n";
    streams s;
    s.in = in;
    auto a = run_tool({"serve", "--store=" + store, "--max-line-bytes=100"}, s);
    auto b = run_tool({"serve", "--store", store, "--max-line-bytes", "100"}, s);
    INFO(describe({"serve"}, a));
    CHECK(a.rc == 0);
    CHECK(a.out == b.out);
    CHECK(a.out.find(R"("result":"pong")") != std::string::npos);
    CHECK(a.out.find("too_large") != std::string::npos); // the limit took effect
  }
  SUBCASE("demo") {
    auto a = run_tool({"demo", "--dir=" + tmp.str() + "/d1", "--agents=2", "--appends=3"});
    auto b = run_tool({"demo", "--dir", tmp.str() + "/d2", "--agents", "2", "--appends", "3"});
    INFO(describe({"demo"}, a));
    CHECK(a.rc == 0);
    CHECK(b.rc == 0);
    for (auto* r : {&a, &b})
      CHECK(r->out.find("2 agents append 3 events each") != std::string::npos);
    CHECK(fs::exists(tmp.str() + "/d1/data.mdb"));
    CHECK(fs::exists(tmp.str() + "/d2/data.mdb"));
  }
  SUBCASE("bench") {
    auto a = run_tool({"bench", "--workload=c", "--scale=0.001", "--durability=memory"});
    auto b = run_tool({"bench", "--workload", "c", "--scale", "0.001", "--durability", "memory"});
    INFO(describe({"bench"}, a));
    REQUIRE(a.rc == 0);
    REQUIRE(b.rc == 0);
    auto ja = json::parse(a.out), jb = json::parse(b.out);
    for (auto key : {"workload", "durability", "scale"}) {
      CAPTURE(key);
      CHECK(ja[key] == jb[key]);
    }
    CHECK(ja["workload"] == "c");
    CHECK(ja["durability"] == "memory");
  }
}

TEST_CASE("cli: backup and import print text, or one JSON object with --json") {
  test::temp_dir tmp;
  auto store = tmp.str() + "/store";
  make_store(store, 3, 2);

  auto text = run_tool({"backup", store, tmp.str() + "/b1"});
  INFO(describe({"backup"}, text));
  CHECK(text.rc == 0);
  CHECK(text.out.rfind("backup of " + store, 0) == 0);
  auto j = run_tool({"backup", store, tmp.str() + "/b2", "--json", "--compact"});
  REQUIRE(j.rc == 0);
  CHECK(count_of(j.out, '\n') == 1);
  auto bj = json::parse(j.out);
  CHECK(bj["backup"] == tmp.str() + "/b2");
  CHECK(bj["source"] == store);
  CHECK(bj["compact"] == true);
  CHECK(bj["bytes"].get<std::uint64_t>() == fs::file_size(tmp.str() + "/b2/data.mdb"));

  auto exported = tmp.str() + "/e.jsonl";
  auto e = run_tool({"export", store});
  REQUIRE(e.rc == 0);
  std::ofstream(exported) << e.out;
  const auto records = count_of(e.out, '\n') - 1; // without the header
  streams s;
  s.in = exported;
  auto t = run_tool({"import", tmp.str() + "/i1"}, s);
  INFO(describe({"import"}, t));
  CHECK(t.rc == 0);
  CHECK(t.out.rfind("imported " + std::to_string(records) + " records into ", 0) == 0);
  auto ij = run_tool({"import", tmp.str() + "/i2", "--json"}, s);
  REQUIRE(ij.rc == 0);
  auto parsed = json::parse(ij.out);
  CHECK(parsed["imported_records"] == records);
  CHECK(parsed["store"] == fs::canonical(tmp.str() + "/i2").string());
}

TEST_CASE("cli: backup DIR - streams data.mdb to stdout; the file restores as a store") {
  test::temp_dir tmp;
  auto store = tmp.str() + "/store";
  make_store(store, 5, 4);
  for (bool compact : {false, true}) {
    CAPTURE(compact);
    INFO("compact: ", compact);
    auto image = tmp.str() + (compact ? "/compact.mdb" : "/full.mdb");
    std::vector<std::string> args{"backup", store, "-"};
    if (compact)
      args.push_back("--compact");
    // Standard output is a file here, as with the shell's `> file`.
    auto r = run_tool(args);
    INFO(describe(args, r));
    REQUIRE(r.rc == 0);
    CHECK(r.err.empty());
    std::ofstream(image, std::ios::binary) << r.out;
    auto restored = tmp.str() + (compact ? "/restored-compact" : "/restored");
    fs::create_directories(restored);
    fs::copy_file(image, restored + "/data.mdb");
    auto v = run_tool({"verify", restored, "--json"});
    INFO(describe({"verify", restored}, v));
    CHECK(v.rc == 0);
    auto vj = json::parse(v.out);
    CHECK(vj["sessions"] == 5);
    CHECK(vj["events"] == 20);
    options o;
    o.dir = restored;
    auto eng = engine::open(o);
    REQUIRE(eng.ok());
    auto got = (*eng)->get_session(test::get_req(test::sref("app", "u", "s3")));
    REQUIRE(got.ok());
    REQUIRE(got.value().has_value());
    CHECK(got.value()->events.size() == 4);
    CHECK(got.value()->state.value("user:k", -1) == 3);
  }
  // Never onto a terminal.
  streams tty;
  tty.out_tty = true;
  auto r = run_tool({"backup", store, "-"}, tty);
  INFO(describe({"backup", store, "-"}, r));
  CHECK(r.rc == 2);
  CHECK(r.out.empty());
  CHECK(count_of(r.err, '\n') == 1);
  CHECK(r.err.find("standard output is a terminal") != std::string::npos);
}

TEST_CASE("cli: progress lines reach a terminal, never a file") {
  test::temp_dir tmp;
  // A store of 2,000 sessions, through import of generated JSON lines.
  auto lines = tmp.str() + "/store.jsonl";
  {
    std::ofstream f(lines);
    f << export_header;
    for (int i = 0; i < 2000; ++i)
      f << session_lines("s" + std::to_string(i));
  }
  streams in;
  in.in = lines;
  auto store = tmp.str() + "/store";
  auto imported = run_tool({"import", store}, in);
  INFO(describe({"import"}, imported));
  REQUIRE(imported.rc == 0);
  CHECK(imported.err.find('\r') == std::string::npos);

  // stderr a file: no progress at all, so no \r.
  auto filed = run_tool({"salvage", store, tmp.str() + "/s1"});
  INFO(describe({"salvage"}, filed));
  REQUIRE(filed.rc == 0);
  CHECK(filed.err.empty());
  CHECK(filed.out.find("salvaged 2000 of 2000 sessions") != std::string::npos);

  // stderr a terminal, the line redrawn at every update
  // (AGENTSTATE_PROGRESS_MS=0): import from a pipe draws the count at each
  // commit of 10,000 records, with \r, and ends the line at the close.
  int fds[2];
  REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
  std::thread feeder([&] {
    auto write_all = [&](const std::string& text) {
      for (std::size_t at = 0; at < text.size();) {
        auto n = ::write(fds[1], text.data() + at, text.size() - at);
        if (n < 0 && errno == EINTR)
          continue;
        if (n < 0)
          return;
        at += static_cast<std::size_t>(n);
      }
    };
    write_all(export_header);
    for (int i = 0; i < 8000; ++i) // 3 records each: 24,000
      write_all(session_lines("p" + std::to_string(i)));
    ::close(fds[1]);
  });
  streams piped;
  piped.in_fd = fds[0];
  piped.err_tty = true;
  piped.env = {"AGENTSTATE_PROGRESS_MS=0"};
  auto shown = run_tool({"import", tmp.str() + "/piped"}, piped);
  feeder.join();
  ::close(fds[0]);
  INFO(describe({"import (stderr a terminal)"}, shown));
  REQUIRE(shown.rc == 0);
  CHECK(shown.out.find("imported 24000 records") != std::string::npos);
  CHECK(shown.err.find("\rrecords: 10000") != std::string::npos);
  CHECK(shown.err.find("\rrecords: 20000") != std::string::npos);
  CHECK(shown.err.back() == '\n');
}
