// SPDX-License-Identifier: Apache-2.0
// The tool's one voice (tools/cli.hpp), through the real binary: every
// command's bad usage and failed work is one line on stderr that starts
// "agentstate CMD: ", with the exit code its --help lists (the ADK import and
// export too); no library's text (nlohmann's exceptions, CLI11's type words)
// in any --help or message; `help CMD` is `CMD --help`; `import DIR FILE`; and the man pages help2man makes
// from the --help texts (cmake/manpages.cmake) have SYNOPSIS, EXIT STATUS,
// ENVIRONMENT, FILES and SEE ALSO.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sqlite3.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "support/test_support.hpp"
#include "support/tool_run.hpp"

using namespace agentstate;
namespace fs = std::filesystem;

namespace {

const auto& every_command = test::all_commands;
using test::describe;
using test::ran;
using test::slurp;

/// Runs the tool with `args`, standard input from `in` (/dev/null when "");
/// returns its exit code and what it wrote.
ran run(const std::vector<std::string>& args, const std::string& in = "") {
  test::streams s;
  s.in = in;
  return test::run_tool(args, s);
}

std::size_t lines_in(const std::string& s) {
  return static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n'));
}

/// Text a library writes that the tool must put in its own words.
void check_no_library_text(const std::string& text) {
  for (auto word :
       {"json.exception", "CLI11", "UINT", "TEXT", "FLOAT", "INT in", "Could not convert"}) {
    CAPTURE(word);
    CHECK(text.find(word) == std::string::npos);
  }
}

/// A store in `dir` with three sessions of app/u, two events each.
void make_store(const std::string& dir) {
  options o;
  o.dir = dir;
  o.mode = durability::nosync;
  auto eng = engine::open(o);
  REQUIRE(eng.ok());
  for (int i = 0; i < 3; ++i) {
    auto ref = test::sref("app", "u", "s" + std::to_string(i));
    MUST((*eng)->create_session(test::create_req(ref, json{{"user:k", i}})));
    for (int e = 0; e < 2; ++e)
      MUST((*eng)->append_event(test::append_req(ref, test::make_event(json{{"n", e}}))));
  }
  MUST((*eng)->close());
}

struct voiced {
  std::vector<std::string> args;
  int rc;
  std::string says; ///< a part of the message
};

} // namespace

TEST_CASE("cli voice: bad usage and failed work of every command: one line 'agentstate CMD: ', "
          "the exit code of its --help") {
  test::temp_dir tmp;
  const std::string missing = tmp.str() + "/no-store", file = tmp.str() + "/a-file";
  std::ofstream(file) << "x\n";
  const std::string under_file = file + "/dir"; // cannot be created: its parent is a file
  // One bad usage (exit 2) and one failed operation (exit 1) per command.
  const std::vector<voiced> cases = {
    {{"backup", "a"}, 2, "DEST is required"},
    {{"backup", missing, tmp.str() + "/b"}, 1, "no store in"},
    {{"bench"}, 2, "--workload is required"},
    {{"bench", "--workload=c", "--scale=0.001", "--dir=/proc"}, 1, "workload c: cannot create"},
    {{"cluster", "status", "--cluster=c"}, 2, "--etcd is required"},
    {{"console"}, 2, "--store is required"},
    {{"demo", "--agents=x"}, 2, "--agents takes a whole number 1..100000, not 'x'"},
    {{"demo", "--dir", under_file}, 1, "open failed"},
    {{"dump", "d", "--app"}, 2, "--app needs a value (NAME)"},
    {{"dump", missing}, 1, "no store in"},
    {{"export", "d", "--adk-flavor=adk-js"}, 2, "--adk-flavor needs --to-adk-sqlite"},
    {{"export", missing}, 1, "no store in"},
    {{"import"}, 2, "DIR is required"},
    {{"import", tmp.str() + "/i", tmp.str() + "/no-such.jsonl"}, 1, "cannot read"},
    {{"inspect", "d", "--json=maybe"}, 2, "--json takes no value"},
    {{"inspect", missing}, 1, "no store in"},
    {{"prune", "d"}, 2, "--older-than is required"},
    {{"prune", under_file, "--older-than", "1d"}, 1, "cannot create store directory"},
    {{"salvage", "a"}, 2, "DEST is required"},
    {{"salvage", missing, tmp.str() + "/s"}, 1, "no store in"},
    {{"serve"}, 2, "give exactly one of --store DIR and --memory"},
    {{"verify", "a", "b"}, 2, "unexpected argument 'b'"},
    {{"verify", missing}, 1, "no store in"},
    {{"watch", "d", "--poll-ms"}, 2, "--poll-ms needs a value (N)"},
    {{"watch", "d", "--poll-ms=0"}, 2, "--poll-ms takes a whole number 1..60000, not '0'"},
    {{"watch", missing, "--once"}, 1, "no store in"},
    {{"help", "frob"}, 2, "unknown command 'frob'"},
    {{"cluster", "status", "--etcd", "http://127.0.0.1:1", "--cluster", "c"}, 1, "status: etcd"},
  };
  for (auto& c : cases) {
    auto r = run(c.args);
    INFO(describe(c.args, r));
    CHECK(r.rc == c.rc);
    CHECK(lines_in(r.err) == 1);
    CHECK(r.err.rfind("agentstate " + c.args.front() + ": ", 0) == 0);
    CHECK(r.err.find(c.says) != std::string::npos);
    if (c.rc == 2)
      CHECK(r.err.find("run 'agentstate " + c.args.front() + " --help' for usage")
            != std::string::npos);
    check_no_library_text(r.err);
  }
  // Every command has a case of each kind above, but for the work of serve
  // and console, whose failures are their log events (--log-format).
  for (auto cmd : every_command) {
    CAPTURE(cmd);
    bool usage = false, failed = false;
    for (auto& c : cases)
      if (c.args.front() == cmd)
        (c.rc == 2 ? usage : failed) = true;
    CHECK(usage);
    CHECK((failed || std::string(cmd) == "serve" || std::string(cmd) == "console"));
  }
  auto served = run({"serve", "--store", under_file});
  INFO(describe({"serve", "--store", under_file}, served));
  CHECK(served.rc == 1);
  CHECK(served.err.find("event=startup_failed") != std::string::npos);
  check_no_library_text(served.err);
}

TEST_CASE("cli voice: the ADK import and export (--from-adk-sqlite, --to-adk-sqlite) say "
          "'agentstate import: ' and 'agentstate export: ' (was 'import: ', 'export: ')") {
  test::temp_dir tmp;
  const std::string fixtures = AGENTSTATE_ADK_FIXTURES;
  const std::string garbage = tmp.str() + "/garbage.sqlite", taken = tmp.str() + "/taken.sqlite";
  std::ofstream(garbage) << "not a database, only text long enough to hold a header's bytes\n";
  std::ofstream(taken) << "keep me";
  const std::string store = tmp.str() + "/store";
  make_store(store);
  const std::vector<voiced> cases = {
    {{"import", "--from-adk-sqlite", tmp.str() + "/missing.sqlite", tmp.str() + "/i1"},
     1,
     "no such file"},
    {{"import", "--from-adk-sqlite", garbage, tmp.str() + "/i2"}, 1, "not an SQLite database"},
    {{"import", "--from-adk-sqlite", fixtures + "/adk_python_v0.sqlite", tmp.str() + "/i3"},
     1,
     "v0 session schema"},
    {{"import", "--from-adk-sqlite", fixtures + "/adk_js.sqlite", store}, 1, "not empty"},
    {{"import", "--from-adk-sqlite", garbage}, 2, "DIR is required"},
    {{"export", "--to-adk-sqlite", taken, store}, 1, "exists"},
    {{"export", "--to-adk-sqlite", tmp.str() + "/x.sqlite", tmp.str() + "/no-store"},
     1,
     "no store in"},
    {{"export", "--to-adk-sqlite", tmp.str() + "/y.sqlite", store, "--adk-flavor", "nope"},
     2,
     "unknown --adk-flavor 'nope'"},
  };
  for (auto& c : cases) {
    auto r = run(c.args);
    INFO(describe(c.args, r));
    CHECK(r.rc == c.rc);
    CHECK(lines_in(r.err) == 1);
    CHECK(r.err.rfind("agentstate " + c.args.front() + ": ", 0) == 0);
    CHECK(r.err.find(c.says) != std::string::npos);
    if (c.rc == 2)
      CHECK(r.err.find("run 'agentstate " + c.args.front() + " --help' for usage")
            != std::string::npos);
    check_no_library_text(r.err);
  }
  CHECK(slurp(taken) == "keep me");

  // A row beyond agentstate's limits: a line naming it, then the verdict
  // (exit 1, nothing written), or with --skip-oversized the line alone (exit 0).
  const std::string big = tmp.str() + "/big.sqlite";
  fs::copy_file(fixtures + "/adk_python_sqlite.sqlite", big);
  {
    sqlite3* h = nullptr;
    REQUIRE(sqlite3_open_v2(big.c_str(), &h, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK);
    const std::string sql = "INSERT INTO sessions VALUES ('weather_app', 'alice', '"
      + std::string(101, 's') + "', '{}', 1.0, 2.0)";
    char* msg = nullptr;
    int rc = sqlite3_exec(h, sql.c_str(), nullptr, nullptr, &msg);
    std::string why = msg ? msg : "";
    sqlite3_free(msg);
    sqlite3_close(h);
    INFO(why);
    REQUIRE(rc == SQLITE_OK);
  }
  for (bool skip : {false, true}) {
    std::vector<std::string> args{"import", "--from-adk-sqlite", big,
                                  tmp.str() + (skip ? "/skipped" : "/refused")};
    if (skip)
      args.push_back("--skip-oversized");
    auto r = run(args);
    INFO(describe(args, r));
    CHECK(r.rc == (skip ? 0 : 1));
    auto lines = lines_in(r.err);
    CHECK(lines == (skip ? 1u : 2u));
    std::istringstream in(r.err);
    std::string line;
    for (std::size_t i = 0; std::getline(in, line); ++i) {
      CAPTURE(line);
      CHECK(line.rfind(i == 0 ? (skip ? "agentstate import: skipping sessions "
                                      : "agentstate import: cannot take sessions ")
                              : "agentstate import: 1 row beyond agentstate's limits",
                       0)
            == 0);
    }
    check_no_library_text(r.err);
  }
}

TEST_CASE("cli voice: a malformed JSON line is named in the tool's words, not nlohmann's") {
  test::temp_dir tmp;
  const std::vector<std::pair<std::string, std::string>> inputs = {
    {"{bad\n", "line 1: invalid JSON at column 2"},
    {"{\"type\":\"header\",\"format\":1}\n[1,\n",
     "line 2: invalid JSON at column 4 (the text ends early)"},
    {"{\"type\":\"header\",\"format\":1}\n{\"type\":\"session\",\"app_name\":5}\n", "line 2: "},
  };
  int n = 0;
  for (auto& [text, says] : inputs) {
    auto in = tmp.str() + "/in" + std::to_string(n);
    std::ofstream(in) << text;
    auto dir = tmp.str() + "/s" + std::to_string(n++);
    for (bool as_file : {false, true}) {
      std::vector<std::string> args{"import", dir + (as_file ? "f" : "")};
      if (as_file)
        args.push_back(in);
      auto r = run(args, as_file ? "" : in);
      INFO(describe(args, r));
      CHECK(r.rc == 1);
      CHECK(lines_in(r.err) == 1);
      CHECK(r.err.rfind("agentstate import: " + says, 0) == 0);
      check_no_library_text(r.err);
    }
  }
}

TEST_CASE("cli voice: no library's words in any --help; help CMD is CMD --help") {
  auto top = run({"--help"});
  REQUIRE(top.rc == 0);
  check_no_library_text(top.out);
  CHECK(run({"help"}).out == top.out);
  CHECK(run({"help", "--help"}).out == top.out);
  for (auto word : {"\nexit status:\n", "\nenvironment:\n", "agentstate help [COMMAND]"})
    CHECK(top.out.find(word) != std::string::npos);
  for (auto cmd : every_command) {
    auto own = run({cmd, "--help"});
    auto helped = run({"help", cmd});
    INFO(describe({cmd, "--help"}, own));
    CHECK(own.rc == 0);
    CHECK(helped.rc == 0);
    CHECK(helped.out == own.out);
    CHECK(helped.err.empty());
    check_no_library_text(own.out);
    // The man page's sections come from these (cmake/manpages.cmake): both
    // last, in this order.
    auto exits = own.out.find("\nexit status:\n  0   "), env = own.out.find("\nenvironment:\n");
    CHECK(exits != std::string::npos);
    CHECK(env != std::string::npos);
    CHECK(exits < env);
    CHECK(own.out.find("\n\n", env + 1) == std::string::npos);
    // One word per value: never CLI11's defaults, and the same for the same thing.
    for (auto word :
         {"--app A\n", "--app A ", "--app TEXT", "--app APP", "--user U", "--session S"})
      CHECK(own.out.find(word) == std::string::npos);
  }
  auto r = run({"help", "dump", "extra"});
  CHECK(r.rc == 2);
  CHECK(r.err.rfind("agentstate help: ", 0) == 0);
}

TEST_CASE("cli voice: import DIR FILE reads FILE; - and no FILE read standard input; a FILE "
          "that cannot be read is refused before DIR is touched") {
  test::temp_dir tmp;
  auto store = tmp.str() + "/store";
  make_store(store);
  auto exported = run({"export", store});
  REQUIRE(exported.rc == 0);
  auto lines = tmp.str() + "/e.jsonl";
  std::ofstream(lines) << exported.out;
  auto original = run({"dump", store});
  REQUIRE(original.rc == 0);

  auto from_file = run({"import", tmp.str() + "/a", lines, "--json"});
  INFO(describe({"import", "a", lines}, from_file));
  REQUIRE(from_file.rc == 0);
  CHECK(json::parse(from_file.out)["imported_records"] == lines_in(exported.out) - 1);
  auto from_dash = run({"import", tmp.str() + "/b", "-"}, lines);
  REQUIRE(from_dash.rc == 0);
  auto from_stdin = run({"import", tmp.str() + "/c"}, lines);
  REQUIRE(from_stdin.rc == 0);
  for (auto dir : {"/a", "/b", "/c"}) {
    CAPTURE(dir);
    CHECK(run({"dump", tmp.str() + dir}).out == original.out);
  }

  for (auto bad : {tmp.str() + "/no-such.jsonl", tmp.str()}) {
    auto dest = tmp.str() + "/never";
    auto r = run({"import", dest, bad});
    INFO(describe({"import", dest, bad}, r));
    CHECK(r.rc == 1);
    CHECK(lines_in(r.err) == 1);
    CHECK(r.err.rfind("agentstate import: cannot read '" + bad + "': ", 0) == 0);
    CHECK_FALSE(fs::exists(dest));
  }
  // --from-adk-sqlite names its own file: a FILE beside it is bad usage.
  auto both = run({"import", "--from-adk-sqlite", lines, tmp.str() + "/d", lines});
  CHECK(both.rc == 2);
  CHECK(both.err.find("--from-adk-sqlite names its own file") != std::string::npos);
}

TEST_CASE("cli voice: the man pages have SYNOPSIS, EXIT STATUS, ENVIRONMENT, FILES and SEE "
          "ALSO") {
  // The pages as the build makes them (cmake/manpages.cmake, run by the
  // agentstate_man target), made here from this build's tool.
  const std::string help2man = "/usr/bin/help2man";
  REQUIRE_MESSAGE(fs::exists(help2man), "help2man not found: run tools/setup.sh --all");
  test::temp_dir tmp;
  const std::string man = tmp.str() + "/man", log = tmp.str() + "/log";
  const std::string cmd = std::string("cmake -DAGENTSTATE_EXE='") + AGENTSTATE_BIN
    + "' -DHELP2MAN=" + help2man + " -DMAN_DIR='" + man + "' -DVERSION=0 -P '"
    + AGENTSTATE_SOURCE_DIR + "/cmake/manpages.cmake' > '" + log + "' 2>&1";
  int rc = std::system(cmd.c_str());
  INFO(slurp(log));
  REQUIRE(rc == 0);
  auto page = [&](const std::string& name) {
    auto text = tmp.str() + "/" + name;
    REQUIRE(std::system(("zcat '" + man + "/" + name + ".1.gz' > '" + text + "'").c_str()) == 0);
    return slurp(text);
  };
  for (auto name : {"agentstate", "agentstate-import", "agentstate-watch", "agentstate-salvage"}) {
    auto text = page(name);
    INFO(name, ":\n", text.substr(0, 3000));
    for (auto section :
         {".SH SYNOPSIS\n", ".SH DESCRIPTION\n", ".SH OPTIONS\n", ".SH \"EXIT STATUS\"\n",
          ".SH ENVIRONMENT\n", ".SH FILES\n", ".SH \"SEE ALSO\"\n"})
      CHECK(text.find(section) != std::string::npos);
    check_no_library_text(text);
  }
  auto import = page("agentstate-import");
  CHECK(import.find(".B agentstate import\nDIR [FILE] [\\-\\-json]\n") != std::string::npos);
  CHECK(import.find(".TP\n.B 1\nthe import failed") != std::string::npos);
  CHECK(page("agentstate-salvage").find(".TP\n.B 3\n") != std::string::npos);
  CHECK(page("agentstate-watch").find(".TP\n.B AGENTSTATE_TOKEN\n") != std::string::npos);
  CHECK(page("agentstate").find(".BR agentstate-watch (1)") != std::string::npos);
  CHECK(page("agentstate-serve").find(".I DIR/cluster-moves.json\n") != std::string::npos);
}
