// SPDX-License-Identifier: Apache-2.0
// Regression: a process killed while it made a new store (found by
// crash_kill9_quick beside two busy loops: the kill landed after the store's
// lock file was made, before data.mdb) left a directory that every later
// open refused with data_corrupt, "has its lock files but no data.mdb: its
// data is gone", though the store had never acknowledged anything. Now a new
// store is marked (agentstate.creating) before any of its files is made and
// unmarked once its first commit is durable; an open that finds the mark
// makes the store again. Without the mark, lock files and no data still mean
// lost data, and are refused as before.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "store/file_check.hpp"
#include "support/test_support.hpp"

using namespace agentstate;

namespace {

namespace fs = std::filesystem;

void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << bytes;
  REQUIRE(out.good());
}

options store_options(const std::string& dir, create_policy create = create_policy::if_new) {
  options o;
  o.dir = dir;
  o.mode = durability::nosync;
  o.create = create;
  return o;
}

/// What a kill at each step of making a store can leave (the mark is made first).
struct cut {
  const char* when;
  std::vector<std::pair<std::string, std::string>> files; ///< name, contents
};

std::vector<cut> cuts() {
  const std::string torn(4096 + 100, '\x5a'); // not LMDB meta pages
  return {
    {"after the mark", {}},
    {"after the store's lock file", {{"agentstate.lock", ""}}},
    {"after the lock file's pid", {{"agentstate.lock", "12345\n"}}},
    {"after LMDB's lock file", {{"agentstate.lock", "12345\n"}, {"lock.mdb", ""}}},
    {"after an empty data.mdb",
     {{"agentstate.lock", "12345\n"}, {"lock.mdb", ""}, {"data.mdb", ""}}},
    {"in data.mdb's first pages",
     {{"agentstate.lock", "12345\n"}, {"lock.mdb", ""}, {"data.mdb", torn}}},
  };
}

} // namespace

TEST_CASE("regression: a store whose creation was cut off opens as a new store") {
  for (const auto& c : cuts()) {
    INFO("cut off ", c.when);
    test::temp_dir dir;
    write_file(dir.path() / store::creating_file, "");
    for (const auto& [name, bytes] : c.files)
      write_file(dir.path() / name, bytes);
    auto e = engine::open(store_options(dir.str()));
    REQUIRE_OK(e);
    CHECK(!fs::exists(dir.path() / store::creating_file));
    MUST((*e)->create_session(test::create_req("app", "u", "s")));
    MUST((*e)->close());
    // Reopened, it is the store just made.
    auto again = engine::open(store_options(dir.str(), create_policy::never));
    REQUIRE_OK(again);
    CHECK(MUST((*again)->get_session(test::get_req(test::sref("app", "u", "s")))).has_value());
    MUST((*again)->close());
  }
}

TEST_CASE("regression: without the mark, a store's lock files and no data are refused, and "
          "with it, create_policy::never finds no store") {
  for (const auto& c : cuts()) {
    if (c.files.empty())
      continue;
    INFO("files of a store cut off ", c.when);
    test::temp_dir dir;
    for (const auto& [name, bytes] : c.files)
      write_file(dir.path() / name, bytes);
    auto e = engine::open(store_options(dir.str()));
    REQUIRE(!e);
    CHECK(e.code() == errc::data_corrupt);
    for (const auto& [name, bytes] : c.files) // LMDB's files are untouched
      if (name != "agentstate.lock") // the refusal tries the lock (the pid is written)
        CHECK(fs::file_size(dir.path() / name) == bytes.size());
    CHECK(!fs::exists(dir.path() / store::creating_file));
  }
  test::temp_dir dir;
  write_file(dir.path() / store::creating_file, "");
  auto never = engine::open(store_options(dir.str(), create_policy::never));
  REQUIRE(!never);
  CHECK(never.code() == errc::not_found);
}

TEST_CASE("a new store leaves no mark, and a store in use is not made again") {
  test::temp_dir dir;
  auto e = engine::open(store_options(dir.str()));
  REQUIRE_OK(e);
  CHECK(!fs::exists(dir.path() / store::creating_file));
  MUST((*e)->create_session(test::create_req("app", "u", "s")));
  // A mark beside a store that is open: a second open is refused by the
  // store's lock before it discards anything.
  write_file(dir.path() / store::creating_file, "");
  auto second = engine::open(store_options(dir.str()));
  REQUIRE(!second);
  CHECK(second.code() == errc::unavailable);
  CHECK(MUST((*e)->get_session(test::get_req(test::sref("app", "u", "s")))).has_value());
  MUST((*e)->close());
}
