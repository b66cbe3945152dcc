// SPDX-License-Identifier: Apache-2.0
// The operational commands, driven as a user would: the real binary, a real
// store, and (for backup) an engine writing in this process meanwhile.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "store/kv.hpp"
#include "store/apply.hpp"
#include "store/format.hpp"
#include "store/keys.hpp"
#include "store/listing.hpp"
#include "store/reads.hpp"
#include "store/records.hpp"
#include "support/test_support.hpp"

using namespace agentstate;

namespace {

int run(const std::string& args) {
  int rc = std::system((std::string(AGENTSTATE_BIN) + " " + args).c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

} // namespace

TEST_CASE("tools: every command answers --help with exit 0, bad usage with 2") {
  for (auto cmd : {"inspect", "verify", "backup", "dump", "export", "import", "demo"}) {
    CAPTURE(cmd);
    CHECK(run(std::string(cmd) + " --help > /dev/null") == 0);
  }
  CHECK(run("--help > /dev/null") == 0);
  CHECK(run("no-such-command 2> /dev/null") == 2);
  CHECK(run("verify 2> /dev/null") == 2);
  CHECK(run("verify /nonexistent-store 2> /dev/null") == 1);
}

TEST_CASE("tools: a backup taken while an engine writes opens and verifies") {
  test::temp_dir dir, out;
  options o;
  o.dir = dir.str();
  o.mode = durability::nosync;
  auto eng = engine::open(o);
  REQUIRE(eng.ok());
  auto& e = **eng;
  for (int i = 0; i < 8; ++i)
    MUST(e.create_session(test::create_req("app", "u", "s" + std::to_string(i))));
  std::atomic<bool> stop{false};
  std::atomic<int> appended{0};
  std::thread writer([&] {
    for (int n = 0; !stop.load(); ++n)
      if (e.append_event(test::append_req(test::sref("app", "u", "s" + std::to_string(n % 8)),
                                          test::make_event(json{{"n", n}, {"user:last", n}})))
            .ok())
        ++appended;
  });
  while (appended.load() < 200)
    std::this_thread::yield();
  auto dest = out.str() + "/copy";
  int backup_rc = run("backup " + dir.str() + " " + dest + " > /dev/null");
  int during = appended.load();
  stop = true;
  writer.join();
  CHECK(backup_rc == 0);
  CHECK(appended.load() > during - 1);
  // The copy is a consistent store: verify is clean and an engine opens it.
  CHECK(run("verify " + dest + " > /dev/null") == 0);
  options c;
  c.dir = dest;
  auto copy = engine::open(c);
  REQUIRE(copy.ok());
  auto s = (*copy)->get_session(test::get_req(test::sref("app", "u", "s0")));
  REQUIRE(s.ok());
  CHECK(s.value().has_value());
}

TEST_CASE("tools: verify exits 1 on a corrupted record; export/import round-trips") {
  test::temp_dir dir, copy, files;
  {
    options o;
    o.dir = dir.str();
    o.mode = durability::nosync;
    auto eng = engine::open(o);
    REQUIRE(eng.ok());
    MUST((*eng)->create_session(test::create_req("app", "u", "s", json{{"user:k", 1}})));
    for (int i = 0; i < 5; ++i)
      MUST((*eng)->append_event(
        test::append_req(test::sref("app", "u", "s"), test::make_event(json{{"n", i}}))));
  }
  CHECK(run("verify " + dir.str() + " > /dev/null") == 0);
  auto e1 = files.str() + "/e1.jsonl", e2 = files.str() + "/e2.jsonl";
  REQUIRE(run("export " + dir.str() + " > " + e1) == 0);
  REQUIRE(run("import " + copy.str() + " < " + e1 + " > /dev/null") == 0);
  REQUIRE(run("export " + copy.str() + " > " + e2) == 0);
  CHECK(slurp(e1) == slurp(e2));
  CHECK(slurp(e1).find("\"type\":\"event\"") != std::string::npos);
  // Importing into a store with data is refused.
  CHECK(run("import " + copy.str() + " < " + e1 + " 2> /dev/null") == 1);
  {
    auto kv = store::open_lmdb_kv(dir.str(), false, std::uint64_t{1} << 30);
    auto w = kv->begin_write();
    std::string k = store::session_key("app", "u", "s") + '\0';
    store::append_be64(k, 3);
    w->put(store::table::events, k, "\x01not an event");
    w->commit();
  }
  CHECK(run("verify " + dir.str() + " > /dev/null") == 1);
}
